/*
 * The worker's life: set itself up once (seed, worker_init), then take
 * tasks from its index queue, fill each batch into the segment the task
 * names, and reply, until the parent says stop or goes away.  Every way
 * out is _exit: a worker never runs the host program's atexit handlers.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

struct slot_table {
  void **base; /* this worker's mapping of each slot, by slot index */
  size_t cap;
};

/*
 * Grown with mmap, not malloc: a worker forked while another thread of the
 * host held an allocator lock would wait on it forever (glibc's malloc
 * resets its locks in the child; others, ASan's among them, do not).
 */
static void **
slot_at(struct slot_table *t, uint32_t slot)
{
  size_t cap;
  void *grown;

  if (slot >= t->cap) {
    cap = t->cap ? t->cap
                 : (size_t)sysconf(_SC_PAGESIZE) / sizeof(*t->base);
    while (cap <= slot)
      cap *= 2;
    if (t->base == NULL)
      grown = mmap(NULL, cap * sizeof(*t->base), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    else
      grown = mremap(t->base, t->cap * sizeof(*t->base),
                     cap * sizeof(*t->base), MREMAP_MAYMOVE);
    if (grown == MAP_FAILED)
      return NULL;
    t->base = grown; /* new pages read as zero: no slot mapped */
    t->cap = cap;
  }
  return &t->base[slot];
}

static void
setup(fl_loader *l, unsigned w)
{
  fl_worker_info info;

  info.id = w;
  info.num_workers = l->opt.num_workers;
  info.seed = l->base_seed + w;
  info.dataset = &l->ds;
  info.rank = l->opt.rank;
  info.world_size = l->opt.world_size;
  info.epoch = l->epoch;
  fl__worker_info_set(&info);
  /*
   * Without this every worker would draw the same rand() stream.  srandom
   * takes a lock of glibc's that another thread of the host may have held
   * at the fork, forever locked here then: only a worker forked from a
   * one-thread process seeds it.  srand48 takes none.
   */
  if (l->forked_alone)
    srandom((unsigned)(info.seed ^ (info.seed >> 32)));
  srand48((long)info.seed);
  if (l->opt.worker_init != NULL)
    l->opt.worker_init(w, l->opt.worker_init_arg);
}

static void
slot_drop(struct slot_table *t, uint32_t slot, size_t size)
{
  if (slot < t->cap && t->base[slot] != NULL) {
    munmap(t->base[slot], size);
    t->base[slot] = NULL;
  }
}

/* Map the segment another worker made, lent to us for this task. */
static int
take_lent(fl_loader *l, int sock, void **base, const struct fl__task *t,
          char *err, size_t errlen)
{
  fl__segment seg = {NULL, 0, -1};
  int fd, rc;

  fd = fl__channel_take_grant(sock, t->serial);
  if (fd < 0) {
    snprintf(err, errlen, "cannot take the segment lent for batch %llu: %s",
             (unsigned long long)t->seq, fl_strerror(fd));
    return fd;
  }
  rc = fl__segment_attach_lent(&seg, fd, l->layout.size);
  fl__close(fd);
  if (rc != 0) {
    snprintf(err, errlen, "cannot map a lent segment: %s", fl_strerror(rc));
    return rc;
  }
  *base = seg.base;
  return 0;
}

/*
 * Fill one task; returns the reply status.  *made says whether a segment
 * the task asked for now exists, *fd is its fd under the fd strategy,
 * *count the samples written, *end that an iterable stream is over,
 * *faulted that the faults option struck.
 */
static int
fill(fl_loader *l, unsigned w, int sock, struct slot_table *slots,
     struct fl__stream *st, const struct fl__task *t, int *fd, int *made,
     uint64_t *serial, size_t *count, int *end, int *faulted, char *err,
     size_t errlen)
{
  char name[FL__SEGMENT_NAME_MAX];
  fl__segment seg = {NULL, 0, -1};
  void **base = slot_at(slots, t->slot);
  int named = l->opt.sharing == FL_SHARE_FILE_SYSTEM;
  int rc;

  *fd = -1;
  *made = 0;
  *count = 0;
  *end = 0;
  if (base == NULL) {
    strncpy(err, "out of memory in the worker", errlen - 1);
    return FL_ENOMEM;
  }
  if (t->flags & FL__TASK_GRANTED) {
    slot_drop(slots, t->slot, l->layout.size);
    rc = take_lent(l, sock, base, t, err, errlen);
    if (rc != 0)
      return rc;
  } else if (t->flags & FL__TASK_NEW_SEGMENT) {
    slot_drop(slots, t->slot, l->layout.size);
    /* Memory taken since create (by held batches, or anyone): an error at
       this batch, which the parent keeps, rather than the OOM killer. */
    rc = fl__room_for_segment(l->layout.size, err, errlen);
    if (rc != 0)
      return rc;
    if (fl__fault(&l->faults, FL__FAULT_ENOSPC, t->epoch, t->seq,
                  t->attempt)) {
      fl__segment_fail_next(FL_ENOSPC);
      *faulted = 1;
    }
    *serial = t->serial;
    if (named || l->opt.fd_in_dev_shm)
      rc = fl__segment_create_named(&seg, l->owner, l->token, serial,
                                    l->layout.size, err, errlen);
    else
      rc = fl__segment_create(&seg, NULL, l->layout.size, err, errlen);
    if (rc != 0)
      return rc;
    *base = seg.base;
    *made = 1;
    if (named) {
      fl__close(seg.fd);
    } else {
      /* PyTorch's way: the name goes at once, the fd carries it. */
      if (l->opt.fd_in_dev_shm) {
        fl__segment_name(name, sizeof(name), l->owner, l->token, *serial);
        shm_unlink(name);
      }
      *fd = seg.fd;
    }
  }
  if (*base == NULL) {
    strncpy(err, "task names a segment this worker does not have",
            errlen - 1);
    return FL_EPROTO;
  }
  if (l->iterable) {
    st->skip = t->skip;
    return fl__stream_fill(l, st, *base, w, t->run, t->epoch, t->seq, count,
                           end, err, errlen);
  }
  *count = t->count;
  return fl__fill(l, *base, w, t->epoch, t->seq, t->offset, t->count, err,
                  errlen);
}

/* The faults option: the worker dies before it fills this batch, as a
   segfault or the OOM killer would kill it, or as a bad exit. */
static void
strike(const fl_loader *l, const struct fl__task *t)
{
  if (fl__fault(&l->faults, FL__FAULT_KILL, t->epoch, t->seq, t->attempt))
    raise(SIGKILL);
  if (fl__fault(&l->faults, FL__FAULT_EXIT, t->epoch, t->seq, t->attempt))
    _exit(1);
}

void
fl__worker_main(fl_loader *l, unsigned w, int sock)
{
  struct slot_table slots = {NULL, 0};
  struct fl__stream st = FL__STREAM_INIT;
  struct fl__task t;
  char err[FL__REPLY_MSG_MAX], why[128];
  pid_t parent = getppid();
  int mq = l->workers[w].mq;
  int named = l->opt.sharing == FL_SHARE_FILE_SYSTEM;
  int rc, fd, made, status, end, faulted, maps;
  uint64_t serial;
  size_t count;

  setup(l, w);
  for (;;) {
    rc = fl__index_queue_recv(mq, sock, parent, &t);
    if (rc <= 0)
      _exit(rc == 0 ? 0 : 3);
    if (t.type == FL__TASK_STOP) {
      fl__stream_close(l, &st);
      _exit(0);
    }
    err[0] = '\0';
    serial = t.serial;
    strike(l, &t);
    faulted = 0;
    status = fill(l, w, sock, &slots, &st, &t, &fd, &made, &serial, &count,
                  &end, &faulted, err, sizeof(err));
    /* Each segment is a mapping here: past vm.max_map_count, a want of
       memory that the parent must name as such. */
    maps = status == FL_ENOMEM && fl__maps_full(why, sizeof(why));
    if (maps)
      snprintf(err, sizeof(err), "worker %u cannot map %s: %s", w,
               (t.flags & FL__TASK_GRANTED) ? "the segment lent to it"
                                            : "a new segment",
               why);
    if (fl__fault(&l->faults, FL__FAULT_DELAY, t.epoch, t.seq, t.attempt)) {
      usleep(l->faults.delay_ms * 1000u);
      faulted = 1;
    }
    /* A new segment's fd goes with the reply even when the fill failed. */
    rc = fl__reply_batch(sock, w, &t, count, status, err, fd,
                         (made && named ? FL__REPLY_NAMED : 0) |
                             (end ? FL__REPLY_END : 0) |
                             (faulted ? FL__REPLY_FAULT : 0) |
                             (maps ? FL__REPLY_MAPS : 0),
                         serial);
    if (fd >= 0)
      fl__close(fd);
    if (rc != 0)
      _exit(0); /* the parent is gone */
    if (t.flags & FL__TASK_ONE_SHOT)
      slot_drop(&slots, t.slot, l->layout.size);
  }
}
