/*
 * The budget (fl_loader_budget): which items a loader's options make, what
 * each held batch adds to each, and that the fd limit, which no held
 * batch's fd fills under either strategy, stops no holding.  And the
 * refusals that go with it at create: workers past RLIMIT_NPROC are
 * FL_EAGAIN, while workers past RLIMIT_MSGQUEUE or fs.mqueue.queues_max
 * are not refused but read from socket pairs.  The stops where
 * max_held says, at a small /dev/shm, are tests/doctor_test.sh's, which
 * needs root.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"

/* Samples of 3 KiB in batches of 4: a segment of a few pages. */
#define SAMPLE 3072
#define BATCH 4

static void
start(flt_case *c, fl_sharing sharing, int in_dev_shm, int in_order)
{
  flt_case_init(c, 100000, SAMPLE);
  c->opt.batch_size = BATCH;
  c->opt.num_workers = 2;
  c->opt.persistent_workers = 1;
  c->opt.sharing = sharing;
  c->opt.fd_in_dev_shm = in_dev_shm;
  c->opt.in_order = in_order;
  flt_case_create(c);
}

static const fl_budget_item *
item(const fl_budget *b, const char *resource)
{
  size_t i;

  for (i = 0; i < b->n; i++)
    if (strcmp(b->item[i].resource, resource) == 0)
      return &b->item[i];
  return NULL;
}

/* The item of that resource in l's budget, read into b: it must be
   there. */
static const fl_budget_item *
budget_item_of(const fl_loader *l, fl_budget *b, const char *resource)
{
  const fl_budget_item *it;

  assert_int_equal(fl_loader_budget(l, b), 0);
  it = item(b, resource);
  assert_non_null(it);
  return it;
}

/* Holds every batch, epoch after epoch, until fl_loader_next fails: it
   must fail with `code`.  Releases them and returns how many there were. */
static size_t
hold_until(fl_loader *l, int code)
{
  static fl_batch *held[4096];
  size_t n = 0, i;
  int rc;

  assert_int_equal(fl_loader_begin(l), 0);
  while (n < 4096 && (rc = fl_loader_next(l, &held[n])) != code) {
    if (rc == 0)
      assert_int_equal(fl_loader_begin(l), 0);
    else if (rc == 1)
      n++;
    else
      fail_msg("fl_loader_next: %d: %s", rc, fl_loader_error(l));
  }
  for (i = 0; i < n; i++)
    fl_batch_release(held[i]);
  return n;
}

/*
 * Under the fd strategy too, no fd is kept per held batch: short of fds,
 * the loader lets go of the held batches' (tests/sharing_test.c).  With 80
 * fd numbers left the fds item adds nothing per batch and binds at no
 * count, and holding every batch, epoch after epoch, does not stop at the
 * fd limit: hold_until gives up at 4096, fifty times the fds left.
 */
static void
fd_strategy_keeps_no_fd_per_held_batch_and_holds_past_the_fd_limit(void **s)
{
  const fl_budget_item *fds;
  fl_budget b;
  flt_case c;

  (void)s;
  flt_fd_limit_leave(80);
  start(&c, FL_SHARE_FILE_DESCRIPTOR, 0, 1);
  assert_int_equal(fl_loader_budget(c.l, &b), 0);
  fds = item(&b, "fds");
  assert_non_null(fds);
  assert_int_equal(fds->per_batch, 0);
  assert_int_equal(fds->max_held, UINT64_MAX);
  assert_true(fds->limit - fds->in_use <= 80);
  assert_string_not_equal(b.item[b.binding].resource, "fds");
  assert_int_equal(hold_until(c.l, FL_EMFILE), 4096);
  flt_case_end(&c);
}

static void
file_system_strategy_keeps_no_fd_per_batch_and_charges_dev_shm(void **s)
{
  const fl_budget_item *fds, *shm, *mem;
  fl_budget b;
  flt_case c;
  uint64_t size, used, used_after;

  (void)s;
  start(&c, FL_SHARE_FILE_SYSTEM, 0, 1);
  fl__dev_shm_now(&size, &used);
  assert_int_equal(fl_loader_budget(c.l, &b), 0);
  fl__dev_shm_now(&size, &used_after);
  fds = item(&b, "fds");
  shm = item(&b, "/dev/shm bytes");
  mem = item(&b, "memory bytes");
  assert_int_equal(fds->per_batch, 0);
  assert_int_equal(fds->max_held, UINT64_MAX);
  assert_non_null(shm);
  assert_int_equal(shm->per_batch, c.l->layout.size);
  assert_int_equal(mem->per_batch, c.l->layout.size);
  assert_int_equal(shm->limit, size);
  /* The free space over the segment, less the 2 that may come ahead; other
     programs may take or free some meanwhile. */
  assert_in_range(shm->max_held + 2,
                  (size - (used > used_after ? used : used_after)) /
                      shm->per_batch,
                  (size - (used < used_after ? used : used_after)) /
                      shm->per_batch);
  /* The least of /dev/shm and memory binds. */
  assert_string_equal(b.item[b.binding].resource,
                      shm->max_held <= mem->max_held ? "/dev/shm bytes"
                                                     : "memory bytes");
  flt_case_end(&c);
}

static void
memfd_segments_are_charged_to_dev_shm_only_with_fd_in_dev_shm(void **s)
{
  fl_budget b;
  flt_case c;

  (void)s;
  start(&c, FL_SHARE_FILE_DESCRIPTOR, 0, 1);
  assert_int_equal(fl_loader_budget(c.l, &b), 0);
  assert_null(item(&b, "/dev/shm bytes"));
  fl_loader_destroy(c.l);
  c.opt.fd_in_dev_shm = 1;
  flt_case_create(&c);
  assert_int_equal(fl_loader_budget(c.l, &b), 0);
  assert_non_null(item(&b, "/dev/shm bytes"));
  assert_int_equal(item(&b, "fds")->per_batch, 0);
  flt_case_end(&c);
}

static void
workers_need_queues_and_processes_but_no_held_batch_does(void **s)
{
  const fl_budget_item *q, *p;
  fl_budget b;
  flt_case c;

  (void)s;
  start(&c, FL_SHARE_FILE_DESCRIPTOR, 0, 1);
  assert_int_equal(fl_loader_budget(c.l, &b), 0);
  q = item(&b, "message queues");
  p = item(&b, "processes");
  assert_int_equal(q->in_use, 2);
  assert_int_equal(q->per_batch, 0);
  assert_int_equal(q->max_held, UINT64_MAX);
  assert_true(q->limit >= 2);
  assert_int_equal(p->per_batch, 0);
  assert_int_equal(p->max_held, UINT64_MAX);
  assert_true(p->in_use >= 1);
  assert_null(item(&b, "memlock bytes"));
  fl_loader_destroy(c.l);
  /* Loading in this process: no queue, no worker, no fd per batch. */
  c.opt.num_workers = 0;
  flt_case_create(&c);
  assert_int_equal(fl_loader_budget(c.l, &b), 0);
  assert_int_equal(b.n, 2);
  assert_int_equal(item(&b, "fds")->per_batch, 0);
  assert_string_equal(b.item[b.binding].resource, "memory bytes");
  flt_case_end(&c);
}

/*
 * In order, max_held leaves room for the batches that may come ahead of
 * the one due, (num_workers - 1) x the prefetch factor in force: a
 * prefetch_factor of 10^6 over 40 samples in batches of 4 is 5 a worker,
 * the epoch's 10 batches over 2 workers, so 5 ahead, not a million.
 */
static void
batches_ahead_count_the_prefetch_factor_in_force(void **s)
{
  const fl_budget_item *m;
  fl_budget b;
  flt_case c;

  (void)s;
  flt_case_init(&c, 40, 1u << 20);
  c.opt.batch_size = 4;
  c.opt.num_workers = 2;
  c.opt.prefetch_factor = 1000000;
  flt_case_create(&c);
  m = budget_item_of(c.l, &b, "memory bytes");
  assert_true(m->per_batch >= 4u << 20);
  assert_true(m->limit / m->per_batch > 5);
  assert_int_equal(m->max_held, m->limit / m->per_batch - 5);
  assert_int_equal(item(&b, "message queues")->limit,
                   fl__index_queue_mq_limit(5 + 1));
  flt_case_end(&c);
}

static int
pin(void *addr, size_t len, void *arg)
{
  (void)addr;
  (void)len;
  (void)arg;
  return 0;
}

static void
pin_memory_with_mlock_adds_memlock_bytes(void **s)
{
  const fl_budget_item *m;
  fl_budget b;
  flt_case c;

  (void)s;
  flt_case_init(&c, 100, SAMPLE);
  c.opt.num_workers = 1;
  c.opt.pin_memory = 1;
  flt_case_create(&c);
  m = budget_item_of(c.l, &b, "memlock bytes");
  assert_int_equal(m->per_batch, c.l->layout.size);
  /* CAP_IPC_LOCK lifts the limit. */
  if (m->limit == UINT64_MAX)
    assert_int_equal(m->max_held, UINT64_MAX);
  else
    assert_true(m->max_held <= m->limit / m->per_batch);
  fl_loader_destroy(c.l);
  /* A pin hook of the caller's is not mlock. */
  c.opt.pin = pin;
  flt_case_create(&c);
  assert_int_equal(fl_loader_budget(c.l, &b), 0);
  assert_null(item(&b, "memlock bytes"));
  flt_case_end(&c);
}

static void
bad_arguments_and_a_child_process_are_refused(void **s)
{
  fl_budget b;
  flt_case c;
  pid_t pid;
  int status;

  (void)s;
  start(&c, FL_SHARE_FILE_DESCRIPTOR, 0, 1);
  assert_int_equal(fl_loader_budget(NULL, &b), FL_EINVAL);
  assert_int_equal(fl_loader_budget(c.l, NULL), FL_EINVAL);
  assert_int_equal(fl_loader_budget_sized(c.l, &b, sizeof(b) - 1),
                   FL_EINVAL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0)
    _exit(fl_loader_budget(c.l, &b) == FL_ESTATE ? 0 : 1);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  flt_case_end(&c);
}

/* Creates a loader of 2 workers with the soft limit of resource lowered
   to soft, if resource >= 0, and destroys it: returns what create did. */
static int
create_under(int resource, rlim_t soft)
{
  struct rlimit saved, low;
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  flt_data d;
  int rc;

  flt_baseline_take(&base);
  flt_data_init(&d, &ds, 100, SAMPLE);
  fl_options_init(&opt);
  opt.num_workers = 2;
  if (resource >= 0) {
    getrlimit(resource, &saved);
    low = saved;
    low.rlim_cur = soft;
    assert_int_equal(setrlimit(resource, &low), 0);
  }
  rc = fl_loader_create(&l, &ds, &opt);
  if (resource >= 0)
    setrlimit(resource, &saved);
  assert_true(rc == 0 ? l != NULL : l == NULL);
  fl_loader_destroy(l);
  flt_data_free(&d);
  flt_assert_clean(&base);
  return rc;
}

/* Refused with FL_EAGAIN and a message holding words. */
static void
refused(int resource, rlim_t soft, const char *words)
{
  int rc = create_under(resource, soft);

  if (rc != FL_EAGAIN || strstr(fl_loader_error(NULL), words) == NULL)
    fail_msg("%d: %s", rc, fl_loader_error(NULL));
}

/*
 * Past RLIMIT_MSGQUEUE, created all the same: not one queue fits in 100
 * bytes, and each worker reads from a socket pair.  The budget says so,
 * and no item binds for it.
 */
static void
workers_past_rlimit_msgqueue_are_not_refused(void **s)
{
  const fl_budget_item *q;
  fl_budget b;
  flt_case c;

  (void)s;
  flt_msgqueue_limit_lower(100);
  start(&c, FL_SHARE_FILE_DESCRIPTOR, 0, 1);
  q = budget_item_of(c.l, &b, "message queues");
  assert_int_equal(q->limit, 0);
  assert_int_equal(q->in_use, 0);
  assert_int_equal(q->max_held, UINT64_MAX);
  flt_msgqueue_limit_restore();
  assert_int_equal(fl_loader_begin(c.l), 0);
  assert_int_equal(flt_drain(c.l, 0), 100000 / BATCH);
  flt_case_end(&c);
}

static void
a_queue_refused_past_admission_gives_a_socket_pair(void **s)
{
  struct mq_attr attr = {0};
  char name[64];
  mqd_t q;

  (void)s;
  /* This uid's queues hold more than the limit leaves: the first
     worker's mq_open fails past admission, which weighs the loader's own
     need alone, and it gets a socket pair.  Nothing of the caller's is
     closed (a worker's fd of 0, from calloc, once was). */
  attr.mq_maxmsg = 10;
  attr.mq_msgsize = 1000;
  snprintf(name, sizeof(name), "/forkload-budget-test.%ld", (long)getpid());
  q = mq_open(name, O_RDWR | O_CREAT | O_EXCL, 0600, &attr);
  assert_true(q != (mqd_t)-1);
  mq_unlink(name);
  assert_int_equal(
      create_under(RLIMIT_MSGQUEUE,
                   2 * fl__index_queue_bytes(fl__index_queue_depth(3))),
      0);
  mq_close(q);
}

static void
workers_past_fs_mqueue_queues_max_are_not_refused(void **s)
{
  const fl_budget_item *q;
  fl_budget b;
  flt_case c;

  (void)s;
  /* The tree says this process lacks CAP_SYS_RESOURCE. */
  flt_tree_put("/proc/sys/fs/mqueue/queues_max", "1\n");
  start(&c, FL_SHARE_FILE_DESCRIPTOR, 0, 1);
  q = budget_item_of(c.l, &b, "message queues");
  assert_int_equal(q->limit, 1);
  assert_int_equal(q->max_held, UINT64_MAX);
  flt_case_end(&c);
}

static void
workers_past_rlimit_nproc_are_refused_with_eagain(void **s)
{
  char status[96];

  (void)s;
  /* 5 threads on the system leave no room for 2 under a limit of 4: the
     uid's are counted, 3, which leave room for 1. */
  flt_tree_put("/proc/loadavg", "0.00 0.00 0.00 1/5 100\n");
  snprintf(status, sizeof(status), "Name:\tx\nUid:\t%u\t%u\t%u\t%u\n"
           "Threads:\t3\n", getuid(), getuid(), getuid(), getuid());
  flt_tree_put("/proc/100/status", status);
  flt_tree_put("/proc/101/status", "Uid:\t65534\t65534\t65534\t65534\n"
                                   "Threads:\t2\n");
  refused(RLIMIT_NPROC, 4, "less the 3 threads of uid");
  /* Room on the whole system is room enough: nothing is counted. */
  flt_tree_put("/proc/loadavg", "0.00 0.00 0.00 1/1 100\n");
  assert_int_equal(create_under(RLIMIT_NPROC, 4), 0);
}

static void
a_process_the_kernel_exempts_from_rlimit_nproc_is_not_refused(void **s)
{
  (void)s;
  /* CAP_SYS_ADMIN, as the tree says: the kernel lets it fork past it. */
  flt_tree_put("/proc/self/status", "CapEff:\t0000000000200000\n");
  flt_tree_put("/proc/loadavg", "0.00 0.00 0.00 1/50 100\n");
  assert_int_equal(create_under(RLIMIT_NPROC, 1), 0);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(
          fd_strategy_keeps_no_fd_per_held_batch_and_holds_past_the_fd_limit,
          flt_fd_limit_teardown),
      cmocka_unit_test(
          file_system_strategy_keeps_no_fd_per_batch_and_charges_dev_shm),
      cmocka_unit_test(
          memfd_segments_are_charged_to_dev_shm_only_with_fd_in_dev_shm),
      cmocka_unit_test(
          workers_need_queues_and_processes_but_no_held_batch_does),
      cmocka_unit_test(batches_ahead_count_the_prefetch_factor_in_force),
      cmocka_unit_test(pin_memory_with_mlock_adds_memlock_bytes),
      cmocka_unit_test(bad_arguments_and_a_child_process_are_refused),
      cmocka_unit_test_teardown(workers_past_rlimit_msgqueue_are_not_refused,
                                flt_msgqueue_limit_teardown),
      cmocka_unit_test(a_queue_refused_past_admission_gives_a_socket_pair),
      cmocka_unit_test_setup_teardown(
          workers_past_fs_mqueue_queues_max_are_not_refused, flt_tree_setup,
          flt_tree_teardown),
      cmocka_unit_test_setup_teardown(
          workers_past_rlimit_nproc_are_refused_with_eagain, flt_tree_setup,
          flt_tree_teardown),
      cmocka_unit_test_setup_teardown(
          a_process_the_kernel_exempts_from_rlimit_nproc_is_not_refused,
          flt_tree_setup, flt_tree_teardown),
  };

  flt_fd_limit_save();
  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
