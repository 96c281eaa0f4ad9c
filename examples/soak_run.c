/*
 * One configuration of `forkload soak`.  A loader made with it runs its
 * epochs while the consumer does what a trainer might: it holds batches a
 * while and releases them in any order, lets go of them when a batch is
 * kept at the fd or shm limit, cuts epochs short with a begin, and
 * destroys the loader holding batches.  Every batch is checked as it
 * comes, and a held one again when it is released; a kept batch must come
 * later, a poisoned one holds its place; at the end the loader's counts
 * must agree with what the consumer saw and the log told.
 */
#include "config.h"

#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "cli.h"

/* Calls in a row that may find the batch due kept at a limit: the faults
   are injected with a probability well below 1, so a longer run of them
   is a batch the loader does not ask for again. */
#define KEPT_MAX 1000

struct consumer {
  const struct soak_config *c;
  struct soak_check check;
  fl_loader *l;
  fl_batch *held[SOAK_HOLD_MAX];
  size_t nheld;
  uint64_t rng;
  uint64_t batches, poisoned; /* of this configuration */
  uint64_t restarts;          /* that the log told of */
  struct soak_tally *t;
};

/* The log: each restart is one sentence. */
static void
hear(void *arg, const char *msg)
{
  struct consumer *u = arg;

  if (strstr(msg, "respawned as pid") != NULL)
    u->restarts++;
}

/* verify.c's checks, for a map-style dataset. */
static int
map_begin(void *ctx, uint64_t epoch, char *why, size_t len)
{
  return verify_begin(ctx, epoch, why, len);
}

static int
map_batch(void *ctx, const fl_batch *b, char *why, size_t len)
{
  return verify_batch(ctx, b, why, len);
}

static int
map_poisoned(void *ctx, uint64_t seq, char *why, size_t len)
{
  return verify_poisoned(ctx, seq, why, len);
}

static int
map_end(void *ctx, char *why, size_t len)
{
  return verify_end(ctx, why, len);
}

static int
map_again(void *ctx, const fl_batch *b, char *why, size_t len)
{
  const struct verify *v = ctx;
  size_t i, n = fl_batch_count(b);

  for (i = 0; i < n; i++)
    if (synth_check_sample(v->data, b, i, why, len) < 0)
      return -1;
  return 0;
}

/* Held batch i goes, checked once more: its segment must not have been
   written while it was held. */
static int
release_at(struct consumer *u, size_t i, char *why, size_t len)
{
  fl_batch *b = u->held[i];
  int rc;

  u->held[i] = u->held[--u->nheld];
  rc = u->check.again(u->check.ctx, b, why, len);
  fl_batch_release(b);
  return rc;
}

static int
release_all(struct consumer *u, char *why, size_t len)
{
  while (u->nheld > 0)
    if (release_at(u, u->nheld - 1, why, len) < 0)
      return -1;
  return 0;
}

/* A batch came: checked, then held for a while or released at once; now
   and then a held one goes, whichever. */
static int
take(struct consumer *u, fl_batch *b, char *why, size_t len)
{
  const struct soak_config *c = u->c;
  int rc = u->check.batch(u->check.ctx, b, why, len);

  u->batches++;
  u->t->batches++;
  u->t->samples += fl_batch_count(b);
  if (rc == 0 && u->nheld < c->hold_max &&
      soak_below(&u->rng, 100) < c->hold_pct) {
    u->held[u->nheld++] = b;
    u->t->held++;
    return 0;
  }
  fl_batch_release(b);
  if (rc == 0 && u->nheld > 0 && soak_below(&u->rng, 4) == 0)
    rc = release_at(u, soak_below(&u->rng, (unsigned)u->nheld), why, len);
  return rc;
}

/* Where an epoch is cut short: after this many batches (poisoned places
   count), or never (SIZE_MAX).  An iterable's length is not known: about
   its batches, past which the epoch ends whole. */
static size_t
cut_point(struct consumer *u)
{
  const struct soak_config *c = u->c;
  size_t n = c->iterable ? c->data.samples / c->opt.batch_size + 1
                         : fl_loader_len(u->l);

  if (n == 0 || soak_below(&u->rng, 100) >= c->cut_pct)
    return SIZE_MAX;
  return soak_below(&u->rng, (unsigned)n);
}

/* One epoch: 1 when it was handed out whole, 0 when cut short or
   interrupted, -1 on a violation (why set). */
static int
epoch(struct consumer *u, char *why, size_t len)
{
  size_t taken = 0, cut;
  uint64_t seq;
  fl_batch *b;
  int rc, kept = 0;

  if ((rc = fl_loader_begin(u->l)) < 0)
    return cli_fail(why, len, "fl_loader_begin: %s (%s)",
                    cli_loader_error(u->l, rc), fl_err_name(rc));
  u->t->epochs++;
  if (u->check.begin(u->check.ctx, fl_loader_epoch(u->l), why, len) < 0)
    return -1;
  cut = cut_point(u);
  for (;;) {
    if (taken == cut) {
      u->t->cut++;
      return 0;
    }
    if (cli_interrupted)
      return 0;
    b = NULL;
    rc = fl_loader_next(u->l, &b);
    kept = cli_kept(rc) ? kept + 1 : 0;
    if (kept > KEPT_MAX)
      return cli_fail(why, len, "fl_loader_next kept the batch due %d "
                      "calls in a row: %s", kept, cli_loader_error(u->l, rc));
    if (kept > 0) {
      u->t->kept++;
      /* As a trainer told to release batches would, half the time. */
      if (soak_below(&u->rng, 2) && release_all(u, why, len) < 0)
        return -1;
      continue;
    }
    if (cli_poisoned(u->l, rc, &seq)) {
      u->poisoned++;
      u->t->poisoned++;
      taken++;
      if (u->check.poisoned(u->check.ctx, seq, why, len) < 0)
        return -1;
      continue;
    }
    if (rc < 0)
      return cli_fail(why, len, "fl_loader_next: %s (%s)",
                      cli_loader_error(u->l, rc), fl_err_name(rc));
    if (rc == 0)
      return u->check.end(u->check.ctx, why, len) < 0 ? -1 : 1;
    taken++;
    if (take(u, b, why, len) < 0)
      return -1;
  }
}

/* The loader's counts against what the consumer saw and the log told. */
static int
counts_agree(struct consumer *u, char *why, size_t len)
{
  const char *f = u->c->faults;
  fl_stats st;
  int rc = fl_loader_stats(u->l, &st);

  if (rc < 0)
    return cli_fail(why, len, "fl_loader_stats: %s",
                    cli_loader_error(u->l, rc));
  u->t->faults += st.faults_injected;
  u->t->restarts += st.worker_restarts;
  if (st.worker_restarts != u->restarts)
    return cli_fail(why, len, "the loader counts %" PRIu64 " worker "
                    "restarts, its log told of %" PRIu64,
                    st.worker_restarts, u->restarts);
  if (st.worker_restarts != 0 && strstr(f, "kill=") == NULL &&
      strstr(f, "exit=") == NULL)
    return cli_fail(why, len, "%" PRIu64 " worker restarts, and no kill or "
                    "exit was injected", st.worker_restarts);
  if (st.faults_injected != 0 && f[0] == '\0')
    return cli_fail(why, len, "%" PRIu64 " faults counted as injected, and "
                    "none were asked for", st.faults_injected);
  if (st.batches_held != u->nheld)
    return cli_fail(why, len, "the loader counts %zu batches held, the "
                    "consumer holds %zu", st.batches_held, u->nheld);
  if (st.batches_delivered != u->batches + u->poisoned)
    return cli_fail(why, len, "the loader counts %" PRIu64 " batches "
                    "delivered, the consumer took %" PRIu64 " and %" PRIu64
                    " poisoned places", st.batches_delivered, u->batches,
                    u->poisoned);
  return 0;
}

/* Makes the loader of c and its check: 0, 1 when the library's admission
   refused it (the machine is short of memory now), or -1. */
static int
create(struct consumer *u, struct synth *data, struct verify *v,
       struct soak_stream *s, char *why, size_t len)
{
  const struct soak_config *c = u->c;
  struct synth_span span = {0, 1, data->samples};
  fl_options opt = c->opt;
  fl_iterable it;
  fl_dataset ds;
  int rc;

  opt.faults = c->faults;
  opt.log = hear;
  opt.log_arg = u;
  if (c->iterable) {
    if (soak_stream_init(s, data, opt.num_workers, c->skip,
                         strstr(c->faults, "enospc=") == NULL, &it) < 0)
      return cli_fail(why, len, "%s", fl_strerror(FL_ENOMEM));
    soak_stream_check(s, &u->check);
    rc = fl_loader_create_iterable(&u->l, &it, &opt);
  } else {
    synth_dataset(data, c->batched, &ds);
    u->check = (struct soak_check){v, map_begin, map_batch, map_poisoned,
                                   map_end, map_again};
    if (verify_init(v, data, &span, &opt, NULL, 0) < 0)
      return cli_fail(why, len, "%s", fl_strerror(FL_ENOMEM));
    rc = fl_loader_create(&u->l, &ds, &opt);
  }
  if (rc == FL_ENOMEM || rc == FL_ENOSPC)
    return 1;
  if (rc < 0)
    return cli_fail(why, len, "fl_loader_create: %s",
                    cli_loader_error(NULL, rc));
  return 0;
}

int
soak_run(const struct soak_config *c, struct soak_tally *t, char *why,
         size_t len)
{
  struct consumer u = {0};
  struct verify v = {0};
  struct soak_stream s = {0};
  struct synth data = c->data;
  unsigned e;
  int rc;

  u.c = c;
  u.t = t;
  u.rng = c->rng;
  t->configs++;
  t->iterable += c->iterable;
  rc = create(&u, &data, &v, &s, why, len);
  if (rc > 0)
    t->refused++;
  for (e = 0; rc == 0 && e < c->epochs && !cli_interrupted; e++)
    rc = epoch(&u, why, len) < 0 ? -1 : 0;
  if (rc == 0)
    rc = counts_agree(&u, why, len);
  if (rc == 0 && !c->destroy_held)
    rc = release_all(&u, why, len);
  /* Batches still held go with the loader. */
  fl_loader_destroy(u.l);
  verify_free(&v);
  soak_stream_free(&s);
  return rc < 0 ? -1 : 0;
}
