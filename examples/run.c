/*
 * `forkload run`: takes its own options (the dataset's and the loader's
 * are in options.c), drives one loader over the synthetic dataset, or the
 * files --dataset names, for some epochs the way a training loop would,
 * and reports what it measured.  Like a job that is preempted and
 * restarted, it can stop early and save the loader's state, and resume
 * from a saved state.  Through worker deaths (real, or --faults'), a
 * batch kept at the fd or shm limit is asked for again, and one whose
 * filling killed its worker twice is reported and passed over.
 */
#include "config.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Calls in a row that may find the batch due kept at the fd or shm limit
   before the run gives up.  It releases each batch at once, so a limit
   that lasts is the rest of the process's: waiting would not end it. */
#define KEPT_MAX 1000

struct run_args {
  struct load_args load;
  struct cli_log log;       /* the library's warnings */
  unsigned epochs;          /* the run ends before epoch `epochs` */
  int verify, json, quiet;
  uint64_t stop_after;      /* batches; 0: no stop */
  const char *save_state;   /* or NULL */
  const char *resume;       /* or NULL */
  uint64_t first_epoch;     /* 0, or the epoch the state resumes */
};

enum {
  OPT_EPOCHS = OPT_OWN,
  OPT_VERIFY,
  OPT_JSON,
  OPT_QUIET,
  OPT_STOP_AFTER,
  OPT_SAVE_STATE,
  OPT_RESUME
};

/* run's own options; the dataset's and the loader's are in options.c. */
static const char help[] =
  "Loads a synthetic dataset, or the files --dataset names, through\n"
  "forked workers and shared memory for some epochs, as a training loop\n"
  "would, and reports how fast it went.\n"
  "\n"
  "run:\n"
  "  --epochs N            run epochs 0 to N-1 over the same loader (1);\n"
  "                        resumed, those left of them\n"
  "  --verify              check every field of every sample against its\n"
  "                        index (with --dataset: files that gen wrote,\n"
  "                        same --seed), and every batch against the order\n"
  "                        an uninterrupted run in one process would give;\n"
  "                        a batch that killed its worker twice holds its\n"
  "                        place, reported, not checked\n"
  "  --json                print the summary as one JSON object\n"
  "  --quiet               no progress line\n"
  "  --stop-after N        stop once N batches are handed out, as if\n"
  "                        preempted, and exit 0\n"
  "  --save-state FILE     when the run ends (stopped, interrupted or\n"
  "                        done), write the loader's state to FILE,\n"
  "                        atomically\n"
  "  --resume FILE         go on from the state in FILE, with the same\n"
  "                        dataset and order options (--workers and, in\n"
  "                        order, --world-size and --rank may differ)\n";

static const struct option options[] = {
  {"epochs", required_argument, NULL, OPT_EPOCHS},
  {"verify", no_argument, NULL, OPT_VERIFY},
  {"json", no_argument, NULL, OPT_JSON},
  {"quiet", no_argument, NULL, OPT_QUIET},
  {"stop-after", required_argument, NULL, OPT_STOP_AFTER},
  {"save-state", required_argument, NULL, OPT_SAVE_STATE},
  {"resume", required_argument, NULL, OPT_RESUME},
  {NULL, 0, NULL, 0}
};

static int
run_option(int c, const char *arg, void *ctx)
{
  struct run_args *a = ctx;
  uint64_t v = 0;
  int rc = 0;

  switch (c) {
  case OPT_EPOCHS:
    rc = cli_uint(c, arg, 1, UINT_MAX, &v);
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
  case OPT_STOP_AFTER:
    rc = cli_uint(c, arg, 1, UINT64_MAX, &a->stop_after);
    break;
  case OPT_SAVE_STATE:
    a->save_state = arg;
    break;
  case OPT_RESUME:
    a->resume = arg;
    break;
  }
  return rc;
}

/* Says what went wrong with the loader (cli_create_error says why it
   could not be made). */
static void
report(const fl_loader *l, int rc)
{
  cli_error("%s", cli_loader_error(l, rc));
}

/* The fault spec in effect: --faults, or the environment's. */
static const char *
faults_spec(const fl_options *o)
{
  return o->faults != NULL ? o->faults : getenv("FORKLOAD_FAULTS");
}

/* A poisoned batch is reported and holds its place (--verify checks it
   was due), and the run goes on: 0, or -1 with why set. */
static int
poisoned(const fl_loader *l, uint64_t seq, struct verify *check,
         struct progress *pg, struct tally *t, char *why, size_t len)
{
  progress_clear(pg);
  cli_error("warning: %s", fl_loader_error(l));
  t->poisoned++;
  return check != NULL ? verify_poisoned(check, seq, why, len) : 0;
}

/* Reads the first value of every sample (of field 0, when it has fields),
   as a trainer's forward pass would, into a checksum the compiler cannot
   drop.  sizes holds nf per sample. */
static void
touch(const fl_batch *b, size_t nf, struct tally *t)
{
  const unsigned char *data = fl_batch_field(b, 0);
  const size_t *sizes = fl_batch_sizes(b);
  size_t i, f, n = fl_batch_count(b), stride = fl_batch_stride(b, 0);
  uint32_t v;

  for (i = 0; i < n; i++) {
    v = 0;
    memcpy(&v, data + i * stride, sizes[i * nf] < sizeof v ? sizes[i * nf]
                                                           : sizeof v);
    t->checksum += v;
    for (f = 0; f < nf; f++)
      t->bytes += sizes[i * nf + f];
  }
  t->samples += n;
  t->batches++;
}

/* Runs the epochs left, or until --stop-after.  Returns the exit status,
   having said why if not 0. */
static int
consume(fl_loader *l, struct run_args *a, struct verify *check,
        struct tally *t, double *seconds)
{
  struct progress pg;
  struct cli_pin pin = {0, 0, &pg};
  fl_batch *b;
  size_t done, total;
  char why[256] = "";
  uint64_t epoch, seq;
  int rc = 0, bad, kept = 0;

  progress_init(&pg, !a->quiet && !a->json);
  a->log.pg = &pg;
  for (epoch = a->first_epoch; epoch < a->epochs; epoch++) {
    if ((rc = fl_loader_begin(l)) < 0)
      goto out;
    total = fl_loader_len(l);
    if (check != NULL &&
        verify_begin(check, fl_loader_epoch(l), why, sizeof why) < 0)
      goto out;
    for (done = 0;;) {
      b = NULL;
      rc = fl_loader_next(l, &b);
      if (cli_pin_warning(&pin, l, &a->load.opt, rc))
        continue; /* the batch comes with the next call */
      kept = cli_kept(rc) ? kept + 1 : 0;
      if (kept > 0 && kept <= KEPT_MAX) {
        t->kept++;
        continue; /* it is asked for again with the next call */
      }
      if (cli_poisoned(l, rc, &seq)) {
        if (poisoned(l, seq, check, &pg, t, why, sizeof why) < 0)
          goto out;
        done = a->load.opt.in_order ? seq + 1 : done + 1;
        continue;
      }
      if (rc < 0)
        goto out;
      if (b == NULL) /* the epoch is over */
        break;
      touch(b, synth_nfields(&a->load.data), t);
      bad = check != NULL &&
            verify_batch(check, b, why, sizeof why) < 0;
      /* In order, a resumed epoch's bar starts where it stood. */
      done = a->load.opt.in_order ? fl_batch_seq(b) + 1 : done + 1;
      fl_batch_release(b);
      t->stopped = !bad && t->batches == a->stop_after;
      if (bad || cli_interrupted || t->stopped)
        goto out;
      progress_draw(&pg, (unsigned)epoch + 1, a->epochs, done, total, t);
    }
    if (check != NULL && verify_end(check, why, sizeof why) < 0)
      goto out;
  }
out:
  *seconds = cli_now() - pg.start;
  progress_clear(&pg);
  a->log.pg = NULL;
  /* Read once, so that the status and the summary agree.  An error then
     came of the interrupt (a ^C reaches the workers too), and is not
     worth a line: the summary tells what was done before it. */
  t->interrupted = cli_interrupted;
  if (t->interrupted)
    return 128 + t->interrupted;
  if (rc < 0 && kept > KEPT_MAX) {
    cli_error("%s (so %d calls in a row)", cli_loader_error(l, rc),
              KEPT_MAX + 1);
    return 1;
  }
  if (rc < 0) {
    report(l, rc);
    return 1;
  }
  if (why[0] != '\0') {
    /* The files may be right and not gen's, or gen's of another seed. */
    cli_error("verify: %s%s", why, a->load.file.kind == DS_SYNTHETIC ? "" :
              " (--verify expects what `forkload gen` wrote, with the same "
              "--seed)");
    return 1;
  }
  return 0;
}

/* Writes the loader's state to --save-state's file, checked first with
   --verify: a wrong state is not written, and the last good one stays.
   Returns 0, or 1 having said why not. */
static int
save_state(const fl_loader *l, const char *file, struct verify *check)
{
  void *buf = NULL;
  char why[256];
  int n, status = 1;

  n = fl_loader_state_save(l, NULL, 0);
  if (n >= 0 && (buf = malloc((size_t)n)) == NULL) {
    cli_error("--save-state %s: %s", file, fl_strerror(FL_ENOMEM));
    return 1;
  }
  if (n >= 0)
    n = fl_loader_state_save(l, buf, (size_t)n);
  if (n < 0)
    cli_error("--save-state %s: %s", file, cli_loader_error(l, n));
  else if (check != NULL &&
           verify_saved(check, buf, (size_t)n, why, sizeof why) < 0)
    cli_error("verify: %s", why);
  else if (state_write(file, buf, (size_t)n) == 0)
    status = 0;
  free(buf);
  return status;
}

/* The lines a resumed, stopped or interrupted run adds to the summary,
   and where its state went.  check: --verify's, or NULL. */
static void
print_place(const struct run_args *a, const struct tally *t,
            const struct verify *check)
{
  if (a->resume != NULL) {
    printf("resumed      epoch %" PRIu64 " from %s", a->first_epoch,
           a->resume);
    if (check != NULL && check->resumed == 0)
      printf(", verified as the uninterrupted run from batch %" PRIu64,
             check->resumed_at);
    else if (check != NULL && check->resumed == 1)
      printf(", verified as an elastic split of what was left");
    putchar('\n');
  }
  if (t->interrupted)
    printf("interrupted  by %s after %" PRIu64 " batches\n",
           cli_signal_name(t->interrupted), t->batches);
  if (t->stopped)
    printf("stopped      after %" PRIu64 " batches (--stop-after)\n",
           t->batches);
  if (a->save_state != NULL)
    printf("state        saved to %s\n", a->save_state);
}

static void
print_text(const struct run_args *a, const struct tally *t, double secs,
           const fl_stats *st, const struct verify *check)
{
  const struct load_args *d = &a->load;
  const fl_options *o = &d->opt;
  const struct {
    int on;
    const char *name;
  } flags[] = {
    {o->shuffle, "shuffle"},
    {o->shuffle && o->shuffle_algorithm == FL_SHUFFLE_BIJECTION,
     "bijection"},
    {o->drop_last, "drop_last"},
    {o->persistent_workers, "persistent"},
    {o->pin_memory, "pin_memory"},
    {!o->reuse_segments, "no_reuse"},
    {o->fd_in_dev_shm, "fd_in_dev_shm"},
    {d->batched, "batched"},
    {a->verify, "verified"}
  };
  char sizes[800]; /* 32 sizes of 20 digits, and words */
  size_t i;

  printf("run          ");
  if (d->file.kind != DS_SYNTHETIC)
    printf("%s, ", d->file.spec);
  if (d->file.kind == DS_IMAGES)
    printf("%ux%u %s crop, hflip %g, %s, ", d->image.height, d->image.width,
           d->image.crop == FL_CROP_CENTER ? "center" : "random",
           d->image.hflip, d->image.chw_float ? "float CHW" : "uint8 HWC");
  fputs(load_samples(d, sizes, sizeof sizes), stdout);
  printf(", %u epoch(s), %u worker(s), "
         "batch_size %zu, prefetch %u, sharing %s, %s, seed %" PRIu64,
         a->epochs, o->num_workers, o->batch_size, o->prefetch_factor,
         o->sharing == FL_SHARE_FILE_SYSTEM ? "fs" : "fd",
         o->in_order ? "in order" : "out of order", o->seed);
  if (o->world_size > 1)
    printf(", rank %u of %u (%s)", o->rank, o->world_size,
           cli_shard_mode_name(o->shard_mode));
  if (d->indices != NULL)
    printf(", indices %s", d->indices);
  if (d->data.delay_us != 0)
    printf(", delay %u us", d->data.delay_us);
  if (o->timeout_ms != 0)
    printf(", timeout %u ms", o->timeout_ms);
  if (o->max_worker_restarts != 0)
    printf(", max_worker_restarts %u", o->max_worker_restarts);
  if (faults_spec(o) != NULL && *faults_spec(o) != '\0')
    printf(", faults %s", faults_spec(o));
  for (i = 0; i < sizeof flags / sizeof flags[0]; i++)
    if (flags[i].on)
      printf(", %s", flags[i].name);
  putchar('\n');
  print_place(a, t, check);
  printf("batches      %" PRIu64 "\n", t->batches);
  printf("samples      %" PRIu64 "\n", t->samples);
  printf("bytes        %" PRIu64 "\n", t->bytes);
  printf("seconds      %.3f\n", secs);
  printf("batches/s    %.1f\n", cli_rate((double)t->batches, secs));
  printf("%s    %.1f\n",
         a->load.file.kind == DS_IMAGES ? "images/s " : "samples/s",
         cli_rate((double)t->samples, secs));
  printf("MB/s         %.1f\n", cli_rate((double)t->bytes / 1e6, secs));
  printf("waited       %.3f s for workers\n", st->wait_seconds);
  printf("segments     %zu at most\n", st->segments_peak);
  printf("mapped       %zu bytes at most\n", st->bytes_mapped_peak);
  printf("fds          %zu at most\n", st->fds_peak);
  printf("reorder      %zu batches waiting at most\n", st->reorder_peak);
  printf("restarts     %" PRIu64 " (faults injected: %" PRIu64 ")\n",
         st->worker_restarts, st->faults_injected);
  if (t->poisoned != 0)
    printf("poisoned     %" PRIu64 " batch(es) not delivered: filling each "
           "killed its worker twice\n", t->poisoned);
  if (t->kept != 0)
    printf("kept         %" PRIu64 " time(s) the batch due waited at the fd "
           "or shm limit\n", t->kept);
  printf("checksum     %" PRIu64 "\n", t->checksum);
}

static void
print_json(const struct run_args *a, const struct tally *t, double secs,
           const fl_stats *st)
{
  const fl_options *o = &a->load.opt;

  printf("{\"batches\":%" PRIu64 ",\"samples\":%" PRIu64
         ",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"batches_per_s\":%.3f"
         ",\"samples_per_s\":%.3f"
         ",\"mb_per_s\":%.3f,\"wait_seconds\":%.6f,\"segments_peak\":%zu"
         ",\"bytes_mapped_peak\":%zu,\"fds_peak\":%zu,\"reorder_peak\":%zu"
         ",\"epochs\":%u,\"workers\":%u,\"batch_size\":%zu"
         ",\"sharing\":\"%s\",\"in_order\":%s,\"persistent\":%s"
         ",\"verified\":%s,\"interrupted\":%s,\"checksum\":%" PRIu64
         ",\"rank\":%u,\"world_size\":%u,\"shard_mode\":\"%s\""
         ",\"first_epoch\":%" PRIu64 ",\"stopped\":%s"
         ",\"worker_restarts\":%" PRIu64 ",\"faults_injected\":%" PRIu64
         ",\"poisoned\":%" PRIu64 ",\"kept\":%" PRIu64
         ",\"max_worker_restarts\":%u,\"resume\":",
         t->batches, t->samples, t->bytes, secs,
         cli_rate((double)t->batches, secs),
         cli_rate((double)t->samples, secs),
         cli_rate((double)t->bytes / 1e6, secs), st->wait_seconds,
         st->segments_peak, st->bytes_mapped_peak, st->fds_peak,
         st->reorder_peak, a->epochs, o->num_workers, o->batch_size,
         o->sharing == FL_SHARE_FILE_SYSTEM ? "fs" : "fd",
         o->in_order ? "true" : "false",
         o->persistent_workers ? "true" : "false",
         a->verify ? "true" : "false", t->interrupted ? "true" : "false",
         t->checksum, o->rank, o->world_size,
         cli_shard_mode_name(o->shard_mode), a->first_epoch,
         t->stopped ? "true" : "false", st->worker_restarts,
         st->faults_injected, t->poisoned, t->kept, o->max_worker_restarts);
  cli_json_string(a->resume);
  fputs(",\"faults\":", stdout);
  cli_json_string(faults_spec(o));
  fputs(",\"save_state\":", stdout);
  cli_json_string(a->save_state);
  fputs(",\"dataset\":", stdout);
  cli_json_string(a->load.file.kind == DS_SYNTHETIC ? "synthetic"
                                                    : a->load.file.spec);
  puts("}");
}

/* Loads --resume's state into l before its first begin: 0, or the exit
   status having said why not, in the library's words, which name the
   field and both values (2: the state is not one for these options). */
static int
resume(fl_loader *l, const struct run_args *a, const void *buf, size_t len)
{
  int rc = fl_loader_state_load(l, buf, len);

  if (rc == 0)
    return 0;
  cli_error("--resume %s: %s", a->resume, cli_loader_error(l, rc));
  return rc == FL_EINVAL ? 2 : 1;
}

/* A stream is checked by its keys, over whole epochs: a resumed epoch
   does not hand out again what came before its state, so there is no set
   to check it against.  Said before any shard is opened.  0, or the exit
   status having said why not. */
static int
verify_stream_args(struct run_args *a)
{
  if (a->resume != NULL || a->save_state != NULL) {
    cli_error("--verify checks a stream's epochs whole, and takes no --%s",
              a->resume != NULL ? "resume" : "save-state");
    return 2;
  }
  if (verify_stream_spec(&a->load.file) < 0) {
    cli_error("--verify checks a stream by its keys: %s has no room for "
              "__key__ beside its %d extensions", a->load.file.spec,
              SYNTH_MAX_FIELDS);
    return 2;
  }
  return 0;
}

static int
run_main(int argc, char **argv)
{
  struct run_args a = {.epochs = 1};
  struct verify check = {0};
  struct tally t = {0};
  fl_stats st;
  fl_loader *l = NULL;
  void *state = NULL;
  size_t state_len = 0;
  double secs;
  int rc, status = 1;

  if (cli_parse(&cli_run, argc, argv, &a.load, run_option, &a) < 0)
    return 2;
  a.load.opt.log = cli_log;
  a.load.opt.log_arg = &a.log;
  if (a.verify && a.load.file.kind == DS_WEBDATASET &&
      (status = verify_stream_args(&a)) != 0)
    goto out;
  if ((status = load_dataset(&a.load)) != 0)
    goto out;
  if (a.resume != NULL &&
      (status = state_read(a.resume, &state, &state_len)) != 0)
    goto out;
  status = 2;
  if (a.save_state != NULL && state_dir_ok(a.save_state) < 0)
    goto out;
  /* The reference epoch is held whole: 9 bytes a sample. */
  if (a.verify && a.load.span.count > VERIFY_MAX_SAMPLES) {
    cli_error("--verify holds each epoch's reference order, 9 bytes a "
              "sample: it checks at most %llu samples, and these are %zu",
              (unsigned long long)VERIFY_MAX_SAMPLES, a.load.span.count);
    goto out;
  }
  status = 1;
  cli_catch_signals();
  if ((rc = load_create(&a.load, &l)) < 0) {
    status = cli_create_error(rc);
    goto out;
  }
  a.log.loader = l;
  if (state != NULL && (status = resume(l, &a, state, state_len)) != 0)
    goto out;
  status = 1;
  a.first_epoch = fl_loader_epoch(l);
  if (a.verify && a.load.iterable)
    verify_stream_init(&check, &a.load.file, &a.load.opt, a.load.data.seed);
  else if (a.verify && verify_init(&check, &a.load.data, &a.load.span,
                              &a.load.opt, state, state_len) < 0) {
    cli_error("--verify: %s", fl_strerror(FL_ENOMEM));
    goto out;
  }
  if (a.load.file.kind == DS_IMAGES)
    check.images = &a.load.ds;
  if (a.load.file.kind == DS_TOKENS)
    check.tokens_seq = a.load.file.seq_len;
  /* Interrupted, it still reports what it did, then exits 128 + the
     signal. */
  status = consume(l, &a, a.verify ? &check : NULL, &t, &secs);
  if (status != 0 && !t.interrupted)
    goto out;
  if (a.save_state != NULL &&
      save_state(l, a.save_state, a.verify ? &check : NULL) != 0) {
    status = 1;
    goto out;
  }
  if ((rc = fl_loader_stats(l, &st)) < 0) {
    report(l, rc);
    status = status != 0 ? status : 1;
    goto out;
  }
  if (a.json)
    print_json(&a, &t, secs, &st);
  else
    print_text(&a, &t, secs, &st, a.verify ? &check : NULL);
out:
  fl_loader_destroy(l);
  verify_free(&check);
  free(state);
  load_args_free(&a.load);
  return status;
}

const struct cli_command cli_run = {
  "run", "forkload run [options]", help, options, run_main
};
