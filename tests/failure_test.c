/*
 * Failures a user can meet, each ending in a clear error with nothing lost,
 * leaked or hung: a get that overruns its room, the fd limit with the fd
 * strategy, a segment the parent cannot map, and a parent killed under its
 * workers.  The names such a parent can leave in /dev/shm are sweep_test's.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"

/* Sample 3 writes 9 bytes past its room, or claims 9 bytes too many. */
static int
overrun_get(void *ctx, size_t i, void *dst, size_t *nbytes)
{
  int claim = *(int *)ctx;

  memset(dst, 1, *nbytes + (i == 3 && !claim ? 9 : 0));
  if (i == 3 && claim)
    *nbytes += 9;
  return 0;
}

static int
overrun_get_batch(void *ctx, const size_t *idx, size_t n, void *dst,
                  size_t *nbytes)
{
  size_t i, extra = 0;

  (void)ctx;
  for (i = 0; i < n; i++)
    extra |= idx[i] == 3;
  memset(dst, 1, n * nbytes[0] + (extra ? 9 : 0));
  return 0;
}

static void
overrun(int claim, int batched, const char *want)
{
  flt_baseline base;
  fl_dataset ds = {0};
  fl_options opt;
  fl_loader *l;
  fl_batch *b;
  int n, rc, errors = 0;

  flt_baseline_take(&base);
  ds.ctx = &claim;
  ds.len = 12;
  ds.sample_bytes = 32;
  if (batched)
    ds.get_batch = overrun_get_batch;
  else
    ds.get = overrun_get;
  fl_options_init(&opt);
  opt.batch_size = 2;
  opt.num_workers = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  for (n = 0; (rc = fl_loader_next(l, &b)) != 0; n++) {
    if (n == 1) { /* batch 1 holds index 3 */
      assert_int_equal(rc, FL_EDATASET);
      assert_non_null(strstr(fl_loader_error(l), want));
      errors++;
      continue;
    }
    assert_int_equal(rc, 1);
    fl_batch_release(b);
  }
  assert_int_equal(n, 6); /* the epoch went on after the error */
  assert_int_equal(errors, 1);
  fl_loader_destroy(l);
  flt_assert_clean(&base);
}

static void
get_writing_past_its_room_is_that_batch_error(void **state)
{
  (void)state;
  overrun(0, 0, "get(index 3) wrote past its room of 32 bytes");
  overrun(0, 1, "get_batch(index 3) wrote past its room of 64 bytes");
}

static void
get_claiming_more_bytes_than_its_room_is_that_batch_error(void **state)
{
  (void)state;
  overrun(1, 0, "get(index 3) reported 41 bytes, more than its room of 32 "
             "(a sample that needs more calls fl_worker_grow first)");
}

/*
 * Every fd number below the lowest free one taken, by fds of /dev/null
 * (fill_fds), and then the soft limit lowered there (lower_to): whatever
 * the loader received in between (the batches held, those on their way)
 * lies above the limit, so that closing it frees no number the limit
 * allows.  The loader is then at the limit with nothing it can let go of,
 * as when the rest of the process holds every fd.  fill_fds comes right
 * after fl_loader_begin, which reads no reply: no segment's fd lies below.
 */
static int fills[4096];
static size_t nfill;

static int
fill_fds(void)
{
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC), fd, top = 0;

  assert_true(null >= 0);
  for (fd = 0; fd < 65536; fd++) {
    if (fcntl(fd, F_GETFD) != -1)
      top = fd + 1;
  }
  fills[0] = null;
  for (nfill = 1;; nfill++) {
    fd = fcntl(null, F_DUPFD_CLOEXEC, 0);
    assert_true(fd >= 0);
    if (fd >= top) {
      close(fd);
      return top;
    }
    assert_true(nfill < 4096);
    fills[nfill] = fd;
  }
}

static void
lower_to(int limit)
{
  struct rlimit rl;

  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  rl.rlim_cur = (rlim_t)limit;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

static void
unfill_fds(void)
{
  while (nfill > 0)
    close(fills[--nfill]);
}

/*
 * PyTorch's test_fd_limit_exceeded, done better.  Short of fds, the
 * loader lets go of those of the batches held, then of its idle ones;
 * only with none left does the limit stop it: the error names the
 * remedies and says that releasing batches frees none, the batch whose fd
 * was lost is kept, and once the consumer releases what it holds, it goes
 * into a released segment (no new fd) with the limit still in force, and
 * the epoch goes on with nothing missing.
 */
static void
nothing_left_to_let_go_at_the_fd_limit_gives_emfile_until_a_release(void **s)
{
  enum { LEN = 600, HOLD = 10, HOLD_MAX = 64 };
  unsigned char seen[LEN];
  fl_batch *held[HOLD_MAX];
  const char *msg;
  char want[64];
  flt_case c;
  fl_batch *b;
  size_t i, j, nheld = 0;
  int rc, below;

  (void)s;
  flt_case_init(&c, LEN, 64);
  memset(seen, 0, sizeof(seen));
  c.opt.batch_size = 2;
  c.opt.num_workers = 2;
  c.opt.persistent_workers = 1;
  flt_case_start(&c);
  below = fill_fds();
  while (nheld < HOLD)
    assert_int_equal(fl_loader_next(c.l, &held[nheld++]), 1);
  /* Workers are forked: only the parent runs short of fds. */
  lower_to(below);
  /* Batches received before may still come. */
  while (nheld < HOLD_MAX && (rc = fl_loader_next(c.l, &b)) == 1)
    held[nheld++] = b;
  assert_int_equal(rc, FL_EMFILE);
  msg = fl_loader_error(c.l);
  print_message("# %s\n", msg);
  assert_non_null(strstr(msg, "ulimit -n"));
  assert_non_null(strstr(msg, "FL_SHARE_FILE_SYSTEM"));
  snprintf(want, sizeof(want), "none of the %zu batches held keeps one",
           nheld);
  assert_non_null(strstr(msg, want));
  assert_non_null(strstr(msg, "The batch is kept"));
  assert_non_null(strstr(msg, "once batches are released"));
  for (i = 0; i < nheld; i++)
    assert_int_equal(held[i]->seg.fd, -1);
  /* Still holding everything: asked again, it fails the same way. */
  assert_int_equal(fl_loader_next(c.l, &b), FL_EMFILE);
  for (i = 0; i < nheld; i++) {
    for (j = 0; j < fl_batch_count(held[i]); j++)
      seen[fl_batch_indices(held[i])[j]]++;
    fl_batch_release(held[i]);
  }
  /* Released: the kept batch comes next, in order, at the same limit. */
  assert_int_equal(fl_loader_next(c.l, &b), 1);
  assert_int_equal(fl_batch_seq(b), nheld);
  flt_fd_limit_restore();
  unfill_fds();
  do {
    for (i = 0; i < fl_batch_count(b); i++) {
      assert_true(flt_sample_ok((const char *)fl_batch_data(b) + i * 64, 64,
                                fl_batch_indices(b)[i]));
      seen[fl_batch_indices(b)[i]]++;
    }
    fl_batch_release(b);
  } while ((rc = fl_loader_next(c.l, &b)) == 1);
  assert_int_equal(rc, 0);
  for (i = 0; i < LEN; i++)
    assert_int_equal(seen[i], 1);
  flt_case_end(&c);
}

/*
 * Opening a segment's name fails in the parent while this says so (with
 * this errno), as at the process's or the system's fd limit: only the
 * test process, not its workers.
 */
static volatile int shm_open_errno;
static pid_t parent_pid;

int __real_shm_open(const char *name, int flags, mode_t mode);
int __wrap_shm_open(const char *name, int flags, mode_t mode);

int
__wrap_shm_open(const char *name, int flags, mode_t mode)
{
  if (shm_open_errno != 0 && getpid() == parent_pid && !(flags & O_CREAT)) {
    errno = shm_open_errno;
    return -1;
  }
  return __real_shm_open(name, flags, mode);
}

/*
 * Under the file-system strategy the loader keeps no fd per segment: at
 * the process's fd limit the lost batch's message says to raise the limit
 * or close files, not to release batches or switch to that strategy; at
 * the system's limit (ENFILE) it names fs.file-max.  Either way the batch
 * is kept and comes once the fds are there.
 */
static void
file_system_strategy_short_of_fds_names_the_remedies_that_apply(void **s)
{
  static const int codes[] = {EMFILE, ENFILE};
  fl_batch *b;
  flt_case c;
  size_t k;
  int rc;

  (void)s;
  parent_pid = getpid();
  for (k = 0; k < 2; k++) {
    flt_case_init(&c, 64, 64);
    c.opt.batch_size = 2;
    c.opt.num_workers = 2;
    c.opt.sharing = FL_SHARE_FILE_SYSTEM;
    flt_case_start(&c);
    shm_open_errno = codes[k];
    rc = fl_loader_next(c.l, &b);
    assert_int_equal(rc, -codes[k]);
    assert_false(fl_error_is_final(rc));
    assert_non_null(strstr(fl_loader_error(c.l), "The batch is kept"));
    if (codes[k] == EMFILE) {
      assert_non_null(strstr(fl_loader_error(c.l), "ulimit -n"));
      assert_null(strstr(fl_loader_error(c.l), "use FL_SHARE_FILE_SYSTEM"));
      assert_null(strstr(fl_loader_error(c.l), "release batches"));
    } else {
      assert_non_null(strstr(fl_loader_error(c.l), "fs.file-max"));
      assert_null(strstr(fl_loader_error(c.l), "ulimit -n"));
    }
    shm_open_errno = 0;
    assert_int_equal(flt_drain(c.l, 0), 32); /* the kept one too */
    flt_case_end(&c);
  }
}

/*
 * mmap fails with EAGAIN where locked memory would pass RLIMIT_MEMLOCK
 * (mlockall(MCL_FUTURE)), which root never meets: armed with a size, the
 * test process's next shared map of a file that size fails so, once.  Its
 * workers, which map the same segments, are left alone.
 */
static volatile size_t mmap_eagain_size;

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd,
                  off_t off);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd,
                  off_t off);

void *
__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
  if (mmap_eagain_size != 0 && len == mmap_eagain_size && fd >= 0 &&
      (flags & MAP_SHARED) && getpid() == parent_pid) {
    mmap_eagain_size = 0;
    errno = EAGAIN;
    return MAP_FAILED;
  }
  return __real_mmap(addr, len, prot, flags, fd, off);
}

/*
 * The parent's map of a worker's new segment failing with EAGAIN is
 * FL_ENOMEM, under either strategy, and the batch is kept and fetched
 * again: as FL_EAGAIN it would be that batch's error, which
 * fl_loader_poll's caller reads as "no batch yet", and the batch would go
 * unsaid.  The epoch goes on, every batch once.
 */
static void
segment_map_past_the_locked_memory_limit_is_enomem_not_poll_eagain(void **s)
{
  enum { LEN = 64, BATCH = 2 };
  static const fl_sharing sharing[] = {FL_SHARE_FILE_DESCRIPTOR,
                                       FL_SHARE_FILE_SYSTEM};
  unsigned char seen[LEN];
  char want[160];
  unsigned long long seq = 0;
  unsigned worker;
  fl_batch *b;
  flt_case c;
  size_t i, k, errors;
  int rc;

  (void)s;
  parent_pid = getpid();
  for (k = 0; k < 2; k++) {
    flt_case_init(&c, LEN, 64);
    memset(seen, 0, sizeof(seen));
    errors = 0;
    c.opt.batch_size = BATCH;
    c.opt.num_workers = 2;
    c.opt.sharing = sharing[k];
    c.opt.timeout_ms = 10000;
    flt_case_start(&c);
    mmap_eagain_size = c.l->layout.size;
    while ((rc = fl_loader_poll(c.l, &b, 100)) != 0) {
      if (rc == FL_EAGAIN) {
        /* The wait's end, and never a batch's error. */
        if (strstr(fl_loader_error(c.l), "(wait_ms of fl_loader_poll)") ==
            NULL)
          fail_msg("FL_EAGAIN, a batch lost: %s", fl_loader_error(c.l));
        continue;
      }
      if (rc < 0) {
        if (rc != FL_ENOMEM)
          fail_msg("%s: %s", fl_err_name(rc), fl_loader_error(c.l));
        assert_false(fl_error_is_final(rc));
        assert_int_equal(sscanf(fl_loader_error(c.l), "batch %llu (worker %u)",
                                &seq, &worker), 2);
        snprintf(want, sizeof(want),
                 "batch %llu (worker %u): cannot map a %zu-byte segment from "
                 "a worker: not enough memory",
                 seq, worker, c.l->layout.size);
        assert_memory_equal(fl_loader_error(c.l), want, strlen(want));
        assert_non_null(strstr(fl_loader_error(c.l), "The batch is kept"));
        errors++;
        continue;
      }
      for (i = 0; i < fl_batch_count(b); i++) {
        assert_true(flt_sample_ok((const char *)fl_batch_data(b) + i * 64, 64,
                                  fl_batch_indices(b)[i]));
        seen[fl_batch_indices(b)[i]]++;
      }
      fl_batch_release(b);
    }
    assert_int_equal(mmap_eagain_size, 0); /* the map did fail */
    /* The batch was kept and fetched again: said (once) only where it
       stood in the way before a released segment could take it. */
    assert_true(errors <= 1);
    for (i = 0; i < LEN; i++)
      assert_int_equal(seen[i], 1);
    flt_case_end(&c);
  }
}

/*
 * A consumer that holds nothing always makes progress.  The fd limit is
 * lowered after create (admission saw room for the window; the host then
 * opened files of its own), so that fewer fds are left than the prefetch
 * window keeps: the loader lets go of what it holds beyond the batch that
 * is due, instead of returning FL_EMFILE for it forever, and every sample
 * of the epoch comes, once.
 */
static void
starved(int in_order)
{
  enum { LEN = 400 };
  unsigned char seen[LEN];
  flt_case c;
  fl_batch *b;
  size_t i, errors = 0, in_a_row = 0;
  int rc;

  flt_case_init(&c, LEN, 64);
  memset(seen, 0, sizeof(seen));
  c.opt.batch_size = 4;
  c.opt.num_workers = 2;
  c.opt.prefetch_factor = 4;
  c.opt.in_order = in_order;
  c.opt.persistent_workers = 1;
  c.opt.timeout_ms = 10000;
  flt_case_start(&c);
  /* Room for 3 segment fds, where the window keeps 8. */
  flt_fd_limit_leave(3);
  while ((rc = fl_loader_next(c.l, &b)) != 0) {
    if (rc < 0) {
      if (rc != FL_EMFILE || fl_error_is_final(rc))
        fail_msg("%s: %s", fl_err_name(rc), fl_loader_error(c.l));
      errors++;
      if (++in_a_row > 50)
        fail_msg("holding nothing, %zu FL_EMFILE in a row: %s", in_a_row,
                 fl_loader_error(c.l));
      continue;
    }
    in_a_row = 0;
    for (i = 0; i < fl_batch_count(b); i++) {
      assert_true(flt_sample_ok((const char *)fl_batch_data(b) + i * 64, 64,
                                fl_batch_indices(b)[i]));
      seen[fl_batch_indices(b)[i]]++;
    }
    fl_batch_release(b);
  }
  flt_fd_limit_restore();
  for (i = 0; i < LEN; i++)
    assert_int_equal(seen[i], 1);
  print_message("# %s: %zu FL_EMFILE on the way\n",
                in_order ? "in order" : "as they arrive", errors);
  flt_case_end(&c);
}

static void
consumer_holding_nothing_short_of_fds_gets_every_batch(void **s)
{
  (void)s;
  starved(1);
  starved(0);
}

/*
 * An epoch begun anew while a batch waits to be fetched again: the next
 * epoch owes nothing to the old one and is whole.
 */
static void
epoch_cut_short_at_the_fd_limit_leaves_nothing_to_fetch_again(void **s)
{
  enum { LEN = 600, HOLD = 10, HOLD_MAX = 64 };
  unsigned char seen[LEN];
  fl_batch *held[HOLD_MAX];
  flt_case c;
  fl_batch *b;
  size_t i, nheld = 0;
  int rc, below;

  (void)s;
  flt_case_init(&c, LEN, 64);
  memset(seen, 0, sizeof(seen));
  c.opt.batch_size = 2;
  c.opt.num_workers = 2;
  c.opt.persistent_workers = 1;
  flt_case_start(&c);
  below = fill_fds();
  while (nheld < HOLD)
    assert_int_equal(fl_loader_next(c.l, &held[nheld++]), 1);
  lower_to(below);
  while (nheld < HOLD_MAX && (rc = fl_loader_next(c.l, &b)) == 1)
    held[nheld++] = b;
  assert_int_equal(rc, FL_EMFILE);
  for (i = 0; i < nheld; i++)
    fl_batch_release(held[i]);
  flt_fd_limit_restore();
  unfill_fds();
  assert_int_equal(fl_loader_begin(c.l), 0);
  assert_int_equal(c.l->nrefetch, 0);
  while ((rc = fl_loader_next(c.l, &b)) == 1) {
    for (i = 0; i < fl_batch_count(b); i++)
      seen[fl_batch_indices(b)[i]]++;
    fl_batch_release(b);
  }
  assert_int_equal(rc, 0);
  for (i = 0; i < LEN; i++)
    assert_int_equal(seen[i], 1);
  flt_case_end(&c);
}

/* In the doomed parent: a loader, one batch, then wait to be killed. */
struct doomed {
  flt_data d;
  fl_dataset ds;
  int ready; /* pipe to the test */
};

static void *
doomed_start(void *arg)
{
  struct doomed *p = arg;
  fl_options opt;
  fl_loader *l;
  fl_batch *b;

  fl_options_init(&opt);
  opt.num_workers = 2;
  opt.persistent_workers = 1;
  opt.sharing = FL_SHARE_FILE_SYSTEM;
  opt.worker_init = flt_worker_init;
  opt.worker_init_arg = &p->d;
  if (fl_loader_create(&l, &p->ds, &opt) != 0 || fl_loader_begin(l) != 0 ||
      fl_loader_next(l, &b) != 1 || fl_loader_next(l, &b) != 1)
    _exit(1);
  if (write(p->ready, "x", 1) != 1)
    _exit(1);
  return l; /* never destroyed: the parent dies holding it */
}

static void
doomed_parent(struct doomed *p, int from_thread)
{
  pthread_t t;

  if (from_thread) {
    pthread_create(&t, NULL, doomed_start, p);
    pthread_join(t, NULL);
  } else {
    doomed_start(p);
  }
  for (;;)
    pause();
}

/* SIGKILL a parent holding a loader; its workers must follow at once. */
static void
parent_killed(int from_thread)
{
  struct doomed p;
  flt_baseline base;
  pid_t parent, w[2];
  double t0;
  int fds[2], i, left;
  char c;

  flt_baseline_take(&base);
  flt_data_init(&p.d, &p.ds, 1000, 4096);
  assert_int_equal(pipe(fds), 0);
  p.ready = fds[1];
  /* Orphans come to us, so that we can reap and time them. */
  assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  parent = fork();
  assert_true(parent >= 0);
  if (parent == 0)
    doomed_parent(&p, from_thread);
  close(fds[1]);
  assert_int_equal(read(fds[0], &c, 1), 1);
  close(fds[0]);
  w[0] = (pid_t)p.d.counters->init_pid[0];
  w[1] = (pid_t)p.d.counters->init_pid[1];
  assert_true(w[0] > 0 && w[1] > 0);
  kill(parent, SIGKILL);
  assert_int_equal(waitpid(parent, NULL, 0), parent);
  t0 = flt_now();
  for (left = 2; left > 0 && flt_now() - t0 < 2.0;) {
    for (i = 0, left = 0; i < 2; i++) {
      if (w[i] != 0 && waitpid(w[i], NULL, WNOHANG) == w[i])
        w[i] = 0;
      left += w[i] != 0;
    }
    usleep(1000);
  }
  assert_int_equal(left, 0);
  assert_true(flt_now() - t0 < 0.5);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  flt_data_free(&p.d);
  /*
   * Batches in transit when it died may have left names; the next forkload
   * start on the machine (here, the sweep it runs) removes every one.
   */
  assert_true(fl_shm_sweep(0, NULL, NULL) >= 0);
  flt_assert_clean(&base);
}

static void
killed_parent_takes_its_workers_down_promptly(void **state)
{
  (void)state;
  parent_killed(0); /* PR_SET_PDEATHSIG */
  parent_killed(1); /* forked from a thread: the socket hangs up */
}

static void
reap_everything(int sig)
{
  int saved = errno;

  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0)
    ;
  errno = saved;
}

/*
 * A host program that reaps every child in its own SIGCHLD handler, or
 * ignores SIGCHLD, takes the worker's exit status; the pidfd still tells
 * the loader that the worker is gone, and it says so instead of hanging.
 * (handler NULL: SIGCHLD as it is.)
 */
static void
host_that_reaps(void (*handler)(int))
{
  struct sigaction sa, old;
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  flt_data d;
  double t0;
  int rc;

  flt_baseline_take(&base);
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = handler;
  sa.sa_flags = SA_RESTART;
  if (handler != NULL)
    sigaction(SIGCHLD, &sa, &old);
  flt_data_init(&d, &ds, 40, 16);
  d.kill_index = 5;
  d.kill_signal = SIGKILL;
  fl_options_init(&opt);
  opt.num_workers = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  t0 = flt_now();
  while ((rc = fl_loader_next(l, &b)) == 1)
    fl_batch_release(b);
  assert_int_equal(rc, FL_EWORKER);
  assert_true(flt_now() - t0 < 1.0);
  assert_non_null(strstr(fl_loader_error(l), "worker 1 (pid "));
  /* The batch it was filling: sample 5's, of batches of one. */
  assert_non_null(strstr(fl_loader_error(l), " while filling batch 5"));
  fl_loader_destroy(l);
  if (handler != NULL)
    sigaction(SIGCHLD, &old, NULL);
  flt_data_free(&d);
  flt_assert_clean(&base);
}

/* Without a handler: the error names the worker, how it died and the
   batch it was filling. */
static void
dead_worker_error_names_the_batch_it_was_filling(void **state)
{
  (void)state;
  host_that_reaps(NULL);
}

static void
host_reaping_children_itself_does_not_hide_a_dead_worker(void **state)
{
  (void)state;
  host_that_reaps(reap_everything);
  host_that_reaps(SIG_IGN);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(get_writing_past_its_room_is_that_batch_error),
      cmocka_unit_test(
          file_system_strategy_short_of_fds_names_the_remedies_that_apply),
      cmocka_unit_test(
          segment_map_past_the_locked_memory_limit_is_enomem_not_poll_eagain),
      cmocka_unit_test(
          get_claiming_more_bytes_than_its_room_is_that_batch_error),
      cmocka_unit_test_teardown(
          nothing_left_to_let_go_at_the_fd_limit_gives_emfile_until_a_release,
          flt_fd_limit_teardown),
      cmocka_unit_test_teardown(
          epoch_cut_short_at_the_fd_limit_leaves_nothing_to_fetch_again,
          flt_fd_limit_teardown),
      cmocka_unit_test_teardown(
          consumer_holding_nothing_short_of_fds_gets_every_batch,
          flt_fd_limit_teardown),
      cmocka_unit_test(killed_parent_takes_its_workers_down_promptly),
      cmocka_unit_test(
          host_reaping_children_itself_does_not_hide_a_dead_worker),
      cmocka_unit_test(dead_worker_error_names_the_batch_it_was_filling),
  };

  flt_fd_limit_save();
  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
