/*
 * Batches larger than their segments (fl_worker_grow): a sample that needs
 * more room than sample_bytes moves its batch to a segment of a larger
 * class, under both sharing strategies, with workers and without, from
 * get, get_batch, get_fields and an iterable's next; segments of several
 * sizes serve side by side, a large one is made small again once the
 * batches no longer need it, and a batch that cannot fit is an error at
 * its position, naming its size and the limit, with the next batch whole
 * after it.  Every case ends by proving a clean teardown.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common.h"

/* Sample i: len_of(i) bytes, byte j of it (i * 31 + j) & 0xff. */
struct sized {
  size_t len, base;      /* samples; the room the loader is made with */
  size_t big_every;      /* every this-th sample is big (0: none) */
  size_t big_index;      /* this one is huge (SIZE_MAX: none) */
  size_t big, huge;      /* their lengths */
  size_t fields;         /* get_fields: field 1 is 8 bytes, i */
  volatile int *kill_after_grow; /* shared: this many workers die right
                                    after they grew a segment (NULL: none) */
};

static size_t
len_of(const struct sized *s, size_t i)
{
  if (i == s->big_index)
    return s->huge;
  if (s->big_every && i % s->big_every == s->big_every - 1)
    return s->big;
  return 1 + i % s->base;
}

static void
write_sample(size_t i, unsigned char *p, size_t n)
{
  size_t j;

  for (j = 0; j < n; j++)
    p[j] = (unsigned char)((i * 31 + j) & 0xff);
}

static int
sample_ok(size_t i, const unsigned char *p, size_t n)
{
  size_t j;

  for (j = 0; j < n; j++)
    if (p[j] != (unsigned char)((i * 31 + j) & 0xff))
      return 0;
  return 1;
}

static int
g_get(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  const struct sized *s = ctx;
  size_t n = len_of(s, index);
  int rc;

  /* A part written before it knows it needs more: it moves too. */
  write_sample(index, dst, n < *nbytes ? n : *nbytes);
  if (n > *nbytes && (rc = fl_worker_grow(0, n, &dst)) != 0)
    return rc;
  if (n > s->base && s->kill_after_grow != NULL &&
      __atomic_sub_fetch(s->kill_after_grow, 1, __ATOMIC_SEQ_CST) >= 0)
    raise(SIGKILL); /* its new segment made, its name in /dev/shm */
  write_sample(index, dst, n);
  *nbytes = n;
  return 0;
}

/* A dataset of s's samples, read by g_get. */
static void
sized_dataset(fl_dataset *ds, struct sized *s)
{
  memset(ds, 0, sizeof(*ds));
  ds->ctx = s;
  ds->len = s->len;
  ds->sample_bytes = s->base;
  ds->get = g_get;
}

static int
g_get_batch(void *ctx, const size_t *indices, size_t n, void *dst,
            size_t *nbytes)
{
  const struct sized *s = ctx;
  size_t i, most = 0, room = nbytes[0];
  int rc;

  for (i = 0; i < n; i++)
    if (len_of(s, indices[i]) > most)
      most = len_of(s, indices[i]);
  if (most > room) {
    if ((rc = fl_worker_grow(0, most, &dst)) != 0)
      return rc;
    room = nbytes[0]; /* the new room, each sample's stride */
    assert_true(room >= most);
  }
  for (i = 0; i < n; i++) {
    nbytes[i] = len_of(s, indices[i]);
    write_sample(indices[i], (unsigned char *)dst + i * room, nbytes[i]);
  }
  return 0;
}

static int
g_get_fields(void *ctx, size_t index, void *const *dst, size_t *nbytes)
{
  const struct sized *s = ctx;
  size_t n = len_of(s, index);
  uint64_t v = index;
  int rc;

  memcpy(dst[1], &v, sizeof(v));
  nbytes[1] = sizeof(v);
  if (n > nbytes[0] &&
      (rc = fl_worker_grow(0, n, (void **)dst)) != 0)
    return rc;
  write_sample(index, dst[0], n);
  nbytes[0] = n;
  return 0;
}

/* Every batch of an epoch checked sample by sample; the seqs of batches
   that failed with `code` in fails (room: nfails), their count returned. */
static size_t
check_epoch(fl_loader *l, const struct sized *s, int fielded, int in_order,
            int code, uint64_t *fails, size_t nfails)
{
  const size_t *idx, *sizes;
  const unsigned char *data;
  size_t k, nf = fielded ? 2 : 1, nfailed = 0;
  uint64_t v, seq = 0;
  fl_batch *b;
  int rc;

  assert_int_equal(fl_loader_begin(l), 0);
  for (;;) {
    rc = fl_loader_next(l, &b);
    if (rc == 0)
      break;
    if (rc < 0) {
      assert_int_equal(rc, code);
      assert_true(nfailed < nfails);
      fails[nfailed++] = seq++;
      continue;
    }
    /* As they arrive, seqs come in any order. */
    if (in_order)
      assert_int_equal(fl_batch_seq(b), seq);
    seq++;
    idx = fl_batch_indices(b);
    sizes = fl_batch_sizes(b);
    data = fl_batch_field(b, 0);
    for (k = 0; k < fl_batch_count(b); k++) {
      assert_int_equal(sizes[k * nf], len_of(s, idx[k]));
      assert_true(fl_batch_stride(b, 0) >= sizes[k * nf]);
      assert_true(sample_ok(idx[k], data + k * fl_batch_stride(b, 0),
                            sizes[k * nf]));
      if (fielded) {
        memcpy(&v, (const unsigned char *)fl_batch_field(b, 1) +
                       k * fl_batch_stride(b, 1), 8);
        assert_int_equal(v, idx[k]);
      }
    }
    fl_batch_release(b);
  }
  return nfailed;
}

enum how { GET, GET_BATCH, GET_FIELDS };

/* fd_in_dev_shm for the next run(). */
static int in_dev_shm;

static void
run(enum how how, unsigned workers, fl_sharing sharing, int in_order)
{
  struct sized s = {200, 64, 7, SIZE_MAX, 1000, 0, 0, NULL};
  static const size_t fb[2] = {64, 8};
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_stats st;
  int epoch;

  flt_baseline_take(&base);
  memset(&ds, 0, sizeof(ds));
  ds.ctx = &s;
  ds.len = s.len;
  ds.sample_bytes = s.base;
  if (how == GET)
    ds.get = g_get;
  else if (how == GET_BATCH)
    ds.get_batch = g_get_batch;
  if (how == GET_FIELDS) {
    ds.sample_bytes = 0;
    ds.nfields = 2;
    ds.field_bytes = fb;
    ds.get_fields = g_get_fields;
  }
  fl_options_init(&opt);
  opt.batch_size = 5;
  opt.num_workers = workers;
  opt.sharing = sharing;
  opt.shuffle = 1;
  opt.in_order = in_order;
  opt.persistent_workers = 1;
  opt.fd_in_dev_shm = in_dev_shm;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  for (epoch = 0; epoch < 2; epoch++)
    assert_int_equal(check_epoch(l, &s, how == GET_FIELDS, in_order, 0, NULL, 0), 0);
  fl_loader_stats(l, &st);
  /* Several sizes side by side: the peak holds a grown one. */
  assert_true(st.bytes_mapped_peak > st.segments_peak * 64 * 5);
  fl_loader_destroy(l);
  flt_assert_clean(&base);
}

static void
get_growing_samples_fd_strategy_two_workers(void **state)
{
  (void)state;
  run(GET, 2, FL_SHARE_FILE_DESCRIPTOR, 1);
}

static void
get_growing_samples_file_system_strategy_two_workers(void **state)
{
  (void)state;
  run(GET, 2, FL_SHARE_FILE_SYSTEM, 1);
}

static void
get_growing_samples_fd_strategy_in_dev_shm(void **state)
{
  (void)state;
  in_dev_shm = 1;
  run(GET, 2, FL_SHARE_FILE_DESCRIPTOR, 1);
  in_dev_shm = 0;
}

static void
get_growing_samples_without_workers(void **state)
{
  (void)state;
  run(GET, 0, FL_SHARE_FILE_DESCRIPTOR, 1);
}

static void
get_batch_growing_batches_both_strategies_as_they_arrive(void **state)
{
  (void)state;
  run(GET_BATCH, 3, FL_SHARE_FILE_DESCRIPTOR, 0);
  run(GET_BATCH, 3, FL_SHARE_FILE_SYSTEM, 0);
  run(GET_BATCH, 0, FL_SHARE_FILE_DESCRIPTOR, 1);
}

static void
get_fields_growing_one_field_moves_the_others_with_it(void **state)
{
  (void)state;
  run(GET_FIELDS, 2, FL_SHARE_FILE_DESCRIPTOR, 1);
  run(GET_FIELDS, 2, FL_SHARE_FILE_SYSTEM, 1);
  run(GET_FIELDS, 0, FL_SHARE_FILE_DESCRIPTOR, 1);
}

/*
 * One batch 200 times the first, then small ones again: the large
 * segment is made small again, so that what stays mapped at the end is
 * what it was before it, give or take a segment of the loader's class.
 */
static void
one_batch_200_times_the_first_keeps_no_memory_after_it(void **state)
{
  struct sized s = {400, 64, 0, 37, 0, 64 * 200, 0, NULL};
  static const fl_sharing sharing[2] = {FL_SHARE_FILE_DESCRIPTOR,
                                        FL_SHARE_FILE_SYSTEM};
  static const unsigned workers[3] = {2, 2, 0};
  size_t before = 0, segs = 1, k;
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  fl_stats st;
  int i, rc;

  (void)state;
  for (i = 0; i < 3; i++) {
    flt_baseline_take(&base);
    memset(&ds, 0, sizeof(ds));
    ds.ctx = &s;
    ds.len = s.len;
    ds.sample_bytes = s.base;
    ds.get = g_get;
    fl_options_init(&opt);
    opt.batch_size = 4;
    opt.num_workers = workers[i];
    opt.sharing = sharing[i % 2];
    assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
    assert_int_equal(fl_loader_begin(l), 0);
    for (k = 0; (rc = fl_loader_next(l, &b)) == 1; k++) {
      if (k == 5) {
        fl_loader_stats(l, &st);
        before = st.bytes_mapped;
        segs = st.segments;
      }
      if (fl_batch_seq(b) == 37 / 4)
        assert_int_equal(fl_batch_sizes(b)[1], 64 * 200);
      fl_batch_release(b);
    }
    assert_int_equal(rc, 0);
    fl_loader_stats(l, &st);
    assert_true(st.bytes_mapped_peak >= before + 64 * 200 * 4);
    /* At most one segment of the loader's class more: a larger one is not
       lent, so another worker may have made one while it was idle. */
    assert_true(st.bytes_mapped <= before + before / segs);
    fl_loader_destroy(l);
    flt_assert_clean(&base);
  }
}

/* A stream whose samples grow: value v is 1 + v * 13 bytes long. */
struct growing {
  size_t end, next;
};

static int
gs_open(void *ctx, const fl_worker_info *w)
{
  struct growing *g = ctx;

  g->next = w != NULL ? w->id : 0;
  return 0;
}

static int
gs_next(void *ctx, void *dst, size_t *nbytes)
{
  struct growing *g = ctx;
  size_t v = g->next, n = 1 + v * 13;
  unsigned char *p = dst;
  int rc;

  if (v >= g->end)
    return 0;
  const fl_worker_info *w = fl_get_worker_info();
  g->next += w != NULL && w->num_workers > 0 ? w->num_workers : 1;
  if (n > *nbytes && (rc = fl_worker_grow(0, n, &dst)) != 0)
    return rc;
  p = dst;
  write_sample(v, p, n);
  *nbytes = n;
  return 1;
}

static void
a_growing_iterable_stream_gets_larger_segments(void **state)
{
  struct growing g = {300, 0};
  static const unsigned workers[3] = {2, 2, 0};
  uint64_t seen[300];
  const unsigned char *data;
  flt_baseline base;
  fl_iterable it;
  fl_options opt;
  fl_loader *l;
  fl_batch *b;
  size_t k, total;
  int i, rc;

  (void)state;
  for (i = 0; i < 3; i++) {
    flt_baseline_take(&base);
    memset(&it, 0, sizeof(it));
    it.ctx = &g;
    it.sample_bytes = 16;
    it.open = gs_open;
    it.next = gs_next;
    fl_options_init(&opt);
    opt.batch_size = 3;
    opt.num_workers = workers[i];
    opt.sharing = i == 1 ? FL_SHARE_FILE_SYSTEM : FL_SHARE_FILE_DESCRIPTOR;
    assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), 0);
    assert_int_equal(fl_loader_begin(l), 0);
    memset(seen, 0, sizeof(seen));
    total = 0;
    while ((rc = fl_loader_next(l, &b)) == 1) {
      data = fl_batch_data(b);
      for (k = 0; k < fl_batch_count(b); k++) {
        /* The stream's position is its index: the value is the sample. */
        size_t n = fl_batch_sizes(b)[k], v = (n - 1) / 13;

        assert_int_equal(n, 1 + v * 13);
        assert_true(sample_ok(v, data + k * fl_batch_stride(b, 0), n));
        seen[v]++;
        total++;
      }
      fl_batch_release(b);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(total, 300);
    for (k = 0; k < 300; k++)
      assert_int_equal(seen[k], 1);
    fl_loader_destroy(l);
    flt_assert_clean(&base);
  }
}

/*
 * A sample larger than memory has room for (MemAvailable read from a
 * made-up /proc/meminfo), or than this machine can address: the error of
 * its batch names its size and the limit, and the next batch comes whole.
 */
static void
a_batch_that_cannot_fit_is_an_error_at_its_position(void **state)
{
  struct sized s = {60, 64, 0, 22, 0, 64ull << 20, 0, NULL};
  static const fl_sharing sharing[3] = {FL_SHARE_FILE_DESCRIPTOR,
                                        FL_SHARE_FILE_SYSTEM,
                                        FL_SHARE_FILE_DESCRIPTOR};
  static const unsigned workers[3] = {2, 2, 0};
  uint64_t fails[4];
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  int i;

  (void)state;
  flt_tree_put("/proc/meminfo", "MemTotal: 16384 kB\n"
                                "MemAvailable: 8192 kB\n");
  for (i = 0; i < 3; i++) {
    flt_baseline_take(&base);
    memset(&ds, 0, sizeof(ds));
    ds.ctx = &s;
    ds.len = s.len;
    ds.sample_bytes = s.base;
    ds.get = g_get;
    fl_options_init(&opt);
    opt.batch_size = 4;
    opt.num_workers = workers[i];
    opt.sharing = sharing[i];
    assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
    assert_int_equal(check_epoch(l, &s, 0, 1, FL_ENOMEM, fails, 4), 1);
    assert_int_equal(fails[0], 22 / 4);
    /* The second epoch says it again, and the rest is whole again. */
    assert_int_equal(fl_loader_begin(l), 0);
    fl_loader_destroy(l);
    flt_assert_clean(&base);
  }
  s.huge = SIZE_MAX / 8;
  flt_baseline_take(&base);
  sized_dataset(&ds, &s);
  fl_options_init(&opt);
  opt.batch_size = 4;
  opt.num_workers = 1;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(check_epoch(l, &s, 0, 1, FL_ENOMEM, fails, 4), 1);
  fl_loader_destroy(l);
  flt_assert_clean(&base);
}

/* The sentence, at the batch that cannot fit. */
static void
the_error_names_the_size_and_the_limit(void **state)
{
  struct sized s = {20, 64, 0, 5, 0, 64ull << 20, 0, NULL};
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  const char *msg;

  (void)state;
  flt_tree_put("/proc/meminfo", "MemTotal: 16384 kB\n"
                                "MemAvailable: 8192 kB\n");
  flt_baseline_take(&base);
  sized_dataset(&ds, &s);
  fl_options_init(&opt);
  opt.batch_size = 4;
  opt.num_workers = 1;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(fl_loader_next(l, &b), 1);
  fl_batch_release(b);
  assert_int_equal(fl_loader_next(l, &b), FL_ENOMEM);
  msg = fl_loader_error(l);
  assert_non_null(strstr(msg, "batch 1 needs a segment of at least "));
  assert_non_null(strstr(msg, "MemAvailable"));
  assert_int_equal(fl_loader_next(l, &b), 1);
  assert_int_equal(fl_batch_seq(b), 2);
  fl_batch_release(b);
  fl_loader_destroy(l);
  flt_assert_clean(&base);
}

/* The same past a memory cgroup's limit (a made-up cgroup v2 of 8 MB,
   with MemAvailable at 8 GB): the sentence names the cgroup. */
static void
a_batch_past_the_cgroups_limit_is_an_error_naming_it(void **state)
{
  struct sized s = {20, 64, 0, 5, 0, 16ull << 20, 0, NULL};
  static const unsigned workers[2] = {2, 0};
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  int i;

  (void)state;
  flt_tree_put("/proc/self/cgroup", "0::/job\n");
  flt_tree_put("/proc/self/mountinfo",
               "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 "
               "rw\n");
  flt_tree_put("/sys/fs/cgroup/job/memory.max", "8388608\n");
  flt_tree_put("/sys/fs/cgroup/job/memory.current", "0\n");
  for (i = 0; i < 2; i++) {
    flt_baseline_take(&base);
    memset(&ds, 0, sizeof(ds));
    ds.ctx = &s;
    ds.len = s.len;
    ds.sample_bytes = s.base;
    ds.get = g_get;
    fl_options_init(&opt);
    opt.batch_size = 4;
    opt.num_workers = workers[i];
    assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
    assert_int_equal(fl_loader_begin(l), 0);
    assert_int_equal(fl_loader_next(l, &b), 1);
    fl_batch_release(b);
    assert_int_equal(fl_loader_next(l, &b), FL_ENOMEM);
    assert_non_null(strstr(fl_loader_error(l), "batch 1 needs a segment"));
    assert_non_null(strstr(fl_loader_error(l), "memory cgroup"));
    assert_int_equal(fl_loader_next(l, &b), 1);
    assert_int_equal(fl_batch_seq(b), 2);
    fl_batch_release(b);
    fl_loader_destroy(l);
    flt_assert_clean(&base);
  }
}

/* The memory item of a loader's budget. */
static const fl_budget_item *
memory_item(const fl_budget *b)
{
  size_t i;

  for (i = 0; i < b->n; i++)
    if (strcmp(b->item[i].resource, "memory bytes") == 0)
      return &b->item[i];
  fail();
  return NULL;
}

/* fl_loader_budget counts each held batch at the class the batches lately
   needed: the loader's own at first, the larger one once they all need
   it. */
static void
the_budget_counts_held_batches_at_the_class_lately_needed(void **state)
{
  struct sized s = {40, 64, 1, SIZE_MAX, 1000, 0, 0, NULL};
  uint64_t first;
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_budget bud;
  fl_loader *l;
  fl_batch *b;
  int k;

  (void)state;
  flt_baseline_take(&base);
  sized_dataset(&ds, &s);
  fl_options_init(&opt);
  opt.batch_size = 4;
  opt.num_workers = 1;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_budget(l, &bud), 0);
  first = memory_item(&bud)->per_batch;
  assert_int_equal(fl_loader_begin(l), 0);
  for (k = 0; k < 3; k++) {
    assert_int_equal(fl_loader_next(l, &b), 1);
    fl_batch_release(b);
  }
  assert_int_equal(fl_loader_budget(l, &bud), 0);
  /* 1000-byte samples: a room of 1024, 16 times the loader's 64. */
  assert_true(memory_item(&bud)->per_batch >= first + 4 * (1024 - 64));
  fl_loader_destroy(l);
  flt_assert_clean(&base);
}

/*
 * A worker killed right after it made a larger segment, its name in
 * /dev/shm (the file-system strategy): the name goes with it, whether the
 * worker is respawned and the batch filled again, or the loader fails and
 * is destroyed.
 */
static void
a_worker_killed_after_it_grew_leaves_no_name(void **state)
{
  struct sized s = {40, 64, 0, 13, 0, 64 * 50, 0, NULL};
  volatile int *kills;
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  int restarts, rc;

  (void)state;
  kills = mmap(NULL, sizeof(*kills), PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(kills != MAP_FAILED);
  s.kill_after_grow = kills;
  for (restarts = 1; restarts >= 0; restarts--) {
    *kills = 1;
    flt_baseline_take(&base);
    memset(&ds, 0, sizeof(ds));
    ds.ctx = &s;
    ds.len = s.len;
    ds.sample_bytes = s.base;
    ds.get = g_get;
    fl_options_init(&opt);
    opt.batch_size = 4;
    opt.num_workers = 2;
    opt.sharing = FL_SHARE_FILE_SYSTEM;
    opt.max_worker_restarts = (unsigned)restarts;
    assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
    if (restarts) {
      assert_int_equal(check_epoch(l, &s, 0, 1, 0, NULL, 0), 0);
    } else {
      assert_int_equal(fl_loader_begin(l), 0);
      while ((rc = fl_loader_next(l, &b)) == 1)
        fl_batch_release(b);
      assert_int_equal(rc, FL_EWORKER);
    }
    fl_loader_destroy(l);
    flt_assert_clean(&base);
  }
  munmap((void *)kills, sizeof(*kills));
}

/* pin and unpin hooks that count, and check with mincore(2) that each
   range is still mapped when it is unpinned (as cudaHostUnregister
   needs). */
struct pin_count {
  size_t pins, unpins, unpinned_unmapped;
};

static int
count_pin(void *addr, size_t len, void *arg)
{
  (void)addr;
  (void)len;
  ((struct pin_count *)arg)->pins++;
  return 0;
}

static void
count_unpin(void *addr, size_t len, void *arg)
{
  struct pin_count *p = arg;
  unsigned char vec[1];

  (void)len;
  p->unpins++;
  if (mincore(addr, 1, vec) != 0)
    p->unpinned_unmapped++;
}

/*
 * Without workers the batch's segment is the parent's own mapping: when a
 * sample grows it, the pin hook's range is unpinned before the mapping
 * goes (once each), not after (where a new segment may lie).
 */
static void
pinned_segment_grown_without_workers_is_unpinned_while_mapped(void **state)
{
  struct sized s = {200, 64, 7, SIZE_MAX, 1000, 0, 0, NULL};
  struct pin_count pc = {0, 0, 0};
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  int epoch;

  (void)state;
  flt_baseline_take(&base);
  sized_dataset(&ds, &s);
  fl_options_init(&opt);
  opt.batch_size = 5;
  opt.pin_memory = 1;
  opt.pin = count_pin;
  opt.unpin = count_unpin;
  opt.pin_arg = &pc;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  for (epoch = 0; epoch < 2; epoch++)
    assert_int_equal(check_epoch(l, &s, 0, 1, 0, NULL, 0), 0);
  fl_loader_destroy(l);
  assert_true(pc.pins > 1); /* segments were grown and pinned anew */
  assert_int_equal(pc.unpins, pc.pins);
  assert_int_equal(pc.unpinned_unmapped, 0);
  flt_assert_clean(&base);
}

/* Outside a dataset's call there is no batch to grow. */
static void
grow_outside_a_fill_is_estate(void **state)
{
  void *p = NULL;

  (void)state;
  assert_int_equal(fl_worker_grow(0, 100, &p), FL_ESTATE);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(get_growing_samples_fd_strategy_two_workers),
      cmocka_unit_test(get_growing_samples_file_system_strategy_two_workers),
      cmocka_unit_test(get_growing_samples_fd_strategy_in_dev_shm),
      cmocka_unit_test(get_growing_samples_without_workers),
      cmocka_unit_test(
          get_batch_growing_batches_both_strategies_as_they_arrive),
      cmocka_unit_test(get_fields_growing_one_field_moves_the_others_with_it),
      cmocka_unit_test(one_batch_200_times_the_first_keeps_no_memory_after_it),
      cmocka_unit_test(a_growing_iterable_stream_gets_larger_segments),
      cmocka_unit_test_setup_teardown(
          a_batch_that_cannot_fit_is_an_error_at_its_position,
          flt_tree_setup, flt_tree_teardown),
      cmocka_unit_test_setup_teardown(the_error_names_the_size_and_the_limit,
                                      flt_tree_setup, flt_tree_teardown),
      cmocka_unit_test_setup_teardown(
          a_batch_past_the_cgroups_limit_is_an_error_naming_it,
          flt_tree_setup, flt_tree_teardown),
      cmocka_unit_test(
          the_budget_counts_held_batches_at_the_class_lately_needed),
      cmocka_unit_test(a_worker_killed_after_it_grew_leaves_no_name),
      cmocka_unit_test(
          pinned_segment_grown_without_workers_is_unpinned_while_mapped),
      cmocka_unit_test(grow_outside_a_fill_is_estate),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
