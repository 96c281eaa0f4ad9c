/*
 * The parent's side of the reply channel, run from its libuv loop: take
 * each worker's replies, attach new segments, put finished batches into the
 * reorder buffer, and notice a worker's exit from its pidfd.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "internal.h"

static void on_sock(uv_poll_t *h, int status, int events);
static void on_exit_notice(uv_poll_t *h, int status, int events);
static void sock_closed(fl_loader *l, unsigned wi);

void
fl__receive_start(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];

  w->loader = l;
  uv_poll_init(&l->loop, &w->sock_poll, w->sock);
  w->sock_poll.data = w;
  uv_poll_start(&w->sock_poll, UV_READABLE | UV_DISCONNECT, on_sock);
  w->sock_polling = 1;
  if (w->pidfd >= 0) {
    uv_poll_init(&l->loop, &w->pid_poll, w->pidfd);
    w->pid_poll.data = w;
    uv_poll_start(&w->pid_poll, UV_READABLE, on_exit_notice);
    w->pid_polling = 1;
  }
}

/*
 * A batch that could not reach us for want of fds or shared memory is not
 * lost: fl_loader_next reports why (fl__receive_lost_error) and asks for it
 * again on its next call, when the consumer may have released batches.
 */
static void
keep_for_refetch(fl_loader *l, fl_batch *b, int code, int orphaned)
{
  char name[FL__SEGMENT_NAME_MAX];

  /* A name the worker made but we could not open would linger. */
  if (l->opt.sharing == FL_SHARE_FILE_SYSTEM && orphaned) {
    fl__segment_name(name, sizeof(name), l->owner, l->token, b->serial);
    shm_unlink(name);
  }
  b->status = code;
  b->orphaned = orphaned;
  b->state = FL__SLOT_REFETCH;
  l->nrefetch++;
}

/* The error for a batch kept for a refetch, with what the loader holds. */
int
fl__receive_lost_error(fl_loader *l, const fl_batch *b)
{
  struct rlimit rl;
  const char *remedy;

  if (b->orphaned) {
    getrlimit(RLIMIT_NOFILE, &rl);
    return fl__loader_set_error(
        l, b->status,
        "cannot receive the segment of batch %llu: this process is at its "
        "open-file limit (RLIMIT_NOFILE %llu) while holding %zu batches and "
        "%zu fds; raise `ulimit -n` or use FL_SHARE_FILE_SYSTEM. The batch "
        "is kept: release batches and call fl_loader_next again",
        (unsigned long long)b->seq, (unsigned long long)rl.rlim_cur,
        l->stats.batches_held, l->stats.fds);
  }
  if (b->status != FL_ENOSPC)
    remedy = "";
  else if (l->opt.sharing == FL_SHARE_FILE_SYSTEM)
    remedy = "; enlarge /dev/shm (docker --shm-size) or use "
             "FL_SHARE_FILE_DESCRIPTOR";
  else if (l->opt.fd_in_dev_shm)
    remedy = "; enlarge /dev/shm (docker --shm-size) or turn "
             "fd_in_dev_shm off: memfd segments are not charged to it";
  else
    remedy = "";
  return fl__loader_set_error(
      l, b->status,
      "batch %llu (worker %u): %s%s; this loader holds %zu bytes in %zu "
      "segments, %zu batches handed out. The batch is kept: release "
      "batches and call fl_loader_next again",
      (unsigned long long)b->seq, b->worker, b->msg, remedy,
      l->stats.bytes_mapped, l->stats.segments, l->stats.batches_held);
}

/* A worker could not make a segment: out of shm, fds or memory. */
static int
resource_error(int status)
{
  return status == FL_ENOSPC || status == FL_EMFILE || status == FL_ENFILE ||
         status == FL_ENOMEM;
}

/* The segment's header must describe the batch the reply announced. */
static int
check_header(fl_loader *l, fl_batch *b, const struct fl__reply *r)
{
  const struct fl__segment_header *h = b->seg.base;

  if (h->magic != FL__SEGMENT_MAGIC || h->seq != r->seq ||
      h->count != r->count || h->count > l->layout.cap) {
    snprintf(b->msg, sizeof(b->msg),
             "segment of batch %llu does not hold what worker %u announced",
             (unsigned long long)r->seq, r->worker);
    return FL_EPROTO;
  }
  return 0;
}

static void
take(fl_loader *l, fl__worker *w, const struct fl__reply *r, int fd,
     int truncated)
{
  fl_batch *b = NULL;
  int rc;

  if (r->slot < l->nslots)
    b = l->slots[r->slot];
  if (b == NULL || b->worker != w->id || b->state != FL__SLOT_TASKED ||
      r->type != FL__REPLY_BATCH) {
    if (fd >= 0)
      fl__close(fd);
    fl__loader_fail(l, FL_EPROTO,
                    "worker %u sent a reply for a task it was not given "
                    "(slot %u, batch %llu)",
                    w->id, r->slot, (unsigned long long)r->seq);
    return;
  }
  w->sent--;
  fl__dispatch_flush(l, w->id);
  /*
   * What was made or lent, the worker maps now; a lent segment the task
   * failed on may not be mapped, so it is lent again when next used.
   */
  if (r->status == 0 || !b->lent) {
    b->lent = 0;
    if (w->id < 64)
      b->mapped_by |= 1ull << w->id;
  }
  /* The name the worker made, which a squatter may have made it change. */
  if (r->flags & (FL__REPLY_NAMED | FL__REPLY_FD))
    b->serial = r->serial;
  b->seq = r->seq;
  b->count = r->count;
  b->status = r->status;
  b->msg[0] = '\0';
  if (r->status != 0)
    memcpy(b->msg, r->msg, sizeof(b->msg));
  rc = 0;
  if (truncated || ((r->flags & FL__REPLY_FD) && fd < 0)) {
    rc = FL_EMFILE; /* the kernel dropped the fd: we are at our limit */
    if (fd >= 0)
      fl__close(fd);
  } else if (r->flags & (FL__REPLY_FD | FL__REPLY_NAMED)) {
    rc = fl__slot_map(l, b, fd);
  } else if (fd >= 0) {
    fl__close(fd);
  }
  if (r->run != l->run || !l->in_epoch) {
    /* Left over from an epoch the consumer cut short. */
    w->assigned--;
    fl__slot_recycle(l, b);
    return;
  }
  if ((rc == FL_EMFILE || rc == FL_ENFILE) && l->iterable) {
    /* A stream cannot be read again: say what was lost, in its place. */
    b->status = rc;
    snprintf(b->msg, sizeof(b->msg),
             "%u samples of this worker's stream were lost: this process "
             "hit its open-file limit holding %zu batches; raise `ulimit "
             "-n` or use FL_SHARE_FILE_SYSTEM",
             r->count, l->stats.batches_held);
  } else if (rc == FL_EMFILE || rc == FL_ENFILE) {
    keep_for_refetch(l, b, rc, 1);
    return;
  }
  if (b->seg.base == NULL && resource_error(r->status)) {
    keep_for_refetch(l, b, r->status, 0);
    return;
  }
  if (rc != 0 && b->status == 0) {
    b->status = rc;
    snprintf(b->msg, sizeof(b->msg),
             "cannot map a %zu-byte segment from a worker: %s", l->layout.size,
             fl_strerror(rc));
  }
  /* An iterable dataset's worker has no more to give this epoch. */
  b->end = (r->flags & FL__REPLY_END) != 0;
  if (b->end && !w->ended) {
    w->ended = 1;
    l->active--;
  }
  if (b->seg.base != NULL && b->status == 0 && !b->end)
    b->status = check_header(l, b, r);
  if (b->seg.base != NULL)
    fl__slot_view(l, b);
  b->state = FL__SLOT_READY;
  fl__reorder_put(&l->reorder, b);
}

/* Read one reply and take it, under the fork table's lock. */
static int
receive_locked(fl_loader *l, unsigned wi, struct fl__reply *r, int *fd)
{
  int rc = fl__channel_recv(l->workers[wi].sock, r, fd);

  if (rc == 1 || rc == FL_EMFILE)
    take(l, &l->workers[wi], r, *fd, rc == FL_EMFILE);
  return rc;
}

/*
 * Take one reply of worker wi, if one waits: 1 when one was taken, 0 when
 * none waits (or the worker's end closed), or a negative code.
 */
int
fl__receive_one(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];
  struct fl__reply r;
  int fd, rc;

  if (w->sock < 0)
    return 0;
  /*
   * From the fd the kernel hands us to its mapping marked MADV_DONTFORK
   * and both in the fork table, no worker of another loader may be forked
   * in another thread: it would keep this segment alive.
   */
  fl__fdtrack_lock();
  rc = receive_locked(l, wi, &r, &fd);
  fl__fdtrack_unlock();
  if (rc == FL_EAGAIN)
    return 0;
  /* A worker that died with grants unread resets instead of closing. */
  if (rc == 0 || rc == -ECONNRESET) {
    sock_closed(l, wi);
    return l->fatal; /* without a pidfd, the close itself tells the death */
  }
  if (rc < 0 && rc != FL_EMFILE)
    return fl__loader_fail(l, rc, "cannot read worker %u's reply: %s", wi,
                           fl_strerror(rc));
  return l->fatal ? l->fatal : 1;
}

int
fl__receive_drain(fl_loader *l, unsigned wi)
{
  int rc;

  while ((rc = fl__receive_one(l, wi)) == 1)
    ;
  return rc;
}

static void
on_sock(uv_poll_t *h, int status, int events)
{
  fl__worker *w = h->data;

  (void)status;
  (void)events;
  fl__receive_drain(w->loader, w->id);
}

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

/* A worker ended without being asked to: the loader cannot go on. */
static void
report_exit(fl_loader *l, unsigned wi, pid_t pid, const siginfo_t *si)
{
  const char *abbrev;
  char why[400] = "";

  if (si->si_code == CLD_EXITED) {
    fl__loader_fail(l, FL_EWORKER,
                    "worker %u (pid %ld) exited unexpectedly with status %d",
                    wi, (long)pid, si->si_status);
    return;
  }
  if (si->si_status == SIGBUS)
    bus_cause(&l->notes[wi], why, sizeof(why));
  abbrev = sigabbrev_np(si->si_status);
  fl__loader_fail(l, FL_EWORKER,
                  "worker %u (pid %ld) was killed by signal %d (SIG%s: %s)%s",
                  wi, (long)pid, si->si_status, abbrev ? abbrev : "?",
                  strsignal(si->si_status), why);
}

/*
 * The worker's process has ended (flags 0: wait for it to be reapable).
 * Unless we asked it to stop, the loader cannot go on.
 */
static void
exited(fl_loader *l, unsigned wi, int flags)
{
  fl__worker *w = &l->workers[wi];
  siginfo_t si;
  pid_t pid = w->pid;
  int rc;

  memset(&si, 0, sizeof(si));
  do
    rc = waitid(P_PID, (id_t)pid, &si, WEXITED | flags);
  while (rc < 0 && errno == EINTR);
  if (rc == 0 && si.si_pid == 0)
    return; /* not yet reapable */
  if (!w->stopping) {
    if (rc == 0)
      report_exit(l, wi, pid, &si);
    else
      fl__loader_fail(l, FL_EWORKER,
                      "worker %u (pid %ld) exited unexpectedly (its status "
                      "was taken by another waitpid in this process)",
                      wi, (long)pid);
  }
  fl__worker_forget(l, wi);
}

/*
 * End of stream: the worker is exiting.  Its pidfd will say how; without
 * one (kernels before 5.3), wait for the exit here.
 */
static void
sock_closed(fl_loader *l, unsigned wi)
{
  fl__worker_close_sock(l, wi);
  if (l->workers[wi].pidfd < 0)
    exited(l, wi, 0);
}

static void
on_exit_notice(uv_poll_t *h, int status, int events)
{
  fl__worker *w = h->data;

  (void)status;
  (void)events;
  /* Replies it sent before it died are still good. */
  fl__receive_drain(w->loader, w->id);
  if (w->pid != 0)
    exited(w->loader, w->id, WNOHANG);
}
