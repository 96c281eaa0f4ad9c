/*
 * Fork safety, with real threads and real forks: a worker forked while
 * another thread of the host holds one of libc's locks must not wait on
 * it; a child of the host (a helper process, a preprocessing child) that
 * touches the loader it inherited must not reach the parent's workers or
 * its event loop; and no fd or mapping one loader makes may be copied into
 * the workers another loader forks from another thread.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"

static volatile int stop_spinning;

/* A host thread busy with random(), which holds glibc's lock for it. */
static void *
spin_random(void *arg)
{
  long sink = 0;

  (void)arg;
  while (!stop_spinning)
    sink += random();
  return (void *)sink;
}

/*
 * Workers forked while that thread runs must come up: before the dataset's
 * first call a worker takes no lock of libc's (srandom's is one).  Each
 * epoch forks two workers; a worker that waited on the lock would leave
 * fl_loader_next to time out.
 */
static void
workers_forked_while_a_thread_calls_random_do_not_hang(void **state)
{
  flt_case c;
  int e;

  (void)state;
  flt_case_init(&c, 8, 16);
  c.opt.batch_size = 4;
  c.opt.num_workers = 2;
  c.opt.timeout_ms = 5000;
  flt_case_create(&c);
  for (e = 0; e < 100; e++) {
    assert_int_equal(fl_loader_begin(c.l), 0);
    assert_int_equal(flt_drain(c.l, 0), 2);
  }
  flt_case_end(&c);
}

/* The spinning thread stops whatever the case did. */
static pthread_t spinner;

static int
spin_setup(void **state)
{
  (void)state;
  stop_spinning = 0;
  return pthread_create(&spinner, NULL, spin_random, NULL) == 0 ? 0 : -1;
}

static int
spin_teardown(void **state)
{
  (void)state;
  stop_spinning = 1;
  return pthread_join(spinner, NULL) == 0 ? 0 : -1;
}

/*
 * A child of the host that uses, releases and destroys the loader it
 * inherited gets FL_ESTATE from every call, frees only its own copy, and
 * the parent's loader goes on as if nothing happened: same workers, every
 * batch of the epoch, a clean destroy.
 */
static void
a_child_of_the_host_cannot_reach_the_parents_loader(void **state)
{
  unsigned char seen[64];
  fl_batch *b, *held, *cb;
  flt_case c;
  size_t i;
  pid_t child;
  int status, rc, persistent;

  (void)state;
  for (persistent = 0; persistent <= 1; persistent++) {
    flt_case_init(&c, 64, 16);
    c.opt.batch_size = 4;
    c.opt.num_workers = 2;
    c.opt.persistent_workers = persistent;
    c.opt.timeout_ms = 5000;
    c.opt.worker_init = flt_worker_init;
    c.opt.worker_init_arg = &c.d;
    flt_case_start(&c);
    assert_int_equal(fl_loader_next(c.l, &held), 1);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
      int bad = 0;

      fl_batch_release(held);
      bad |= fl_loader_next(c.l, &cb) != FL_ESTATE;
      bad |= strstr(fl_loader_error(c.l), "not the process that made") ==
             NULL;
      bad |= fl_loader_begin(c.l) != FL_ESTATE;
      bad |= fl_loader_set_epoch(c.l, 3) != FL_ESTATE;
      bad |= fl_loader_poll(c.l, &cb, 0) != FL_ESTATE;
      /* Were the maker's workers stopped, its epoch would not go on. */
      bad |= fl_loader_stop(c.l) != FL_ESTATE;
      fl_loader_destroy(c.l);
      /* exit, not _exit: the host's atexit handlers run, as in system(). */
      exit(bad);
    }
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    memset(seen, 0, sizeof(seen));
    for (i = 0; i < fl_batch_count(held); i++)
      seen[fl_batch_indices(held)[i]] = 1;
    fl_batch_release(held);
    while ((rc = fl_loader_next(c.l, &b)) == 1) {
      for (i = 0; i < fl_batch_count(b); i++) {
        assert_true(flt_sample_ok((const char *)fl_batch_data(b) + i * 16,
                                  16, fl_batch_indices(b)[i]));
        seen[fl_batch_indices(b)[i]] = 1;
      }
      fl_batch_release(b);
    }
    if (rc != 0)
      fail_msg("after the child: %s", fl_loader_error(c.l));
    for (i = 0; i < 64; i++)
      assert_int_equal(seen[i], 1);
    /* A whole second epoch, with the same workers when persistent. */
    assert_int_equal(fl_loader_begin(c.l), 0);
    assert_int_equal(flt_drain(c.l, 0), 16);
    for (i = 0; i < 2; i++)
      assert_int_equal(c.d.counters->init_calls[i], persistent ? 1 : 2);
    flt_case_end(&c);
  }
}

/* --- no fd or mapping of one loader in another loader's workers ------ */

/* What a worker of the file-system strategy loader saw of others'. */
struct leak_counters {
  volatile uint64_t gets, foreign_fds, foreign_maps;
};

static struct leak_counters *leaks;

/* Whether the worker holds an fd or mapping of a memfd segment: a loader
   of the file-system strategy never makes one, so it is another's.  Read
   with getdents64 and read(2): this runs in a worker forked while thread A
   may hold an allocator lock, which opendir and fopen would wait on under
   ASan (glibc's malloc resets its locks in the child; ASan's does not). */
static void
count_foreign(void)
{
  char path[300], target[256], line[512], ents[4096];
  struct fl__lines maps;
  ssize_t n, got, at;
  struct dirent64 *e;
  int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

  while (dir >= 0 && (got = getdents64(dir, ents, sizeof(ents))) > 0)
    for (at = 0; at < got; at += e->d_reclen) {
      e = (struct dirent64 *)(ents + at);
      snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
      n = readlink(path, target, sizeof(target) - 1);
      target[n > 0 ? n : 0] = '\0';
      if (strstr(target, "memfd:forkload") != NULL)
        __atomic_add_fetch(&leaks->foreign_fds, 1, __ATOMIC_SEQ_CST);
    }
  if (dir >= 0)
    close(dir);
  if (fl__lines_open(&maps, "/proc/self/maps") != 0)
    return;
  while (fl__lines_next(&maps, line, sizeof(line)) > 0)
    if (strstr(line, "memfd:forkload") != NULL)
      __atomic_add_fetch(&leaks->foreign_maps, 1, __ATOMIC_SEQ_CST);
  close(maps.fd);
}

static int
get_and_look(void *ctx, size_t i, void *dst, size_t *nbytes)
{
  (void)ctx;
  memcpy(dst, &i, sizeof(i));
  *nbytes = sizeof(i);
  __atomic_add_fetch(&leaks->gets, 1, __ATOMIC_SEQ_CST);
  count_foreign();
  return 0;
}

static volatile int fd_loader_done;

/* Thread A: an fd-strategy loader receiving a new memfd every batch. */
static void *
fd_loader(void *arg)
{
  fl_dataset *ds = arg;
  fl_options opt;
  fl_loader *l;
  fl_batch *b;
  int rc = 0;

  fl_options_init(&opt);
  opt.num_workers = 2;
  opt.batch_size = 2;
  opt.reuse_segments = 0;
  opt.persistent_workers = 1;
  opt.timeout_ms = 10000;
  if (fl_loader_create(&l, ds, &opt) != 0)
    return (void *)1;
  /* An error stops the memfds the other loader's workers must not see:
     the case would prove nothing, so it is the thread's result. */
  while (!fd_loader_done && rc == 0 && (rc = fl_loader_begin(l)) == 0) {
    while ((rc = fl_loader_next(l, &b)) == 1)
      fl_batch_release(b);
  }
  fl_loader_destroy(l);
  return rc == 0 ? NULL : (void *)1;
}

static void
one_loaders_segments_never_reach_another_loaders_workers(void **state)
{
  flt_baseline base;
  fl_dataset fds, fs;
  fl_options opt;
  fl_loader *l;
  fl_batch *b;
  flt_data d;
  pthread_t t;
  void *trc;
  int e;

  (void)state;
  flt_baseline_take(&base);
  leaks = mmap(NULL, sizeof(*leaks), PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(leaks != MAP_FAILED);
  memset(leaks, 0, sizeof(*leaks));
  flt_data_init(&d, &fds, 2000, 4096);
  memset(&fs, 0, sizeof(fs));
  fs.len = 64;
  fs.sample_bytes = sizeof(size_t);
  fs.get = get_and_look;
  fd_loader_done = 0;
  assert_int_equal(pthread_create(&t, NULL, fd_loader, &fds), 0);
  /* Thread B (this one): workers forked every epoch, which look. */
  fl_options_init(&opt);
  opt.num_workers = 2;
  opt.batch_size = 8;
  opt.sharing = FL_SHARE_FILE_SYSTEM;
  opt.timeout_ms = 10000;
  assert_int_equal(fl_loader_create(&l, &fs, &opt), 0);
  for (e = 0; e < 60; e++) {
    assert_int_equal(fl_loader_begin(l), 0);
    while (fl_loader_next(l, &b) == 1)
      fl_batch_release(b);
  }
  fl_loader_destroy(l);
  fd_loader_done = 1;
  assert_int_equal(pthread_join(t, &trc), 0);
  assert_null(trc);
  assert_int_equal(leaks->gets, 60 * 64);
  if (leaks->foreign_fds != 0 || leaks->foreign_maps != 0)
    fail_msg("%llu of %llu gets saw another loader's segment fds, %llu "
             "its mappings", (unsigned long long)leaks->foreign_fds,
             (unsigned long long)leaks->gets,
             (unsigned long long)leaks->foreign_maps);
  munmap((void *)leaks, sizeof(*leaks));
  flt_data_free(&d);
  flt_assert_clean(&base);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(
          workers_forked_while_a_thread_calls_random_do_not_hang,
          spin_setup, spin_teardown),
      cmocka_unit_test(a_child_of_the_host_cannot_reach_the_parents_loader),
      cmocka_unit_test(
          one_loaders_segments_never_reach_another_loaders_workers),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
