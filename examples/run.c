/*
 * `forkload run`: parses its options, drives one loader over the synthetic
 * dataset for some epochs the way a training loop would, and reports what
 * it measured.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

struct run_args {
  fl_options opt;
  struct synth data;
  struct synth_span span; /* what the sampler gives, before any shuffle */
  const char *indices;    /* --indices as given, or NULL */
  int batched;
  unsigned epochs;
  int verify, json, quiet;
};

enum {
  OPT_SAMPLES = 256, /* past every short option */
  OPT_SAMPLE_BYTES,
  OPT_DELAY_US,
  OPT_BATCHED,
  OPT_INDICES,
  OPT_BATCH_SIZE,
  OPT_SHUFFLE,
  OPT_SEED,
  OPT_DROP_LAST,
  OPT_WORKERS,
  OPT_PREFETCH,
  OPT_PERSISTENT,
  OPT_OUT_OF_ORDER,
  OPT_PIN_MEMORY,
  OPT_TIMEOUT_MS,
  OPT_SHARING,
  OPT_NO_REUSE,
  OPT_SHOW_WORKERS,
  OPT_EPOCHS,
  OPT_VERIFY,
  OPT_JSON,
  OPT_QUIET
};

static const struct option options[] = {
  {"samples", required_argument, NULL, OPT_SAMPLES},
  {"sample-bytes", required_argument, NULL, OPT_SAMPLE_BYTES},
  {"delay-us", required_argument, NULL, OPT_DELAY_US},
  {"batched", no_argument, NULL, OPT_BATCHED},
  {"indices", required_argument, NULL, OPT_INDICES},
  {"batch-size", required_argument, NULL, OPT_BATCH_SIZE},
  {"shuffle", no_argument, NULL, OPT_SHUFFLE},
  {"seed", required_argument, NULL, OPT_SEED},
  {"drop-last", no_argument, NULL, OPT_DROP_LAST},
  {"workers", required_argument, NULL, OPT_WORKERS},
  {"prefetch", required_argument, NULL, OPT_PREFETCH},
  {"persistent", no_argument, NULL, OPT_PERSISTENT},
  {"out-of-order", no_argument, NULL, OPT_OUT_OF_ORDER},
  {"pin-memory", no_argument, NULL, OPT_PIN_MEMORY},
  {"timeout-ms", required_argument, NULL, OPT_TIMEOUT_MS},
  {"sharing", required_argument, NULL, OPT_SHARING},
  {"no-reuse", no_argument, NULL, OPT_NO_REUSE},
  {"show-workers", no_argument, NULL, OPT_SHOW_WORKERS},
  {"epochs", required_argument, NULL, OPT_EPOCHS},
  {"verify", no_argument, NULL, OPT_VERIFY},
  {"json", no_argument, NULL, OPT_JSON},
  {"quiet", no_argument, NULL, OPT_QUIET},
  {"help", no_argument, NULL, 'h'},
  {NULL, 0, NULL, 0}
};

static pid_t parent;
static volatile sig_atomic_t interrupted;

static const char *
option_name(int val)
{
  const struct option *o;

  for (o = options; o->name != NULL; o++)
    if (o->val == val)
      return o->name;
  return NULL;
}

/* strtoull alone would take a sign or leading spaces: a digit must come
   first.  Returns 0, -1 when there is no number, -2 when it overflows. */
static int
scan_uint(const char *s, char **end, uint64_t *out)
{
  if (*s < '0' || *s > '9')
    return -1;
  errno = 0;
  *out = strtoull(s, end, 10);
  return errno == ERANGE ? -2 : 0;
}

/* Parses option val's value s, a whole decimal number in [min, max]. */
static int
parse_uint(int val, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
  char *end;
  int rc = scan_uint(s, &end, out);

  if (rc == -1 || (rc == 0 && *end != '\0')) {
    cli_error("--%s: expected a %s integer, got '%s'", option_name(val),
              min > 0 ? "positive" : "non-negative", s);
    return -1;
  }
  if (rc == -2 || *out < min || *out > max) {
    cli_error("--%s: expected an integer from %" PRIu64 " to %" PRIu64
              ", got '%s'", option_name(val), min, max, s);
    return -1;
  }
  return 0;
}

/* START:END[:STEP] gives START, START+STEP, ... while below END. */
static int
parse_span(const char *s, struct synth_span *sp)
{
  uint64_t first, last, step = 1;
  char *p;

  if (scan_uint(s, &p, &first) != 0 || *p != ':' ||
      scan_uint(p + 1, &p, &last) != 0 ||
      (*p == ':' && scan_uint(p + 1, &p, &step) != 0) || *p != '\0' ||
      first >= last || step == 0) {
    cli_error("--indices: expected START:END[:STEP] with START < END and "
              "STEP > 0, got '%s'", s);
    return -1;
  }
  sp->first = first;
  sp->step = step;
  sp->count = (last - first - 1) / step + 1;
  return 0;
}

static void
bad_option(char **argv)
{
  const char *name = optopt != 0 ? option_name(optopt) : NULL;

  if (name != NULL)
    cli_error("--%s: takes no value", name);
  else if (optopt != 0)
    cli_error("unknown option '-%c'", optopt);
  else
    cli_error("unknown or ambiguous option '%s'", argv[optind - 1]);
}

/* Returns 0, or -1 having printed one line on what is wrong. */
static int
parse_args(struct run_args *a, int argc, char **argv)
{
  uint64_t v = 0;
  int c, rc = 0;

  *a = (struct run_args){0};
  fl_options_init(&a->opt);
  a->opt.batch_size = 64;
  a->opt.num_workers = 2;
  a->data.samples = 50000;
  a->data.sample_bytes = 3 * 32 * 32 * sizeof(float); /* CIFAR-10 */
  a->epochs = 1;

  opterr = 0; /* our own one-line messages, not getopt's */
  while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
    switch (c) {
    case OPT_SAMPLES:
      rc = parse_uint(c, optarg, 1, SIZE_MAX, &v);
      a->data.samples = v;
      break;
    case OPT_SAMPLE_BYTES:
      rc = parse_uint(c, optarg, 1, SIZE_MAX, &v);
      a->data.sample_bytes = v;
      break;
    case OPT_DELAY_US:
      rc = parse_uint(c, optarg, 0, UINT_MAX, &v);
      a->data.delay_us = v;
      break;
    case OPT_BATCHED:
      a->batched = 1;
      break;
    case OPT_INDICES:
      rc = parse_span(optarg, &a->span);
      a->indices = optarg;
      break;
    /* Zero goes through where the library has the say on it. */
    case OPT_BATCH_SIZE:
      rc = parse_uint(c, optarg, 0, SIZE_MAX, &v);
      a->opt.batch_size = v;
      break;
    case OPT_SHUFFLE:
      a->opt.shuffle = 1;
      break;
    case OPT_SEED:
      rc = parse_uint(c, optarg, 0, UINT64_MAX, &v);
      a->opt.seed = v;
      break;
    case OPT_DROP_LAST:
      a->opt.drop_last = 1;
      break;
    case OPT_WORKERS:
      rc = parse_uint(c, optarg, 0, UINT_MAX, &v);
      a->opt.num_workers = v;
      break;
    case OPT_PREFETCH:
      rc = parse_uint(c, optarg, 0, UINT_MAX, &v);
      a->opt.prefetch_factor = v;
      break;
    case OPT_PERSISTENT:
      a->opt.persistent_workers = 1;
      break;
    case OPT_OUT_OF_ORDER:
      a->opt.in_order = 0;
      break;
    case OPT_PIN_MEMORY:
      a->opt.pin_memory = 1;
      break;
    case OPT_TIMEOUT_MS:
      rc = parse_uint(c, optarg, 0, UINT_MAX, &v);
      a->opt.timeout_ms = v;
      break;
    case OPT_SHARING:
      if (strcmp(optarg, "fd") == 0)
        a->opt.sharing = FL_SHARE_FILE_DESCRIPTOR;
      else if (strcmp(optarg, "fs") == 0)
        a->opt.sharing = FL_SHARE_FILE_SYSTEM;
      else {
        cli_error("--sharing: expected 'fd' or 'fs', got '%s'", optarg);
        rc = -1;
      }
      break;
    case OPT_NO_REUSE:
      a->opt.reuse_segments = 0;
      break;
    case OPT_SHOW_WORKERS:
      a->opt.worker_init = synth_worker_init;
      break;
    case OPT_EPOCHS:
      rc = parse_uint(c, optarg, 1, UINT_MAX, &v);
      a->epochs = v;
      break;
    case OPT_VERIFY:
      a->verify = 1;
      break;
    case OPT_JSON:
      a->json = 1;
      break;
    case OPT_QUIET:
      a->quiet = 1;
      break;
    case 'h':
      usage(0);
    case ':':
      cli_error("--%s: missing value", option_name(optopt));
      return -1;
    default:
      bad_option(argv);
      return -1;
    }
    if (rc < 0)
      return -1;
  }
  if (optind < argc) {
    cli_error("run: unexpected argument '%s'", argv[optind]);
    return -1;
  }
  if (a->indices == NULL)
    a->span = (struct synth_span){0, 1, a->data.samples};
  /* Checked here so that a wild range is never built into an array. */
  if (a->span.first + (a->span.count - 1) * a->span.step >=
      a->data.samples) {
    cli_error("--indices: %s goes past the %zu samples", a->indices,
              a->data.samples);
    return -1;
  }
  return 0;
}

/* A first ^C ends the run after the batch at hand, so that the loader is
   destroyed and leaves no names in /dev/shm; a second one kills. */
static void
on_signal(int sig)
{
  /* A worker inherits this: there the default action (SA_RESETHAND
     restored it) is what the library expects. */
  if (getpid() != parent) {
    raise(sig);
    return;
  }
  interrupted = sig;
}

static void
catch_signals(void)
{
  struct sigaction sa;

  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  parent = getpid();
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* fl_loader_error(NULL) holds why fl_loader_create failed. */
static void
report(const fl_loader *l, int rc)
{
  const char *msg = fl_loader_error(l);

  cli_error("%s", msg != NULL && *msg != '\0' ? msg : fl_strerror(rc));
}

/* Reads the first value of every sample, as a trainer's forward pass
   would, into a checksum the compiler cannot drop. */
static void
touch(const fl_batch *b, size_t sample_bytes, struct tally *t)
{
  const unsigned char *data = fl_batch_data(b);
  const size_t *sizes = fl_batch_sizes(b);
  size_t i, n = fl_batch_count(b);
  uint32_t v;

  for (i = 0; i < n; i++) {
    v = 0;
    memcpy(&v, data + i * sample_bytes, sizes[i] < sizeof v ? sizes[i]
                                                            : sizeof v);
    t->checksum += v;
    t->bytes += sizes[i];
  }
  t->samples += n;
  t->batches++;
}

/* Runs the epochs.  Returns the exit status, having said why if not 0. */
static int
consume(fl_loader *l, const struct run_args *a, struct synth_check *check,
        struct tally *t, double *seconds)
{
  struct progress pg;
  fl_batch *b;
  size_t done, total = fl_loader_len(l);
  char why[256] = "";
  unsigned epoch;
  int rc = 0, bad;

  progress_init(&pg, !a->quiet && !a->json);
  for (epoch = 1; epoch <= a->epochs; epoch++) {
    if ((rc = fl_loader_begin(l)) < 0)
      goto out;
    if (check != NULL)
      synth_check_begin(check);
    for (done = 0;; done++) {
      b = NULL;
      if ((rc = fl_loader_next(l, &b)) < 0)
        goto out;
      if (b == NULL) /* the epoch is over */
        break;
      touch(b, a->data.sample_bytes, t);
      bad = check != NULL &&
            synth_check_batch(check, b, why, sizeof why) < 0;
      fl_batch_release(b);
      if (bad || interrupted)
        goto out;
      progress_draw(&pg, epoch, a->epochs, done + 1, total, t);
    }
    if (check != NULL && synth_check_end(check, why, sizeof why) < 0)
      goto out;
  }
out:
  *seconds = cli_now() - pg.start;
  progress_clear(&pg);
  if (interrupted) {
    cli_error("interrupted");
    return 128 + interrupted;
  }
  if (rc < 0) {
    report(l, rc);
    return 1;
  }
  if (why[0] != '\0') {
    cli_error("verify: %s", why);
    return 1;
  }
  return 0;
}

static void
print_text(const struct run_args *a, const struct tally *t, double secs,
           const fl_stats *st)
{
  const fl_options *o = &a->opt;
  const struct {
    int on;
    const char *name;
  } flags[] = {
    {o->shuffle, "shuffle"},
    {o->drop_last, "drop_last"},
    {o->persistent_workers, "persistent"},
    {o->pin_memory, "pin_memory"},
    {!o->reuse_segments, "no_reuse"},
    {a->batched, "batched"},
    {a->verify, "verified"}
  };
  size_t i;

  printf("run          %zu samples of %zu bytes, %u epoch(s), %u worker(s), "
         "batch_size %zu, prefetch %u, sharing %s, %s, seed %" PRIu64,
         a->data.samples, a->data.sample_bytes, a->epochs, o->num_workers,
         o->batch_size, o->prefetch_factor,
         o->sharing == FL_SHARE_FILE_SYSTEM ? "fs" : "fd",
         o->in_order ? "in order" : "out of order", o->seed);
  if (a->indices != NULL)
    printf(", indices %s", a->indices);
  if (a->data.delay_us != 0)
    printf(", delay %u us", a->data.delay_us);
  if (o->timeout_ms != 0)
    printf(", timeout %u ms", o->timeout_ms);
  for (i = 0; i < sizeof flags / sizeof flags[0]; i++)
    if (flags[i].on)
      printf(", %s", flags[i].name);
  printf("\nbatches      %" PRIu64 "\n", t->batches);
  printf("samples      %" PRIu64 "\n", t->samples);
  printf("bytes        %" PRIu64 "\n", t->bytes);
  printf("seconds      %.3f\n", secs);
  printf("batches/s    %.1f\n", cli_rate((double)t->batches, secs));
  printf("MB/s         %.1f\n", cli_rate((double)t->bytes / 1e6, secs));
  printf("waited       %.3f s for workers\n", st->wait_seconds);
  printf("segments     %zu at most\n", st->segments_peak);
  printf("mapped       %zu bytes at most\n", st->bytes_mapped_peak);
  printf("fds          %zu at most\n", st->fds_peak);
  printf("reorder      %zu batches waiting at most\n", st->reorder_peak);
  printf("checksum     %" PRIu64 "\n", t->checksum);
}

static void
print_json(const struct run_args *a, const struct tally *t, double secs,
           const fl_stats *st)
{
  const fl_options *o = &a->opt;

  printf("{\"batches\":%" PRIu64 ",\"samples\":%" PRIu64
         ",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"batches_per_s\":%.3f"
         ",\"mb_per_s\":%.3f,\"wait_seconds\":%.6f,\"segments_peak\":%zu"
         ",\"bytes_mapped_peak\":%zu,\"fds_peak\":%zu,\"reorder_peak\":%zu"
         ",\"epochs\":%u,\"workers\":%u,\"batch_size\":%zu"
         ",\"sharing\":\"%s\",\"in_order\":%s,\"persistent\":%s"
         ",\"verified\":%s,\"checksum\":%" PRIu64 "}\n",
         t->batches, t->samples, t->bytes, secs,
         cli_rate((double)t->batches, secs),
         cli_rate((double)t->bytes / 1e6, secs), st->wait_seconds,
         st->segments_peak, st->bytes_mapped_peak, st->fds_peak,
         st->reorder_peak, a->epochs, o->num_workers, o->batch_size,
         o->sharing == FL_SHARE_FILE_SYSTEM ? "fs" : "fd",
         o->in_order ? "true" : "false",
         o->persistent_workers ? "true" : "false",
         a->verify ? "true" : "false", t->checksum);
}

static size_t *
span_indices(const struct synth_span *sp)
{
  size_t *v = calloc(sp->count, sizeof *v);
  size_t k;

  for (k = 0; v != NULL && k < sp->count; k++)
    v[k] = sp->first + k * sp->step;
  return v;
}

int
run_main(int argc, char **argv)
{
  struct run_args a;
  struct synth_check check = {0};
  struct tally t = {0};
  fl_dataset ds;
  fl_stats st;
  fl_loader *l = NULL;
  size_t *indices = NULL;
  double secs;
  int rc, status = 1;

  if (parse_args(&a, argc, argv) < 0)
    return 2;
  if (a.indices != NULL) {
    if ((indices = span_indices(&a.span)) == NULL) {
      cli_error("--indices: %s", fl_strerror(FL_ENOMEM));
      goto out;
    }
    a.opt.indices = indices;
    a.opt.indices_len = a.span.count;
  }
  synth_dataset(&a.data, a.batched, &ds);
  catch_signals();
  if ((rc = fl_loader_create(&l, &ds, &a.opt)) < 0) {
    report(l, rc);
    /* The library checks the options: what it refuses is bad input. */
    status = rc == FL_EINVAL ? 2 : 1;
    goto out;
  }
  if (a.verify && synth_check_init(&check, &a.data, &a.span, &a.opt) < 0) {
    cli_error("--verify: %s", fl_strerror(FL_ENOMEM));
    goto out;
  }
  if ((status = consume(l, &a, a.verify ? &check : NULL, &t, &secs)) != 0)
    goto out;
  if ((rc = fl_loader_stats(l, &st)) < 0) {
    report(l, rc);
    status = 1;
    goto out;
  }
  if (a.json)
    print_json(&a, &t, secs, &st);
  else
    print_text(&a, &t, secs, &st);
out:
  fl_loader_destroy(l);
  synth_check_free(&check);
  free(indices);
  return status;
}
