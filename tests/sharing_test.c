/*
 * How a batch travels, with the real kernel objects: segment layout and
 * creation (memfd and named /dev/shm), the reply channel with SCM_RIGHTS
 * across a real fork (including an fd dropped at the receiver's fd limit),
 * the POSIX message queues that carry tasks (and the socket pairs where
 * none can be had), and what a forked worker drops of its parent's tracked
 * fds and mappings.  Each case ends by proving that
 * no process, /dev/shm name or fd is left behind.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "common.h"

static size_t page;

static void
sleep_ms(long ms)
{
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};

  nanosleep(&t, NULL);
}

/*
 * Wait for a child to exit, at most timeout_ms; a child that hangs is
 * killed and reaped (so no later test inherits it) and the test fails.
 * Returns the exit status of a child that exited normally.
 */
static int
wait_child(pid_t pid, long timeout_ms)
{
  double deadline = flt_now() + timeout_ms / 1e3;
  int status;
  pid_t r;

  for (;;) {
    r = waitpid(pid, &status, WNOHANG);
    if (r == pid)
      break;
    assert_int_equal(r, 0);
    if (flt_now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fail_msg("child %ld did not exit within %ld ms", (long)pid,
               timeout_ms);
    }
    sleep_ms(1);
  }
  if (!WIFEXITED(status))
    fail_msg("child died of signal %d", WTERMSIG(status));
  return WEXITSTATUS(status);
}

static unsigned char
pattern(size_t i, unsigned salt)
{
  return (unsigned char)((i * 131u + salt) ^ (i >> 8));
}

static void
fill(void *p, size_t n, unsigned salt)
{
  unsigned char *c = p;
  size_t i;

  for (i = 0; i < n; i++)
    c[i] = pattern(i, salt);
}

/* 1 if p holds the pattern. */
static int
holds(const void *p, size_t n, unsigned salt)
{
  const unsigned char *c = p;
  size_t i;

  for (i = 0; i < n; i++)
    if (c[i] != pattern(i, salt))
      return 0;
  return 1;
}

static void
seqpacket_pair(int sv[2])
{
  assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv),
                   0);
}

static struct fl__reply
make_reply(uint64_t seq)
{
  struct fl__reply r;

  memset(&r, 0, sizeof(r));
  r.version = FL__PROTOCOL_VERSION;
  r.type = FL__REPLY_BATCH;
  r.worker = 3;
  r.run = 2;
  r.seq = seq;
  r.slot = 5;
  r.count = 17;
  r.flags = FL__REPLY_FD;
  snprintf(r.msg, sizeof(r.msg), "reply %llu", (unsigned long long)seq);
  return r;
}

/* Wait for the socket to be readable: recv is non-blocking. */
static void
wait_readable(int fd, int timeout_ms)
{
  struct pollfd p = {fd, POLLIN, 0};

  assert_int_equal(poll(&p, 1, timeout_ms), 1);
}

/* --- segment.c ----------------------------------------------------- */

static void
segment_layout_is_page_multiple_with_aligned_data(void **state)
{
  static const size_t cases[][2] = {
      {1, 1}, {1, 4096}, {7, 100}, {64, 3 * 224 * 224}, {1000, 1}, {3, 63},
  };
  size_t i, bs, sb, off, meta;
  fl__layout lo;

  (void)state;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    bs = cases[i][0];
    sb = cases[i][1];
    assert_int_equal(fl__segment_layout(&lo, bs, 1, &sb), 0);
    off = lo.field_offset[0];
    meta = sizeof(struct fl__segment_header) + 2 * bs * sizeof(size_t);
    assert_int_equal(lo.cap, bs);
    assert_int_equal(lo.size % page, 0);
    assert_int_equal(off % 64, 0);
    /* Room for the header, indices and sizes, then all the samples... */
    assert_true(off >= meta);
    assert_true(lo.sizes_offset + bs * sizeof(size_t) <= off);
    assert_true(lo.size >= off + bs * sb + FL__GUARD_BYTES);
    /* ...and no more than alignment adds. */
    assert_true(off < meta + 128);
    assert_true(lo.size < off + bs * sb + FL__GUARD_BYTES + 64 + page);
  }
}

static void
segment_layout_rejects_absurd_sizes(void **state)
{
  size_t one = 1, huge = SIZE_MAX / 2, big = (size_t)1 << 50, max = SIZE_MAX;
  fl__layout lo;

  (void)state;
  assert_int_equal(fl__segment_layout(&lo, SIZE_MAX / 2, 1, &one),
                   FL_ENOMEM);
  assert_int_equal(fl__segment_layout(&lo, 2, 1, &huge), FL_ENOMEM);
  /* Each factor is fine alone; their product overflows. */
  assert_int_equal(fl__segment_layout(&lo, (size_t)1 << 20, 1, &big),
                   FL_ENOMEM);
  assert_int_equal(fl__segment_layout(&lo, 1, 1, &max), FL_ENOMEM);
  assert_int_equal(fl__segment_layout(&lo, 1, 0, &one), FL_EINVAL);
}

static void
unnamed_segment_never_appears_in_dev_shm(void **state)
{
  char err[256] = "", path[64], link[256];
  flt_baseline base;
  fl__segment seg;
  ssize_t n;

  (void)state;
  flt_baseline_take(&base);
  if (fl__segment_create(&seg, NULL, 4 * page, err, sizeof(err)) != 0)
    fail_msg("fl__segment_create: %s", err);
  assert_non_null(seg.base);
  assert_int_equal(seg.size, 4 * page);
  assert_true(seg.fd >= 0);
  assert_int_equal(flt_shm_count(), base.shm);
  /* A memfd, not a file anywhere in a file system. */
  snprintf(path, sizeof(path), "/proc/self/fd/%d", seg.fd);
  n = readlink(path, link, sizeof(link) - 1);
  assert_true(n > 0);
  link[n] = '\0';
  if (strncmp(link, "/memfd:", 7) != 0)
    fail_msg("segment fd is %s, not a memfd", link);
  assert_true(fcntl(seg.fd, F_GETFD) & FD_CLOEXEC);
  fill(seg.base, seg.size, 1);
  assert_true(holds(seg.base, seg.size, 1));
  fl__segment_close(&seg);
  assert_null(seg.base);
  assert_int_equal(seg.fd, -1);
  flt_assert_clean(&base);
}

static void
named_segment_name_is_gone_once_attached(void **state)
{
  char err[256] = "", name[128], path[160];
  fl__segment made, seen;
  flt_baseline base;
  size_t size = 3 * page;

  (void)state;
  flt_baseline_take(&base);
  fl__segment_name(name, sizeof(name), getpid(), 0x1234abcdu, 7);
  /* Then the PID namespace and boot, which sweep_test checks. */
  snprintf(path, sizeof(path), "/forkload.%ld.1234abcd.0000000000000007.",
           (long)getpid());
  assert_memory_equal(name, path, strlen(path));
  snprintf(path, sizeof(path), "/dev/shm%s", name);

  if (fl__segment_create(&made, name, size, err, sizeof(err)) != 0)
    fail_msg("fl__segment_create %s: %s", name, err);
  assert_true(made.fd >= 0);
  assert_int_equal(access(path, F_OK), 0);
  assert_int_equal(flt_shm_count(), base.shm + 1);
  /* Creating it again must fail: names are never shared by accident. */
  {
    fl__segment again;

    assert_int_equal(fl__segment_create(&again, name, size, err,
                                        sizeof(err)),
                     -EEXIST);
    /* ...and that failure must not remove the first one's name. */
    assert_int_equal(access(path, F_OK), 0);
  }

  fill(made.base, size, 2);
  assert_int_equal(fl__segment_attach_name(&seen, name, size), 0);
  assert_int_equal(access(path, F_OK), -1);
  assert_int_equal(errno, ENOENT);
  assert_int_equal(flt_shm_count(), base.shm);
  assert_int_equal(seen.fd, -1); /* the name's fd is not kept */
  assert_int_equal(seen.size, size);
  assert_true(holds(seen.base, size, 2));
  /* One memory, two mappings: writes show through both ways. */
  fill(seen.base, size, 3);
  assert_true(holds(made.base, size, 3));
  /* The name is gone for everyone else. */
  assert_int_equal(fl__segment_attach_name(&(fl__segment){0}, name, size),
                   -ENOENT);
  fl__segment_close(&seen);
  fl__segment_close(&made);
  flt_assert_clean(&base);
}

static void
attach_fd_rejects_segment_smaller_than_expected(void **state)
{
  char err[256] = "";
  fl__segment seg, small;
  flt_baseline base;
  int fd;

  (void)state;
  flt_baseline_take(&base);
  if (fl__segment_create(&seg, NULL, page, err, sizeof(err)) != 0)
    fail_msg("fl__segment_create: %s", err);
  fd = dup(seg.fd);
  assert_true(fd >= 0);
  /* A worker's segment shorter than the layout says is a protocol error,
     not a SIGBUS later. */
  assert_int_equal(fl__segment_attach_fd(&small, fd, 2 * page), FL_EPROTO);
  assert_int_equal(fl__segment_attach_fd(&small, fd, page), 0);
  assert_int_equal(small.fd, fd);
  fl__segment_close(&small); /* closes fd */
  fl__segment_close(&seg);
  flt_assert_clean(&base);
}

/* --- channel.c ----------------------------------------------------- */

static void
fd_strategy_round_trip_across_fork(void **state)
{
  struct fl__reply r;
  flt_baseline base;
  fl__segment seg;
  size_t size = 5 * page;
  pid_t pid;
  int sv[2], fd, rc;

  (void)state;
  flt_baseline_take(&base);
  seqpacket_pair(sv);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* The worker's side: make the segment, fill it, send its fd. */
    char err[256];
    struct fl__reply out = make_reply(42);

    close(sv[0]);
    if (fl__segment_create(&seg, NULL, size, err, sizeof(err)) != 0)
      _exit(2);
    fill(seg.base, size, 4);
    if (fl__channel_send(sv[1], &out, seg.fd) != 0)
      _exit(3);
    _exit(0);
  }
  close(sv[1]);
  wait_readable(sv[0], 5000);
  memset(&r, 0, sizeof(r));
  rc = fl__channel_recv(sv[0], &r, &fd);
  assert_int_equal(rc, 1);
  assert_true(fd >= 0);
  /* Received fds must not leak into workers forked later. */
  assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  assert_int_equal(r.version, FL__PROTOCOL_VERSION);
  assert_int_equal(r.seq, 42);
  assert_int_equal(r.worker, 3);
  assert_int_equal(r.slot, 5);
  assert_int_equal(r.count, 17);
  assert_int_equal(r.flags, FL__REPLY_FD);
  assert_string_equal(r.msg, "reply 42");
  assert_int_equal(wait_child(pid, 5000), 0);
  /* The worker is gone; its memory lives on through the fd. */
  assert_int_equal(fl__segment_attach_fd(&seg, fd, size), 0);
  assert_true(holds(seg.base, size, 4));
  /* The peer closed its end: end of stream. */
  assert_int_equal(fl__channel_recv(sv[0], &r, &fd), 0);
  assert_int_equal(fd, -1);
  fl__segment_close(&seg);
  close(sv[0]);
  flt_assert_clean(&base);
}

static void
channel_reply_without_fd_gives_minus_one(void **state)
{
  struct fl__reply in = make_reply(9), out;
  flt_baseline base;
  int sv[2], fd = 1234;

  (void)state;
  flt_baseline_take(&base);
  seqpacket_pair(sv);
  in.flags = 0;
  in.status = FL_EDATASET;
  assert_int_equal(fl__channel_send(sv[1], &in, -1), 0);
  assert_int_equal(fl__channel_recv(sv[0], &out, &fd), 1);
  assert_int_equal(fd, -1);
  assert_memory_equal(&in, &out, sizeof(in));
  close(sv[0]);
  close(sv[1]);
  flt_assert_clean(&base);
}

static void
channel_recv_on_empty_socket_is_eagain(void **state)
{
  struct fl__reply r;
  flt_baseline base;
  int sv[2], fd = 1234;

  (void)state;
  flt_baseline_take(&base);
  seqpacket_pair(sv);
  assert_int_equal(fl__channel_recv(sv[0], &r, &fd), FL_EAGAIN);
  assert_int_equal(fd, -1);
  close(sv[0]);
  close(sv[1]);
  flt_assert_clean(&base);
}

static void
channel_wrong_version_is_eproto_and_closes_fd(void **state)
{
  struct fl__reply in = make_reply(1), r;
  flt_baseline base;
  int sv[2], mfd, fd = 1234;

  (void)state;
  flt_baseline_take(&base);
  seqpacket_pair(sv);
  mfd = memfd_create("flt-version", MFD_CLOEXEC);
  assert_true(mfd >= 0);
  in.version = FL__PROTOCOL_VERSION + 1;
  assert_int_equal(fl__channel_send(sv[1], &in, mfd), 0);
  close(mfd);
  assert_int_equal(fl__channel_recv(sv[0], &r, &fd), FL_EPROTO);
  /* The fd that came with it is closed, not leaked (the clean check). */
  assert_int_equal(fd, -1);

  /* A message of the wrong length is malformed as well. */
  assert_int_equal(send(sv[1], "short", 5, 0), 5);
  assert_int_equal(fl__channel_recv(sv[0], &r, &fd), FL_EPROTO);
  assert_int_equal(fd, -1);
  close(sv[0]);
  close(sv[1]);
  flt_assert_clean(&base);
}

static void
channel_recv_after_peer_closed_is_end_of_stream(void **state)
{
  struct fl__reply r;
  flt_baseline base;
  int sv[2], fd = 1234;

  (void)state;
  flt_baseline_take(&base);
  seqpacket_pair(sv);
  close(sv[1]);
  assert_int_equal(fl__channel_recv(sv[0], &r, &fd), 0);
  assert_int_equal(fd, -1);
  close(sv[0]);
  flt_assert_clean(&base);
}

/* Exit codes of the child in the fd-limit test. */
enum {
  LIMIT_OK = 0,
  LIMIT_SETRLIMIT = 10,
  LIMIT_NOT_AT_LIMIT = 11,
  LIMIT_NOT_EMFILE = 12,
  LIMIT_GOT_FD = 13,
  LIMIT_REPLY_LOST = 14,
  LIMIT_FD_NOT_CLEARED = 15,
};

/*
 * The receiving child lowers its soft RLIMIT_NOFILE to its lowest free fd
 * number, so the kernel has nowhere to put an incoming fd (counting fds is
 * not enough when numbers have gaps).  The kernel then drops the fd and
 * flags MSG_CTRUNC; recv must say FL_EMFILE and still give the reply.
 */
static void
fd_sent_to_receiver_at_fd_limit_gives_emfile(void **state)
{
  struct fl__reply in = make_reply(77);
  flt_baseline base;
  pid_t pid;
  int sv[2], mfd;

  (void)state;
  flt_baseline_take(&base);
  seqpacket_pair(sv);
  mfd = memfd_create("flt-limit", MFD_CLOEXEC);
  assert_true(mfd >= 0);
  assert_int_equal(fl__channel_send(sv[0], &in, mfd), 0);
  close(mfd);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct fl__reply r;
    struct rlimit lim;
    int lowest, fd = 1234, rc;

    close(sv[0]);
    lowest = dup(sv[1]);
    close(lowest);
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0)
      _exit(LIMIT_SETRLIMIT);
    lim.rlim_cur = (rlim_t)lowest;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
      _exit(LIMIT_SETRLIMIT);
    if (dup(sv[1]) >= 0 || errno != EMFILE)
      _exit(LIMIT_NOT_AT_LIMIT);
    memset(&r, 0, sizeof(r));
    rc = fl__channel_recv(sv[1], &r, &fd);
    if (rc != FL_EMFILE)
      _exit(rc == 1 ? LIMIT_GOT_FD : LIMIT_NOT_EMFILE);
    if (fd != -1)
      _exit(LIMIT_FD_NOT_CLEARED);
    if (r.seq != 77 || strcmp(r.msg, "reply 77") != 0)
      _exit(LIMIT_REPLY_LOST);
    _exit(LIMIT_OK);
  }
  close(sv[1]);
  assert_int_equal(wait_child(pid, 5000), LIMIT_OK);
  close(sv[0]);
  flt_assert_clean(&base);
}

/* --- index_queue.c ------------------------------------------------- */

static long
msg_max(void)
{
  FILE *f = fopen("/proc/sys/fs/mqueue/msg_max", "re");
  long v = 10;

  if (f != NULL) {
    if (fscanf(f, "%ld", &v) != 1)
      v = 10;
    fclose(f);
  }
  return v;
}

static struct fl__task
make_task(uint64_t seq)
{
  struct fl__task t;

  memset(&t, 0, sizeof(t));
  t.version = FL__PROTOCOL_VERSION;
  t.type = FL__TASK_FILL;
  t.slot = (uint32_t)(seq % 7);
  t.epoch = 3;
  t.seq = seq;
  t.offset = seq * 32;
  t.count = 32;
  t.flags = FL__TASK_NEW_SEGMENT;
  t.serial = 1000 + seq;
  return t;
}

static int
mqueue_dir_count(void)
{
  DIR *d = opendir("/dev/mqueue");
  struct dirent *e;
  int n = 0;

  if (d == NULL)
    return -1;
  while ((e = readdir(d)) != NULL)
    n += strncmp(e->d_name, "forkload", 8) == 0;
  closedir(d);
  return n;
}

/* The prestate of a case run over the socket pair as well. */
static int socket_kind = 1;

/*
 * A queue of `depth` tasks: a message queue, or with socket set, the
 * socket pair a worker gets when none fits (here no byte of
 * RLIMIT_MSGQUEUE is left).
 */
static void
queue_make(struct fl__index_queue *q, uint32_t token, unsigned depth,
           int socket)
{
  struct rlimit saved, none;
  char err[256] = "";
  int rc;

  assert_int_equal(getrlimit(RLIMIT_MSGQUEUE, &saved), 0);
  none = saved;
  none.rlim_cur = 0;
  if (socket)
    assert_int_equal(setrlimit(RLIMIT_MSGQUEUE, &none), 0);
  rc = fl__index_queue_create(q, token, 0, depth, err, sizeof(err));
  if (socket)
    setrlimit(RLIMIT_MSGQUEUE, &saved);
  if (rc != 0)
    fail_msg("fl__index_queue_create: %s", err);
  assert_int_equal(FL__INDEX_QUEUE_SOCKET(q), socket);
}

static void
index_queue_is_created_without_a_name(void **state)
{
  char err[256] = "", name[64];
  flt_baseline base;
  struct fl__index_queue mq;
  int before;
  mqd_t again;

  (void)state;
  before = mqueue_dir_count();
  flt_baseline_take(&base);
  if (fl__index_queue_create(&mq, 0xfeedbeefu, 6, 4, err, sizeof(err)) != 0)
    fail_msg("fl__index_queue_create: %s", err);
  assert_true(mq.recv >= 0 && mq.send == mq.recv);
  assert_true(fcntl(mq.recv, F_GETFD) & FD_CLOEXEC);
  /* The name it was made under no longer opens... */
  snprintf(name, sizeof(name), "/forkload.%ld.feedbeef.q6", (long)getpid());
  again = mq_open(name, O_RDWR);
  if (again != (mqd_t)-1) {
    mq_close(again);
    mq_unlink(name);
    fail_msg("the queue's name %s is still there", name);
  }
  assert_int_equal(errno, ENOENT);
  /* ...and nothing is listed where mqueue is mounted. */
  if (before >= 0)
    assert_int_equal(mqueue_dir_count(), before);
  fl__index_queue_close(&mq);
  flt_assert_clean(&base);
}

static void
index_queue_send_then_withdraw_round_trip(void **state)
{
  struct fl__task in = make_task(11), out;
  flt_baseline base;
  struct fl__index_queue mq;

  flt_baseline_take(&base);
  queue_make(&mq, 1, 4, *state != NULL);
  /* Empty: nothing to take back, and no blocking. */
  assert_int_equal(fl__index_queue_withdraw(&mq, &out), 0);
  assert_int_equal(fl__index_queue_send(&mq, &in), 0);
  memset(&out, 0, sizeof(out));
  assert_int_equal(fl__index_queue_withdraw(&mq, &out), 1);
  assert_memory_equal(&in, &out, sizeof(in));
  assert_int_equal(fl__index_queue_withdraw(&mq, &out), 0);
  fl__index_queue_close(&mq);
  flt_assert_clean(&base);
}

static void
index_queue_full_returns_eagain(void **state)
{
  struct fl__task t, out;
  char err[256] = "";
  flt_baseline base;
  long max = msg_max(), depth = max < 4 ? max : 4, i;
  struct fl__index_queue mq;

  (void)state;
  flt_baseline_take(&base);
  if (fl__index_queue_create(&mq, 2, 0, (unsigned)depth, err,
                             sizeof(err)) != 0)
    fail_msg("fl__index_queue_create: %s", err);
  for (i = 0; i < depth; i++) {
    t = make_task((uint64_t)i);
    assert_int_equal(fl__index_queue_send(&mq, &t), 0);
  }
  t = make_task(99);
  assert_int_equal(fl__index_queue_send(&mq, &t), FL_EAGAIN);
  /* Same priority: first in, first out. */
  for (i = 0; i < depth; i++) {
    assert_int_equal(fl__index_queue_withdraw(&mq, &out), 1);
    assert_int_equal(out.seq, (uint64_t)i);
  }
  assert_int_equal(fl__index_queue_withdraw(&mq, &out), 0);
  fl__index_queue_close(&mq);
  flt_assert_clean(&base);
}

/* Asking for more than fs.mqueue.msg_max gets msg_max, not a failure. */
static void
index_queue_depth_is_capped_at_msg_max(void **state)
{
  struct fl__task t = make_task(0), out;
  char err[256] = "";
  flt_baseline base;
  long max = msg_max(), i;
  struct fl__index_queue mq;

  (void)state;
  if (max > 1000)
    skip(); /* a tuned system: the cap is not reachable cheaply */
  flt_baseline_take(&base);
  if (fl__index_queue_create(&mq, 3, 1, (unsigned)max + 100, err,
                             sizeof(err)) != 0)
    fail_msg("fl__index_queue_create with depth %ld: %s", max + 100, err);
  for (i = 0; i < max; i++)
    assert_int_equal(fl__index_queue_send(&mq, &t), 0);
  assert_int_equal(fl__index_queue_send(&mq, &t), FL_EAGAIN);
  while (fl__index_queue_withdraw(&mq, &out) == 1)
    ;
  fl__index_queue_close(&mq);
  flt_assert_clean(&base);
}

/*
 * A worker-like child over a queue of 4 tasks (a socket pair with socket
 * set) and a socket pair to its parent: 0 in the child, which keeps
 * sv[1]; in the parent the child's pid, and the parent keeps sv[0].
 */
static pid_t
fork_worker(struct fl__index_queue *mq, uint32_t token, int socket,
            int sv[2])
{
  pid_t pid;

  queue_make(mq, token, 4, socket);
  seqpacket_pair(sv);
  pid = fork();
  assert_true(pid >= 0);
  close(sv[pid == 0 ? 0 : 1]);
  return pid;
}

/* Exit codes of the receiving child. */
enum {
  RECV_OK = 0,
  RECV_FIRST_NOT_1 = 20,
  RECV_FIRST_WRONG = 21,
  RECV_BAD_VERSION_NOT_EPROTO = 22,
  RECV_END_NOT_0 = 23,
};

/*
 * A worker-like child blocks in fl__index_queue_recv; the parent sends
 * only after a pause, so the poll path is what wakes the child.
 */
static void
child_receives_tasks_through_index_queue(void **state)
{
  struct fl__task good = make_task(5), bad = make_task(6);
  flt_baseline base;
  pid_t pid, parent = getpid();
  struct fl__index_queue mq;
  int sv[2];

  flt_baseline_take(&base);
  if ((pid = fork_worker(&mq, 4, *state != NULL, sv)) == 0) {
    struct fl__task t;

    if (fl__index_queue_recv(&mq, sv[1], parent, &t) != 1)
      _exit(RECV_FIRST_NOT_1);
    if (memcmp(&t, &good, sizeof(t)) != 0)
      _exit(RECV_FIRST_WRONG);
    if (fl__index_queue_recv(&mq, sv[1], parent, &t) != FL_EPROTO)
      _exit(RECV_BAD_VERSION_NOT_EPROTO);
    /* Then the parent's end closes: that is the way out. */
    if (fl__index_queue_recv(&mq, sv[1], parent, &t) != 0)
      _exit(RECV_END_NOT_0);
    _exit(RECV_OK);
  }
  sleep_ms(50);
  assert_int_equal(fl__index_queue_send(&mq, &good), 0);
  bad.version = FL__PROTOCOL_VERSION + 1;
  assert_int_equal(fl__index_queue_send(&mq, &bad), 0);
  sleep_ms(20);
  close(sv[0]);
  assert_int_equal(wait_child(pid, 5000), RECV_OK);
  /* The child took both tasks: none is left to withdraw. */
  assert_int_equal(fl__index_queue_withdraw(&mq, &good), 0);
  fl__index_queue_close(&mq);
  flt_assert_clean(&base);
}

/*
 * A worker idle in fl__index_queue_recv must notice at once that the
 * parent's end of its socket closed, not at its periodic parent check
 * (that check only catches re-parenting, so a miss here would hang).
 */
static void
index_queue_recv_returns_zero_promptly_when_parent_end_closes(void **state)
{
  flt_baseline base;
  pid_t pid, parent = getpid();
  struct fl__index_queue mq;
  int sv[2], status;
  double t0, took;

  flt_baseline_take(&base);
  if ((pid = fork_worker(&mq, 5, *state != NULL, sv)) == 0) {
    struct fl__task t;

    _exit(fl__index_queue_recv(&mq, sv[1], parent, &t) == 0 ? 0 : 1);
  }
  sleep_ms(100); /* let the child settle into poll */
  assert_int_equal(waitpid(pid, &status, WNOHANG), 0); /* still waiting */
  t0 = flt_now();
  close(sv[0]);
  assert_int_equal(wait_child(pid, 3000), 0);
  took = flt_now() - t0;
  if (took > 0.5)
    fail_msg("the worker took %.3f s to see its parent's end close", took);
  fl__index_queue_close(&mq);
  flt_assert_clean(&base);
}

/*
 * The socket pair's depth is its send buffer's, not msg_max: it takes
 * tasks until full, then says EAGAIN as a full queue does, and gives back
 * every one, first in first out, to the parent that keeps both its ends.
 */
static void
index_queue_socket_full_returns_eagain_and_gives_all_back(void **state)
{
  struct fl__task t, out;
  flt_baseline base;
  struct fl__index_queue mq;
  uint64_t i, n;
  int rc = 0;

  (void)state;
  flt_baseline_take(&base);
  queue_make(&mq, 6, 4, 1);
  for (n = 0; n < 100000 && rc == 0; n++) {
    t = make_task(n);
    rc = fl__index_queue_send(&mq, &t);
  }
  assert_int_equal(rc, FL_EAGAIN);
  n--; /* the last was refused */
  assert_true(n >= 4);
  for (i = 0; i < n; i++) {
    assert_int_equal(fl__index_queue_withdraw(&mq, &out), 1);
    assert_int_equal(out.seq, i);
  }
  assert_int_equal(fl__index_queue_withdraw(&mq, &out), 0);
  fl__index_queue_close(&mq);
  flt_assert_clean(&base);
}

/* A worker on a socket pair whose parent's ends close (the parent died)
   sees its parent gone, even while the reply socket is still open. */
static void
index_queue_socket_recv_returns_zero_when_its_sending_end_closes(void **state)
{
  flt_baseline base;
  pid_t pid, parent = getpid();
  struct fl__index_queue mq;
  int sv[2];

  (void)state;
  flt_baseline_take(&base);
  if ((pid = fork_worker(&mq, 7, 1, sv)) == 0) {
    struct fl__task t;

    close(mq.send);
    _exit(fl__index_queue_recv(&mq, sv[1], parent, &t) == 0 ? 0 : 1);
  }
  sleep_ms(50);
  fl__index_queue_close(&mq);
  assert_int_equal(wait_child(pid, 3000), 0);
  close(sv[0]);
  flt_assert_clean(&base);
}

#if defined(__x86_64__)
#define MQ_FAULT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define MQ_FAULT_ARCH AUDIT_ARCH_AARCH64
#endif

/*
 * From now on, in this process and the workers it forks, the kernel
 * answers mq_open with errno e, as a kernel without POSIX message queues
 * answers ENOSYS: a seccomp filter, not a mock.  0, or -1 where seccomp
 * filters cannot be had.
 */
static int
mq_open_fails_with(int e)
{
#ifdef MQ_FAULT_ARCH
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MQ_FAULT_ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mq_open, 0, 1),
      BPF_STMT(BPF_RET | BPF_K,
               SECCOMP_RET_ERRNO | ((unsigned)e & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof(f) / sizeof(f[0]), f};

  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
#else
  (void)e;
  errno = ENOSYS;
  return -1;
#endif
}

/*
 * In a child whose mq_open fails with *arg: a queue is a socket pair that
 * carries a task, and a loader of 2 workers delivers an epoch in order
 * through theirs.  0, 77 without seccomp, or a code with why.
 */
static int
queues_without_mq_open(void *arg, char *why, size_t len)
{
  int e = *(const int *)arg, rc, got;
  struct fl__task in = make_task(8), out;
  flt_baseline base;
  char name[64];
  mqd_t mq;
  struct fl__index_queue q;
  const size_t sb = 16;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l = NULL;
  fl_budget bg;
  flt_data d;
  size_t n, i;

  if (mq_open_fails_with(e) != 0) {
    snprintf(why, len, "not run: no seccomp filter (%s)", strerror(errno));
    return 77;
  }
  flt_baseline_take(&base);
  snprintf(name, sizeof(name), "/forkload-sharing-test.%ld",
           (long)getpid());
  mq = mq_open(name, O_RDWR | O_CREAT | O_EXCL, 0600, NULL);
  got = mq == (mqd_t)-1 ? errno : 0;
  if (mq != (mqd_t)-1) {
    mq_close(mq);
    mq_unlink(name);
  }
  if (got != e) {
    snprintf(why, len, "mq_open did not fail with %s", strerror(e));
    return 1;
  }
  rc = fl__index_queue_create(&q, 8, 0, 4, why, len);
  if (rc != 0)
    return 2;
  if (!FL__INDEX_QUEUE_SOCKET(&q) || fl__index_queue_send(&q, &in) != 0 ||
      fl__index_queue_withdraw(&q, &out) != 1 ||
      memcmp(&in, &out, sizeof(in)) != 0) {
    snprintf(why, len, "the queue is no socket pair that carries a task");
    fl__index_queue_close(&q);
    return 3;
  }
  fl__index_queue_close(&q);
  flt_data_init(&d, &ds, 40, sb);
  fl_options_init(&opt);
  opt.batch_size = 4;
  opt.num_workers = 2;
  n = 0;
  rc = fl_loader_create(&l, &ds, &opt);
  if (rc == 0)
    rc = fl_loader_budget(l, &bg);
  for (i = 0; rc == 0 && i < bg.n; i++)
    if (strcmp(bg.item[i].resource, "message queues") == 0 &&
        bg.item[i].in_use != 0)
      rc = FL_EPROTO;
  if (rc == 0)
    rc = flt_epoch_in_order(l, sb, &n);
  snprintf(why, len, "mq_open failing with %s: %zu of 10 batches%s%s",
           strerror(e), n, rc == 0 ? "" : ": ",
           rc == 0 ? "" : l != NULL ? fl_loader_error(l)
                                    : fl_loader_error(NULL));
  fl_loader_destroy(l);
  flt_data_free(&d);
  if (rc != 0 || n != 10)
    return 4;
  /* By hand: an assert here would go on with the parent's cases. */
  return flt_left_behind(&base, why, len) ? 5 : 0;
}

/*
 * A kernel without POSIX message queues (ENOSYS), or one that will not let
 * this process have one (EACCES), is a queue that cannot be had as
 * RLIMIT_MSGQUEUE's is: the worker reads its tasks from a socket pair.
 */
static void
index_queue_is_a_socket_pair_where_mq_open_is_enosys_or_eacces(void **state)
{
  static const int errs[] = {ENOSYS, EACCES};
  char why[400];
  size_t i;
  int status;

  (void)state;
  for (i = 0; i < 2; i++) {
    status = flt_in_child(queues_without_mq_open, (void *)&errs[i], why,
                          sizeof(why));
    print_message("# %s\n", why);
    if (status == 77)
      skip();
    if (status != 0)
      fail_msg("status %d: %s", status, why);
  }
}

/* --- fdtrack.c ----------------------------------------------------- */

/* Bits of the fdtrack child's exit status. */
enum {
  DROP_DROPPED_OPEN = 1,    /* a tracked, not kept fd is still open */
  DROP_KEPT_CLOSED = 2,     /* a kept fd was closed */
  DROP_UNTRACKED_CLOSED = 4, /* an fd never tracked was closed */
  DROP_MAP_KEPT = 8,        /* a tracked, not kept mapping is still there */
  DROP_KEEP_MAP_LOST = 16,  /* the kept mapping is gone or changed */
};

static int
fd_open(int fd)
{
  return fcntl(fd, F_GETFD) >= 0;
}

static int
mapped(void *addr, size_t len)
{
  return msync(addr, len, MS_ASYNC) == 0;
}

static void
fdtrack_child_drop_closes_tracked_fds_except_kept(void **state)
{
  flt_baseline base;
  struct rlimit saved, need;
  int p1[2], p2[2], high, untracked, status;
  void *drop_map, *keep_map;
  pid_t pid;

  (void)state;
  flt_baseline_take(&base);
  assert_int_equal(fl__fdtrack_add(-1), FL_EINVAL);
  assert_int_equal(pipe2(p1, O_CLOEXEC), 0);
  assert_int_equal(pipe2(p2, O_CLOEXEC), 0);
  /* Past the table's first 256 entries, so that it has to grow: fd 700
     needs a limit above it, which `ulimit -n 256` does not give.  The
     limit is raised, the hard one too where that is below (which takes
     CAP_SYS_RESOURCE); where it cannot be, no fd past the hard limit can
     exist, and the highest it allows is tracked instead. */
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
  need = saved;
  if (need.rlim_cur <= 700) {
    need.rlim_cur = 701;
    if (need.rlim_max < 701)
      need.rlim_max = 701;
    if (setrlimit(RLIMIT_NOFILE, &need) != 0) {
      need.rlim_cur = saved.rlim_max;
      need.rlim_max = saved.rlim_max;
      assert_int_equal(setrlimit(RLIMIT_NOFILE, &need), 0);
    }
  }
  high = fcntl(p1[0], F_DUPFD_CLOEXEC,
               need.rlim_cur > 700 ? 700 : (int)need.rlim_cur - 1);
  if (need.rlim_cur > 700)
    assert_true(high >= 700);
  else
    assert_true(high >= 0);
  if (high < 256)
    print_message("# the fd limit %llu keeps every fd below 256: the "
                  "table does not grow here\n",
                  (unsigned long long)need.rlim_cur);
  untracked = dup(p1[0]);
  assert_true(untracked >= 0);
  drop_map = mmap(NULL, page, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  keep_map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(drop_map != MAP_FAILED && keep_map != MAP_FAILED);
  fill(keep_map, 2 * page, 5);

  assert_int_equal(fl__fdtrack_add(p1[0]), 0);
  assert_int_equal(fl__fdtrack_add(p1[1]), 0);
  assert_int_equal(fl__fdtrack_add(p2[0]), 0);
  assert_int_equal(fl__fdtrack_add(p2[1]), 0);
  assert_int_equal(fl__fdtrack_add(high), 0);
  assert_int_equal(fl__fdtrack_map_add(drop_map, page), 0);
  assert_int_equal(fl__fdtrack_map_add(keep_map, 2 * page), 0);

  /* As spawn.c does: the table is locked across fork. */
  fl__fdtrack_lock();
  pid = fork();
  if (pid == 0) {
    const int keep[2] = {p1[1], p2[0]};
    int bad = 0;

    fl__fdtrack_child_drop(keep, 2, (const void *const *)&keep_map, 1);
    if (fd_open(p1[0]) || fd_open(p2[1]) || fd_open(high))
      bad |= DROP_DROPPED_OPEN;
    if (!fd_open(p1[1]) || !fd_open(p2[0]))
      bad |= DROP_KEPT_CLOSED;
    if (!fd_open(untracked))
      bad |= DROP_UNTRACKED_CLOSED;
    if (mapped(drop_map, page))
      bad |= DROP_MAP_KEPT;
    if (!mapped(keep_map, 2 * page) || !holds(keep_map, 2 * page, 5))
      bad |= DROP_KEEP_MAP_LOST;
    /* The lock was made anew: taking it again must not deadlock. */
    fl__fdtrack_lock();
    fl__fdtrack_unlock();
    _exit(bad);
  }
  fl__fdtrack_unlock();
  assert_true(pid > 0);
  status = wait_child(pid, 5000);
  if (status != 0)
    fail_msg("child drop went wrong: status bits 0x%x", status);
  /* The parent's own fds and mappings are untouched. */
  assert_true(fd_open(p1[0]) && fd_open(p2[1]) && fd_open(high));
  assert_true(mapped(drop_map, page));

  fl__fdtrack_del(p1[0]);
  fl__fdtrack_del(p1[1]);
  fl__fdtrack_del(p2[0]);
  fl__fdtrack_del(p2[1]);
  fl__fdtrack_del(high);
  fl__fdtrack_map_del(drop_map);
  fl__fdtrack_map_del(keep_map);
  munmap(drop_map, page);
  munmap(keep_map, 2 * page);
  close(p1[0]);
  close(p1[1]);
  close(p2[0]);
  close(p2[1]);
  close(high);
  close(untracked);
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
  flt_assert_clean(&base);
}

/* After fl__fdtrack_del, a forked child keeps the fd: the table forgets. */
static void
fdtrack_del_untracks_fd(void **state)
{
  flt_baseline base;
  int fd;
  pid_t pid;

  (void)state;
  flt_baseline_take(&base);
  fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(fl__fdtrack_add(fd), 0);
  fl__fdtrack_del(fd);
  fl__fdtrack_lock();
  pid = fork();
  if (pid == 0) {
    fl__fdtrack_child_drop(NULL, 0, NULL, 0);
    _exit(fd_open(fd) ? 0 : 1);
  }
  fl__fdtrack_unlock();
  assert_true(pid > 0);
  assert_int_equal(wait_child(pid, 5000), 0);
  close(fd);
  flt_assert_clean(&base);
}

/* Fd numbers below the soft limit that no fd takes, counted up to most. */
static size_t
fds_left(size_t most)
{
  struct rlimit rl;
  size_t fd, n = 0;

  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  for (fd = 0; fd < rl.rlim_cur && n < most; fd++)
    n += fcntl((int)fd, F_GETFD) == -1;
  return n;
}

/*
 * The consumer holds every batch of an epoch, four times as many as the
 * fd numbers left under the soft limit (at most 1024 of them: a few
 * thousand batches), as `list(loader)` does: all come, each once and
 * whole, in order where asked, with no error.  Held batches keep at most
 * the prefetch window's fds (the consumer reads their mappings), so the
 * loader's fds stay within the limit, far fewer than the batches.  Then every
 * batch is released and a second epoch runs, its workers forked (the
 * first time anew) at the limit.
 */
static void
hold_past_the_fd_limit(int in_order, int persistent)
{
  enum { SAMPLE = 64, BS = 2 };
  unsigned char *seen;
  fl_batch **held, *b;
  size_t left, n, i, j, with_fd = 0;
  struct rlimit rl;
  fl_stats st;
  flt_case c;
  int rc;

  left = fds_left(1024);
  assert_true(left >= 64);
  flt_fd_limit_leave((int)left);
  n = 4 * left;
  flt_case_init(&c, n * BS, SAMPLE);
  c.opt.batch_size = BS;
  c.opt.num_workers = 2;
  c.opt.in_order = in_order;
  c.opt.persistent_workers = persistent;
  c.opt.timeout_ms = 30000;
  flt_case_start(&c);
  held = calloc(n, sizeof(*held));
  seen = calloc(n * BS, 1);
  assert_non_null(held);
  assert_non_null(seen);
  for (i = 0; i < n; i++) {
    rc = fl_loader_next(c.l, &held[i]);
    if (rc != 1)
      fail_msg("batch %zu of %zu held: %s: %s", i, n, fl_err_name(rc),
               fl_loader_error(c.l));
    b = held[i];
    if (in_order)
      assert_int_equal(fl_batch_seq(b), i);
    assert_int_equal(fl_batch_count(b), BS);
    for (j = 0; j < BS; j++) {
      assert_true(flt_sample_ok((const char *)fl_batch_data(b) + j * SAMPLE,
                                SAMPLE, fl_batch_indices(b)[j]));
      seen[fl_batch_indices(b)[j]]++;
    }
  }
  assert_int_equal(fl_loader_next(c.l, &b), 0);
  for (i = 0; i < n * BS; i++)
    assert_int_equal(seen[i], 1);
  /* Still whole after all that came later. */
  for (i = 0; i < n; i++) {
    assert_true(flt_sample_ok(fl_batch_data(held[i]), SAMPLE,
                              fl_batch_indices(held[i])[0]));
    with_fd += held[i]->seg.fd >= 0;
  }
  assert_int_equal(fl_loader_stats(c.l, &st), 0);
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  assert_int_equal(st.batches_held, n);
  assert_true(st.fds_peak <= left);
  assert_true(with_fd <= (size_t)c.opt.num_workers * c.opt.prefetch_factor);
  print_message("# %s: %zu batches held under %zu fds left, %zu of them "
                "with an fd, the loader's fds at most %zu (limit %llu)\n",
                in_order ? "in order" : "as they arrive", n, left, with_fd,
                st.fds_peak, (unsigned long long)rl.rlim_cur);
  for (i = 0; i < n; i++)
    fl_batch_release(held[i]);
  assert_int_equal(fl_loader_begin(c.l), 0);
  assert_int_equal(flt_drain(c.l, 0), n);
  flt_fd_limit_restore();
  free(held);
  free(seen);
  flt_case_end(&c);
}

static void
fd_strategy_holds_four_times_the_fds_left_in_batches_and_runs_again(void **s)
{
  (void)s;
  hold_past_the_fd_limit(1, 0);
  hold_past_the_fd_limit(0, 1);
}

/*
 * mmap of a segment (shared, from an fd) fails with ENOMEM while
 * *maps_full names this process (MAPS_PARENT) or a worker (MAPS_WORKER),
 * as past vm.max_map_count, which is the machine's and not a test's to
 * lower; the made-up tree (flt_tree_setup) says the process is at it.
 */
enum { MAPS_PARENT = 1, MAPS_WORKER = 2 };
static volatile int *maps_full;
static pid_t maps_parent;

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd,
                  off_t off);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd,
                  off_t off);

void *
__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
  int who = maps_full != NULL ? *maps_full : 0;

  if (who != 0 && fd >= 0 && (flags & MAP_SHARED) &&
      (who == MAPS_PARENT) == (getpid() == maps_parent)) {
    errno = ENOMEM;
    return MAP_FAILED;
  }
  return __real_mmap(addr, len, prot, flags, fd, off);
}

/*
 * Past vm.max_map_count (each held batch keeps a mapping), the parent
 * cannot map the segment a worker sent, or a worker cannot map a new one:
 * the error at that batch names vm.max_map_count, where it is read and
 * its value, and the batches held, and the batch is kept.  Once they are
 * released it comes, the limit still in force (it goes into a released
 * segment, mapped already), and the epoch goes on whole.
 */
static void
at_vm_max_map_count(int who)
{
  enum { LEN = 400, SAMPLE = 64, BS = 2, HOLD_MAX = 64 };
  char maps[100 * 24], want[64];
  unsigned char seen[LEN];
  fl_batch *held[HOLD_MAX], *b;
  size_t i, j, nheld = 0;
  unsigned long long seq;
  const char *msg;
  flt_case c;
  int rc;

  for (i = 0, maps[0] = '\0'; i < 100; i++)
    strcat(maps, "0-1000 r--p 0 0:0 0\n");
  flt_tree_put("/proc/sys/vm/max_map_count", "100\n");
  flt_tree_put("/proc/self/maps", maps);
  maps_full = mmap(NULL, sizeof(*maps_full), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(maps_full != MAP_FAILED);
  *maps_full = 0;
  maps_parent = getpid();
  memset(seen, 0, sizeof(seen));
  flt_case_init(&c, LEN, SAMPLE);
  c.opt.batch_size = BS;
  c.opt.num_workers = 2;
  c.opt.persistent_workers = 1;
  flt_case_start(&c);
  for (; nheld < 10; nheld++)
    assert_int_equal(fl_loader_next(c.l, &held[nheld]), 1);
  /* Batches mapped before it may still come. */
  *maps_full = who;
  while (nheld < HOLD_MAX && (rc = fl_loader_next(c.l, &b)) == 1)
    held[nheld++] = b;
  assert_int_equal(rc, FL_ENOMEM);
  assert_false(fl_error_is_final(rc));
  msg = fl_loader_error(c.l);
  print_message("# %s\n", msg);
  assert_int_equal(sscanf(msg, "batch %llu: ", &seq), 1);
  assert_int_equal(seq, nheld);
  assert_non_null(strstr(msg, who == MAPS_PARENT
                                  ? ": this process cannot map the segment "
                                    "worker "
                                  : ": worker "));
  assert_non_null(strstr(msg, "it has 100 memory mappings, at "
                              "vm.max_map_count "
                              "(/proc/sys/vm/max_map_count: 100)"));
  snprintf(want, sizeof(want), "while holding %zu batches", nheld);
  assert_non_null(strstr(msg, want));
  assert_non_null(strstr(msg, "The batch is kept"));
  /* Still holding them all: asked again, it fails the same way. */
  assert_int_equal(fl_loader_next(c.l, &b), FL_ENOMEM);
  for (i = 0; i < nheld; i++) {
    for (j = 0; j < fl_batch_count(held[i]); j++)
      seen[fl_batch_indices(held[i])[j]]++;
    fl_batch_release(held[i]);
  }
  assert_int_equal(fl_loader_next(c.l, &b), 1);
  assert_int_equal(fl_batch_seq(b), nheld);
  *maps_full = 0;
  do {
    for (j = 0; j < fl_batch_count(b); j++) {
      assert_true(flt_sample_ok((const char *)fl_batch_data(b) + j * SAMPLE,
                                SAMPLE, fl_batch_indices(b)[j]));
      seen[fl_batch_indices(b)[j]]++;
    }
    fl_batch_release(b);
  } while ((rc = fl_loader_next(c.l, &b)) == 1);
  assert_int_equal(rc, 0);
  for (i = 0; i < LEN; i++)
    assert_int_equal(seen[i], 1);
  munmap((void *)maps_full, sizeof(*maps_full));
  maps_full = NULL;
  flt_case_end(&c);
}

static void
parent_past_vm_max_map_count_names_it_and_keeps_the_batch(void **s)
{
  (void)s;
  at_vm_max_map_count(MAPS_PARENT);
}

static void
worker_past_vm_max_map_count_names_it_and_keeps_the_batch(void **s)
{
  (void)s;
  at_vm_max_map_count(MAPS_WORKER);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(segment_layout_is_page_multiple_with_aligned_data),
      cmocka_unit_test(segment_layout_rejects_absurd_sizes),
      cmocka_unit_test(unnamed_segment_never_appears_in_dev_shm),
      cmocka_unit_test(named_segment_name_is_gone_once_attached),
      cmocka_unit_test(attach_fd_rejects_segment_smaller_than_expected),
      cmocka_unit_test(fd_strategy_round_trip_across_fork),
      cmocka_unit_test(channel_reply_without_fd_gives_minus_one),
      cmocka_unit_test(channel_recv_on_empty_socket_is_eagain),
      cmocka_unit_test(channel_wrong_version_is_eproto_and_closes_fd),
      cmocka_unit_test(channel_recv_after_peer_closed_is_end_of_stream),
      cmocka_unit_test(fd_sent_to_receiver_at_fd_limit_gives_emfile),
      cmocka_unit_test(index_queue_is_created_without_a_name),
      cmocka_unit_test(index_queue_send_then_withdraw_round_trip),
      cmocka_unit_test_prestate(index_queue_send_then_withdraw_round_trip,
                                &socket_kind),
      cmocka_unit_test(index_queue_full_returns_eagain),
      cmocka_unit_test(
          index_queue_socket_full_returns_eagain_and_gives_all_back),
      cmocka_unit_test(index_queue_depth_is_capped_at_msg_max),
      cmocka_unit_test(child_receives_tasks_through_index_queue),
      cmocka_unit_test_prestate(child_receives_tasks_through_index_queue,
                                &socket_kind),
      cmocka_unit_test(
          index_queue_recv_returns_zero_promptly_when_parent_end_closes),
      cmocka_unit_test_prestate(
          index_queue_recv_returns_zero_promptly_when_parent_end_closes,
          &socket_kind),
      cmocka_unit_test(
          index_queue_socket_recv_returns_zero_when_its_sending_end_closes),
      cmocka_unit_test(
          index_queue_is_a_socket_pair_where_mq_open_is_enosys_or_eacces),
      cmocka_unit_test(fdtrack_child_drop_closes_tracked_fds_except_kept),
      cmocka_unit_test(fdtrack_del_untracks_fd),
      cmocka_unit_test_teardown(
          fd_strategy_holds_four_times_the_fds_left_in_batches_and_runs_again,
          flt_fd_limit_teardown),
      cmocka_unit_test_setup_teardown(
          parent_past_vm_max_map_count_names_it_and_keeps_the_batch,
          flt_tree_setup, flt_tree_teardown),
      cmocka_unit_test_setup_teardown(
          worker_past_vm_max_map_count_names_it_and_keeps_the_batch,
          flt_tree_setup, flt_tree_teardown),
  };

  page = (size_t)sysconf(_SC_PAGESIZE);
  flt_fd_limit_save();
  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
