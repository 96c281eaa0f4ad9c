/*
 * Batches as the consumer sees them, and the parent's table of segments
 * behind them.  A segment is a slot: the parent names the slot in each task,
 * so it alone decides which segment a worker refills; releasing a batch
 * returns its slot to that worker's free list, with no message and no
 * syscall.
 */
#include "config.h"

#include <stdlib.h>
#include <errno.h>
#include <sys/mman.h>

#include "internal.h"

int
fl__slot_new(fl_loader *l, unsigned worker, fl_batch **out)
{
  fl_batch **grown;
  uint32_t *spare;
  fl_batch *b;
  size_t cap;

  b = calloc(1, sizeof(*b));
  if (b == NULL)
    return FL_ENOMEM;
  if (l->nspare > 0) {
    b->slot = l->spare[--l->nspare];
  } else {
    if (l->nslots == l->slots_cap) {
      /* spare can hold every slot, so a drop never allocates. */
      cap = l->slots_cap ? l->slots_cap * 2 : 16;
      grown = realloc(l->slots, cap * sizeof(*grown));
      spare = grown != NULL ? realloc(l->spare, cap * sizeof(*spare)) : NULL;
      if (grown != NULL)
        l->slots = grown;
      if (spare == NULL) {
        free(b);
        return FL_ENOMEM;
      }
      l->spare = spare;
      l->slots_cap = cap;
    }
    b->slot = (uint32_t)l->nslots++;
  }
  b->loader = l;
  b->worker = worker;
  b->gen = l->workers != NULL ? l->workers[worker].gen : 0;
  b->seg.fd = -1;
  b->state = FL__SLOT_FREE;
  l->slots[b->slot] = b;
  *out = b;
  return 0;
}

/* Unmap seg and close its fd, untracked under the fork table's lock, so
   that no worker forked meanwhile keeps it. */
static void
close_segment(fl__segment *seg)
{
  fl__fdtrack_lock();
  if (seg->fd >= 0)
    fl__fdtrack_del(seg->fd);
  fl__segment_close(seg);
  fl__fdtrack_unlock();
}

/* Let go of the parent's side of b's segment; the slot stays. */
void
fl__slot_unmap(fl_loader *l, fl_batch *b)
{
  if (b->seg.base == NULL)
    return;
  fl__stats_segments(l, -1, -(long)b->seg.size, b->seg.fd >= 0 ? -1 : 0);
  if (!l->foreign && b->pinned && l->hooks_held && l->opt.unpin != NULL &&
      l->nunpin_due < sizeof(l->unpin_due) / sizeof(l->unpin_due[0])) {
    /* Unpinned after the fork table's lock, then let go of. */
    l->unpin_due[l->nunpin_due++] = b->seg;
    b->pinned = 0;
    b->seg.base = NULL;
    b->seg.size = 0;
    b->seg.fd = -1;
    b->mapped_by = 0;
    return;
  }
  if (!l->foreign)
    fl__slot_unpin(l, b);
  close_segment(&b->seg);
  b->mapped_by = 0;
}

/*
 * A segment we never received: a worker may have made its name before it
 * died or the epoch was cut.  A name of that serial made by another user
 * stays theirs.
 */
void
fl__slot_unname(fl_loader *l, fl_batch *b)
{
  char name[FL__SEGMENT_NAME_MAX];

  if ((l->opt.sharing == FL_SHARE_FILE_SYSTEM || l->opt.fd_in_dev_shm) &&
      b->seg.base == NULL && b->serial != 0 && !l->foreign) {
    fl__segment_name(name, sizeof(name), l->owner, l->token, b->serial);
    fl__segment_unlink_own(name);
  }
}

void
fl__slot_unname_grown(fl_loader *l, fl_batch *b)
{
  char name[FL__SEGMENT_NAME_MAX];
  unsigned s;

  if (l->opt.sharing != FL_SHARE_FILE_SYSTEM || b->serial == 0 ||
      l->foreign)
    return;
  for (s = 0; s <= l->max_shift; s++) {
    fl__segment_name(name, sizeof(name), l->owner, l->token,
                     fl__grown_serial(b->serial, s));
    fl__segment_unlink_own(name);
  }
}

/*
 * A batch that could not reach the consumer for want of fds or shared
 * memory is not lost: fl_loader_next reports why (fl__receive_lost_error)
 * and asks for it again (fl__dispatch_refetch), when the consumer may have
 * released batches.  orphaned: the worker made a segment we do not have.
 */
void
fl__slot_keep(fl_loader *l, fl_batch *b, int code, int orphaned)
{
  /* A name the worker made but we could not open would linger. */
  if (orphaned)
    fl__slot_unname(l, b);
  b->status = code;
  b->orphaned = orphaned;
  b->state = FL__SLOT_REFETCH;
  l->nrefetch++;
}

void
fl__slot_drop(fl_loader *l, fl_batch *b)
{

  if (b->state == FL__SLOT_REFETCH)
    l->nrefetch--;
  if (b->state == FL__SLOT_TASKED)
    fl__slot_unname_grown(l, b);
  if (b->seg.base != NULL)
    fl__slot_unmap(l, b);
  else
    fl__slot_unname(l, b);
  l->slots[b->slot] = NULL;
  l->spare[l->nspare++] = b->slot;
  free(b);
}

/* Close the fd of b's segment, keeping its mapping: it is refilled then
   by a worker that maps it, or dropped, never lent (dispatch.c). */
static void
close_fd(fl_batch *b)
{
  fl__fdtrack_del(b->seg.fd);
  fl__close(b->seg.fd);
  b->seg.fd = -1;
}

/*
 * A batch handed out while the consumer holds as many as the prefetch
 * window or more keeps no fd: lending serves to refill the window, which
 * the first held batches' fds do, and more would fill the fd table, the
 * caller's too.  So held batches keep at most a window's fds.
 */
void
fl__slot_hold(fl_loader *l, fl_batch *b)
{
  if (b->seg.fd >= 0 &&
      l->stats.batches_held >=
          (size_t)l->opt.num_workers * l->opt.prefetch_factor) {
    fl__fdtrack_lock();
    close_fd(b);
    fl__fdtrack_unlock();
    fl__stats_fds(l, -1);
  }
  b->state = FL__SLOT_HELD;
  l->stats.batches_held++;
}

/*
 * Short of fds under the fd strategy: close the fd of every segment whose
 * batch the consumer holds, keeping its mapping, which is what the
 * consumer reads.  Every held batch's at once, because each time fds run
 * short the batches in flight lose theirs and are fetched again, which
 * should happen as seldom as can be.  Returns how many were closed.
 */
size_t
fl__slot_close_held_fds(fl_loader *l)
{
  size_t s, n = 0;
  fl_batch *b;

  fl__fdtrack_lock();
  for (s = 0; s < l->nslots; s++) {
    b = l->slots[s];
    if (b == NULL || b->state != FL__SLOT_HELD || b->seg.fd < 0)
      continue;
    close_fd(b);
    n++;
  }
  fl__fdtrack_unlock();
  fl__stats_fds(l, -(int)n);
  return n;
}

void
fl__slot_park(fl_loader *l, fl_batch *b)
{
  b->state = FL__SLOT_FREE;
  if (b->seg.base == NULL || b->seg.fd < 0 || !l->opt.reuse_segments ||
      l->foreign) {
    fl__slot_drop(l, b);
    return;
  }
  b->gen = 0;
  b->next_free = l->pool;
  l->pool = b;
}

/* The slot is done with: refill it later, or let it go. */
void
fl__slot_recycle(fl_loader *l, fl_batch *b)
{
  fl__worker *w;

  if (b->state == FL__SLOT_REFETCH)
    l->nrefetch--; /* an epoch cut short while it waited */
  b->state = FL__SLOT_FREE;
  if (b->seg.base == NULL || !l->opt.reuse_segments) {
    fl__slot_drop(l, b);
    return;
  }
  if (l->workers == NULL) {
    b->next_free = l->inline_free;
    l->inline_free = b;
    return;
  }
  w = &l->workers[b->worker];
  if (w->pid == 0 || w->gen != b->gen) {
    fl__slot_park(l, b); /* the process that could refill it is gone */
    return;
  }
  /* Its fd, if the loader kept it, stays: it lends the segment to another
     worker (dispatch.c); without one, only a worker that maps it refills
     it. */
  b->next_free = w->free;
  w->free = b;
}

/*
 * Attach the segment a worker made for b: by fd (this takes the fd over,
 * whatever happens) or by name, and pin it.  On failure b stays unmapped.
 */
int
fl__slot_map(fl_loader *l, fl_batch *b, int fd)
{
  char name[FL__SEGMENT_NAME_MAX];
  int rc;

  if (fd >= 0) {
    rc = fl__segment_attach_fd(&b->seg, fd, 0);
    if (rc != 0)
      fl__close(fd);
    else if ((rc = fl__fdtrack_add(fd)) != 0)
      fl__segment_close(&b->seg);
  } else {
    fl__segment_name(name, sizeof(name), l->owner, l->token, b->serial);
    rc = fl__segment_attach_name(&b->seg, name, 0);
  }
  if (rc != 0)
    return rc;
  if (b->seg.size < l->layout.size) {
    close_segment(&b->seg);
    return FL_EPROTO;
  }
  fl__stats_segments(l, 1, (long)b->seg.size, fd >= 0 ? 1 : 0);
  fl__slot_pin(l, b);
  return 0;
}

/*
 * pin_memory: lock a newly mapped segment, once for its life, with mlock
 * or the caller's hook (cudaHostRegister: the batch is then page-locked
 * where it lies, no copy).  If that fails, the segment serves unpinned,
 * and the first batch it carries says so (loader.c).
 */
void
fl__slot_pin(fl_loader *l, fl_batch *b)
{
  int rc;

  b->pin_error = b->pin_hook_rc = 0;
  if (!l->opt.pin_memory)
    return;
  if (l->opt.pin != NULL && l->hooks_held) {
    l->pin_due = b; /* one reply, one segment mapped */
    return;
  }
  if (l->opt.pin == NULL) {
    if (mlock(b->seg.base, b->seg.size) != 0)
      b->pin_error = -errno;
    return;
  }
  rc = l->opt.pin(b->seg.base, b->seg.size, l->opt.pin_arg);
  b->pinned = rc == 0;
  b->pin_hook_rc = rc;
  b->pin_error = rc != 0 ? FL_ENOMEM : 0;
}

void
fl__slot_run_due_hooks(fl_loader *l)
{
  fl_batch *b = l->pin_due;
  size_t i;

  for (i = 0; i < l->nunpin_due; i++) {
    l->opt.unpin(l->unpin_due[i].base, l->unpin_due[i].size,
                 l->opt.pin_arg);
    close_segment(&l->unpin_due[i]);
  }
  l->nunpin_due = 0;
  l->pin_due = NULL;
  if (b != NULL && b->seg.base != NULL)
    fl__slot_pin(l, b);
}

/* Before the parent unmaps a segment the hook pinned. */
void
fl__slot_unpin(const fl_loader *l, fl_batch *b)
{
  if (b->pinned && l->opt.unpin != NULL)
    l->opt.unpin(b->seg.base, b->seg.size, l->opt.pin_arg);
  b->pinned = 0;
}

const fl__layout *
fl__slot_layout(const fl_batch *b)
{
  return &b->loader->classes[b->shift];
}

int
fl__slot_class(fl_loader *l, fl_batch *b)
{
  const struct fl__segment_header *h = b->seg.base;

  b->shift = 0;
  if (h == NULL || h->magic != FL__SEGMENT_MAGIC || h->shift == 0)
    return 0;
  if (h->shift > l->max_shift || l->classes[h->shift].size > b->seg.size)
    return FL_EPROTO;
  b->shift = (unsigned)h->shift;
  return 0;
}

/*
 * The class each batch needed (the largest sample of each field against
 * the loader's room for it), the largest over this round of batches and
 * the last: a segment larger than that is made smaller when next refilled
 * (dispatch.c), so that one long batch keeps no memory for the rest of the
 * run, while a run of long ones does not make and unmake segments.  A
 * round is twice the prefetch window.
 */
void
fl__slot_needed(fl_loader *l, const fl_batch *b)
{
  const fl__layout *lo = &l->layout;
  size_t i, f, nf = lo->nfields, round = 2 * (l->window + 1);
  const size_t *sz = b->sizes;
  unsigned need = 0;

  /* A batch in a segment of the loader's class needed no more: the
     fixed-size case reads no size. */
  if (b->shift > 0 && sz != NULL && b->status == 0)
    for (i = 0; i < b->count; i++, sz += nf)
      for (f = 0; f < nf; f++)
        while (need < b->shift && (lo->field_bytes[f] << need) < sz[f])
          need++;
  if (need > l->need_now)
    l->need_now = need;
  if (++l->need_round >= round) {
    l->need_before = l->need_now;
    l->need_now = 0;
    l->need_round = 0;
  }
  l->want_shift = l->need_now > l->need_before ? l->need_now
                                               : l->need_before;
}

/* Point the batch at what the worker wrote into its segment. */
void
fl__slot_view(fl_loader *l, fl_batch *b)
{
  const unsigned char *base = b->seg.base;
  const fl__layout *lo = &l->classes[b->shift];

  b->indices = (const size_t *)(base + sizeof(struct fl__segment_header));
  b->sizes = (const size_t *)(base + lo->sizes_offset);
  b->data = base + lo->field_offset[0];
}

const void *
fl_batch_data(const fl_batch *b)
{
  return b != NULL ? b->data : NULL;
}

const void *
fl_batch_field(const fl_batch *b, size_t f)
{
  if (b == NULL || b->data == NULL || f >= b->loader->layout.nfields)
    return NULL;
  return (const unsigned char *)b->seg.base +
         fl__slot_layout(b)->field_offset[f];
}

size_t
fl_batch_stride(const fl_batch *b, size_t f)
{
  if (b == NULL || f >= b->loader->layout.nfields)
    return 0;
  return fl__slot_layout(b)->field_bytes[f];
}

size_t
fl_batch_count(const fl_batch *b)
{
  return b != NULL ? b->count : 0;
}

const size_t *
fl_batch_indices(const fl_batch *b)
{
  return b != NULL ? b->indices : NULL;
}

const size_t *
fl_batch_sizes(const fl_batch *b)
{
  return b != NULL ? b->sizes : NULL;
}

uint64_t
fl_batch_seq(const fl_batch *b)
{
  return b != NULL ? b->seq : 0;
}

unsigned
fl_batch_worker(const fl_batch *b)
{
  return b != NULL ? b->worker : 0;
}

void
fl_batch_release(fl_batch *b)
{
  fl_loader *l;

  if (b == NULL || b->state != FL__SLOT_HELD)
    return;
  l = b->loader;
  /* In a child of the loader's maker, destroy frees this copy. */
  if (FL__FOREIGN(l))
    return;
  l->stats.batches_held--;
  fl__slot_recycle(l, b);
}
