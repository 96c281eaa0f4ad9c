/*
 * A loader's plan, made before it reserves anything: the samples of an
 * epoch, the layout of a segment (which holds at most that many samples,
 * whatever batch_size says), the segments the prefetch window needs (a
 * window of at most the epoch's batches, whatever prefetch_factor says),
 * and what all of it costs in memory.  Then admission: the plan must fit what
 * the machine can give now (limits.c), memory, fds, file size, /dev/shm
 * and processes, or fl_loader_create refuses it with the
 * arithmetic, the limit and its source, and the options that would fit.
 * That is what keeps a typo in batch_size from reserving memfd memory until
 * the kernel's OOM killer takes down unrelated processes.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "internal.h"

/* cost_of's answer when the order, not a segment, is too large. */
#define FL__TOO_LARGE_ORDER 1

/* What one combination of the options costs. */
struct cost {
  size_t n, batches, cap, window, nsegs, backlog;
  unsigned pf;         /* the prefetch factor in force */
  fl__layout layout;
  uint64_t order_bytes, own_bytes;
  size_t moved_slots;  /* the lazy order's moved values */
  uint64_t segs_bytes; /* nsegs x layout.size */
  uint64_t total;      /* everything, saturated at UINT64_MAX */
  uint64_t fds;        /* the parent's: a segment's, with the fd strategy,
                          and the loader's own */
};

static uint64_t
sat_add(uint64_t a, uint64_t b)
{
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t
sat_mul(uint64_t a, uint64_t b)
{
  uint64_t r;

  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static const char *
plural(uint64_t n)
{
  return n == 1 ? "" : "s";
}

int
fl__own_segments_first(const fl_options *opt)
{
  return opt->sharing == FL_SHARE_FILE_SYSTEM && !opt->in_order &&
         opt->reuse_segments;
}

/* The loader's own fds: each worker's queue, socket and pidfd, a second
   for the queue of each worker past the message queues the limits allow
   (a socket pair, index_queue.c), and the event loop's (epoll, a pipe and
   an eventfd).  No queue is refused: fds are what the workers cost. */
static uint64_t
own_fds(unsigned pf, unsigned nw)
{
  uint64_t mqs = fl__index_queue_mq_limit(pf + 1);

  return 3 * (uint64_t)nw + (nw > mqs ? nw - mqs : 0) + 5;
}

/* Samples of an epoch before batching; 0 for an iterable dataset. */
static size_t
epoch_samples(const fl_dataset *ds, const fl_options *opt, int iterable)
{
  if (iterable)
    return 0;
  if (opt->sampler != NULL)
    return opt->sampler_len;
  return opt->indices != NULL ? opt->indices_len : ds->len;
}

/* This rank's batches in an epoch of n samples (with a sampler, the most
   it may have), in batches of bs. */
static size_t
epoch_batches(const fl_options *opt, size_t n, size_t bs)
{
  return fl__batches(fl__shard_len(opt->shard_mode, n, opt->world_size,
                                   opt->rank),
                     bs, opt->drop_last);
}

/*
 * The prefetch factor in force: no window needs more batches than an
 * epoch has, so pf is capped at the epoch's batches per worker (at least
 * one).  An iterable's length is unknown: its pf is as given.
 */
static unsigned
prefetch_in_force(size_t batches, int iterable, unsigned pf, unsigned nw)
{
  size_t per;

  if (iterable || nw == 0)
    return pf;
  per = batches / nw + (batches % nw != 0);
  if (per == 0)
    per = 1;
  return per < pf ? (unsigned)per : pf;
}

/* Where torch's order is what does not fit: the shuffle that needs none. */
static const char *
bijection_hint(const fl_options *opt)
{
  return opt->shuffle && opt->sampler == NULL &&
                 opt->shuffle_algorithm == FL_SHUFFLE_TORCH
             ? ", or shuffle with FL_SHUFFLE_BIJECTION, which keeps no order"
             : "";
}

/*
 * The cost of the loader with batch size bs, prefetch pf (capped as it
 * will be: prefetch_in_force) and nw workers.  Returns 0; FL_ENOMEM when
 * a segment would be larger than this machine can address,
 * FL__TOO_LARGE_ORDER when the epoch's order would.
 */
static int
cost_of(struct cost *c, const fl_dataset *ds, const fl_options *opt,
        int iterable, size_t bs, unsigned pf, unsigned nw)
{
  size_t ring = 1, sb = ds->sample_bytes;
  const size_t *fields = ds->nfields > 0 ? ds->field_bytes : &sb;

  memset(c, 0, sizeof(*c));
  c->n = epoch_samples(ds, opt, iterable);
  c->batches = iterable ? 0 : epoch_batches(opt, c->n, bs);
  c->pf = pf = prefetch_in_force(c->batches, iterable, pf, nw);
  c->cap = iterable || bs < c->n ? bs : c->n;
  if (c->cap == 0)
    c->cap = 1;
  if (fl__segment_layout(&c->layout, c->cap,
                         ds->nfields > 0 ? ds->nfields : 1, fields) != 0)
    return FL_ENOMEM;
  c->window = nw ? (size_t)pf * nw : 1;
  /*
   * The window and the batch being used.  Under the file-system strategy
   * in order, no segment can be lent and each worker keeps its own: up to
   * prefetch_factor + 1 each.
   */
  c->nsegs = !nw                                     ? 1
             : opt->sharing == FL_SHARE_FILE_SYSTEM &&
                       opt->in_order && opt->reuse_segments
                 ? c->window + nw
                 : c->window + 1;
  /* Map-style, a worker has at most pf tasks out, unless it is given
     tasks for the free segments it holds; one iterable stream may be left
     to take the whole window. */
  c->backlog = (iterable || fl__own_segments_first(opt) ? c->window : pf) + 2;
  c->order_bytes = sat_add(sizeof(fl__order),
                           fl__order_table(opt)
                               ? sat_mul(c->n, sizeof(size_t))
                               : 0);
  if (c->order_bytes > SIZE_MAX / 4)
    return FL__TOO_LARGE_ORDER;
  while (ring < c->window)
    ring <<= 1;
  c->moved_slots = fl__order_moved_slots(opt, c->n, c->window);
  c->own_bytes = sat_add(opt->indices != NULL
                             ? sat_mul(c->n, sizeof(size_t))
                             : 0,
                         sat_add(sat_mul(ring, sizeof(void *)),
                                 sat_mul(sat_mul(nw, c->backlog),
                                         sizeof(struct fl__task))));
  c->own_bytes = sat_add(c->own_bytes,
                         sat_mul(c->moved_slots, 2 * sizeof(size_t)));
  c->segs_bytes = sat_mul(c->nsegs, c->layout.size);
  c->total = sat_add(c->segs_bytes, sat_add(c->order_bytes, c->own_bytes));
  c->fds = own_fds(pf, nw) +
           (nw && opt->sharing == FL_SHARE_FILE_DESCRIPTOR ? c->nsegs : 0);
  return 0;
}

int
fl__plan_make(fl__plan *p, const fl_dataset *ds, const fl_options *opt,
              int iterable, char *err, size_t errlen)
{
  struct cost c;
  int rc;

  rc = cost_of(&c, ds, opt, iterable, opt->batch_size,
               opt->prefetch_factor, opt->num_workers);
  if (rc == FL__TOO_LARGE_ORDER) {
    snprintf(err, errlen, "an epoch of %zu samples needs an order of %zu "
             "indices, more bytes than this machine can address%s", c.n,
             c.n, bijection_hint(opt));
    return FL_ENOMEM;
  }
  if (rc != 0) {
    snprintf(err, errlen, "a segment of %zu sample%s of %zu bytes would be "
             "larger than this machine can address", c.cap, plural(c.cap),
             ds->sample_bytes);
    return FL_ENOMEM;
  }
  /* A task carries its sample count in 32 bits (protocol.h). */
  if (c.cap > UINT32_MAX) {
    snprintf(err, errlen, "batch_size is %zu: a batch holds at most %u "
             "samples", opt->batch_size, UINT32_MAX);
    return FL_EINVAL;
  }
  p->n = c.n;
  p->batches = c.batches;
  p->prefetch = c.pf;
  p->window = c.window;
  p->nsegs = c.nsegs;
  p->backlog = c.backlog;
  p->layout = c.layout;
  p->order_bytes = (size_t)c.order_bytes;
  p->moved_slots = c.moved_slots;
  p->segs_bytes = c.segs_bytes;
  p->need = c.total;
  p->fds = c.fds;
  return 0;
}

enum limit { MEMORY, FILE_SIZE, DEV_SHM, FDS };

/* Whether the options fit under the limit. */
static int
fits(const fl_dataset *ds, const fl_options *opt, int iterable,
     enum limit which, uint64_t room, size_t bs, unsigned pf, unsigned nw)
{
  struct cost c;

  if (cost_of(&c, ds, opt, iterable, bs, pf, nw) != 0)
    return 0;
  switch (which) {
  case MEMORY:
    return c.total <= room;
  case FILE_SIZE:
    return c.layout.size <= room;
  case FDS:
    return c.fds <= room;
  default:
    return c.segs_bytes <= room;
  }
}

/* The largest v in [1, hi) for which ok(v) holds, or 0: need grows with
   each of the three options, so a bisection finds it. */
#define LARGEST(v, hi, ok)                                                   \
  do {                                                                       \
    uint64_t lo_ = 0, hi_ = (hi), mid_;                                      \
    while (hi_ - lo_ > 1) {                                                  \
      mid_ = lo_ + (hi_ - lo_) / 2;                                          \
      v = mid_;                                                              \
      if (ok)                                                                \
        lo_ = mid_;                                                          \
      else                                                                   \
        hi_ = mid_;                                                          \
    }                                                                        \
    v = lo_;                                                                 \
  } while (0)

/* "Options that fit: ...", or why none of the three alone does. */
static void
suggest(char *buf, size_t len, const fl__plan *p, const fl_dataset *ds,
        const fl_options *opt, int iterable, enum limit which, uint64_t room)
{
  char found[3][48];
  uint64_t v = 0, others = p->need - p->segs_bytes;
  unsigned nw = opt->num_workers, pf = p->prefetch;
  size_t bs = opt->batch_size, n = 0;

  if (which != FILE_SIZE && nw > 0) {
    LARGEST(v, pf, fits(ds, opt, iterable, which, room, bs, (unsigned)v, nw));
    if (v > 0)
      snprintf(found[n++], sizeof(found[0]), "prefetch_factor %llu",
               (unsigned long long)v);
    LARGEST(v, nw, fits(ds, opt, iterable, which, room, bs, pf, (unsigned)v));
    if (v > 0)
      snprintf(found[n++], sizeof(found[0]), "num_workers %llu",
               (unsigned long long)v);
  }
  LARGEST(v, p->layout.cap,
          fits(ds, opt, iterable, which, room, (size_t)v, pf, nw));
  if (v > 0)
    snprintf(found[n++], sizeof(found[0]), "batch_size %llu",
             (unsigned long long)v);
  if (n == 3)
    snprintf(buf, len, "Options that fit, each alone: %s, %s or %s",
             found[0], found[1], found[2]);
  else if (n == 2)
    snprintf(buf, len, "Options that fit, each alone: %s or %s", found[0],
             found[1]);
  else if (n == 1)
    snprintf(buf, len, "An option that fits: %s", found[0]);
  else if (which == MEMORY && others > room)
    snprintf(buf, len, "The epoch's order of %zu indices and the loader's "
             "tables alone need %llu bytes: load fewer samples%s", p->n,
             (unsigned long long)others, bijection_hint(opt));
  else
    snprintf(buf, len, "No batch_size, prefetch_factor or num_workers "
             "alone fits: a sample of %zu bytes is too large for it",
             ds->sample_bytes);
}

/* The sentence for a plan that does not fit under room. */
static int
refuse(const fl__plan *p, const fl_dataset *ds, const fl_options *opt,
       int iterable, enum limit which, const fl__room *room, int code,
       char *err, size_t errlen)
{
  char segs[256], capped[80] = "", extra[120] = "", fit[200];
  uint64_t others = p->need - p->segs_bytes;
  size_t cap = p->layout.cap;

  if (p->prefetch < opt->prefetch_factor)
    snprintf(capped, sizeof(capped), " (capped at the epoch's %zu "
             "batch%s)", p->batches, p->batches == 1 ? "" : "es");
  if (opt->num_workers > 0 && p->nsegs > p->window + 1)
    snprintf(segs, sizeof(segs),
             "(prefetch_factor %u%s + 1) x num_workers %u segments of %zu "
             "bytes, each worker's own under FL_SHARE_FILE_SYSTEM",
             p->prefetch, capped, opt->num_workers, p->layout.size);
  else if (opt->num_workers > 0)
    snprintf(segs, sizeof(segs),
             "(prefetch_factor %u%s x num_workers %u + 1) segments of %zu "
             "bytes", p->prefetch, capped, opt->num_workers,
             p->layout.size);
  else
    snprintf(segs, sizeof(segs), "one segment of %zu bytes",
             p->layout.size);
  if (which == MEMORY && others >= (1u << 20))
    snprintf(extra, sizeof(extra), ", plus %llu bytes for the epoch's "
             "order of %zu indices and the loader's tables",
             (unsigned long long)others, p->n);
  suggest(fit, sizeof(fit), p, ds, opt, iterable, which, room->amount);
  if (which == FDS)
    snprintf(err, errlen,
             "the prefetch window needs %llu fds: one for each of its %s, "
             "and %llu of the loader's own, but %s leaves %llu. %s; or "
             "FL_SHARE_FILE_SYSTEM, which keeps no fd per segment; or raise "
             "`ulimit -n`",
             (unsigned long long)p->fds, segs,
             (unsigned long long)own_fds(p->prefetch, opt->num_workers),
             room->source,
             (unsigned long long)room->amount, fit);
  else if (which == FILE_SIZE)
    snprintf(err, errlen,
             "a segment is a file of %zu bytes (%zu sample%s of %zu "
             "bytes, with their indices and sizes), but %s is %llu bytes. "
             "%s; or raise `ulimit -f`",
             p->layout.size, cap, plural(cap), ds->sample_bytes,
             room->source, (unsigned long long)room->amount, fit);
  else
    snprintf(err, errlen,
             "%s %llu bytes: %s, each for %zu sample%s of %zu bytes with "
             "their indices and sizes%s, but %s is %llu bytes. %s%s",
             which == DEV_SHM ? "the prefetch window needs in /dev/shm"
             : opt->num_workers > 0 ? "the prefetch window needs"
                                    : "the loader needs",
             (unsigned long long)(which == DEV_SHM ? p->segs_bytes
                                                   : p->need),
             segs, cap, plural(cap), ds->sample_bytes, extra, room->source,
             (unsigned long long)room->amount, fit,
             which == DEV_SHM
                 ? "; or enlarge /dev/shm, or use memfd segments "
                   "(FL_SHARE_FILE_DESCRIPTOR without fd_in_dev_shm)"
                 : "");
  return code;
}

/* A process per worker: fork would fail with EAGAIN past RLIMIT_NPROC. */
static int
admit_processes(const fl_options *opt, char *err, size_t errlen)
{
  fl__room room;

  fl__room_processes(&room, opt->num_workers);
  if (opt->num_workers <= room.amount)
    return 0;
  if (room.amount > 0)
    snprintf(err, errlen, "the loader forks %u worker processes, but %s "
             "leaves room for %llu: num_workers %llu fits; or raise "
             "`ulimit -u`", opt->num_workers, room.source,
             (unsigned long long)room.amount,
             (unsigned long long)room.amount);
  else
    snprintf(err, errlen, "the loader forks %u worker processes, but %s "
             "leaves room for none: num_workers 0 loads in this process; "
             "or raise `ulimit -u`", opt->num_workers, room.source);
  return FL_EAGAIN;
}

int
fl__plan_admit(const fl__plan *p, const fl_dataset *ds, const fl_options *opt,
               int iterable, char *err, size_t errlen)
{
  fl__room room;
  int workers = opt->num_workers > 0, rc;

  fl__room_memory(&room);
  if (p->need > room.amount)
    return refuse(p, ds, opt, iterable, MEMORY, &room, FL_ENOMEM, err,
                  errlen);
  if (!workers)
    return 0; /* its one segment is private memory, not a file */
  fl__room_fds(&room);
  if (p->fds > room.amount)
    return refuse(p, ds, opt, iterable, FDS, &room, FL_EMFILE, err, errlen);
  if ((rc = admit_processes(opt, err, errlen)) != 0)
    return rc;
  fl__room_file_size(&room);
  if (p->layout.size > room.amount)
    return refuse(p, ds, opt, iterable, FILE_SIZE, &room, FL_ENOMEM, err,
                  errlen);
  if (opt->sharing != FL_SHARE_FILE_SYSTEM && !opt->fd_in_dev_shm)
    return 0;
  fl__room_dev_shm(&room);
  if (p->segs_bytes > room.amount)
    return refuse(p, ds, opt, iterable, DEV_SHM, &room, FL_ENOSPC, err,
                  errlen);
  return 0;
}
