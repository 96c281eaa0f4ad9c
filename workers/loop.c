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

/* This worker's mapping of a slot's segment. */
struct slot_map {
  void *base;   /* NULL: none */
  size_t size;  /* its size (a segment of any class) */
  unsigned shift;
};

struct slot_table {
  struct slot_map *base; /* by slot index */
  size_t cap;
};

/*
 * Grown with mmap, not malloc: a worker forked while another thread of the
 * host held an allocator lock would wait on it forever (glibc's malloc
 * resets its locks in the child; others, ASan's among them, do not).
 */
static struct slot_map *
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
  info.run = l->run;
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
slot_drop(struct slot_table *t, uint32_t slot)
{
  if (slot < t->cap && t->base[slot].base != NULL) {
    munmap(t->base[slot].base, t->base[slot].size);
    t->base[slot].base = NULL;
  }
}

/* Map the segment another worker made, lent to us for this task. */
static int
take_lent(fl_loader *l, int sock, struct slot_map *m,
          const struct fl__task *t, char *err, size_t errlen)
{
  const struct fl__segment_header *h;
  fl__segment seg = {NULL, 0, -1};
  int fd, rc;

  fd = fl__channel_take_grant(sock, t->serial);
  if (fd < 0) {
    snprintf(err, errlen, "cannot take the segment lent for batch %llu: %s",
             (unsigned long long)t->seq, fl_strerror(fd));
    return fd;
  }
  rc = fl__segment_attach_lent(&seg, fd, 0);
  fl__close(fd);
  if (rc != 0) {
    snprintf(err, errlen, "cannot map a lent segment: %s", fl_strerror(rc));
    return rc;
  }
  /* Its class, as the worker that made it wrote: the parent checked it
     when it received the segment. */
  h = seg.base;
  m->base = seg.base;
  m->size = seg.size;
  m->shift = h->magic == FL__SEGMENT_MAGIC && h->shift <= l->max_shift &&
                     l->classes[h->shift].size <= seg.size
                 ? (unsigned)h->shift
                 : 0;
  return 0;
}

/*
 * Fill one task; returns the reply status.  *made says whether a segment
 * the task asked for now exists, *replaced that one was made in place of
 * the slot's (a batch larger than it, or a rescale), *fd is its fd under
 * the fd strategy, *count the samples written, *end that an iterable
 * stream is over, *faulted that the faults option struck.
 */
static int
fill(fl_loader *l, unsigned w, int sock, struct slot_table *slots,
     struct fl__stream *st, const struct fl__task *t, int *fd, int *made,
     int *replaced, uint64_t *serial, size_t *count, int *end, int *faulted,
     char *err, size_t errlen)
{
  struct slot_map *m = slot_at(slots, t->slot);
  enum fl__make how = fl__make_of(l);
  fl__segment seg = {NULL, 0, -1};
  fl__fill_ctx c;
  char why[FL__REPLY_MSG_MAX];
  int rc, fresh = 0;

  *fd = -1;
  *made = 0;
  *replaced = 0;
  *count = 0;
  *end = 0;
  if (m == NULL) {
    strncpy(err, "out of memory in the worker", errlen - 1);
    return FL_ENOMEM;
  }
  if (t->flags & FL__TASK_GRANTED) {
    slot_drop(slots, t->slot);
    rc = take_lent(l, sock, m, t, err, errlen);
    if (rc != 0)
      return rc;
  } else if (t->flags & FL__TASK_NEW_SEGMENT) {
    slot_drop(slots, t->slot);
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
    rc = fl__make_segment(l, how, &seg, serial, l->layout.size, err,
                          errlen);
    if (rc != 0)
      return rc;
    m->base = seg.base;
    m->size = seg.size;
    m->shift = 0;
    fresh = 1;
  }
  if (m->base == NULL) {
    strncpy(err, "task names a segment this worker does not have",
            errlen - 1);
    return FL_EPROTO;
  }
  seg.base = m->base;
  seg.size = m->size;
  fl__fill_ctx_init(&c, l, how, &seg, m->shift, fresh, *serial);
  c.seq = t->seq;
  c.task_serial = t->serial; /* what the parent knows the slot by */
  /* Smaller again, as the parent asks; where it cannot be made now, the
     batch goes into the larger one it has. */
  if ((t->flags & FL__TASK_RESCALE) && !fresh && t->shift < m->shift &&
      fl__fill_replace(&c, t->shift, 0, why, sizeof(why)) == 0)
    m->base = NULL; /* unmapped by fl__fill_replace */
  if (l->iterable) {
    st->skip = t->skip;
    rc = fl__stream_fill(l, st, &c, w, t->run, t->epoch, t->seq, count, end,
                         err, errlen);
  } else {
    *count = t->count;
    rc = fl__fill(l, &c, w, t->run, t->epoch, t->seq, t->offset, t->count,
                  err, errlen);
  }
  /* The segment the batch is in now: the slot's from here on. */
  m->base = c.seg.base;
  m->size = c.seg.size;
  m->shift = c.shift;
  *made = fresh || c.replaced;
  *replaced = c.replaced;
  *fd = c.seg.fd;
  if (c.replaced)
    *serial = c.serial;
  return rc;
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
  int named = l->opt.sharing == FL_SHARE_FILE_SYSTEM;
  int rc, fd, made, replaced, status, end, faulted, maps;
  uint64_t serial;
  size_t count;

  setup(l, w);
  for (;;) {
    rc = fl__index_queue_recv(&l->workers[w].queue, sock, parent, &t);
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
    status = fill(l, w, sock, &slots, &st, &t, &fd, &made, &replaced,
                  &serial, &count, &end, &faulted, err, sizeof(err));
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
                             (replaced ? FL__REPLY_REPLACED : 0) |
                             (end ? FL__REPLY_END : 0) |
                             (faulted ? FL__REPLY_FAULT : 0) |
                             (maps ? FL__REPLY_MAPS : 0),
                         serial);
    if (fd >= 0)
      fl__close(fd);
    if (rc != 0)
      _exit(0); /* the parent is gone */
    if (t.flags & FL__TASK_ONE_SHOT)
      slot_drop(&slots, t.slot);
  }
}
