/*
 * The parent's side of the reply channel: take each worker's replies,
 * attach new segments, and put finished batches into the reorder buffer,
 * or keep those that could not reach us for a refetch.  A worker's end is
 * worker.c's business.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "internal.h"

/*
 * At the open-file limit, with nothing left that the loader could let go
 * of (loader.c): under the fd strategy the held batches' fds went first,
 * then those of its idle segments.  Releasing batches then frees no fd,
 * but where segments are reused the batch can go into a released one,
 * which needs none.
 */
static int
at_fd_limit(fl_loader *l, const fl_batch *b)
{
  struct rlimit rl;

  getrlimit(RLIMIT_NOFILE, &rl);
  if (l->opt.sharing == FL_SHARE_FILE_SYSTEM)
    /* No fd is kept per segment: releasing batches frees none, and the
       other strategy would hold more. */
    return fl__loader_set_error(
        l, b->status,
        "cannot receive the segment of batch %llu: this process is at its "
        "open-file limit (RLIMIT_NOFILE %llu) while holding %zu batches and "
        "%zu fds; under FL_SHARE_FILE_SYSTEM the loader keeps no fd per "
        "segment, so the process's other fds fill the limit: raise `ulimit "
        "-n` or close files. The batch is kept: once fds are free, call "
        "fl_loader_next again",
        (unsigned long long)b->seq, (unsigned long long)rl.rlim_cur,
        l->stats.batches_held, l->stats.fds);
  return fl__loader_set_error(
      l, b->status,
      "cannot receive the segment of batch %llu: this process is at its "
      "open-file limit (RLIMIT_NOFILE %llu), and the loader has let go of "
      "every fd it could: none of the %zu batches held keeps one, and the "
      "%zu it holds are its event loop's, its workers' and those of batches "
      "on their way; the process's other fds fill the limit: raise `ulimit "
      "-n`, close files or use FL_SHARE_FILE_SYSTEM. The batch is kept: "
      "call fl_loader_next again once fds are free%s",
      (unsigned long long)b->seq, (unsigned long long)rl.rlim_cur,
      l->stats.batches_held, l->stats.fds,
      l->stats.batches_held > 0 && l->opt.reuse_segments
          ? ", or once batches are released: it goes into a released "
            "segment, which needs no new fd"
          : "");
}

/* The error for a batch kept for a refetch, with what the loader holds. */
int
fl__receive_lost_error(fl_loader *l, const fl_batch *b)
{
  const char *remedy;

  if (b->orphaned && b->status == FL_ENFILE)
    return fl__loader_set_error(
        l, b->status,
        "cannot receive the segment of batch %llu: the system is at its "
        "limit of open files (/proc/sys/fs/file-max), whatever this "
        "process's own: close files elsewhere or raise fs.file-max. The "
        "batch is kept: call fl_loader_next again",
        (unsigned long long)b->seq);
  if (b->orphaned && b->status == FL_EMFILE)
    return at_fd_limit(l, b);
  if (b->at_maps)
    return fl__loader_set_error(
        l, b->status,
        "batch %llu: %s, while holding %zu batches, each a mapping here and "
        "in the worker that made it; raise vm.max_map_count (sysctl, as "
        "root) or hold fewer batches. The batch is kept: release batches "
        "and call fl_loader_next again",
        (unsigned long long)b->seq, b->msg, l->stats.batches_held);
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
      h->count != r->count || h->count > l->layout.cap ||
      h->shift != b->shift) {
    snprintf(b->msg, sizeof(b->msg),
             "segment of batch %llu does not hold what worker %u announced",
             (unsigned long long)r->seq, r->worker);
    return FL_EPROTO;
  }
  return 0;
}

/*
 * This process cannot map the segment a worker made for b: out of memory,
 * or, as each segment is a mapping, at vm.max_map_count, which is then
 * named.  A stream's batch is lost (its samples were read): say how many.
 */
static void
map_failed(fl_loader *l, fl_batch *b, uint32_t count)
{
  char why[128], lost[48] = "";

  if (l->iterable)
    snprintf(lost, sizeof(lost),
             "%u samples of this worker's stream were lost: ", count);
  b->status = FL_ENOMEM;
  b->at_maps = fl__maps_full(why, sizeof(why));
  if (b->at_maps)
    snprintf(b->msg, sizeof(b->msg),
             "%sthis process cannot map the segment worker %u made: %s",
             lost, b->worker, why);
  else
    snprintf(b->msg, sizeof(b->msg),
             "%scannot map a %zu-byte segment from a worker: %s", lost,
             l->layout.size, fl_strerror(FL_ENOMEM));
}

static void
take(fl_loader *l, fl__worker *w, const struct fl__reply *r, int fd,
     int lost)
{
  fl_batch *b = NULL;
  size_t closed;
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
   * What was made or lent, the worker maps now.  A lent segment the task
   * failed on is mapped by none: the worker let go of its own mapping
   * before it took the grant, so a later task must lend it again, not
   * name a segment it no longer has.
   */
  if (w->id < 64 && (r->status == 0 || !b->lent))
    b->mapped_by |= 1ull << w->id;
  else if (w->id < 64)
    b->mapped_by &= ~(1ull << w->id);
  b->lent = 0;
  b->at_maps = (r->flags & FL__REPLY_MAPS) != 0;
  if (r->flags & FL__REPLY_FAULT)
    l->stats.faults_injected++;
  if (l->iterable && r->run == l->run && !(r->flags & FL__REPLY_END))
    w->answered += r->count;
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
  /*
   * A segment in place of the slot's: the old one goes here, as it went
   * in the worker, whether or not the new one reaches us; another worker
   * that maps the old one has the slot lent to it anew before it refills
   * it.
   */
  if ((r->flags & FL__REPLY_REPLACED) && b->seg.base != NULL) {
    fl__slot_unmap(l, b);
    b->mapped_by = w->id < 64 ? 1ull << w->id : 0;
  }
  if (lost || ((r->flags & FL__REPLY_FD) && fd < 0)) {
    rc = FL_EMFILE; /* its fd or name could not be had: the fd limit */
    if (fd >= 0)
      fl__close(fd);
  } else if (r->flags & (FL__REPLY_FD | FL__REPLY_NAMED)) {
    rc = fl__slot_map(l, b, fd);
    if (rc == 0)
      rc = fl__slot_class(l, b);
    if (rc == FL_ENOMEM)
      map_failed(l, b, r->count);
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
    /*
     * A stream cannot be read again: say what was lost, in its place.  At
     * once, not when the loss stands in the way, the fds of the batches
     * held go, so that the batches in flight after this one come.
     */
    closed = rc == FL_EMFILE ? fl__slot_close_held_fds(l) : 0;
    b->status = rc;
    snprintf(b->msg, sizeof(b->msg),
             "%u samples of this worker's stream were lost: this process "
             "hit its open-file limit holding %zu batches%s; raise `ulimit "
             "-n` or %s",
             r->count, l->stats.batches_held,
             closed > 0 ? " (it let go of their fds for the next ones)" : "",
             l->opt.sharing == FL_SHARE_FILE_SYSTEM
                 ? "close files (this strategy keeps no fd per batch)"
                 : "use FL_SHARE_FILE_SYSTEM");
  } else if (rc == FL_EMFILE || rc == FL_ENFILE ||
             (rc == FL_ENOMEM && !l->iterable)) {
    /* Into a segment of a batch released later, it needs no new fd or
       mapping. */
    fl__slot_keep(l, b, rc, 1);
    return;
  }
  if (b->seg.base == NULL && resource_error(r->status)) {
    fl__slot_keep(l, b, r->status, 0);
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

/*
 * Read one reply and take it, under the fork table's lock.  The emfile
 * fault takes a new segment from us where the fd limit does: under the
 * fd strategy it drops the fd, as the kernel does in recvmsg; under the
 * file-system strategy the name is left unopened, as shm_open fails.
 */
static int
receive_locked(fl_loader *l, unsigned wi, struct fl__reply *r, int *fd)
{
  int rc = fl__channel_recv(l->workers[wi].sock, r, fd);
  const fl_batch *b;

  if (rc == 1 && (*fd >= 0 || (r->flags & FL__REPLY_NAMED)) &&
      r->slot < l->nslots && (b = l->slots[r->slot]) != NULL &&
      fl__fault(&l->faults, FL__FAULT_EMFILE, l->epoch, r->seq,
                FL__ATTEMPT(b))) {
    if (*fd >= 0)
      fl__close(*fd);
    *fd = -1;
    l->stats.faults_injected++;
    rc = FL_EMFILE;
  }
  if (rc == 1 || rc == FL_EMFILE)
    take(l, &l->workers[wi], r, *fd, rc == FL_EMFILE);
  return rc;
}

/*
 * Take one reply of worker wi, if one waits: 1 when one was taken, 0 when
 * none waits, FL__RECEIVE_CLOSED when the worker's end closed, or a
 * negative code.
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
  l->hooks_held = 1;
  /*
   * A worker that died with grants unread leaves ECONNRESET, and a
   * SOCK_SEQPACKET read reports it before the replies the worker sent
   * first: it is reported once, and the next read returns them, then 0.
   */
  do
    rc = receive_locked(l, wi, &r, &fd);
  while (rc == -ECONNRESET);
  l->hooks_held = 0;
  fl__fdtrack_unlock();
  fl__slot_run_due_hooks(l);
  if (rc == FL_EAGAIN)
    return 0;
  if (rc == 0)
    return FL__RECEIVE_CLOSED;
  if (rc < 0 && rc != FL_EMFILE)
    return fl__loader_fail(l, rc, "cannot read worker %u's reply: %s", wi,
                           fl_strerror(rc));
  return l->fatal ? l->fatal : 1;
}
