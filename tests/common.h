/*
 * Helpers shared by the test programs: what a clean teardown means (no
 * child process left, no forkload name in /dev/shm, the fd count back where
 * it started), a test dataset whose content is a function of its index,
 * and a whole-program skip that automake's TAP driver understands.
 */
#ifndef FL_TESTS_COMMON_H
#define FL_TESTS_COMMON_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

#include <cmocka.h>

#include "forkload.h"

/* Open fds of this process. */
int flt_fd_count(void);
/* Entries in /dev/shm named for segments this process owns. */
int flt_shm_count(void);
/* Live or zombie children of this process. */
int flt_child_count(void);

/* The state a test starts from, and the check that it ends there. */
typedef struct flt_baseline {
  int fds, shm, children;
} flt_baseline;

void flt_baseline_take(flt_baseline *b);
/* Children may take a moment to be reaped by the kernel: waits up to 2 s. */
void flt_assert_clean(const flt_baseline *b);
/* The same check without an assert, for a child of flt_in_child: 0, or 1
   with why saying what was left behind. */
int flt_left_behind(const flt_baseline *b, char *why, size_t len);

/*
 * libuv opens a process-wide pipe (its signal lock) on the first
 * uv_loop_init and keeps it for the life of the process.  Creating one
 * loader before the tests makes that pipe part of every baseline, so fd
 * counts measure forkload alone.
 */
void flt_warm_up(void);

/*
 * The fd limit, for cases that run the parent short of fds: save it once
 * in main, lower the soft limit to the highest fd in use plus headroom,
 * and restore it (flt_fd_limit_teardown does that, whatever the case did).
 */
void flt_fd_limit_save(void);
void flt_fd_limit_lower(int headroom);
/* Lower the soft limit so that exactly `free` fd numbers are left. */
void flt_fd_limit_leave(int free);
void flt_fd_limit_restore(void);
int flt_fd_limit_teardown(void **state);

/*
 * RLIMIT_MSGQUEUE, for cases whose workers do not all get a message queue:
 * lower its soft limit to `bytes`, and restore it as it was before
 * (flt_msgqueue_limit_teardown does that, whatever the case did).
 */
void flt_msgqueue_limit_lower(rlim_t bytes);
void flt_msgqueue_limit_restore(void);
int flt_msgqueue_limit_teardown(void **state);

/* Monotonic seconds. */
double flt_now(void);

/*
 * A made-up tree of /proc and /sys files, which the library's readings of
 * limits take for the real ones (fl__limits_root).  flt_tree_setup, a
 * cmocka setup, makes it with a /proc/meminfo of 8 GB available;
 * flt_tree_put writes a file in it (its directories too);
 * flt_tree_teardown removes it and points the readings back at the real
 * files.
 */
int flt_tree_setup(void **state);
/* Removes dir and everything under it, symlinks as themselves: 0, or -1
   (nftw's). */
int flt_rm_tree(const char *dir);

/*
 * Long paths, for the errors that quote them: a folder under parent whose
 * path is 4 KiB less FLT_LONG_ROOM bytes (room for the names a case puts
 * in it, under PATH_MAX), every folder on the way made.  Malloc'ed; it
 * goes with parent (flt_rm_tree).
 */
#define FLT_LONG_ROOM 96
char *flt_long_dir(const char *parent);
/* Fails, quoting both, unless msg ends with end: a message shortened to
   fit must keep its cause. */
void flt_assert_ends_with(const char *msg, const char *end);
/* Begins an epoch of l and takes every batch, releasing it: 0, the
   loader's error code, or FL_EPROTO for a batch out of sequence or a
   sample whose bytes are not its index's; *n the batches taken.  No
   assert: a child of flt_in_child may call it. */
int flt_epoch_in_order(fl_loader *l, size_t sample_bytes, size_t *n);
/* Runs an epoch of l, releasing its batches: the first error's code, its
   sentence in buf; 0 when there was none. */
int flt_epoch_error(fl_loader *l, char *buf, size_t len);
int flt_tree_teardown(void **state);
void flt_tree_put(const char *path, const char *text);

/*
 * Runs fn(arg, why, len) in a forked child, where no assert may run (one
 * would go on with the parent's cases there): what fn returns is the
 * child's exit status, and what it wrote in why comes back in why.
 * Returns that status, or -1 when the child did not exit.
 */
int flt_in_child(int (*fn)(void *arg, char *why, size_t len), void *arg,
                 char *why, size_t len);

/* Print a TAP "skip all" plan with the reason and exit 77. */
/*
 * Puts this process in a private mount namespace with its own tmpfs over
 * /dev/shm, mounted with OPTS ("size=1m"): what it holds is seen by no other
 * process on the machine, and no other loader's sweep touches it.  Needs
 * root; on failure returns -1 with the reason in why.
 */
int flt_private_dev_shm(const char *opts, char *why, size_t len);

void flt_skip_all(const char *fmt, ...)
    __attribute__((noreturn, format(printf, 1, 2)));

/*
 * A dataset whose sample i holds i in its first 8 bytes and then bytes
 * derived from i, so any misplaced or stale byte is caught.  Shared
 * counters (in memory all processes see) record what workers did.
 */
typedef struct flt_counters {
  volatile uint64_t samples_fetched;
  volatile uint64_t init_calls[64];
  volatile uint64_t init_seed[64];
  volatile int64_t init_pid[64];
  volatile uint64_t info_seen;    /* gets that saw fl_get_worker_info() */
  volatile uint64_t info_missing; /* gets that saw NULL */
  volatile uint64_t batch_calls;  /* get_batch calls */
  volatile uint64_t kills;        /* times kill_index killed its worker */
  volatile uint64_t slows;        /* times slow_index slept */
} flt_counters;

typedef struct flt_data {
  size_t len;
  size_t sample_bytes;
  long fail_index;        /* get fails for this index, -1: never */
  long kill_index;        /* raise kill_signal here (0: _exit(3)) */
  int kill_signal;
  unsigned kill_times;    /* that many times, then no more (0: always) */
  long slow_index;        /* this index sleeps slow_us */
  unsigned slow_us;
  unsigned slow_times;    /* that many times (0: always) */
  flt_counters *counters; /* shared; see flt_data_init */
} flt_data;

void flt_data_init(flt_data *d, fl_dataset *ds, size_t len,
                   size_t sample_bytes);
void flt_data_free(flt_data *d);
/* Serve the dataset through get_batch instead of get. */
void flt_data_batched(fl_dataset *ds);
/* 1 if the sample at p is what index i must hold. */
int flt_sample_ok(const void *p, size_t sample_bytes, size_t i);
/* worker_init for flt_data: records calls, seed and pid per worker. */
void flt_worker_init(unsigned id, void *arg);

/*
 * What most cases start from, so that each states only what it is about: a
 * baseline, a flt_data dataset and default options.  The case sets d and
 * opt, creates l, and flt_case_end destroys it and proves the teardown
 * clean.  ds.ctx points at d: a case must stay where it was initialised.
 */
typedef struct flt_case {
  flt_baseline base;
  flt_data d;
  fl_dataset ds;
  fl_options opt;
  fl_loader *l; /* NULL until created */
} flt_case;

void flt_case_init(flt_case *c, size_t len, size_t sample_bytes);
/* Create l from ds and opt; creating must succeed. */
void flt_case_create(flt_case *c);
/* Create l and begin its first epoch. */
void flt_case_start(flt_case *c);
/* Destroy l, free the data, and assert that nothing is left. */
void flt_case_end(flt_case *c);

/*
 * Release every batch up to the call that ends the epoch under way, which
 * must return `end` (0: the epoch is over), or fail with the loader's
 * message.  Returns how many batches came.
 */
size_t flt_drain(fl_loader *l, int end);

#endif
