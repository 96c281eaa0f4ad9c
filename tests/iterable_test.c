/*
 * Iterable-style datasets end to end, with real workers: PyTorch's
 * expectations for IterableDataset (test_in_order_iterable_ds,
 * test_out_of_order_iterable_ds, test_iterable_style_dataset,
 * test_multi_epochs_reproducibility): streams interleave round-robin in
 * order, each worker's short final batch is its own, drop_last drops it,
 * and each epoch reopens the streams.  Every case ends by proving a clean
 * teardown.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"

/*
 * Worker w streams `counts[w]` values, first[w], first[w]+1, ...; with no
 * worker (num_workers 0) it streams counts[0] values from first[0].
 * Shared counters record how often open ran in each worker.
 */
struct streams {
  size_t first[4], counts[4];
  long slow_value;       /* this value's next sleeps slow_us */
  unsigned slow_us;
  long fail_value;       /* next fails at this value */
  long overrun_value, oversize_value; /* s_next_fields's faults */
  int fail_open_worker;  /* open fails in this worker, -1: none */
  volatile uint64_t *opens; /* shared, per worker (4 for num_workers 0) */
  size_t next_value, end;   /* the stream, in this process */
};

static int
s_open(void *ctx, const fl_worker_info *w)
{
  struct streams *s = ctx;
  unsigned id = w != NULL ? w->id : 0;

  __atomic_add_fetch(&s->opens[w != NULL ? id : 4], 1, __ATOMIC_SEQ_CST);
  if (w != NULL && (int)id == s->fail_open_worker) {
    fl_worker_error("worker %u cannot open its shard", id);
    return -2;
  }
  s->next_value = s->first[id];
  s->end = s->first[id] + s->counts[id];
  return 0;
}

static int
s_next(void *ctx, void *dst, size_t *nbytes)
{
  struct streams *s = ctx;
  uint64_t v;

  if (s->next_value >= s->end)
    return 0;
  v = s->next_value++;
  if ((long)v == s->slow_value)
    usleep(s->slow_us);
  if ((long)v == s->fail_value)
    return -1;
  memcpy(dst, &v, sizeof(v));
  *nbytes = sizeof(v);
  return 1;
}

/*
 * The same streams as samples of two fields: value v, (v % 3 + 1) times
 * in field 0 (room 24), and v * 7 as a uint32 in field 1 (room 4), of
 * which an odd v writes only 2 bytes.  At overrun_value field 1 writes 5
 * bytes; at oversize_value it reports 5.
 */
static const size_t two_fields[2] = {24, 4};

static int
s_next_fields(void *ctx, void *const *dst, size_t *nbytes)
{
  struct streams *s = ctx;
  uint64_t v;
  uint32_t label;
  unsigned char *f0 = dst[0];
  size_t k;
  int rc = s_next(ctx, f0, &nbytes[0]);

  if (rc <= 0)
    return rc;
  memcpy(&v, f0, sizeof(v));
  for (k = 1; k <= v % 3; k++)
    memcpy(f0 + 8 * k, &v, sizeof(v));
  nbytes[0] = 8 * (v % 3 + 1);
  label = (uint32_t)(v * 7);
  memcpy(dst[1], &label, sizeof(label));
  nbytes[1] = v % 2 ? 2 : 4;
  if ((long)v == s->overrun_value)
    ((unsigned char *)dst[1])[4] = 0xee;
  if ((long)v == s->oversize_value)
    nbytes[1] = 5;
  return 1;
}

static void
s_init(struct streams *s, fl_iterable *it)
{
  memset(s, 0, sizeof(*s));
  s->slow_value = s->fail_value = -1;
  s->overrun_value = s->oversize_value = -1;
  s->fail_open_worker = -1;
  s->opens = mmap(NULL, 5 * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(s->opens != MAP_FAILED);
  memset((void *)s->opens, 0, 5 * sizeof(uint64_t));
  memset(it, 0, sizeof(*it));
  it->ctx = s;
  it->sample_bytes = sizeof(uint64_t);
  it->open = s_open;
  it->next = s_next;
}

static void
s_free(struct streams *s)
{
  munmap((void *)s->opens, 5 * sizeof(uint64_t));
}

/* One epoch's batches: values and workers, flattened in delivery order. */
struct seen {
  uint64_t values[256];
  unsigned workers[256], sizes[256];
  size_t nvalues, nbatches;
  int errors;
};

static void
one_epoch(fl_loader *l, struct seen *out)
{
  fl_batch *b;
  size_t i;
  int rc;

  memset(out, 0, sizeof(*out));
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    if (rc < 0) {
      out->errors++;
      assert_int_equal(rc, FL_EDATASET);
      continue;
    }
    out->sizes[out->nbatches++] = (unsigned)fl_batch_count(b);
    for (i = 0; i < fl_batch_count(b); i++) {
      memcpy(&out->values[out->nvalues],
             (const char *)fl_batch_data(b) + i * 8, 8);
      out->workers[out->nvalues++] = fl_batch_worker(b);
    }
    fl_batch_release(b);
  }
}

static fl_loader *
make(const fl_iterable *it, unsigned nw, size_t bs, int in_order,
     int persistent, int drop_last)
{
  fl_options opt;
  fl_loader *l = NULL;

  fl_options_init(&opt);
  opt.num_workers = nw;
  opt.batch_size = bs;
  opt.in_order = in_order;
  opt.persistent_workers = persistent;
  opt.drop_last = drop_last;
  assert_int_equal(fl_loader_create_iterable(&l, it, &opt), 0);
  return l;
}

/* PyTorch: worker w yields [5w, 5w+5); item 5 is slow. */
static void
two_streams(int in_order, const uint64_t *want_v, const unsigned *want_w)
{
  struct streams s;
  struct seen got;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  size_t i;

  flt_baseline_take(&base);
  s_init(&s, &it);
  s.first[1] = 5;
  s.counts[0] = s.counts[1] = 5;
  s.slow_value = 5;
  s.slow_us = 500000;
  l = make(&it, 2, 1, in_order, 0, 0);
  assert_int_equal(fl_loader_len(l), 0);
  one_epoch(l, &got);
  assert_int_equal(got.nvalues, 10);
  for (i = 0; i < 10; i++) {
    assert_int_equal(got.values[i], want_v[i]);
    assert_int_equal(got.workers[i], want_w[i]);
  }
  fl_loader_destroy(l);
  s_free(&s);
  flt_assert_clean(&base);
}

static void
in_order_streams_interleave_round_robin(void **state)
{
  const uint64_t v[10] = {0, 5, 1, 6, 2, 7, 3, 8, 4, 9};
  const unsigned w[10] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1};

  (void)state;
  two_streams(1, v, w);
}

static void
as_they_arrive_a_slow_stream_does_not_hold_the_other(void **state)
{
  const uint64_t v[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const unsigned w[10] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1};

  (void)state;
  two_streams(0, v, w);
}

/* PyTorch's WorkerSpecificIterableDataset([0, 4, 20]), batch 7. */
static void
short_final_batches(int drop_last, size_t want_batches)
{
  unsigned char count[20];
  struct streams s;
  struct seen got;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  size_t i, full = 0;

  flt_baseline_take(&base);
  s_init(&s, &it);
  s.counts[0] = 0;
  s.counts[1] = 4;
  s.counts[2] = 20;
  s.first[2] = 100;
  l = make(&it, 3, 7, 1, 0, drop_last);
  one_epoch(l, &got);
  assert_int_equal(got.nbatches, want_batches);
  memset(count, 0, sizeof(count));
  for (i = 0; i < got.nvalues; i++) {
    if (got.values[i] >= 100)
      count[got.values[i] - 100]++;
    else
      assert_true(got.values[i] < 4 && got.workers[i] == 1);
  }
  for (i = 0; i < got.nbatches; i++)
    full += got.sizes[i] == 7;
  assert_int_equal(full, 2);
  for (i = 0; i < 20; i++) /* 14..19 are worker 2's short batch */
    assert_int_equal(count[i], drop_last && i >= 14 ? 0 : 1);
  fl_loader_destroy(l);
  s_free(&s);
  flt_assert_clean(&base);
}

static void
each_worker_sends_its_own_short_final_batch(void **state)
{
  (void)state;
  short_final_batches(0, 4);
}

static void
drop_last_drops_each_worker_short_batch(void **state)
{
  (void)state;
  short_final_batches(1, 2);
}

/*
 * Each epoch reopens the streams: the same batches, epoch after epoch,
 * also when fl_loader_set_epoch (repeat) begins epoch 0 over and over.
 */
static void
epochs(int persistent, unsigned nw, int repeat)
{
  struct seen first, again;
  struct streams s;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  unsigned w;
  int e;

  flt_baseline_take(&base);
  s_init(&s, &it);
  s.counts[0] = s.counts[1] = 10;
  s.first[1] = 10;
  l = make(&it, nw, 3, 1, persistent, 0);
  one_epoch(l, &first);
  assert_int_equal(first.nvalues, nw == 0 ? 10 : 20);
  for (e = 1; e < 3; e++) {
    if (repeat)
      assert_int_equal(fl_loader_set_epoch(l, 0), 0);
    one_epoch(l, &again);
    assert_int_equal(again.nvalues, first.nvalues);
    assert_memory_equal(again.values, first.values,
                        first.nvalues * sizeof(uint64_t));
  }
  for (w = 0; w < nw; w++)
    assert_int_equal(s.opens[w], 3); /* once per worker per epoch */
  if (nw == 0)
    assert_int_equal(s.opens[4], 3);
  fl_loader_destroy(l);
  s_free(&s);
  flt_assert_clean(&base);
}

static void
every_epoch_reopens_the_streams(void **state)
{
  (void)state;
  epochs(1, 2, 0);
  epochs(0, 2, 0);
  epochs(0, 0, 0);
}

/* Streams closed in this process (num_workers 0). */
static unsigned closes;

static void
s_close(void *ctx)
{
  (void)ctx;
  closes++;
}

/*
 * Stopped after one batch of an epoch, which stays held, the loader
 * begins the next with every stream opened anew (in new workers), and
 * gives the batches of a whole epoch.  Without workers, stop closes the
 * stream read here at once, as a stopped worker closes its own.
 */
static void
stop_mid_epoch(int persistent, unsigned nw)
{
  struct seen whole, again;
  struct streams s;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  fl_batch *held;
  uint64_t v, before[2];
  unsigned w;

  flt_baseline_take(&base);
  s_init(&s, &it);
  it.close = s_close;
  closes = 0;
  s.counts[0] = s.counts[1] = 10;
  s.first[1] = 10;
  l = make(&it, nw, 3, 1, persistent, 0);
  one_epoch(l, &whole);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(fl_loader_next(l, &held), 1);
  assert_int_equal(fl_loader_stop(l), 0);
  assert_int_equal(flt_child_count(), base.children);
  if (nw == 0)
    assert_int_equal(closes, 2);
  /* A worker stopped before it took its first task never opened its
     stream in the epoch cut short: count the opens of the next alone. */
  for (w = 0; w < nw; w++)
    before[w] = s.opens[w];
  one_epoch(l, &again);
  assert_int_equal(again.nvalues, whole.nvalues);
  assert_memory_equal(again.values, whole.values,
                      whole.nvalues * sizeof(uint64_t));
  memcpy(&v, fl_batch_data(held), sizeof(v));
  assert_int_equal(v, whole.values[0]);
  fl_batch_release(held);
  for (w = 0; w < nw; w++)
    assert_int_equal(s.opens[w], before[w] + 1);
  if (nw == 0)
    assert_int_equal(s.opens[4], 3);
  fl_loader_destroy(l);
  s_free(&s);
  flt_assert_clean(&base);
}

static void
stop_mid_epoch_then_begin_opens_every_stream_anew(void **state)
{
  (void)state;
  stop_mid_epoch(1, 2);
  stop_mid_epoch(0, 2);
  stop_mid_epoch(0, 0);
}

static void
an_epoch_repeated_by_set_epoch_reopens_the_streams(void **state)
{
  (void)state;
  epochs(1, 2, 1);
  epochs(0, 0, 1);
}

/* A failing next is that batch's error; a failing open ends that stream. */
static void
errors_arrive_in_place_and_the_epoch_goes_on(void **state)
{
  struct streams s;
  struct seen got;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;

  (void)state;
  flt_baseline_take(&base);
  s_init(&s, &it);
  s.counts[0] = s.counts[1] = 6;
  s.first[1] = 10;
  s.fail_value = 2; /* worker 0's third value: its batch [2, 3] fails */
  l = make(&it, 2, 2, 1, 1, 0);
  one_epoch(l, &got);
  assert_int_equal(got.errors, 1);
  assert_int_equal(got.nvalues, 12 - 2 + 1); /* value 2 lost, 3 read after */
  s.fail_value = -1;
  fl_loader_destroy(l);
  s_free(&s);

  s_init(&s, &it);
  s.counts[0] = s.counts[1] = 6;
  s.first[1] = 10;
  s.fail_open_worker = 1;
  l = make(&it, 2, 2, 1, 1, 0);
  one_epoch(l, &got);
  assert_int_equal(got.errors, 1);
  assert_int_equal(got.nvalues, 6); /* worker 0's stream, whole */
  assert_non_null(strstr(fl_loader_error(l), "cannot open its shard"));
  fl_loader_destroy(l);
  s_free(&s);
  flt_assert_clean(&base);
}

/*
 * A stream cannot be read again, so a batch whose fd the kernel dropped
 * at the fd limit is not fetched anew (the worker would read on past it):
 * its place holds an error that counts the samples lost, and once fds are
 * free again, the epoch goes on with every other sample.  The limit is
 * the rest of the process's doing (no fd number left at all): held
 * batches keep none past the window, and the loader lets go of those.
 */
static void
fd_limit_loses_only_what_it_says_and_the_stream_goes_on(void **state)
{
  enum { PER = 400 };
  unsigned char seen[2 * PER];
  struct streams s;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  fl_batch *b;
  const char *at;
  size_t j, lost = 0, got = 0;
  unsigned k;
  int rc, limited = 1;

  (void)state;
  flt_baseline_take(&base);
  memset(seen, 0, sizeof(seen));
  s_init(&s, &it);
  s.counts[0] = s.counts[1] = PER;
  s.first[1] = PER;
  l = make(&it, 2, 2, 1, 1, 0);
  assert_int_equal(fl_loader_begin(l), 0);
  /* The workers are forked: only the parent runs short of fds. */
  flt_fd_limit_leave(0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    if (rc == FL_EMFILE) {
      at = strstr(fl_loader_error(l), "): ");
      assert_non_null(at);
      assert_int_equal(sscanf(at + 3, "%u samples of this worker's stream "
                                      "were lost", &k), 1);
      assert_non_null(strstr(fl_loader_error(l), "ulimit -n"));
      lost += k;
      if (limited)
        flt_fd_limit_restore();
      limited = 0;
      continue;
    }
    assert_int_equal(rc, 1);
    for (j = 0; j < fl_batch_count(b); j++, got++)
      seen[*(const uint64_t *)((const char *)fl_batch_data(b) + j * 8)]++;
    fl_batch_release(b);
  }
  flt_fd_limit_restore();
  assert_int_equal(limited, 0); /* the limit did stop a batch */
  assert_true(lost > 0);
  assert_int_equal(got + lost, 2 * PER);
  for (j = 0; j < 2 * PER; j++)
    assert_true(seen[j] <= 1); /* none twice */
  fl_loader_destroy(l);
  s_free(&s);
  flt_assert_clean(&base);
}

/*
 * Holding batches of a stream past the fd limit loses nothing: a held
 * batch keeps no fd past the prefetch window.
 */
static void
held_stream_batches_past_the_fd_limit_lose_nothing(void **state)
{
  enum { PER = 400, HOLD = 300 };
  unsigned char seen[2 * PER];
  fl_batch *held[HOLD];
  struct streams s;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  size_t n = 0, i, j;
  int rc;

  (void)state;
  flt_baseline_take(&base);
  memset(seen, 0, sizeof(seen));
  s_init(&s, &it);
  s.counts[0] = s.counts[1] = PER;
  s.first[1] = PER;
  l = make(&it, 2, 2, 1, 1, 0);
  assert_int_equal(fl_loader_begin(l), 0);
  flt_fd_limit_lower(16);
  while (n < HOLD && (rc = fl_loader_next(l, &held[n])) == 1)
    n++;
  assert_int_equal(n, HOLD);
  for (i = 0; i < n; i++) {
    for (j = 0; j < fl_batch_count(held[i]); j++)
      seen[*(const uint64_t *)((const char *)fl_batch_data(held[i]) +
                               j * 8)]++;
    fl_batch_release(held[i]);
  }
  flt_fd_limit_restore();
  for (i = 0; i < 2 * PER; i++)
    assert_true(seen[i] <= 1);
  fl_loader_destroy(l);
  s_free(&s);
  flt_assert_clean(&base);
}

/*
 * When the other streams have ended, the one left takes every task of the
 * window, more than its queue holds: they wait in the parent, in order.
 */
static void
one_stream_left_takes_the_whole_window(void **state)
{
  struct streams s;
  struct seen got;
  flt_baseline base;
  fl_iterable it;
  fl_options opt;
  fl_loader *l = NULL;
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  s_init(&s, &it);
  s.counts[1] = 200; /* workers 0, 2, 3 have nothing */
  s.first[1] = 0;
  fl_options_init(&opt);
  opt.num_workers = 4;
  opt.prefetch_factor = 8; /* a window of 32, the queue holds 9 at most */
  opt.persistent_workers = 1;
  assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), 0);
  one_epoch(l, &got);
  assert_int_equal(got.errors, 0);
  assert_int_equal(got.nvalues, 200);
  for (i = 0; i < 200; i++)
    assert_int_equal(got.values[i], i);
  fl_loader_destroy(l);
  s_free(&s);
  flt_assert_clean(&base);
}

static void
shuffle_and_indices_do_not_apply(void **state)
{
  const size_t idx[2] = {0, 1};
  struct streams s;
  flt_baseline base;
  fl_iterable it;
  fl_options opt;
  fl_loader *l = NULL;

  (void)state;
  flt_baseline_take(&base);
  s_init(&s, &it);
  fl_options_init(&opt);
  opt.shuffle = 1;
  assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "shuffle"));
  assert_null(l);
  fl_options_init(&opt);
  opt.indices = idx;
  opt.indices_len = 2;
  assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "indices"));
  it.next = NULL;
  assert_int_equal(fl_loader_create_iterable(&l, &it, NULL), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "next"));
  s_free(&s);
  flt_assert_clean(&base);
}

static void
fields_init(struct streams *s, fl_iterable *it)
{
  s_init(s, it);
  it->sample_bytes = 0;
  it->next = NULL;
  it->nfields = 2;
  it->field_bytes = two_fields;
  it->next_fields = s_next_fields;
}

/* Every value of a fielded epoch's batches, checked field by field. */
static size_t
fielded_epoch(fl_loader *l, uint64_t *values, size_t *errors)
{
  const unsigned char *f0, *f1;
  const size_t *sizes;
  size_t n = 0, i, k;
  uint64_t v, again;
  uint32_t label;
  fl_batch *b;
  int rc;

  *errors = 0;
  while ((rc = fl_loader_next(l, &b)) != 0) {
    if (rc < 0) {
      assert_int_equal(rc, FL_EDATASET);
      ++*errors;
      continue;
    }
    assert_int_equal(fl_batch_stride(b, 0), 24);
    assert_int_equal(fl_batch_stride(b, 1), 4);
    assert_null(fl_batch_field(b, 2));
    assert_ptr_equal(fl_batch_field(b, 0), fl_batch_data(b));
    f0 = fl_batch_field(b, 0);
    f1 = fl_batch_field(b, 1);
    sizes = fl_batch_sizes(b);
    for (i = 0; i < fl_batch_count(b); i++) {
      memcpy(&v, f0 + 24 * i, sizeof(v));
      assert_int_equal(sizes[2 * i], 8 * (v % 3 + 1));
      for (k = 1; k <= v % 3; k++) {
        memcpy(&again, f0 + 24 * i + 8 * k, sizeof(again));
        assert_int_equal(again, v);
      }
      assert_int_equal(sizes[2 * i + 1], v % 2 ? 2 : 4);
      memcpy(&label, f1 + 4 * i, sizeof(label));
      if (v % 2)
        assert_int_equal(label & 0xffff, (uint32_t)(v * 7) & 0xffff);
      else
        assert_int_equal(label, (uint32_t)(v * 7));
      values[n++] = v;
    }
    fl_batch_release(b);
  }
  return n;
}

/*
 * Since 0.6 an iterable's samples may have fields, each batched into its
 * own array exactly as a map-style dataset's, with each field's size per
 * sample; in workers and in the caller.
 */
static void
iterable_fields_batch_each_into_its_own_array(void **state)
{
  uint64_t values[64];
  struct streams s;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  size_t n, errors, i;
  unsigned nw;

  (void)state;
  flt_baseline_take(&base);
  for (nw = 0; nw <= 2; nw += 2) {
    fields_init(&s, &it);
    s.counts[0] = s.counts[1] = 11;
    s.first[1] = 11;
    l = make(&it, nw, 4, 1, 0, 0);
    assert_int_equal(fl_loader_begin(l), 0);
    n = fielded_epoch(l, values, &errors);
    assert_int_equal(errors, 0);
    assert_int_equal(n, nw ? 22 : 11);
    for (i = 0; i < n; i++) /* each value once, streams interleaved */
      assert_true(values[i] < 22);
    fl_loader_destroy(l);
    s_free(&s);
  }
  flt_assert_clean(&base);
}

/*
 * A field written past its room, or said to be larger than it, is that
 * batch's error naming the field; the epoch goes on.  An iterable whose
 * fields have no next_fields, or whose next_fields has no fields, is
 * refused at create.
 */
static void
iterable_field_overrun_is_refused(void **state)
{
  uint64_t values[64];
  struct streams s;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l = NULL;
  size_t n, errors, fault;

  (void)state;
  flt_baseline_take(&base);
  for (fault = 0; fault < 2; fault++) {
    fields_init(&s, &it);
    s.counts[0] = 12;
    if (fault)
      s.oversize_value = 5;
    else
      s.overrun_value = 5;
    l = make(&it, 1, 4, 1, 0, 0);
    assert_int_equal(fl_loader_begin(l), 0);
    n = fielded_epoch(l, values, &errors);
    assert_int_equal(errors, 1);
    assert_int_equal(n, 10); /* 4 and 5 are lost with their batch */
    assert_non_null(strstr(fl_loader_error(l),
                           fault ? "reported 5 bytes for field 1"
                                 : "wrote past field 1's room of 4"));
    assert_non_null(strstr(fl_loader_error(l), "next_fields"));
    fl_loader_destroy(l);
    s_free(&s);
  }
  fields_init(&s, &it);
  it.next_fields = NULL;
  assert_int_equal(fl_loader_create_iterable(&l, &it, NULL), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "next_fields is NULL"));
  it.next_fields = s_next_fields;
  it.nfields = 0;
  it.field_bytes = NULL;
  it.next = s_next;
  it.sample_bytes = 8;
  assert_int_equal(fl_loader_create_iterable(&l, &it, NULL), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "nfields is 0"));
  assert_null(l);
  s_free(&s);
  flt_assert_clean(&base);
}

/*
 * The ABI rule: a program built before 0.6 passes a shorter fl_iterable,
 * and whatever lies past it (here: garbage where nfields would be) is
 * never read.  The field sizes are copied at create: the caller's array
 * may go.
 */
static void
an_iterable_of_an_older_size_still_works(void **state)
{
  size_t old = offsetof(fl_iterable, nfields), fb[2], n, errors;
  uint64_t values[64];
  unsigned char *raw;
  struct streams s;
  struct seen got;
  flt_baseline base;
  fl_iterable it;
  fl_options opt;
  fl_loader *l = NULL;

  (void)state;
  flt_baseline_take(&base);
  s_init(&s, &it);
  s.counts[0] = 5;
  raw = malloc(sizeof(it));
  assert_non_null(raw);
  memset(raw, 0xa5, sizeof(it));
  memcpy(raw, &it, old);
  fl_options_init(&opt);
  opt.batch_size = 2;
  assert_int_equal(fl_loader_create_iterable_sized(
                       &l, (const fl_iterable *)raw, old, &opt,
                       sizeof(opt)), 0);
  free(raw);
  one_epoch(l, &got);
  assert_int_equal(got.nvalues, 5);
  assert_int_equal(got.values[4], 4);
  fl_loader_destroy(l);
  s_free(&s);

  fields_init(&s, &it);
  s.counts[0] = 5;
  memcpy(fb, two_fields, sizeof(fb));
  it.field_bytes = fb;
  l = make(&it, 1, 2, 1, 0, 0);
  memset(fb, 0, sizeof(fb));
  assert_int_equal(fl_loader_begin(l), 0);
  n = fielded_epoch(l, values, &errors);
  assert_int_equal(n, 5);
  assert_int_equal(errors, 0);
  fl_loader_destroy(l);
  s_free(&s);
  flt_assert_clean(&base);
}

/*
 * A resumed epoch of a fielded iterable without skip: next_fields reads
 * the samples handed out before into the batch's room, and the rest come
 * as the uninterrupted run gave them.
 */
static void
iterable_fields_resume_without_skip(void **state)
{
  uint64_t whole[64], rest[64];
  unsigned char buf[4096];
  struct streams s;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  fl_batch *b;
  size_t n, m, errors;
  int len;

  (void)state;
  flt_baseline_take(&base);
  fields_init(&s, &it);
  s.counts[0] = s.counts[1] = 9;
  s.first[1] = 9;
  l = make(&it, 2, 2, 1, 0, 0);
  assert_int_equal(fl_loader_begin(l), 0);
  n = fielded_epoch(l, whole, &errors);
  assert_int_equal(n, 18);
  fl_loader_destroy(l);
  l = make(&it, 2, 2, 1, 0, 0);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(fl_loader_next(l, &b), 1);
  fl_batch_release(b);
  assert_int_equal(fl_loader_next(l, &b), 1);
  fl_batch_release(b);
  len = fl_loader_state_save(l, buf, sizeof(buf));
  assert_true(len > 0);
  fl_loader_destroy(l);
  l = make(&it, 2, 2, 1, 0, 0);
  assert_int_equal(fl_loader_state_load(l, buf, (size_t)len), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  m = fielded_epoch(l, rest, &errors);
  assert_int_equal(errors, 0);
  assert_int_equal(m, n - 4);
  assert_memory_equal(rest, whole + 4, m * sizeof(*rest));
  fl_loader_destroy(l);
  s_free(&s);
  flt_assert_clean(&base);
}

static void
destroy_mid_epoch_leaves_nothing(void **state)
{
  struct streams s;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  fl_batch *b;

  (void)state;
  flt_baseline_take(&base);
  s_init(&s, &it);
  s.counts[0] = s.counts[1] = 1000;
  s.first[1] = 1000;
  l = make(&it, 2, 4, 1, 1, 0);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(fl_loader_next(l, &b), 1);
  /* A new epoch before this one ends starts the streams from the top. */
  assert_int_equal(fl_loader_begin(l), 0);
  fl_batch_release(b);
  assert_int_equal(fl_loader_next(l, &b), 1);
  assert_int_equal(*(const uint64_t *)fl_batch_data(b), 0);
  fl_loader_destroy(l);
  s_free(&s);
  flt_assert_clean(&base);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(in_order_streams_interleave_round_robin),
      cmocka_unit_test(as_they_arrive_a_slow_stream_does_not_hold_the_other),
      cmocka_unit_test(each_worker_sends_its_own_short_final_batch),
      cmocka_unit_test(drop_last_drops_each_worker_short_batch),
      cmocka_unit_test(every_epoch_reopens_the_streams),
      cmocka_unit_test(stop_mid_epoch_then_begin_opens_every_stream_anew),
      cmocka_unit_test(an_epoch_repeated_by_set_epoch_reopens_the_streams),
      cmocka_unit_test(errors_arrive_in_place_and_the_epoch_goes_on),
      cmocka_unit_test_teardown(
          fd_limit_loses_only_what_it_says_and_the_stream_goes_on,
          flt_fd_limit_teardown),
      cmocka_unit_test_teardown(
          held_stream_batches_past_the_fd_limit_lose_nothing,
          flt_fd_limit_teardown),
      cmocka_unit_test(one_stream_left_takes_the_whole_window),
      cmocka_unit_test(shuffle_and_indices_do_not_apply),
      cmocka_unit_test(destroy_mid_epoch_leaves_nothing),
      cmocka_unit_test(iterable_fields_batch_each_into_its_own_array),
      cmocka_unit_test(iterable_field_overrun_is_refused),
      cmocka_unit_test(an_iterable_of_an_older_size_still_works),
      cmocka_unit_test(iterable_fields_resume_without_skip),
  };

  flt_fd_limit_save();
  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
