/*
 * `forkload soak`: random configurations of the loader (soak_config.c),
 * one after the other until its time is up, each checked batch by batch
 * (soak_run.c), and after each, that this process holds the fds, the
 * /dev/shm names and the child processes it held before the first; at
 * the end, that its resident memory has not grown past a margin over what
 * it was after the first.  The first violation ends it, naming the seed
 * and the configuration, which --config runs again alone.
 */
#include "config.h"

#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* A configuration takes about a second: one that takes this long hangs. */
#define WATCHDOG_S 300
/* What the process's resident memory may grow by, after the first
   configuration, before the soak calls it a leak: room for the heap's
   and libuv's own ups and downs, far below a leak's growth over minutes
   of configurations. */
#define RSS_MARGIN_KB (4 * 1024)
/* AddressSanitizer holds freed memory in its quarantine, so there the
   resident memory says nothing of leaks: LeakSanitizer looks at exit. */
#ifdef __SANITIZE_ADDRESS__
#define RSS_CHECKED 0
#else
#define RSS_CHECKED 1
#endif

struct soak_args {
  uint64_t seconds, seed, config;
  int seconds_set, seed_set, config_set, verbose;
};

enum { OPT_SECONDS = OPT_OWN, OPT_SEED_OWN, OPT_CONFIG, OPT_VERBOSE };

static const char help[] =
  "Runs random configurations of the loader, one after the other, until\n"
  "the time is up: sharing strategies, workers, batch sizes, prefetch,\n"
  "order, persistence, segment reuse, map-style and iterable datasets,\n"
  "batches held and released in any order, epochs cut short, and injected\n"
  "faults (kills, exits, a full /dev/shm, the fd limit, delays).  Every\n"
  "batch is checked (its content, its place, each index once an epoch),\n"
  "and after each configuration that no fd, /dev/shm name or child\n"
  "process is left; at the end, that memory has not grown.  The first\n"
  "violation ends the soak, exit 1, naming the seed and the\n"
  "configuration, which --seed S --config K runs again alone.\n"
  "\n"
  "soak:\n"
  "  --seconds N           start no configuration after N seconds (60)\n"
  "  --seed S              the seed of the configurations (a random one,\n"
  "                        printed)\n"
  "  --config K            run configuration K alone; with --seconds,\n"
  "                        again and again until they are up\n"
  "  --verbose             print each configuration before it runs\n";

static const struct option options[] = {
  {"seconds", required_argument, NULL, OPT_SECONDS},
  {"seed", required_argument, NULL, OPT_SEED_OWN},
  {"config", required_argument, NULL, OPT_CONFIG},
  {"verbose", no_argument, NULL, OPT_VERBOSE},
  {NULL, 0, NULL, 0}
};

static int
soak_option(int c, const char *arg, void *ctx)
{
  struct soak_args *a = ctx;

  switch (c) {
  case OPT_SECONDS:
    a->seconds_set = 1;
    return cli_uint(c, arg, 1, UINT32_MAX, &a->seconds);
  case OPT_SEED_OWN:
    a->seed_set = 1;
    return cli_uint(c, arg, 0, UINT64_MAX, &a->seed);
  case OPT_CONFIG:
    a->config_set = 1;
    return cli_uint(c, arg, 0, UINT64_MAX, &a->config);
  case OPT_VERBOSE:
    a->verbose = 1;
    return 0;
  }
  return 0;
}

/* What the watchdog says, written before each configuration starts: a
   signal handler may only write(). */
static char watchdog_msg[2048];
static size_t watchdog_len;

static void
on_alarm(int sig)
{
  (void)sig;
  if (write(STDERR_FILENO, watchdog_msg, watchdog_len) < 0)
    _exit(1);
  _exit(1);
}

/* The lines that name configuration c of a failed soak, after why. */
static int
name_config(char *buf, size_t len, const struct soak_config *c,
            const char *why)
{
  char desc[1024];

  return snprintf(buf, len,
                  "forkload: soak: violation in configuration %" PRIu64
                  " of seed %" PRIu64 ": %s\n"
                  "forkload: soak: configuration %" PRIu64 ": %s\n"
                  "forkload: soak: replay it with: forkload soak --seed %"
                  PRIu64 " --config %" PRIu64 "\n",
                  c->index, c->seed, why, c->index,
                  soak_config_describe(c, desc, sizeof desc), c->seed,
                  c->index);
}

static void
arm_watchdog(const struct soak_config *c)
{
  char why[64];
  int n;

  snprintf(why, sizeof why, "it did not end within %d s (a hang)",
           WATCHDOG_S);
  n = name_config(watchdog_msg, sizeof watchdog_msg, c, why);
  watchdog_len = n < 0 ? 0
                 : (size_t)n < sizeof watchdog_msg ? (size_t)n
                                                   : sizeof watchdog_msg - 1;
  alarm(WATCHDOG_S);
}

/* This process's resident memory in kB, the heap's free memory given back
   first; 0 when /proc does not say. */
static unsigned long
rss_kb(void)
{
  unsigned long kb = 0;
  char line[128];
  FILE *f;

  malloc_trim(0);
  if ((f = fopen("/proc/self/status", "r")) == NULL)
    return 0;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %lu kB", &kb) == 1)
      break;
  fclose(f);
  return kb;
}

/* After a configuration: what this process holds must be what it held
   before the first.  0, or -1 with why set. */
static int
left_behind(const struct census *before, char *why, size_t len)
{
  struct census after;
  char list[768];
  int rc;

  if (census_children(1.0, list, sizeof list) > 0)
    return cli_fail(why, len, "child processes left after "
                    "fl_loader_destroy: %s", list);
  if ((rc = census_take(&after)) < 0)
    return cli_fail(why, len, "cannot take stock of fds and /dev/shm: %s",
                    strerror(-rc));
  if (census_new_names(before, &after, list, sizeof list) > 0)
    rc = cli_fail(why, len, "names left in /dev/shm: %s", list);
  else if (census_new_fds(before, &after, list, sizeof list) > 0)
    rc = cli_fail(why, len, "fds not as before the first configuration: "
                  "%s", list);
  census_free(&after);
  return rc;
}

/* What the soak saw. */
struct outcome {
  struct soak_tally t;
  uint64_t first, last;     /* the configurations run */
  double seconds;
  unsigned long rss_first, rss_end, rss_peak; /* kB */
  size_t fds;               /* open before the first */
  int violation, interrupted;
};

static void
print_summary(const struct soak_args *a, const struct outcome *o)
{
  const struct soak_tally *t = &o->t;

  printf("soak         seed %" PRIu64 ", %.1f s, configuration%s %" PRIu64,
         a->seed, o->seconds, o->first == o->last ? "" : "s", o->first);
  if (o->first != o->last)
    printf(" to %" PRIu64, o->last);
  if (a->config_set && t->configs > 1)
    printf(", %" PRIu64 " times", t->configs);
  putchar('\n');
  printf("configs      %" PRIu64 ": %" PRIu64 " map-style, %" PRIu64
         " iterable; %" PRIu64 " refused at create (memory short)\n",
         t->configs, t->configs - t->iterable, t->iterable, t->refused);
  printf("epochs       %" PRIu64 " begun, %" PRIu64 " cut short by a "
         "begin\n", t->epochs, t->cut);
  printf("batches      %" PRIu64 " checked, %" PRIu64 " held a while, %"
         PRIu64 " calls found one kept at a limit\n", t->batches, t->held,
         t->kept);
  printf("samples      %" PRIu64 "\n", t->samples);
  printf("faults       %" PRIu64 " injected\n", t->faults);
  printf("restarts     %" PRIu64 "\n", t->restarts);
  printf("poisoned     %" PRIu64 " batch(es) whose filling killed their "
         "worker twice\n", t->poisoned);
  if (o->interrupted)
    printf("interrupted  by %s\n", cli_signal_name(o->interrupted));
  if (o->violation) {
    printf("result       VIOLATION (on standard error)\n");
    return;
  }
  printf("fds          as before the first configuration: %zu open\n",
         o->fds);
  printf("shm names    none left\n");
  printf("children     none left\n");
  printf("rss          %.1f MB after the first configuration, %.1f MB at "
         "the end, %.1f MB at most (margin %.1f MB%s)\n",
         o->rss_first / 1024.0, o->rss_end / 1024.0, o->rss_peak / 1024.0,
         RSS_MARGIN_KB / 1024.0,
         RSS_CHECKED ? "" : "; not checked under AddressSanitizer");
  printf("result       no violation\n");
}

/* A seed of its own, printed so that the soak can be replayed. */
static uint64_t
fresh_seed(void)
{
  uint64_t s;

  if (getrandom(&s, sizeof s, 0) == (ssize_t)sizeof s)
    return s;
  return synth_mix64((uint64_t)time(NULL) ^ (uint64_t)getpid() << 32);
}

/* Runs configurations until the time is up: 0, or -1 with why set and c
   the configuration that failed. */
static int
soak(const struct soak_args *a, const struct census *before,
     struct soak_config *c, struct outcome *o, char *why, size_t len)
{
  uint64_t k = a->config_set ? a->config : 0;
  double start = cli_now();
  char desc[1024];
  unsigned long kb;
  int rc;

  o->first = k;
  for (;;) {
    soak_config_draw(c, a->seed, k);
    o->last = k;
    if (a->verbose) {
      printf("config %" PRIu64 "  %s\n", k,
             soak_config_describe(c, desc, sizeof desc));
      fflush(stdout);
    }
    arm_watchdog(c);
    rc = soak_run(c, &o->t, why, len);
    alarm(0);
    o->seconds = cli_now() - start;
    if (rc == 0)
      rc = left_behind(before, why, len);
    if (rc < 0)
      return -1;
    kb = rss_kb();
    o->rss_first = o->rss_first ? o->rss_first : kb;
    o->rss_peak = kb > o->rss_peak ? kb : o->rss_peak;
    o->rss_end = kb;
    if (cli_interrupted || (a->config_set && !a->seconds_set) ||
        o->seconds >= (double)a->seconds)
      return 0;
    k += !a->config_set;
  }
}

static int
soak_main(int argc, char **argv)
{
  struct soak_args a = {.seconds = 60};
  struct census before = {0};
  struct outcome o = {0};
  struct soak_config c;
  struct sigaction sa;
  char why[1024] = "", msg[4096];
  int rc, grew = 0;

  if (cli_parse(&cli_soak, argc, argv, NULL, soak_option, &a) < 0)
    return 2;
  if (!a.seed_set)
    a.seed = fresh_seed();
  if (census_warm_up("soak") < 0)
    return 1;
  if ((rc = census_take(&before)) < 0) {
    cli_error("soak: cannot take stock of fds and /dev/shm: %s",
              strerror(-rc));
    return 1;
  }
  o.fds = before.nfds;
  cli_catch_signals();
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  o.violation = soak(&a, &before, &c, &o, why, sizeof why) < 0;
  o.interrupted = cli_interrupted;
  grew = RSS_CHECKED && !o.violation &&
         o.rss_end > o.rss_first + RSS_MARGIN_KB;
  o.violation |= grew;
  print_summary(&a, &o);
  fflush(stdout);
  /* A leak is the whole soak's: no one configuration shows it. */
  if (grew)
    cli_error("soak: violation: resident memory grew from %lu kB after "
              "configuration %" PRIu64 " to %lu kB after configuration %"
              PRIu64 ", past the margin of %d kB; replay it with: forkload "
              "soak --seed %" PRIu64 " --seconds %.0f", o.rss_first, o.first,
              o.rss_end, o.last, RSS_MARGIN_KB, a.seed, o.seconds + 1);
  else if (o.violation) {
    name_config(msg, sizeof msg, &c, why);
    fputs(msg, stderr);
  }
  census_free(&before);
  if (o.violation)
    return 1;
  return o.interrupted ? 128 + o.interrupted : 0;
}

const struct cli_command cli_soak = {
  "soak", "forkload soak [--seconds N] [--seed S] [--config K] [--verbose]",
  help, options, soak_main
};
