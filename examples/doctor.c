/*
 * `forkload doctor`: creates the loader run's options describe (its
 * workers are forked only by an epoch, so none is) and prints its budget,
 * fl_loader_budget: for each resource the limit, what is in use, what
 * each held batch adds and how many batches can be held, which limit
 * binds first and the remedy for it.  `forkload exhaust` reads the same
 * budget before it holds anything, and says the same remedies.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"

/* A loader needs a socket and a pidfd per worker, its event loop's few
   fds and room to receive: below this many free fds it cannot start. */
#define START_FDS 16

struct doctor_args {
  struct load_args load;
  uint64_t fd_limit; /* lower the soft RLIMIT_NOFILE to this; 0: keep it */
  int json;
};

enum { OPT_FD_LIMIT = OPT_OWN, OPT_JSON };

static const char help[] =
  "Creates the loader the options describe, without forking its workers,\n"
  "and prints its budget: for each resource that held batches use up, or\n"
  "that the workers need, the limit, what is in use, what each held batch\n"
  "adds and how many batches the consumer can hold before the loader\n"
  "stops there; then which limit binds first, and the remedy.  In order,\n"
  "up to (workers - 1) x prefetch batches more may be held before it\n"
  "stops: the batches that came ahead of the one due.\n"
  "\n"
  "doctor:\n"
  "  --fd-limit N          lower the soft RLIMIT_NOFILE to N first\n"
  "  --json                print the budget as one JSON object\n";

static const struct option options[] = {
  {"fd-limit", required_argument, NULL, OPT_FD_LIMIT},
  {"json", no_argument, NULL, OPT_JSON},
  {NULL, 0, NULL, 0}
};

static int
doctor_option(int c, const char *arg, void *ctx)
{
  struct doctor_args *a = ctx;

  if (c == OPT_JSON) {
    a->json = 1;
    return 0;
  }
  return cli_uint(c, arg, 1, RLIM_INFINITY - 1, &a->fd_limit);
}

int
cli_fd_limit(uint64_t n, size_t fds_open)
{
  struct rlimit rl;

  if (n < fds_open + START_FDS) {
    cli_error("--fd-limit: %" PRIu64 " leaves no room: %zu fds are open "
              "and a loader needs about %d more to start", n, fds_open,
              START_FDS);
    return 2;
  }
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && n > rl.rlim_max) {
    cli_error("--fd-limit: %" PRIu64 " is above the hard limit %llu", n,
              (unsigned long long)rl.rlim_max);
    return 2;
  }
  rl.rlim_cur = n;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    cli_error("--fd-limit: cannot set RLIMIT_NOFILE to %" PRIu64 ": %s", n,
              strerror(errno));
    return 1;
  }
  return 0;
}

const fl_budget_item *
budget_stopping(const fl_budget *b)
{
  const fl_budget_item *first = NULL;
  size_t i;

  for (i = 0; i < b->n; i++)
    if (strcmp(b->item[i].resource, "memlock bytes") != 0 &&
        (first == NULL || b->item[i].max_held < first->max_held))
      first = &b->item[i];
  return first;
}

const fl_budget_item *
budget_item(const fl_budget *b, const char *resource)
{
  size_t i;

  for (i = 0; i < b->n; i++)
    if (strcmp(b->item[i].resource, resource) == 0)
      return &b->item[i];
  return NULL;
}

unsigned
budget_prefetch(const struct load_args *a, const fl_loader *l)
{
  const fl_options *o = &a->opt;
  size_t per;

  if (a->iterable || o->num_workers == 0)
    return o->prefetch_factor;
  per = (fl_loader_len(l) + o->num_workers - 1) / o->num_workers;
  if (per == 0)
    per = 1;
  return per < o->prefetch_factor ? (unsigned)per : o->prefetch_factor;
}

uint64_t
budget_ahead(const struct load_args *a, const fl_loader *l)
{
  const fl_options *o = &a->opt;

  return o->in_order && o->num_workers > 0
             ? (uint64_t)(o->num_workers - 1) * budget_prefetch(a, l)
             : 0;
}

const char *
budget_remedy(const char *resource, const fl_options *o)
{
  if (strcmp(resource, "fds") == 0)
    return "raise `ulimit -n` or close files: the loader keeps no fd per "
           "held batch";
  if (strcmp(resource, "/dev/shm bytes") == 0)
    return o->sharing == FL_SHARE_FILE_SYSTEM
               ? "enlarge /dev/shm (docker --shm-size), release batches "
                 "sooner, or --sharing fd, whose memfd segments are not "
                 "charged to /dev/shm"
               : "enlarge /dev/shm (docker --shm-size), release batches "
                 "sooner, or drop --fd-in-dev-shm: memfd segments are not "
                 "charged to /dev/shm";
  if (strcmp(resource, "memory bytes") == 0)
    return "release batches sooner, or make them smaller (--batch-size): "
           "every held batch keeps its segment in memory";
  if (strcmp(resource, "memlock bytes") == 0)
    return "raise `ulimit -l`, or drop --pin-memory; past it, batches come "
           "unpinned, with a warning, and loading goes on";
  /* No message queue binds: a worker without one reads a socket pair. */
  return "raise `ulimit -u`, or use fewer --workers";
}

/* v, or "none" for UINT64_MAX, in buf. */
static const char *
figure(uint64_t v, char *buf, size_t len)
{
  if (v == UINT64_MAX)
    snprintf(buf, len, "none");
  else
    snprintf(buf, len, "%" PRIu64, v);
  return buf;
}

void
budget_json_number(uint64_t v)
{
  if (v == UINT64_MAX)
    fputs("null", stdout);
  else
    printf("%" PRIu64, v);
}

static void
print_json(const fl_budget *b)
{
  const fl_budget_item *it;
  size_t i;

  fputs("{\"binding\":", stdout);
  cli_json_string(b->item[b->binding].max_held == UINT64_MAX
                      ? NULL
                      : b->item[b->binding].resource);
  fputs(",\"items\":[", stdout);
  for (i = 0; i < b->n; i++) {
    it = &b->item[i];
    fputs(i ? ",{\"resource\":" : "{\"resource\":", stdout);
    cli_json_string(it->resource);
    fputs(",\"limit\":", stdout);
    budget_json_number(it->limit);
    fputs(",\"in_use\":", stdout);
    budget_json_number(it->in_use);
    fputs(",\"per_batch\":", stdout);
    budget_json_number(it->per_batch);
    fputs(",\"max_held\":", stdout);
    budget_json_number(it->max_held);
    putchar('}');
  }
  puts("]}");
}

/*
 * Workers that got no message queue (past `ulimit -q` or
 * fs.mqueue.queues_max, or from a kernel without them) read their tasks
 * from a socket pair: nothing is refused, and no advice is owed but its
 * cost.
 */
static void
queues_say(const fl_options *o, const fl_budget_item *q)
{
  uint64_t pairs;

  if (q == NULL || q->in_use >= o->num_workers)
    return;
  pairs = o->num_workers - q->in_use;
  printf("queues       %" PRIu64 " of %u worker(s) read their tasks from a "
         "socket pair, as no message queue could be had (`ulimit -q`, "
         "fs.mqueue.queues_max, or a kernel without them): none is "
         "refused, each keeps one fd more, counted in fds\n\n", pairs,
         o->num_workers);
}

static void
print_text(const struct doctor_args *a, const fl_loader *l,
           const fl_budget *b)
{
  const fl_options *o = &a->load.opt;
  const fl_budget_item *it, *bind = &b->item[b->binding];
  const fl_budget_item *mem = budget_item(b, "memory bytes");
  char f[4][24], sizes[800], capped[64] = "";
  uint64_t ahead = budget_ahead(&a->load, l);
  unsigned pf = budget_prefetch(&a->load, l);
  size_t i;

  if (pf < o->prefetch_factor)
    snprintf(capped, sizeof capped, " (of %u: the epoch's %zu batches)",
             o->prefetch_factor, fl_loader_len(l));
  printf("loader       %s, batch_size %zu, %u worker(s), "
         "prefetch %u%s, sharing %s%s, %s\n",
         load_samples(&a->load, sizes, sizeof sizes), o->batch_size,
         o->num_workers, pf, capped,
         o->sharing == FL_SHARE_FILE_SYSTEM ? "fs (/dev/shm)"
         : o->fd_in_dev_shm                 ? "fd (/dev/shm)"
                                            : "fd (memfd)",
         o->reuse_segments ? "" : ", no_reuse",
         o->in_order ? "in order" : "as they arrive");
  if (mem != NULL)
    printf("segment      %" PRIu64 " bytes per held batch (the size class "
           "the batches lately needed)\n",
           mem->per_batch);
  printf("\n%-16s %14s %12s %15s %21s\n", "resource", "limit", "in use",
         "per held batch", "batches you can hold");
  for (i = 0; i < b->n; i++) {
    it = &b->item[i];
    printf("%-16s %14s %12s %15s %21s%s\n", it->resource,
           figure(it->limit, f[0], sizeof f[0]),
           figure(it->in_use, f[1], sizeof f[1]),
           figure(it->per_batch, f[2], sizeof f[2]),
           figure(it->max_held, f[3], sizeof f[3]),
           i == b->binding && it->max_held != UINT64_MAX ? "  <- binds first"
                                                         : "");
  }
  putchar('\n');
  queues_say(o, budget_item(b, "message queues"));
  if (bind->max_held == UINT64_MAX) {
    puts("binds first  none: no limit is reached by holding batches");
    return;
  }
  printf("binds first  %s, after %" PRIu64 " batches held", bind->resource,
         bind->max_held);
  if (ahead > 0)
    printf(" (in order, up to %" PRIu64 " more)", ahead);
  printf("\nremedy       %s\n", budget_remedy(bind->resource, o));
}

static int
doctor_main(int argc, char **argv)
{
  struct doctor_args a = {0};
  struct census now = {0};
  fl_loader *l = NULL;
  fl_budget b;
  int rc, status;

  if (cli_parse(&cli_doctor, argc, argv, &a.load, doctor_option, &a) < 0)
    return 2;
  if ((status = load_dataset(&a.load)) != 0)
    goto out;
  status = 1;
  if (a.fd_limit != 0) {
    if ((rc = census_take(&now)) < 0) {
      cli_error("doctor: cannot count the open fds: %s", strerror(-rc));
      goto out;
    }
    if ((status = cli_fd_limit(a.fd_limit, now.nfds)) != 0)
      goto out;
    status = 1;
  }
  if ((rc = load_create(&a.load, &l)) < 0) {
    status = cli_create_error(rc);
    goto out;
  }
  if ((rc = fl_loader_budget(l, &b)) < 0) {
    cli_error("doctor: %s", cli_loader_error(l, rc));
    goto out;
  }
  if (a.json)
    print_json(&b);
  else
    print_text(&a, l, &b);
  status = 0;
out:
  fl_loader_destroy(l);
  census_free(&now);
  load_args_free(&a.load);
  return status;
}

const struct cli_command cli_doctor = {
  "doctor", "forkload doctor [--json] [--fd-limit N] [options]", help,
  options, doctor_main
};
