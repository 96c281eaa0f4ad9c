/*
 * The rule for batches that an asynchronous copy reads (cudaMemcpyAsync
 * to a GPU), without a GPU: the test plays the copy engine.  It takes
 * batches, queues their "copies", and performs each copy only after more
 * batches have come, as a copy engine running behind the host would; it
 * releases a batch once its copy is done, never before.  Pin and unpin
 * hooks record what the loader did, in one log with the takes and the
 * releases, and the log is checked afterwards:
 *   1  each segment is pinned before the first batch handed out from it;
 *   2  a segment is unpinned only once every batch taken from it was
 *      released, and while it is still mapped;
 *   3  a batch held is never refilled: its bytes stay as they were while
 *      later batches arrive, so a copy that ends late reads the right data;
 * and the other way round, what goes wrong otherwise: a batch released
 * before its copy ends is refilled under that copy, with no error.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"

#define LOG_MAX 8192
#define SAMPLE_BYTES 64
#define BATCH 4

enum what { PIN, UNPIN, TAKE, RELEASE };

/* One thing that happened, in the order it happened. */
struct event {
  enum what what;
  const unsigned char *addr; /* the segment's (pin), the batch's data */
  size_t len;
  uint64_t seq;              /* a take's or a release's batch */
  int mapped;                /* unpin: the range was mapped then */
};

struct log {
  struct event e[LOG_MAX];
  size_t n;
};

static struct event *
log_add(struct log *g, enum what what, const void *addr, size_t len,
        uint64_t seq)
{
  struct event *e;

  assert_true(g->n < LOG_MAX);
  e = &g->e[g->n++];
  memset(e, 0, sizeof(*e));
  e->what = what;
  e->addr = addr;
  e->len = len;
  e->seq = seq;
  return e;
}

static int
log_pin(void *addr, size_t len, void *arg)
{
  log_add(arg, PIN, addr, len, 0);
  return 0;
}

/* mincore fails with ENOMEM on a range that is not mapped. */
static void
log_unpin(void *addr, size_t len, void *arg)
{
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char *vec = malloc((len + page - 1) / page);

  assert_non_null(vec);
  log_add(arg, UNPIN, addr, len, 0)->mapped = mincore(addr, len, vec) == 0;
  free(vec);
}

/* The pin of the segment that holds p, pinned and not unpinned at event
   `at` of the log, or NULL. */
static const struct event *
pinned_at(const struct log *g, size_t at, const void *p)
{
  const unsigned char *x = p;
  const struct event *pin = NULL;
  size_t i;

  for (i = 0; i < at; i++) {
    const struct event *e = &g->e[i];

    if (x < e->addr || x >= e->addr + e->len)
      continue;
    if (e->what == PIN)
      pin = e;
    else if (e->what == UNPIN && pin != NULL && e->addr == pin->addr)
      pin = NULL;
  }
  return pin;
}

/*
 * Rules 1 and 2 over the whole log of a loader now destroyed: every take
 * lies in a segment pinned then; every unpin finds the segment mapped and
 * each batch taken from it since its pin released; every pin unpinned.
 */
static void
check_log(const struct log *g)
{
  size_t i, j, pins = 0, unpins = 0;

  for (i = 0; i < g->n; i++) {
    const struct event *e = &g->e[i];
    const struct event *pin;

    if (e->what == TAKE) {
      if (pinned_at(g, i, e->addr) == NULL)
        fail_msg("batch %llu was handed out from a segment not pinned",
                 (unsigned long long)e->seq);
    } else if (e->what == PIN) {
      pins++;
    } else if (e->what == UNPIN) {
      unpins++;
      if (!e->mapped)
        fail_msg("a segment was unpinned after it was unmapped");
      pin = pinned_at(g, i, e->addr);
      assert_non_null(pin);
      for (j = (size_t)(pin - g->e); j < i; j++) {
        const struct event *t = &g->e[j];
        size_t k;
        int released = 0;

        if (t->what != TAKE || t->addr < e->addr ||
            t->addr >= e->addr + e->len)
          continue;
        for (k = j + 1; k < i; k++)
          released |= g->e[k].what == RELEASE && g->e[k].seq == t->seq;
        if (!released)
          fail_msg("a segment was unpinned while batch %llu, from it, was "
                   "held", (unsigned long long)t->seq);
      }
    }
  }
  assert_true(pins > 0);
  assert_int_equal(pins, unpins);
}

/* A batch whose copy is queued: where its data is and what it must be. */
struct copy {
  fl_batch *b;
  const unsigned char *data;
  size_t count;
  size_t index[BATCH];
};

/* Rule 3: the copy, late, reads the samples the batch was handed out
   with; then the batch goes. */
static void
copy_then_release(struct log *g, struct copy *c)
{
  unsigned char buf[BATCH * SAMPLE_BYTES];
  size_t i;

  memcpy(buf, c->data, c->count * SAMPLE_BYTES);
  for (i = 0; i < c->count; i++)
    if (!flt_sample_ok(buf + i * SAMPLE_BYTES, SAMPLE_BYTES, c->index[i]))
      fail_msg("batch %llu changed before its copy ended (sample %zu)",
               (unsigned long long)fl_batch_seq(c->b), i);
  log_add(g, RELEASE, c->data, 0, fl_batch_seq(c->b));
  fl_batch_release(c->b);
  c->b = NULL;
}

/*
 * Epochs of batches through a copy engine `depth` batches behind the host:
 * each batch taken is queued; when the queue is full its oldest copy is
 * done and that batch released.  No batch taken may lie in the segment of
 * one still queued.
 */
static void
run_copies(flt_case *f, struct log *g, unsigned epochs, size_t depth)
{
  struct copy q[8];
  const size_t *idx;
  size_t head = 0, n = 0, i, taken = 0;
  fl_batch *b;
  unsigned e;

  assert_true(depth <= 8);
  memset(q, 0, sizeof(q));
  for (e = 0; e < epochs; e++) {
    assert_int_equal(fl_loader_begin(f->l), 0);
    while (fl_loader_next(f->l, &b) == 1) {
      const struct event *seg;
      struct copy *c;

      log_add(g, TAKE, fl_batch_data(b), 0, fl_batch_seq(b));
      seg = pinned_at(g, g->n, fl_batch_data(b));
      assert_non_null(seg);
      for (i = 0; i < n; i++)
        if (pinned_at(g, g->n, q[(head + i) % depth].data) == seg)
          fail_msg("batch %llu was refilled into the segment of batch "
                   "%llu, whose copy was still queued",
                   (unsigned long long)fl_batch_seq(b),
                   (unsigned long long)fl_batch_seq(q[(head + i) % depth].b));
      if (n == depth) {
        copy_then_release(g, &q[head]);
        head = (head + 1) % depth;
        n--;
      }
      c = &q[(head + n++) % depth];
      c->b = b;
      c->data = fl_batch_data(b);
      c->count = fl_batch_count(b);
      idx = fl_batch_indices(b);
      for (i = 0; i < c->count; i++)
        c->index[i] = idx[i];
      taken++;
    }
  }
  /* The end of the run: every copy completes before the loader goes. */
  for (; n > 0; n--, head = (head + 1) % depth)
    copy_then_release(g, &q[head]);
  assert_int_equal(taken, epochs * fl_loader_len(f->l));
}

/* What the hooks and the cases log: one case runs at a time. */
static struct log the_log;

/* A case's loader, created, with the hooks logging into the_log. */
static void
start(flt_case *f, unsigned workers, int persistent, int reuse)
{
  memset(&the_log, 0, sizeof(the_log));
  flt_case_init(f, 96, SAMPLE_BYTES);
  f->opt.batch_size = BATCH;
  f->opt.shuffle = 1;
  f->opt.num_workers = workers;
  f->opt.persistent_workers = persistent;
  f->opt.reuse_segments = reuse;
  f->opt.pin_memory = 1;
  f->opt.pin = log_pin;
  f->opt.unpin = log_unpin;
  f->opt.pin_arg = &the_log;
  flt_case_create(f);
}

/* The loader gone (unpinning what is left), the log must hold. */
static void
finish(flt_case *f)
{
  fl_loader_destroy(f->l);
  f->l = NULL;
  check_log(&the_log);
  flt_case_end(f);
}

static void
copies_three_batches_behind_read_every_batch_intact(void **state)
{
  static const unsigned workers[] = {2, 1, 0};
  flt_case f;
  size_t w;

  (void)state;
  for (w = 0; w < 3; w++) {
    start(&f, workers[w], 1, 1);
    run_copies(&f, &the_log, 2, 3);
    finish(&f);
  }
}

/* Workers forked each epoch: the last epoch's segments, still pinned, are
   lent to the new workers, and a queued copy is still safe across it. */
static void
copies_behind_workers_forked_each_epoch_read_every_batch_intact(void **state)
{
  flt_case f;

  (void)state;
  start(&f, 2, 0, 1);
  run_copies(&f, &the_log, 3, 3);
  finish(&f);
}

/* A new segment per batch, as PyTorch makes them: each is unpinned when
   its batch is released (and so pinned once per batch, which costs a
   cudaHostRegister each: keep reuse_segments for a GPU). */
static void
without_reuse_each_segment_is_unpinned_at_its_release(void **state)
{
  const struct log *g = &the_log;
  size_t i, unpins = 0, releases = 0;
  flt_case f;

  (void)state;
  start(&f, 2, 1, 0);
  run_copies(&f, &the_log, 1, 2);
  for (i = 0; i < g->n; i++) {
    unpins += g->e[i].what == UNPIN;
    releases += g->e[i].what == RELEASE;
  }
  assert_int_equal(releases, fl_loader_len(f.l));
  assert_int_equal(unpins, releases);
  finish(&f);
}

/*
 * One batch held over a whole epoch (a copy that never ends, say): while
 * every other batch comes and goes, its segment is never refilled and
 * never unpinned.
 */
static void
a_batch_held_over_an_epoch_keeps_its_bytes_and_its_pin(void **state)
{
  struct log *g = &the_log;
  struct copy held;
  const size_t *idx;
  fl_batch *b;
  flt_case f;
  size_t i, others = 0;

  (void)state;
  start(&f, 2, 1, 1);
  assert_int_equal(fl_loader_begin(f.l), 0);
  assert_int_equal(fl_loader_next(f.l, &held.b), 1);
  held.data = fl_batch_data(held.b);
  held.count = fl_batch_count(held.b);
  idx = fl_batch_indices(held.b);
  for (i = 0; i < held.count; i++)
    held.index[i] = idx[i];
  log_add(g, TAKE, held.data, 0, fl_batch_seq(held.b));
  while (fl_loader_next(f.l, &b) == 1) {
    log_add(g, TAKE, fl_batch_data(b), 0, fl_batch_seq(b));
    assert_true(pinned_at(g, g->n, fl_batch_data(b)) !=
                pinned_at(g, g->n, held.data));
    for (i = 0; i < held.count; i++)
      assert_true(flt_sample_ok(held.data + i * SAMPLE_BYTES, SAMPLE_BYTES,
                                held.index[i]));
    log_add(g, RELEASE, fl_batch_data(b), 0, fl_batch_seq(b));
    fl_batch_release(b);
    others++;
  }
  assert_int_equal(others, fl_loader_len(f.l) - 1);
  assert_non_null(pinned_at(g, g->n, held.data));
  copy_then_release(g, &held);
  finish(&f);
}

/*
 * What goes wrong otherwise: a batch released as soon as its copy was
 * queued (when cudaMemcpyAsync returns) goes back to its worker, which
 * refills the segment while the copy would still read it.  The segment
 * stays pinned, so nothing fails: the copy silently reads another batch.
 */
static void
a_batch_released_before_its_copy_ends_is_refilled_under_it(void **state)
{
  const struct log *g = &the_log;
  const unsigned char *data;
  size_t first, i, unpins;
  fl_batch *b;
  flt_case f;
  int back = 0;

  (void)state;
  start(&f, 1, 1, 1);
  assert_int_equal(fl_loader_begin(f.l), 0);
  assert_int_equal(fl_loader_next(f.l, &b), 1);
  data = fl_batch_data(b);
  first = fl_batch_indices(b)[0];
  assert_true(flt_sample_ok(data, SAMPLE_BYTES, first));
  /* The mistake: released with its copy still to come. */
  fl_batch_release(b);
  unpins = 0;
  for (i = 0; i < 16 && !back; i++) {
    assert_int_equal(fl_loader_next(f.l, &b), 1);
    back = fl_batch_data(b) == data;
    fl_batch_release(b);
  }
  if (!back)
    fail_msg("the released segment did not come back in 16 batches");
  /* The late copy reads the batch a worker refilled it with. */
  assert_false(flt_sample_ok(data, SAMPLE_BYTES, first));
  for (i = 0; i < g->n; i++)
    unpins += g->e[i].what == UNPIN;
  assert_int_equal(unpins, 0); /* and no hook said a word */
  flt_drain(f.l, 0);
  finish(&f);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(copies_three_batches_behind_read_every_batch_intact),
      cmocka_unit_test(
          copies_behind_workers_forked_each_epoch_read_every_batch_intact),
      cmocka_unit_test(without_reuse_each_segment_is_unpinned_at_its_release),
      cmocka_unit_test(a_batch_held_over_an_epoch_keeps_its_bytes_and_its_pin),
      cmocka_unit_test(
          a_batch_released_before_its_copy_ends_is_refilled_under_it),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
