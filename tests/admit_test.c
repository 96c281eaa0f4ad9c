/*
 * Admission: fl_loader_create weighs what the prefetch window will reserve
 * against what the machine can give, before anything is reserved; a
 * segment holds no more samples than an epoch has, and the window no more
 * batches.  The program runs under a low RLIMIT_FSIZE with SIGXFSZ
 * ignored: memfd and shm segments are files, so if admission ever
 * regresses, a worker's reservation fails with EFBIG here instead of
 * waking the OOM killer on the test machine.  The cgroup readings are
 * checked against made-up /proc and /sys trees.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"

/* Far below this machine's memory, far above what the cases reserve. */
#define FILE_LIMIT (256u << 20)

static uint64_t
mem_total(void)
{
  unsigned long long kb = 0;
  char line[256];
  FILE *f = fopen("/proc/meminfo", "r");

  assert_non_null(f);
  while (fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
      break;
  fclose(f);
  assert_true(kb > 0);
  return (uint64_t)kb * 1024;
}

static void
batch_size_far_above_the_samples_makes_segments_of_the_samples(void **state)
{
  flt_case c;
  fl_batch *b;
  fl_stats st;
  size_t i;

  (void)state;
  flt_case_init(&c, 10, 4096);
  c.opt.batch_size = (size_t)100000000000000ull;
  c.opt.num_workers = 2;
  flt_case_create(&c);
  assert_int_equal(fl_loader_len(c.l), 1);
  assert_int_equal(fl_loader_begin(c.l), 0);
  assert_int_equal(fl_loader_next(c.l, &b), 1);
  assert_int_equal(fl_batch_count(b), 10);
  for (i = 0; i < 10; i++)
    assert_true(flt_sample_ok((const char *)fl_batch_data(b) + i * 4096,
                              4096, fl_batch_indices(b)[i]));
  fl_batch_release(b);
  assert_int_equal(fl_loader_next(c.l, &b), 0);
  assert_int_equal(fl_loader_stats(c.l, &st), 0);
  /* Room for ten samples and their indices, not for 10^14. */
  assert_true(st.bytes_mapped_peak <= 3 * (10 * 4096 + 8192));
  flt_case_end(&c);
}

static void
custom_indices_bound_the_segment_too(void **state)
{
  static const size_t idx[] = {3, 1, 4};
  fl_dataset ds;
  fl_options opt;
  fl__plan p;
  char err[FL__ERRMSG_MAX];
  flt_data d;

  (void)state;
  flt_data_init(&d, &ds, 100, 64);
  fl_options_init(&opt);
  opt.batch_size = 1000;
  opt.indices = idx;
  opt.indices_len = 3;
  assert_int_equal(fl__plan_make(&p, &ds, &opt, 0, err, sizeof(err)), 0);
  assert_int_equal(p.layout.cap, 3);
  /* An iterable dataset's length is unknown: batch_size it is. */
  opt.indices = NULL;
  opt.indices_len = 0;
  assert_int_equal(fl__plan_make(&p, &ds, &opt, 1, err, sizeof(err)), 0);
  assert_int_equal(p.layout.cap, 1000);
  flt_data_free(&d);
}

static void
sample_bytes_above_the_machines_memory_is_refused_at_create(void **state)
{
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l = (fl_loader *)&l;
  flt_data d;
  const char *msg;

  (void)state;
  flt_baseline_take(&base);
  flt_data_init(&d, &ds, 1000, (size_t)(mem_total() * 2));
  fl_options_init(&opt);
  opt.num_workers = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), FL_ENOMEM);
  assert_null(l);
  msg = fl_loader_error(NULL);
  assert_non_null(strstr(msg, "the prefetch window needs"));
  assert_non_null(strstr(msg, "(prefetch_factor 2 x num_workers 2 + 1) "
                              "segments of"));
  assert_true(strstr(msg, "MemAvailable") != NULL ||
              strstr(msg, "memory cgroup") != NULL);
  assert_non_null(strstr(msg, "a sample of"));
  /* In the calling process too: one private segment is memory as well. */
  opt.num_workers = 0;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), FL_ENOMEM);
  assert_non_null(strstr(fl_loader_error(NULL), "the loader needs"));
  flt_data_free(&d);
  flt_assert_clean(&base);
}

/* The value after `key ` in msg, or 0. */
static unsigned long long
after(const char *msg, const char *key)
{
  const char *p = strstr(msg, key);

  return p != NULL ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/*
 * Whether the options fit in memory, by the library's own reckoning:
 * admission weighs memory first, so FL_ENOMEM says they do not.  Where
 * they fit, the whole admission must take them, unless the fds they keep
 * do not fit under RLIMIT_NOFILE: under a low `ulimit -n` the fd limit
 * refuses some on its own account, with its own arithmetic
 * (window_beyond_the_fd_limit_is_refused_with_the_arithmetic); batch_size's
 * proposal below keeps 4097 segment fds.
 */
static int
admitted(const fl_dataset *ds, const fl_options *opt)
{
  char err[FL__ERRMSG_MAX];
  fl__plan p;
  fl__room fds;
  int rc;

  assert_int_equal(fl__plan_make(&p, ds, opt, 0, err, sizeof(err)), 0);
  rc = fl__plan_admit(&p, ds, opt, 0, err, sizeof(err));
  fl__room_fds(&fds);
  if (rc == FL_EMFILE && p.fds > fds.amount)
    return 0;
  return rc;
}

/* Options refused for want of memory: fl_loader_create's sentence in msg,
   and in p the plan it weighed. */
static void
refused_for_memory(const fl_dataset *ds, const fl_options *opt, char *msg,
                   size_t len, fl__plan *p)
{
  char err[FL__ERRMSG_MAX];
  fl_loader *l;

  assert_int_equal(fl_loader_create(&l, ds, opt), FL_ENOMEM);
  snprintf(msg, len, "%s", fl_loader_error(NULL));
  assert_int_equal(fl__plan_make(p, ds, opt, 0, err, sizeof(err)), 0);
}

static void
window_of_64_workers_by_prefetch_64_is_refused_with_the_arithmetic(
    void **state)
{
  char msg[FL__ERRMSG_MAX], expect[400];
  const char *fit;
  fl_options opt;
  fl_dataset ds;
  fl__plan p;
  flt_data d;
  unsigned long long pf, nw, bs;

  (void)state;
  /* Batches of 64 samples of 1 MiB: 4097 segments of 64 MiB, 275 GB in
     all, where MemAvailable says 8 GB.  An epoch of 4096 batches, so that
     no factor is capped at its batches. */
  flt_data_init(&d, &ds, 64 * 4096, 1u << 20);
  fl_options_init(&opt);
  opt.batch_size = 64;
  opt.num_workers = 64;
  opt.prefetch_factor = 64;
  refused_for_memory(&ds, &opt, msg, sizeof(msg), &p);
  assert_true(p.need >= 4097 * (uint64_t)p.layout.size);
  snprintf(expect, sizeof(expect),
           "the prefetch window needs %llu bytes: (prefetch_factor 64 x "
           "num_workers 64 + 1) segments of %zu bytes, each for 64 samples "
           "of 1048576 bytes with their indices and sizes, but "
           "MemAvailable in /proc/meminfo is 8192000000 bytes. Options that "
           "fit, each alone: prefetch_factor ",
           (unsigned long long)p.need, p.layout.size);
  if (strstr(msg, expect) != msg)
    fail_msg("'%s' does not start '%s'", msg, expect);
  /* Each option it proposes fits, and one more of it would not. */
  fit = strstr(msg, "fit,");
  pf = after(fit, "prefetch_factor ");
  nw = after(fit, "num_workers ");
  bs = after(fit, "batch_size ");
  assert_true(pf > 0 && nw > 0 && bs > 0);
  opt.prefetch_factor = (unsigned)pf;
  assert_int_equal(admitted(&ds, &opt), 0);
  opt.prefetch_factor = (unsigned)pf + 1;
  assert_int_equal(admitted(&ds, &opt), FL_ENOMEM);
  opt.prefetch_factor = 64;
  opt.num_workers = (unsigned)nw;
  assert_int_equal(admitted(&ds, &opt), 0);
  opt.num_workers = (unsigned)nw + 1;
  assert_int_equal(admitted(&ds, &opt), FL_ENOMEM);
  opt.num_workers = 64;
  opt.batch_size = bs;
  assert_int_equal(admitted(&ds, &opt), 0);
  opt.batch_size = bs + 1;
  assert_int_equal(admitted(&ds, &opt), FL_ENOMEM);
  flt_data_free(&d);
}

/*
 * No window needs more batches than an epoch has: a prefetch_factor of
 * 10^6 over 40 samples, batches of 4, loads the 10 batches with a window
 * of 10 (2 million segments of 256 KiB, half a terabyte, were refused),
 * under either strategy, epoch after epoch with persistent workers.
 */
static void
a_prefetch_factor_past_the_epoch_loads_it_in_a_window_of_its_batches(
    void **state)
{
  static const fl_sharing sharing[] = {FL_SHARE_FILE_DESCRIPTOR,
                                       FL_SHARE_FILE_SYSTEM};
  char err[FL__ERRMSG_MAX];
  size_t i, k, n, epoch;
  fl_batch *b;
  fl__plan p;
  fl_stats st;
  flt_case c;
  int rc;

  (void)state;
  for (k = 0; k < 2; k++) {
    flt_case_init(&c, 40, 1u << 16);
    c.opt.batch_size = 4;
    c.opt.num_workers = 2;
    c.opt.prefetch_factor = 1000000;
    c.opt.persistent_workers = 1;
    c.opt.sharing = sharing[k];
    assert_int_equal(fl__plan_make(&p, &c.ds, &c.opt, 0, err, sizeof(err)),
                     0);
    assert_int_equal(p.batches, 10);
    assert_int_equal(p.prefetch, 5);
    assert_int_equal(p.window, 10);
    if (fl_loader_create(&c.l, &c.ds, &c.opt) != 0)
      fail_msg("%s", fl_loader_error(NULL));
    for (epoch = 0; epoch < 2; epoch++) {
      assert_int_equal(fl_loader_begin(c.l), 0);
      for (n = 0; (rc = fl_loader_next(c.l, &b)) == 1; n++) {
        assert_int_equal(fl_batch_seq(b), n);
        assert_int_equal(fl_batch_count(b), 4);
        for (i = 0; i < 4; i++)
          assert_true(flt_sample_ok((const char *)fl_batch_data(b) +
                                        i * (1u << 16),
                                    1u << 16, fl_batch_indices(b)[i]));
        fl_batch_release(b);
      }
      assert_int_equal(rc, 0);
      assert_int_equal(n, 10);
    }
    assert_int_equal(fl_loader_stats(c.l, &st), 0);
    assert_true(st.in_flight_peak <= 10);
    assert_true(st.segments_peak <= p.nsegs);
    flt_case_end(&c);
  }
}

/* The factor in force for the options: fl__plan_make's. */
static unsigned
prefetch_of(const fl_dataset *ds, const fl_options *opt, int iterable)
{
  char err[FL__ERRMSG_MAX];
  fl__plan p;

  if (fl__plan_make(&p, ds, opt, iterable, err, sizeof(err)) != 0)
    fail_msg("%s", err);
  assert_int_equal(p.window,
                   opt->num_workers ? (size_t)p.prefetch * opt->num_workers
                                    : 1);
  return p.prefetch;
}

static size_t
twelve(void *ctx, uint64_t epoch, size_t *order, size_t cap)
{
  size_t i;

  (void)ctx;
  (void)epoch;
  for (i = 0; i < cap; i++)
    order[i] = i;
  return cap;
}

/*
 * The epoch's batches where the library knows them: this rank's share,
 * less the last with drop_last, of the dataset, the indices or the most
 * a sampler may give; per worker, rounded up, and never below 1.  An
 * iterable's are unknown, and a factor below them is as given.
 */
static void
the_prefetch_factor_is_capped_at_the_epochs_batches_per_worker(void **state)
{
  static const size_t idx[] = {3, 1, 4};
  fl_options opt;
  fl_dataset ds;
  flt_data d;

  (void)state;
  flt_data_init(&d, &ds, 40, 64);
  fl_options_init(&opt);
  opt.batch_size = 4;
  opt.num_workers = 2;
  opt.prefetch_factor = 1000000;
  assert_int_equal(prefetch_of(&ds, &opt, 0), 5);  /* 10 batches */
  opt.num_workers = 3;
  assert_int_equal(prefetch_of(&ds, &opt, 0), 4);  /* 10 / 3, up */
  opt.num_workers = 20;
  assert_int_equal(prefetch_of(&ds, &opt, 0), 1);  /* fewer than workers */
  opt.num_workers = 2;
  opt.prefetch_factor = 3;
  assert_int_equal(prefetch_of(&ds, &opt, 0), 3);  /* below: as given */
  opt.prefetch_factor = 1000000;
  opt.batch_size = 6;
  assert_int_equal(prefetch_of(&ds, &opt, 0), 4);  /* 7 batches */
  opt.drop_last = 1;
  assert_int_equal(prefetch_of(&ds, &opt, 0), 3);  /* 6 */
  opt.drop_last = 0;
  opt.batch_size = 4;
  opt.world_size = 4;
  opt.rank = 3;
  assert_int_equal(prefetch_of(&ds, &opt, 0), 2);  /* 10 samples: 3 */
  opt.world_size = 1;
  opt.rank = 0;
  opt.indices = idx;
  opt.indices_len = 3;
  assert_int_equal(prefetch_of(&ds, &opt, 0), 1);  /* 1 batch */
  opt.indices = NULL;
  opt.indices_len = 0;
  opt.sampler = twelve;
  opt.sampler_len = 12;
  assert_int_equal(prefetch_of(&ds, &opt, 0), 2);  /* at most 3 */
  opt.sampler = NULL;
  opt.sampler_len = 0;
  assert_int_equal(prefetch_of(&ds, &opt, 1), 1000000);  /* iterable */
  opt.num_workers = 0;
  assert_int_equal(prefetch_of(&ds, &opt, 0), 1000000);  /* no window */
  flt_data_free(&d);
}

/*
 * A window of the epoch's batches that still does not fit is refused with
 * the factor in force and the one asked for, and the factor it proposes
 * fits where one more does not.  400 samples of 32 MiB in batches of 2,
 * 200 batches: 201 segments of 64 MiB, where MemAvailable says 8 GB.
 */
static void
a_capped_window_that_does_not_fit_is_refused_with_the_cap(void **state)
{
  char msg[FL__ERRMSG_MAX], expect[300];
  unsigned long long pf;
  fl_options opt;
  fl_dataset ds;
  fl__plan p;
  flt_data d;

  (void)state;
  flt_data_init(&d, &ds, 400, 32u << 20);
  fl_options_init(&opt);
  opt.batch_size = 2;
  opt.num_workers = 2;
  opt.prefetch_factor = 1000000;
  refused_for_memory(&ds, &opt, msg, sizeof(msg), &p);
  snprintf(expect, sizeof(expect),
           "(prefetch_factor 100 (capped at the epoch's 200 batches) x "
           "num_workers 2 + 1) segments of %zu bytes", p.layout.size);
  if (strstr(msg, expect) == NULL)
    fail_msg("'%s' does not say '%s'", msg, expect);
  pf = after(strstr(msg, "fit"), "prefetch_factor ");
  assert_true(pf > 0 && pf < 100);
  opt.prefetch_factor = (unsigned)pf;
  assert_int_equal(admitted(&ds, &opt), 0);
  opt.prefetch_factor = (unsigned)pf + 1;
  assert_int_equal(admitted(&ds, &opt), FL_ENOMEM);
  flt_data_free(&d);
}

static void
segment_larger_than_rlimit_fsize_is_refused(void **state)
{
  struct rlimit saved, low;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  flt_data d;
  const char *msg;

  (void)state;
  flt_data_init(&d, &ds, 1000, 1u << 20);
  fl_options_init(&opt);
  opt.batch_size = 4;
  opt.num_workers = 1;
  getrlimit(RLIMIT_FSIZE, &saved);
  low = saved;
  low.rlim_cur = 2u << 20;
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &low), 0);
  assert_int_equal(fl_loader_create(&l, &ds, &opt), FL_ENOMEM);
  setrlimit(RLIMIT_FSIZE, &saved);
  msg = fl_loader_error(NULL);
  assert_non_null(strstr(msg, "RLIMIT_FSIZE (ulimit -f) is 2097152 bytes"));
  assert_non_null(strstr(msg, "batch_size 1;"));
  /* In the calling process a segment is private memory, not a file. */
  opt.num_workers = 0;
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &low), 0);
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  setrlimit(RLIMIT_FSIZE, &saved);
  fl_loader_destroy(l);
  flt_data_free(&d);
}

/*
 * RLIMIT_FSIZE lowered after create: the worker's segment fails with
 * EFBIG as an error at its batch, and no SIGXFSZ kills the worker, even
 * where the host leaves that signal's default action.
 */
static void
fsize_lowered_after_create_is_an_error_at_the_batch(void **state)
{
  struct rlimit saved, low;
  flt_case c;
  fl_batch *b;
  int rc;

  (void)state;
  flt_case_init(&c, 100, 64 * 1024);
  c.opt.batch_size = 4;
  c.opt.num_workers = 1;
  flt_case_create(&c);
  getrlimit(RLIMIT_FSIZE, &saved);
  low = saved;
  low.rlim_cur = 64 * 1024;
  signal(SIGXFSZ, SIG_DFL);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &low), 0);
  rc = fl_loader_begin(c.l);
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(rc, 0);
  rc = fl_loader_next(c.l, &b);
  assert_int_equal(rc, -EFBIG);
  assert_non_null(strstr(fl_loader_error(c.l), "ulimit -f"));
  flt_case_end(&c);
}

/*
 * Memory taken after create (here, MemAvailable of the made-up tree falls
 * to 100 kB): the segment a worker would make anew is refused as an error
 * at its batch, the batch is kept, and once memory is back the next call
 * delivers it and the epoch goes on whole.  In the calling process too.
 */
static void
memory_gone_after_create_is_an_error_at_the_batch_and_nothing_is_lost(
    void **state)
{
  static const unsigned workers[] = {1, 0};
  flt_case c;
  fl_batch *b;
  size_t i, n;
  int rc;

  (void)state;
  for (i = 0; i < 2; i++) {
    flt_case_init(&c, 40, 64 * 1024);
    c.opt.batch_size = 4;
    c.opt.num_workers = workers[i];
    flt_case_create(&c);
    flt_tree_put("/proc/meminfo", "MemAvailable:        100 kB\n");
    assert_int_equal(fl_loader_begin(c.l), 0);
    rc = fl_loader_next(c.l, &b);
    assert_int_equal(rc, FL_ENOMEM);
    assert_false(fl_error_is_final(rc));
    assert_non_null(strstr(fl_loader_error(c.l), "segment does not fit in "
                                                 "memory now: MemAvailable"));
    flt_tree_put("/proc/meminfo", "MemAvailable:    8000000 kB\n");
    for (n = 0; (rc = fl_loader_next(c.l, &b)) == 1; n++) {
      assert_int_equal(fl_batch_seq(b), n);
      assert_true(flt_sample_ok(fl_batch_data(b), 64 * 1024,
                                fl_batch_indices(b)[0]));
      fl_batch_release(b);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(n, 10);
    flt_case_end(&c);
  }
}

/*
 * No worker is refused for want of a message queue: one past those
 * RLIMIT_MSGQUEUE allows reads from a socket pair, of which the parent
 * keeps both ends, an fd more than a queue.  Those fds are weighed against
 * RLIMIT_NOFILE: here 16 workers with no byte of message queue, their own
 * 53 fds and 16 more, past a limit of 64.
 */
static void
workers_past_their_message_queues_cost_an_fd_each(void **state)
{
  struct rlimit files, low;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l = NULL;
  flt_data d;
  const char *msg;
  int rc;

  (void)state;
  getrlimit(RLIMIT_NOFILE, &files);
  flt_data_init(&d, &ds, 1000, 64);
  fl_options_init(&opt);
  opt.num_workers = 16;
  flt_msgqueue_limit_lower(0);
  low = files;
  low.rlim_cur = 64;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
  rc = fl_loader_create(&l, &ds, &opt);
  setrlimit(RLIMIT_NOFILE, &files);
  msg = fl_loader_error(NULL);
  if (rc != FL_EMFILE ||
      strstr(msg, "the prefetch window needs 102 fds") == NULL ||
      strstr(msg, "and 69 of the loader's own") == NULL)
    fail_msg("%s: %s", fl_err_name(rc), msg);
  /* Under the fd limit, the same options are admitted. */
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  fl_loader_destroy(l);
  flt_data_free(&d);
}

/*
 * 16 workers x prefetch 64 under the fd strategy keep 1025 segment fds, at
 * a limit of 1024: refused at create with FL_EMFILE and the arithmetic,
 * rather than an epoch stuck at the fd limit.  The file-system strategy
 * keeps no fd per segment, and fits.  Where the hard limit is below 1024
 * (`ulimit -n 256`), the limit is the hard one and the prefetch a
 * sixteenth of it: the window's segments and the loader's own 53 fds are
 * then past it.
 */
static void
window_beyond_the_fd_limit_is_refused_with_the_arithmetic(void **state)
{
  struct rlimit saved, low;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l = NULL;
  flt_data d;
  const char *msg;
  char needs[200], leaves[120];
  unsigned long long limit;
  int rc;

  (void)state;
  getrlimit(RLIMIT_NOFILE, &saved);
  limit = saved.rlim_max < 1024 ? (unsigned long long)saved.rlim_max : 1024;
  flt_data_init(&d, &ds, 100000, 64);
  fl_options_init(&opt);
  opt.batch_size = 4;
  opt.num_workers = 16;
  opt.prefetch_factor = (unsigned)(limit / 16);
  snprintf(needs, sizeof(needs),
           "the prefetch window needs %llu fds: one for each of its "
           "(prefetch_factor %u x num_workers 16 + 1) segments",
           16ull * opt.prefetch_factor + 1 + 53, opt.prefetch_factor);
  snprintf(leaves, sizeof(leaves),
           "and 53 of the loader's own, but RLIMIT_NOFILE (ulimit -n) "
           "%llu less the ", limit);
  low = saved;
  low.rlim_cur = (rlim_t)limit;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
  rc = fl_loader_create(&l, &ds, &opt);
  msg = fl_loader_error(NULL);
  if (rc != FL_EMFILE || strstr(msg, needs) == NULL ||
      strstr(msg, leaves) == NULL ||
      strstr(msg, "or FL_SHARE_FILE_SYSTEM") == NULL) {
    setrlimit(RLIMIT_NOFILE, &saved);
    fail_msg("%s: %s", fl_err_name(rc), msg);
  }
  opt.sharing = FL_SHARE_FILE_SYSTEM;
  rc = fl_loader_create(&l, &ds, &opt);
  setrlimit(RLIMIT_NOFILE, &saved);
  assert_int_equal(rc, 0);
  fl_loader_destroy(l);
  flt_data_free(&d);
}

/*
 * torch's order keeps 8 bytes a sample; one that does not fit is refused,
 * pointing to the bijection, and the same dataset unshuffled or shuffled
 * by the bijection keeps no order and is made.
 */
static void
an_order_too_large_for_memory_is_refused(void **state)
{
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  flt_data d;

  (void)state;
  /* Its n x 8 bytes would wrap: once, that was a segfault. */
  flt_data_init(&d, &ds, (size_t)2305843009213693953ull, 1);
  fl_options_init(&opt);
  opt.shuffle = 1;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), FL_ENOMEM);
  assert_non_null(strstr(fl_loader_error(NULL), "more bytes than this "
                                                "machine can address, or "
                                                "shuffle with "
                                                "FL_SHUFFLE_BIJECTION"));
  /* 8 TB of order: addressable, but not there. */
  ds.len = (size_t)1000000000000ull;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), FL_ENOMEM);
  assert_non_null(strstr(fl_loader_error(NULL), "load fewer samples, or "
                                                "shuffle with "
                                                "FL_SHUFFLE_BIJECTION"));
  opt.shuffle_algorithm = FL_SHUFFLE_BIJECTION;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_len(l), 1000000000000ull);
  fl_loader_destroy(l);
  opt.shuffle = 0;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  fl_loader_destroy(l);
  flt_data_free(&d);
}

static void
iterable_batch_size_is_the_segment_and_is_checked(void **state)
{
  fl_iterable it = {0};
  fl_options opt;
  fl_loader *l;

  (void)state;
  it.sample_bytes = 1024;
  it.next = (int (*)(void *, void *, size_t *))1; /* never called */
  fl_options_init(&opt);
  opt.batch_size = 4000000000u;
  opt.num_workers = 1;
  assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), FL_ENOMEM);
  assert_non_null(strstr(fl_loader_error(NULL), "bytes, each for "
                                                "4000000000 samples"));
  /* A task counts a batch's samples in 32 bits. */
  opt.batch_size = (size_t)100000000000000ull;
  assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), FL_EINVAL);
  assert_string_equal(fl_loader_error(NULL),
                      "batch_size is 100000000000000: a batch holds at most "
                      "4294967295 samples");
}

static void
mem_available_alone_when_no_cgroup_limits(void **state)
{
  fl__room r;

  (void)state;
  fl__room_memory(&r);
  assert_int_equal(r.amount, 8000000ull * 1024);
  assert_string_equal(r.source, "MemAvailable in /proc/meminfo");
}

static void
cgroup_v2_limit_of_a_parent_binds_and_inactive_files_do_not_count(
    void **state)
{
  fl__room r;

  (void)state;
  flt_tree_put("/proc/self/cgroup", "0::/pod/app\n");
  flt_tree_put("/proc/self/mountinfo",
      "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n");
  /* app: no limit of its own; pod: 1 GiB, 900 MiB used of which 300 MiB
     are inactive file pages. */
  flt_tree_put("/sys/fs/cgroup/pod/app/memory.max", "max\n");
  flt_tree_put("/sys/fs/cgroup/pod/app/memory.current", "104857600\n");
  flt_tree_put("/sys/fs/cgroup/pod/memory.max", "1073741824\n");
  flt_tree_put("/sys/fs/cgroup/pod/memory.current", "943718400\n");
  flt_tree_put("/sys/fs/cgroup/pod/memory.stat",
               "anon 1\ninactive_file 314572800\nactive_file 2\n");
  fl__room_memory(&r);
  assert_int_equal(r.amount, 1073741824ull - (943718400ull - 314572800ull));
  assert_non_null(strstr(r.source, "the memory cgroup /sys/fs/cgroup/pod "
                                   "(memory.max 1073741824 bytes"));
}

static void
cgroup_v1_limit_is_read_under_its_mount_root(void **state)
{
  fl__room r;

  (void)state;
  flt_tree_put("/proc/self/cgroup",
               "5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n");
  /* A container's view: the mount shows /docker/abc as its top. */
  flt_tree_put("/proc/self/mountinfo",
      "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup "
      "rw,memory\n");
  flt_tree_put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n");
  flt_tree_put("/sys/fs/cgroup/memory/memory.usage_in_bytes", "268435456\n");
  flt_tree_put("/sys/fs/cgroup/memory/memory.stat",
               "cache 5\ntotal_inactive_file 67108864\n");
  fl__room_memory(&r);
  assert_int_equal(r.amount, 536870912ull - (268435456ull - 67108864ull));
  assert_non_null(strstr(r.source, "memory.limit_in_bytes 536870912"));
}

static void
cgroup_v1_without_a_limit_leaves_mem_available(void **state)
{
  fl__room r;

  (void)state;
  flt_tree_put("/proc/self/cgroup", "4:memory:/\n");
  flt_tree_put("/proc/self/mountinfo",
      "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  flt_tree_put("/sys/fs/cgroup/memory/memory.limit_in_bytes",
      "9223372036854771712\n");
  flt_tree_put("/sys/fs/cgroup/memory/memory.usage_in_bytes", "1000\n");
  fl__room_memory(&r);
  assert_int_equal(r.amount, 8000000ull * 1024);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(
          batch_size_far_above_the_samples_makes_segments_of_the_samples),
      cmocka_unit_test(custom_indices_bound_the_segment_too),
      cmocka_unit_test(
          sample_bytes_above_the_machines_memory_is_refused_at_create),
      cmocka_unit_test_setup_teardown(
          window_of_64_workers_by_prefetch_64_is_refused_with_the_arithmetic,
          flt_tree_setup, flt_tree_teardown),
      cmocka_unit_test(
          a_prefetch_factor_past_the_epoch_loads_it_in_a_window_of_its_batches),
      cmocka_unit_test(
          the_prefetch_factor_is_capped_at_the_epochs_batches_per_worker),
      cmocka_unit_test_setup_teardown(
          a_capped_window_that_does_not_fit_is_refused_with_the_cap,
          flt_tree_setup, flt_tree_teardown),
      cmocka_unit_test(segment_larger_than_rlimit_fsize_is_refused),
      cmocka_unit_test(
          fsize_lowered_after_create_is_an_error_at_the_batch),
      cmocka_unit_test_setup_teardown(
          memory_gone_after_create_is_an_error_at_the_batch_and_nothing_is_lost,
          flt_tree_setup, flt_tree_teardown),
      cmocka_unit_test(
          window_beyond_the_fd_limit_is_refused_with_the_arithmetic),
      cmocka_unit_test_teardown(
          workers_past_their_message_queues_cost_an_fd_each,
          flt_msgqueue_limit_teardown),
      cmocka_unit_test(an_order_too_large_for_memory_is_refused),
      cmocka_unit_test(iterable_batch_size_is_the_segment_and_is_checked),
      cmocka_unit_test_setup_teardown(
          mem_available_alone_when_no_cgroup_limits, flt_tree_setup,
          flt_tree_teardown),
      cmocka_unit_test_setup_teardown(
          cgroup_v2_limit_of_a_parent_binds_and_inactive_files_do_not_count,
          flt_tree_setup, flt_tree_teardown),
      cmocka_unit_test_setup_teardown(
          cgroup_v1_limit_is_read_under_its_mount_root, flt_tree_setup,
          flt_tree_teardown),
      cmocka_unit_test_setup_teardown(
          cgroup_v1_without_a_limit_leaves_mem_available, flt_tree_setup,
          flt_tree_teardown),
  };
  struct rlimit fsize;

  /* A regression must meet EFBIG, not the OOM killer. */
  signal(SIGXFSZ, SIG_IGN);
  getrlimit(RLIMIT_FSIZE, &fsize);
  if (fsize.rlim_cur == RLIM_INFINITY || fsize.rlim_cur > FILE_LIMIT) {
    fsize.rlim_cur = FILE_LIMIT;
    setrlimit(RLIMIT_FSIZE, &fsize);
  }
  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
