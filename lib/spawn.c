/*
 * Starting and stopping worker processes.  Signals are blocked across
 * fork() so that no host handler runs in a half-made child; the child lets
 * go of everything of the parent's it must not hold, ignores SIGINT (a
 * Ctrl-C is the parent's to handle, and its death ends the workers), then
 * runs the worker loop and never returns.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* How long stopping workers may take before they are killed. */
#define FL__STOP_GRACE_MS 300

static void
child(fl_loader *l, unsigned w, int sock, pid_t parent, int main_thread,
      const sigset_t *old)
{
  const void *keep_maps[2] = {l->order, l->notes};
  struct sigaction sa;
  int keep[2], sig;

  keep[0] = l->workers[w].mq;
  keep[1] = sock;
  fl__fdtrack_child_drop(keep, 2, keep_maps, 2);
  /*
   * The host's handlers are not the worker's: a crash handler that
   * longjmps or reports for the parent must not run here.  worker_init
   * may install its own.  What the host ignores stays ignored, as across
   * exec: a program run under nohup keeps its workers on SIGHUP.
   */
  for (sig = 1; sig < NSIG; sig++) {
    if (sig != SIGKILL && sig != SIGSTOP &&
        sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_IGN)
      signal(sig, SIG_DFL);
  }
  signal(SIGINT, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  /* A segment past RLIMIT_FSIZE is then EFBIG, an error at its batch,
     rather than a worker killed by SIGXFSZ. */
  signal(SIGXFSZ, SIG_IGN);
  fl__bus_watch(&l->notes[w]);
  /*
   * PR_SET_PDEATHSIG fires when the forking *thread* exits, so it is only
   * safe when the main thread forked; otherwise the worker loop's checks
   * of its socket and of getppid() notice the parent's end.
   */
  if (main_thread)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    _exit(0);
  pthread_sigmask(SIG_SETMASK, old, NULL);
  fl__worker_main(l, w, sock);
}

int
fl__worker_spawn(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];
  sigset_t all, old;
  pid_t pid, parent = getpid();
  int main_thread = (pid_t)syscall(SYS_gettid) == parent;
  int sv[2] = {-1, -1};
  uint64_t threads = 0;
  int rc, pidfd, saved;

  /* Alone, no other thread can hold a lock of libc's at the fork. */
  l->forked_alone = fl__proc_value("/proc/self/status", "Threads",
                                   &threads) == 0 && threads == 1;
  fl__fdtrack_lock();
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    rc = -errno;
    fl__fdtrack_unlock();
    return fl__loader_set_error(l, rc,
                                "cannot create worker %u's socket: %s%s", wi,
                                fl__strerror(-rc),
                                rc == FL_EMFILE ? " (raise ulimit -n)" : "");
  }
  fl__fdtrack_add(sv[0]);
  fl__fdtrack_add(sv[1]);
  memset(&l->notes[wi], 0, sizeof(l->notes[wi]));
  w->gen++;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid = fork();
  if (pid == 0)
    child(l, wi, sv[1], parent, main_thread, &old);
  saved = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  fl__fdtrack_del(sv[1]);
  fl__close(sv[1]);
  if (pid < 0) {
    fl__fdtrack_del(sv[0]);
    fl__close(sv[0]);
    fl__fdtrack_unlock();
    return fl__loader_set_error(l, -saved, "cannot fork worker %u: %s", wi,
                                fl__strerror(saved));
  }
  /* The kernel's own notice of this child's exit, whoever reaps it; made
     and tracked under the lock, so no other loader's worker keeps it. */
  pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd >= 0)
    fl__fdtrack_add(pidfd);
  fl__fdtrack_unlock();
  w->pid = pid;
  w->pidfd = pidfd;
  w->sock = sv[0];
  w->stopping = 0;
  w->sent = w->assigned = 0;
  fl__stats_fds(l, pidfd >= 0 ? 2 : 1);
  fl__receive_start(l, wi);
  return 0;
}

/* Stop reading a worker's replies and close the parent's end. */
void
fl__worker_close_sock(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];

  if (w->sock_polling)
    uv_close((uv_handle_t *)&w->sock_poll, NULL);
  w->sock_polling = 0;
  if (w->sock >= 0) {
    fl__fdtrack_close(w->sock);
    fl__stats_fds(l, -1);
    w->sock = -1;
  }
}

/* Stop watching a worker altogether. */
void
fl__worker_unwatch(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];

  if (w->pid_polling)
    uv_close((uv_handle_t *)&w->pid_poll, NULL);
  w->pid_polling = 0;
  fl__worker_close_sock(l, wi);
}

/*
 * The worker process is gone (reaped by us or by the host): forget it and
 * every segment only it could refill.  Batches the consumer holds stay
 * mapped until released.
 */
void
fl__worker_forget(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];
  struct fl__task t;
  size_t i;
  fl_batch *b;

  fl__worker_unwatch(l, wi);
  /* The queue outlives the process: the next one must not inherit work. */
  while (fl__index_queue_withdraw(w->mq, &t) == 1)
    ;
  if (w->pidfd >= 0) {
    fl__fdtrack_close(w->pidfd);
    fl__stats_fds(l, -1);
    w->pidfd = -1;
  }
  w->pid = 0;
  w->free = NULL;
  w->sent = w->assigned = 0;
  w->backlog_len = 0;
  for (i = 0; i < l->nslots; i++) {
    b = l->slots[i];
    if (b != NULL && b->worker == wi && b->state != FL__SLOT_HELD)
      fl__slot_drop(l, b);
  }
}

/*
 * In a child of the loader's maker: the workers are the maker's children,
 * their queues and sockets shared with it.  Close this copy's fds alone;
 * no stop, no signal, no reaping, no task taken back.
 */
static void
let_go(fl_loader *l)
{
  fl__worker *w;
  unsigned i;

  for (i = 0; i < l->opt.num_workers; i++) {
    w = &l->workers[i];
    fl__worker_unwatch(l, i);
    if (w->pidfd >= 0)
      fl__fdtrack_close(w->pidfd);
    w->pidfd = -1;
    w->pid = 0;
  }
}

static int
reap(pid_t pid)
{
  pid_t r;

  do
    r = waitpid(pid, NULL, WNOHANG);
  while (r < 0 && errno == EINTR);
  return r == pid || (r < 0 && errno == ECHILD);
}

static long
ms_since(const struct timespec *t0)
{
  struct timespec t;

  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/*
 * Stop every worker: ask (a stop task, and the socket hangs up), give them
 * a short grace together, then SIGKILL whatever is left (a worker stuck in
 * the dataset's get) and reap it.  Never blocks for long.
 */
void
fl__workers_stop(fl_loader *l)
{
  struct fl__task stop = {0};
  struct pollfd p[16];
  struct timespec t0;
  unsigned i, n, left;
  fl__worker *w;

  if (l->foreign) {
    let_go(l);
    return;
  }
  stop.version = FL__PROTOCOL_VERSION;
  stop.type = FL__TASK_STOP;
  for (i = 0; i < l->opt.num_workers; i++) {
    w = &l->workers[i];
    if (w->pid == 0)
      continue;
    w->stopping = 1;
    fl__index_queue_send(w->mq, &stop);
    fl__worker_unwatch(l, i);
  }
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    left = n = 0;
    for (i = 0; i < l->opt.num_workers; i++) {
      w = &l->workers[i];
      if (w->pid == 0)
        continue;
      if (reap(w->pid)) {
        fl__worker_forget(l, i);
        continue;
      }
      left++;
      if (w->pidfd >= 0 && n < 16) {
        p[n].fd = w->pidfd;
        p[n].events = POLLIN;
        n++;
      }
    }
    if (left == 0 || ms_since(&t0) >= FL__STOP_GRACE_MS)
      break;
    /* Without pidfds (old kernels), look again in a few milliseconds. */
    poll(p, n, n == left ? (int)(FL__STOP_GRACE_MS - ms_since(&t0)) : 5);
  }
  for (i = 0; i < l->opt.num_workers; i++) {
    w = &l->workers[i];
    if (w->pid == 0)
      continue;
    kill(w->pid, SIGKILL);
    while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
      ;
    fl__worker_forget(l, i);
  }
  /* Let libuv finish closing the handles before they are reused. */
  uv_run(&l->loop, UV_RUN_NOWAIT);
}
