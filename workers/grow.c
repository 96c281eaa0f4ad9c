/*
 * Grow: a batch larger than its segment.  A dataset's call that finds its
 * sample larger than the room it was given calls fl_worker_grow; the
 * segment is replaced, there and then, by one of a larger size class
 * (every field's room scaled by a power of two), admitted first as a
 * loader's segments are (memory, RLIMIT_FSIZE, /dev/shm), the batch so far
 * copied into it, and the call goes on writing there.  The reply then
 * tells the parent that the slot has a new segment.  The same path makes a
 * segment smaller again when the parent asks (FL__TASK_RESCALE).
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/* The batch being filled in this thread (num_workers 0: loaders in
   several threads fill inline). */
static __thread fl__fill_ctx *current;

enum fl__make
fl__make_of(const fl_loader *l)
{
  if (l->opt.num_workers == 0)
    return FL__MAKE_PRIVATE;
  if (l->opt.sharing == FL_SHARE_FILE_SYSTEM)
    return FL__MAKE_NAMED;
  return l->opt.fd_in_dev_shm ? FL__MAKE_UNNAMED : FL__MAKE_MEMFD;
}

int
fl__make_segment(const fl_loader *l, enum fl__make m, fl__segment *seg,
                 uint64_t *serial, size_t size, char *err, size_t errlen)
{
  char name[FL__SEGMENT_NAME_MAX];
  int rc;

  switch (m) {
  case FL__MAKE_PRIVATE:
    fl__fdtrack_lock();
    rc = fl__segment_private(seg, size);
    fl__fdtrack_unlock();
    if (rc != 0)
      snprintf(err, errlen, "cannot map %zu bytes for a batch: %s", size,
               fl_strerror(rc));
    return rc;
  case FL__MAKE_MEMFD:
    return fl__segment_create(seg, NULL, size, err, errlen);
  default:
    rc = fl__segment_create_named(seg, l->owner, l->token, serial, size, err,
                                  errlen);
    if (rc != 0)
      return rc;
    if (m == FL__MAKE_NAMED) {
      fl__close(seg->fd); /* the name carries it */
      seg->fd = -1;
    } else {
      /* PyTorch's way: the name goes at once, the fd carries it. */
      fl__segment_name(name, sizeof(name), l->owner, l->token, *serial);
      shm_unlink(name);
    }
    return 0;
  }
}

static void
point(fl__fill_ctx *c)
{
  const fl__layout *lo = &c->l->classes[c->shift];
  unsigned char *base = c->seg.base;
  size_t f;

  for (f = 0; f < lo->nfields; f++)
    c->fields[f] = base + lo->field_offset[f];
  c->sizes = (size_t *)(base + lo->sizes_offset);
}

void
fl__fill_ctx_init(fl__fill_ctx *c, const fl_loader *l, enum fl__make m,
                  const fl__segment *seg, unsigned shift, int fresh,
                  uint64_t serial)
{
  memset(c, 0, sizeof(*c));
  c->l = l;
  c->make = m;
  c->seg = *seg;
  c->shift = shift;
  c->fresh = fresh;
  c->serial = serial;
  c->task_serial = serial;
  c->sample = SIZE_MAX;
  c->retired.fd = -1;
  point(c);
}

/* A segment made by this task that goes before the parent had it: its
   name (NAMED) and its fd go now; seg_unmap says whether its mapping
   goes too. */
static void
unmake(fl__fill_ctx *c, fl__segment *seg, int fresh, uint64_t serial,
       int seg_unmap)
{
  char name[FL__SEGMENT_NAME_MAX];

  if (fresh && c->make == FL__MAKE_NAMED) {
    fl__segment_name(name, sizeof(name), c->l->owner, c->l->token, serial);
    shm_unlink(name);
  }
  if (seg->fd >= 0)
    fl__close(seg->fd);
  seg->fd = -1;
  if (seg_unmap && seg->base != NULL)
    munmap(seg->base, seg->size);
  if (seg_unmap)
    seg->base = NULL;
}

/* The batch so far, from old (class os) into c's new segment: header,
   indices and sizes where they were, and each field's array: a batched
   call's bytes at their offsets, a per-sample call's samples at the new
   stride (the one being written keeps what it wrote of its room). */
static void
copy_batch(fl__fill_ctx *c, const void *old, unsigned os)
{
  const fl__layout *ol = &c->l->classes[os], *nl = &c->l->classes[c->shift];
  const unsigned char *from = old;
  unsigned char *to = c->seg.base;
  size_t f, i, rows;

  memcpy(to, from, ol->field_offset[0]);
  for (f = 0; f < nl->nfields; f++) {
    if (c->sample == SIZE_MAX) {
      memcpy(to + nl->field_offset[f], from + ol->field_offset[f],
             c->n * ol->field_bytes[f]);
      fl__canary_plant(to + nl->field_offset[f] + c->n * nl->field_bytes[f]);
      continue;
    }
    rows = c->sample + 1 < c->n ? c->sample + 1 : c->n;
    for (i = 0; i < rows; i++)
      memcpy(to + nl->field_offset[f] + i * nl->field_bytes[f],
             from + ol->field_offset[f] + i * ol->field_bytes[f],
             ol->field_bytes[f]);
    fl__canary_plant(to + nl->field_offset[f] +
                     (c->sample + 1) * nl->field_bytes[f]);
  }
  ((struct fl__segment_header *)c->seg.base)->shift = c->shift;
}

/* Whether a segment of size bytes may be made now: the arithmetic
   fl_loader_create's admission does, for one segment. */
static int
admit(const fl__fill_ctx *c, const fl__layout *lo, char *err, size_t errlen)
{
  char why[512];
  size_t size = lo->size;
  fl__room r;
  int rc;

  rc = fl__room_for_segment(size, why, sizeof(why));
  if (rc == 0 && c->make != FL__MAKE_PRIVATE) {
    fl__room_file_size(&r);
    if (size > r.amount) {
      snprintf(why, sizeof(why), "%s is %llu bytes", r.source,
               (unsigned long long)r.amount);
      rc = FL_ENOMEM;
    }
  }
  if (rc == 0 &&
      (c->make == FL__MAKE_NAMED || c->make == FL__MAKE_UNNAMED)) {
    fl__room_dev_shm(&r);
    if (size > r.amount) {
      snprintf(why, sizeof(why), "%s is %llu bytes", r.source,
               (unsigned long long)r.amount);
      rc = FL_ENOSPC;
    }
  }
  if (rc != 0)
    snprintf(err, errlen, "batch %llu needs a segment of at least %zu bytes "
             "(room for %zu samples of %zu bytes), but %.200s",
             (unsigned long long)c->seq, size, lo->cap,
             lo->field_bytes[0], why);
  return rc;
}

int
fl__fill_replace(fl__fill_ctx *c, unsigned shift, int copy, char *err,
                 size_t errlen)
{
  const fl__layout *lo;
  fl__segment seg = {NULL, 0, -1}, old = c->seg;
  uint64_t serial = fl__grown_serial(c->task_serial, shift);
  unsigned os = c->shift;
  int rc, old_fresh = c->fresh;

  if (shift > c->l->max_shift) {
    snprintf(err, errlen, "batch %llu needs samples of more than %zu "
             "bytes: larger than this machine can address",
             (unsigned long long)c->seq,
             c->l->classes[c->l->max_shift].field_bytes[0]);
    return FL_ENOMEM;
  }
  lo = &c->l->classes[shift];
  rc = admit(c, lo, err, errlen);
  if (rc == 0)
    rc = fl__make_segment(c->l, c->make, &seg, &serial, lo->size, err,
                          errlen);
  if (rc != 0)
    return rc;
  c->seg = seg;
  c->shift = shift;
  c->fresh = 1;
  c->replaced = c->make != FL__MAKE_PRIVATE || c->replaced;
  point(c);
  if (copy)
    copy_batch(c, old.base, os);
  /* The old one: made by this task, it goes now (the parent never had
     it); the parent's, the parent lets go of it at the reply.  Its
     mapping stays while the call that began in it runs.  Without
     workers the parent's is this very mapping: its pin goes first. */
  if (!old_fresh && c->own != NULL)
    fl__slot_unpin(c->l, c->own);
  if (c->in_call && c->retired.base == NULL) {
    unmake(c, &old, old_fresh, c->serial, 0);
    c->retired = old;
  } else {
    unmake(c, &old, old_fresh, c->serial, 1);
  }
  c->serial = serial;
  return 0;
}

void
fl__fill_call_begin(fl__fill_ctx *c, size_t sample, void **dst)
{
  c->sample = sample;
  c->call_dst = dst;
  c->in_call = 1;
  c->code = 0;
  current = c;
}

void
fl__fill_call_end(fl__fill_ctx *c)
{
  const fl__layout *lo = &c->l->classes[c->shift];

  current = NULL;
  c->in_call = 0;
  c->call_dst = NULL;
  if (c->retired.base == NULL)
    return;
  /* The call wrote its sizes where it was given them. */
  memcpy((unsigned char *)c->seg.base + lo->sizes_offset,
         (unsigned char *)c->retired.base + lo->sizes_offset,
         lo->cap * lo->nfields * sizeof(size_t));
  munmap(c->retired.base, c->retired.size);
  c->retired.base = NULL;
}

/* The dataset's calls take an array of destinations, one a field. */
static int
fielded(const fl_loader *l)
{
  return l->iterable ? l->it.nfields > 0 : l->ds.nfields > 0;
}

int
fl_worker_grow(size_t field, size_t bytes, void **dst)
{
  fl__fill_ctx *c = current;
  const fl__layout *lo;
  char err[FL__REPLY_MSG_MAX];
  unsigned shift;
  size_t f, i, row, *sizes;
  int rc;

  if (c == NULL || !c->in_call) {
    fl__error_set(FL_ESTATE, "fl_worker_grow: no batch is being filled "
                  "here (call it from get, get_batch, get_fields, next or "
                  "next_fields)");
    return FL_ESTATE;
  }
  lo = &c->l->classes[c->shift];
  if (field >= lo->nfields || dst == NULL)
    return FL_EINVAL;
  if (bytes <= lo->field_bytes[field])
    return 0;
  shift = c->shift;
  while (shift < FL__SHIFT_MAX &&
         (c->l->layout.field_bytes[field] << shift) < bytes)
    shift++;
  if ((c->l->layout.field_bytes[field] << shift) < bytes)
    shift = FL__SHIFT_MAX + 1;
  rc = fl__fill_replace(c, shift, 1, err, sizeof(err));
  if (rc != 0) {
    /* The batch's error: the dataset's call returns its failure, and this
       is what the batch says. */
    fl_worker_error("%s", err);
    fl__error_set(rc, "%s", err);
    c->code = rc;
    return rc;
  }
  lo = &c->l->classes[c->shift];
  row = c->sample == SIZE_MAX ? 0 : c->sample;
  /* The call's nbytes, where it reads them (the segment it began in),
     say the new room: a batched call lays its samples out by it. */
  sizes = (size_t *)((unsigned char *)c->retired.base + lo->sizes_offset);
  for (i = 0; i < (c->sample == SIZE_MAX ? c->n : 1) * lo->nfields; i++)
    sizes[row * lo->nfields + i] = lo->field_bytes[i % lo->nfields];
  if (!fielded(c->l)) {
    *dst = (unsigned char *)c->fields[0] + row * lo->field_bytes[0];
  } else {
    for (f = 0; f < lo->nfields; f++)
      dst[f] = (unsigned char *)c->fields[f] + row * lo->field_bytes[f];
  }
  if (c->call_dst != NULL && c->call_dst != dst)
    for (f = 0; f < lo->nfields; f++)
      c->call_dst[f] = (unsigned char *)c->fields[f] +
                       row * lo->field_bytes[f];
  return 0;
}
