/*
 * A worker's life, seen from the parent: fork it, watch its socket and its
 * pidfd, notice its end, and then forget it or, within the restart budget,
 * put a new process with the same id and seed in its place, which takes
 * over the tasks the dead one had not answered (exactly once: nothing it
 * had answered is asked again; a batch that killed it twice is not tried a
 * third time).  Stopping and killing workers lives here too.  Signals are
 * blocked across fork() so that no host handler runs in a half-made child;
 * the child lets go of everything of the parent's it must not hold,
 * ignores SIGINT (a Ctrl-C is the parent's to handle, and its death ends
 * the workers), then runs the worker loop and never returns.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

/* How long stopping workers may take before they are killed. */
#define FL__STOP_GRACE_MS 300

static int watch(fl_loader *l, unsigned wi);

static void
child(fl_loader *l, unsigned w, int sock, pid_t parent, int main_thread,
      const sigset_t *old)
{
  const void *keep_maps[2] = {l->order, l->notes};
  struct sigaction sa;
  int keep[2], sig;

  keep[0] = l->workers[w].queue.recv;
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

static int
spawn(fl_loader *l, unsigned wi)
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
  /* At the fd limit (the batches held took the fds, say), the loader lets
     go of those it can spare first. */
  for (;;) {
    rc = socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0
             ? 0
             : -errno;
    if (rc != FL_EMFILE || !fl__dispatch_spare_fd(l))
      break;
  }
  if (rc != 0) {
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
  fl__fdtrack_close(sv[1]);
  if (pid < 0) {
    fl__fdtrack_close(sv[0]);
    fl__fdtrack_unlock();
    return fl__loader_set_error(l, -saved, "cannot fork worker %u: %s", wi,
                                fl__strerror(saved));
  }
  /* The kernel's own notice of this child's exit, whoever reaps it; made
     and tracked under the lock, so no other loader's worker keeps it. */
  for (;;) {
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd >= 0 || errno != EMFILE || !fl__dispatch_spare_fd(l))
      break;
  }
  if (pidfd >= 0)
    fl__fdtrack_add(pidfd);
  fl__fdtrack_unlock();
  w->pid = pid;
  w->pidfd = pidfd;
  w->sock = sv[0];
  w->stopping = 0;
  w->sent = 0;
  w->last_seen = fl__now();
  fl__stats_fds(l, pidfd >= 0 ? 2 : 1);
  if ((rc = watch(l, wi)) != 0)
    return fl__loader_set_error(l, rc, "out of memory to watch worker %u",
                                wi);
  return 0;
}

/* The caller's hooks around the fork, outside the fd tracker's lock: one
   may wait for a lock of its runtime that a thread holding it releases
   only after a call into forkload. */
int
fl__worker_spawn(fl_loader *l, unsigned wi)
{
  int rc;

  if (l->opt.fork_before != NULL)
    l->opt.fork_before(l->opt.fork_arg);
  rc = spawn(l, wi);
  if (l->opt.fork_after != NULL)
    l->opt.fork_after(l->opt.fork_arg);
  return rc;
}

/*
 * Poll handles are allocated per process and freed by libuv once closed:
 * a respawn, run from the loop's own callback, needs new ones before the
 * old ones have finished closing.
 */
static void
free_handle(uv_handle_t *h)
{
  free(h);
}

static void
stop_poll(uv_poll_t **h)
{
  if (*h != NULL)
    uv_close((uv_handle_t *)*h, free_handle);
  *h = NULL;
}

static int
start_poll(fl_loader *l, fl__worker *w, uv_poll_t **h, int fd, int events,
           uv_poll_cb cb)
{
  *h = malloc(sizeof(**h));
  if (*h == NULL)
    return FL_ENOMEM;
  uv_poll_init(&l->loop, *h, fd);
  (*h)->data = w;
  uv_poll_start(*h, events, cb);
  return 0;
}

/* Stop reading a worker's replies and close the parent's end. */
void
fl__worker_close_sock(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];

  stop_poll(&w->sock_poll);
  if (w->sock >= 0) {
    fl__fdtrack_close(w->sock);
    fl__stats_fds(l, -1);
    w->sock = -1;
  }
}

/* Stop watching a worker altogether, and close its pidfd. */
static void
unwatch(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];

  stop_poll(&w->pid_poll);
  fl__worker_close_sock(l, wi);
  if (w->pidfd >= 0) {
    fl__fdtrack_close(w->pidfd);
    fl__stats_fds(l, -1);
    w->pidfd = -1;
  }
}

/*
 * The process behind worker wi is gone: no segment may be known as mapped
 * by wi any more, and the queue it shared must not hand its next process
 * old work.  The slots of the tasks it had not started (in its queue or
 * the backlog) are marked pending.
 */
static void
let_process_go(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];
  struct fl__task t;
  fl_batch *b;
  unsigned k;
  size_t i;

  unwatch(l, wi);
  while (fl__index_queue_withdraw(&w->queue, &t) == 1) {
    b = t.type == FL__TASK_FILL && t.slot < l->nslots ? l->slots[t.slot]
                                                     : NULL;
    if (b != NULL)
      b->pending = 1;
  }
  for (k = 0; k < w->backlog_len; k++) {
    t = w->backlog[(w->backlog_head + k) % w->backlog_cap];
    b = t.slot < l->nslots ? l->slots[t.slot] : NULL;
    if (b != NULL)
      b->pending = 1;
  }
  w->backlog_len = 0;
  w->pid = 0;
  w->sent = 0;
  for (i = 0; i < l->nslots; i++) {
    b = l->slots[i];
    if (b != NULL && wi < 64)
      b->mapped_by &= ~(1ull << wi);
  }
}

/*
 * Worker wi's idle segments: into the loader's pool (fd strategy: a later
 * worker is granted them, and takes no new page), or let go.
 */
static void
pool_free_segments(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];
  fl_batch *b;

  while ((b = w->free) != NULL) {
    w->free = b->next_free;
    fl__slot_park(l, b);
  }
}

/*
 * The worker process is gone (reaped by us or by the host) and will not be
 * replaced: forget it, and every segment only it could refill.  Batches
 * the consumer holds stay mapped until released.
 */
void
fl__worker_forget(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];
  size_t i;
  fl_batch *b;

  let_process_go(l, wi);
  pool_free_segments(l, wi);
  w->assigned = 0;
  for (i = 0; i < l->nslots; i++) {
    b = l->slots[i];
    if (b != NULL && b->worker == wi && b->state != FL__SLOT_HELD &&
        b->state != FL__SLOT_FREE)
      fl__slot_drop(l, b);
    else if (b != NULL)
      b->pending = 0;
  }
}

/* ---- a worker's end ---------------------------------------------- */

/*
 * What the worker's SIGBUS note says: the file it read when the mapping
 * ran out under it.  A segment's memory is reserved when it is made, so a
 * fault there is no full /dev/shm; a dataset's mapped file that shrank is
 * the usual cause.
 */
static void
bus_cause(const struct fl__bus_note *n, char *buf, size_t len)
{
  if (n->addr == 0)
    snprintf(buf, len, "; it left no note of where");
  else if (n->si_code <= 0)
    snprintf(buf, len, "; the signal was sent to it (kill or raise), not a "
             "fault of its own");
  else if (strstr(n->path, "memfd:forkload") != NULL ||
           strstr(n->path, "/dev/shm/forkload") != NULL)
    snprintf(buf, len, " while writing its batch's segment %.*s at 0x%llx: "
             "the segment's memory was reserved when it was made, so "
             "something cut the segment short", 120, n->path,
             (unsigned long long)n->addr);
  else if (n->path[0] != '\0')
    snprintf(buf, len, " while reading %.*s at 0x%llx, which it maps: the "
             "file shrank or was truncated while in use, and a mapped "
             "dataset's file must not change", 200, n->path,
             (unsigned long long)n->addr);
  else
    snprintf(buf, len, " at 0x%llx, in no mapped file",
             (unsigned long long)n->addr);
}

/* How worker wi (pid) ended, as a sentence; in brief, the signal or
   status alone. */
static void
describe(fl_loader *l, unsigned wi, pid_t pid, const siginfo_t *si, int rc,
         char *buf, size_t len, char *brief, size_t blen)
{
  const char *abbrev;
  char why[400] = "";

  if (rc != 0) {
    snprintf(buf, len, "worker %u (pid %ld) exited unexpectedly (its status "
             "was taken by another waitpid in this process)", wi, (long)pid);
    snprintf(brief, blen, "an unknown status");
  } else if (si->si_code == CLD_EXITED) {
    snprintf(buf, len, "worker %u (pid %ld) exited unexpectedly with status "
             "%d", wi, (long)pid, si->si_status);
    snprintf(brief, blen, "exit status %d", si->si_status);
  } else {
    if (si->si_status == SIGBUS)
      bus_cause(&l->notes[wi], why, sizeof(why));
    abbrev = fl__sigabbrev(si->si_status);
    snprintf(buf, len, "worker %u (pid %ld) was killed by signal %d (SIG%s: "
             "%s)%s", wi, (long)pid, si->si_status, abbrev ? abbrev : "?",
             strsignal(si->si_status), why);
    snprintf(brief, blen, "SIG%s", abbrev ? abbrev : "?");
  }
}

static int
by_order(const void *a, const void *b)
{
  const fl_batch *x = *(fl_batch *const *)a, *y = *(fl_batch *const *)b;

  return x->sent_order < y->sent_order ? -1 : x->sent_order > y->sent_order;
}

/*
 * The batch worker wi was filling when it died: the oldest task it had
 * taken from its queue and not answered (the others were still queued).
 */
static fl_batch *
blame(fl_loader *l, unsigned wi)
{
  fl_batch *b, *first = NULL;
  size_t i;

  for (i = 0; i < l->nslots; i++) {
    b = l->slots[i];
    if (b != NULL && b->worker == wi && b->state == FL__SLOT_TASKED &&
        !b->pending && (first == NULL || b->sent_order < first->sent_order))
      first = b;
  }
  return first;
}

/* How a death's sentence names the batch its worker was filling. */
static void
name_batch(const fl_batch *b, char *what, size_t len)
{
  if (b != NULL)
    snprintf(what, len, " while filling batch %llu",
             (unsigned long long)b->seq);
}

/*
 * A batch whose filling killed its worker twice is not tried again: its
 * place holds a dataset error, as any bad sample's, naming its first
 * samples and how the worker died.
 */
static void
poison(fl_loader *l, fl_batch *b, const char *how)
{
  char first[96] = "";
  size_t off, count, i, at = 0, idx[4];

  if (!l->iterable) {
    fl__sampler_span(&l->sampler, b->seq, &off, &count);
    fl__sampler_indices(&l->sampler, l->order, off, count < 4 ? count : 4,
                        idx);
    for (i = 0; i < count && i < 4 && at < sizeof(first); i++)
      at += (size_t)snprintf(first + at, sizeof(first) - at, "%s%zu",
                             i ? ", " : "", idx[i]);
    if (count > 4 && at < sizeof(first))
      snprintf(first + at, sizeof(first) - at, ", ...");
  }
  b->status = FL_EDATASET;
  b->count = 0;
  snprintf(b->msg, sizeof(b->msg),
           "filling this batch%s%s%s killed its worker twice (%s); it is "
           "not tried again", first[0] ? " (samples " : "", first,
           first[0] ? ")" : "", how);
  b->state = FL__SLOT_READY;
  fl__reorder_put(&l->reorder, b);
}

/*
 * Put a new process in worker wi's place: the tasks the dead one had not
 * answered go to it, in the order they were given, into segments the
 * parent grants it (fd strategy) or it makes anew; the batch it was filling
 * is blamed, and poisoned the second time.  During an epoch cut short, its
 * tasks are stale and only taken back.
 */
static int
respawn(fl_loader *l, unsigned wi, const char *how, const char *brief)
{
  fl__worker *w = &l->workers[wi];
  fl_batch *b, *culprit, **todo = NULL;
  size_t i, n = 0;
  char msg[FL__ERRMSG_MAX], what[48] = "";
  int rc;

  let_process_go(l, wi);
  culprit = blame(l, wi);
  if (culprit != NULL &&
      (fl__fault(&l->faults, FL__FAULT_KILL, l->epoch, culprit->seq,
                 FL__ATTEMPT(culprit)) ||
       fl__fault(&l->faults, FL__FAULT_EXIT, l->epoch, culprit->seq,
                 FL__ATTEMPT(culprit))))
    l->stats.faults_injected++;
  /* Said now: the loop below may free the culprit's slot. */
  name_batch(culprit, what, sizeof(what));
  pool_free_segments(l, wi);
  todo = malloc((l->nslots ? l->nslots : 1) * sizeof(*todo));
  if (todo == NULL)
    return fl__loader_fail(l, FL_ENOMEM, "out of memory to respawn worker "
                           "%u", wi);
  for (i = 0; i < l->nslots; i++) {
    b = l->slots[i];
    if (b == NULL || b->worker != wi || b->state != FL__SLOT_TASKED)
      continue;
    fl__slot_unname_grown(l, b);
    b->pending = 0;
    if (!l->in_epoch) {
      w->assigned--;
      fl__slot_recycle(l, b);
    } else if (b == culprit && ++b->kills >= 2) {
      poison(l, b, brief);
    } else {
      todo[n++] = b;
    }
  }
  qsort(todo, n, sizeof(*todo), by_order);
  l->stats.worker_restarts++;
  if (l->iterable)
    w->skip = w->answered;
  rc = fl__worker_spawn(l, wi);
  for (i = 0; rc == 0 && i < n; i++)
    rc = fl__dispatch_resend(l, w, todo[i]);
  free(todo);
  if (rc != 0) {
    snprintf(msg, sizeof(msg), "%s", l->err);
    return fl__loader_fail(l, rc, "%s, and it could not be respawned: %s",
                           how, msg);
  }
  /* Formatted by fl__log itself, which shortens a long sentence but
     keeps its end. */
  fl__log(l, "%s%s; respawned as pid %ld, %llu restart(s) left", how, what,
          (long)w->pid, (unsigned long long)(l->opt.max_worker_restarts -
                                             l->stats.worker_restarts));
  return 0;
}

/*
 * The worker's process has ended (flags 0: wait for it to be reapable).
 * Unless we asked it to stop, it is respawned while the budget lasts, or
 * the loader cannot go on.
 */
static void
exited(fl_loader *l, unsigned wi, int flags)
{
  fl__worker *w = &l->workers[wi];
  char how[FL__ERRMSG_MAX / 2], brief[32], what[48] = "";
  const fl_batch *culprit;
  siginfo_t si;
  pid_t pid = w->pid;
  int rc;

  memset(&si, 0, sizeof(si));
  do
    rc = waitid(P_PID, (id_t)pid, &si, WEXITED | flags);
  while (rc < 0 && errno == EINTR);
  if (rc == 0 && si.si_pid == 0)
    return; /* not yet reapable */
  if (w->stopping) {
    fl__worker_forget(l, wi);
    return;
  }
  describe(l, wi, pid, &si, rc, how, sizeof(how), brief, sizeof(brief));
  if (l->stats.worker_restarts < l->opt.max_worker_restarts && !l->fatal) {
    respawn(l, wi, how, brief);
    return;
  }
  culprit = blame(l, wi);
  name_batch(culprit, what, sizeof(what));
  if (l->opt.max_worker_restarts > 0)
    fl__loader_fail(l, FL_EWORKER, "%s%s; the budget of %u worker restarts "
                    "is spent", how, what, l->opt.max_worker_restarts);
  else
    fl__loader_fail(l, FL_EWORKER, "%s%s", how, what);
  fl__worker_forget(l, wi);
}

/*
 * Read one reply of worker wi: 1 when one was taken, 0 when none waits, or
 * a negative code.  A socket that closed means the worker is exiting: its
 * pidfd will say how; without one (kernels before 5.3), wait here.
 */
int
fl__worker_read(fl_loader *l, unsigned wi)
{
  int rc = fl__receive_one(l, wi);

  if (rc == FL__RECEIVE_CLOSED) {
    fl__worker_close_sock(l, wi);
    if (l->workers[wi].pidfd < 0 && l->workers[wi].pid != 0)
      exited(l, wi, 0);
    return l->fatal;
  }
  if (rc == 1)
    l->workers[wi].last_seen = fl__now();
  return rc;
}

static void
drain(fl_loader *l, unsigned wi)
{
  while (fl__worker_read(l, wi) == 1)
    ;
}

static void
on_sock(uv_poll_t *h, int status, int events)
{
  fl__worker *w = h->data;

  (void)status;
  (void)events;
  drain(w->loader, w->id);
}

static void
on_exit_notice(uv_poll_t *h, int status, int events)
{
  fl__worker *w = h->data;

  (void)status;
  (void)events;
  /* Replies it sent before it died are still good. */
  drain(w->loader, w->id);
  if (w->pid != 0)
    exited(w->loader, w->id, WNOHANG);
}

static int
watch(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];
  int rc;

  w->loader = l;
  rc = start_poll(l, w, &w->sock_poll, w->sock, UV_READABLE | UV_DISCONNECT,
                  on_sock);
  if (rc == 0 && w->pidfd >= 0)
    rc = start_poll(l, w, &w->pid_poll, w->pidfd, UV_READABLE,
                    on_exit_notice);
  return rc;
}

/*
 * With restarts to spare, a worker that owes batches and has said nothing
 * for timeout_ms is taken as hung: it is killed, and its end respawns it.
 * Returns how many were killed.
 */
int
fl__workers_kill_hung(fl_loader *l)
{
  double now = fl__now(), limit = l->opt.timeout_ms / 1e3;
  unsigned i, n = 0;
  fl__worker *w;

  if (l->stats.worker_restarts >= l->opt.max_worker_restarts)
    return 0;
  for (i = 0; i < l->opt.num_workers; i++) {
    w = &l->workers[i];
    if (w->pid != 0 && w->sent > 0 && now - w->last_seen >= limit &&
        kill(w->pid, SIGKILL) == 0)
      n++;
  }
  return (int)n;
}

/*
 * In a child of the loader's maker: the workers are the maker's children,
 * their queues and sockets shared with it.  Close this copy's fds alone;
 * no stop, no signal, no reaping, no task taken back.
 */
static void
let_go(fl_loader *l)
{
  unsigned i;

  for (i = 0; i < l->opt.num_workers; i++) {
    unwatch(l, i);
    l->workers[i].pid = 0;
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
  double t0, ms;
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
    fl__index_queue_send(&w->queue, &stop);
    stop_poll(&w->pid_poll);
    fl__worker_close_sock(l, i);
  }
  t0 = fl__now();
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
    ms = (fl__now() - t0) * 1e3;
    if (left == 0 || ms >= FL__STOP_GRACE_MS)
      break;
    /* Without pidfds (old kernels), look again in a few milliseconds. */
    poll(p, n, n == left ? (int)(FL__STOP_GRACE_MS - ms) + 1 : 5);
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
