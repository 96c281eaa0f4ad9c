/*
 * A loader's place, saved and loaded: the epoch, where its list starts in
 * the order, and which batches fl_loader_next has handed out (those count
 * as consumed; batches prefetched but not handed out are made again).  The
 * blob is little-endian with a checksum, and its size depends on the
 * prefetch window and the workers, never on the dataset or the epoch.  A
 * state saved in order may be loaded on another world size: what was left
 * of its epoch is split among the new ranks (the elastic rule).  Version 2
 * is version 1 with the bijection's flag: a state is written as version 1
 * unless it has it, so that a library that knows only 1 refuses exactly
 * the states whose order it cannot make.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define STATE_MAGIC 0x54534c46u /* "FLST" */
#define STATE_VERSION 2
#define STATE_HEAD 112

enum {
  STATE_IN_ORDER = 0x1,
  STATE_ITERABLE = 0x2,
  STATE_SHUFFLE = 0x4,
  STATE_BIJECTION = 0x8 /* shuffled by FL_SHUFFLE_BIJECTION (version 2) */
};

/* The version a state of these flags is written as. */
static unsigned
version_of(unsigned flags)
{
  return flags & STATE_BIJECTION ? 2 : 1;
}

static unsigned
bijection_flag(const fl_loader *l)
{
  return l->opt.shuffle && l->opt.shuffle_algorithm == FL_SHUFFLE_BIJECTION
             ? STATE_BIJECTION
             : 0;
}

/* FNV-1a, 64 bits: a torn or edited blob is told from a good one. */
static uint64_t
fnv64(const unsigned char *p, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ull;

  while (n-- > 0)
    h = (h ^ *p++) * 0x100000001b3ull;
  return h;
}

static void
put(unsigned char *p, uint64_t v, int bytes)
{
  int i;

  for (i = 0; i < bytes; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t
get(const unsigned char *p, int bytes)
{
  uint64_t v = 0;
  int i;

  for (i = bytes - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* Which list the order is made from: 0 for 0..len-1, else a hash of it. */
uint64_t
fl__state_indices_hash(const fl_loader *l)
{
  const size_t *v = l->sampler.custom;
  unsigned char b[8];
  uint64_t h = 0;
  size_t i;

  for (i = 0; v != NULL && i < l->sampler.base; i++) {
    put(b, v[i], 8);
    h = fl__mix64(h ^ fnv64(b, 8));
  }
  return v != NULL ? h | 1 : 0;
}

static int
cmp_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

  return x < y ? -1 : x > y;
}

/*
 * The batches of the epoch under way that are not handed out, below the
 * next one to be asked for: those being filled or waiting (their slots),
 * and those a resume has yet to ask for.  At most the window.
 */
static size_t
not_handed(const fl_loader *l, uint64_t *out, size_t cap)
{
  const fl_batch *b;
  size_t n = 0, s, i;

  for (s = 0; s < l->nslots; s++) {
    b = l->slots[s];
    if (b != NULL && !b->end &&
        (b->state == FL__SLOT_TASKED || b->state == FL__SLOT_READY ||
         b->state == FL__SLOT_REFETCH) && n < cap)
      out[n++] = b->seq;
  }
  for (i = l->resume.itodo; i < l->resume.place.ntodo && n < cap; i++)
    out[n++] = l->resume.place.todo[i];
  qsort(out, n, sizeof(*out), cmp_u64);
  return n;
}

static void *
dup_u64(const uint64_t *v, size_t n)
{
  uint64_t *d = malloc((n ? n : 1) * sizeof(*d));

  if (d != NULL && n > 0)
    memcpy(d, v, n * sizeof(*d));
  return d;
}

/* Where the loader stands, as a state would say it; p's lists are its
   own. */
static int
take_place(const fl_loader *l, struct fl__place *p)
{
  size_t cap = l->window + l->resume.place.ntodo + 1, npos;
  unsigned w;

  npos = l->opt.num_workers ? l->opt.num_workers : 1;
  memset(p, 0, sizeof(*p));
  p->flags = (l->opt.in_order ? STATE_IN_ORDER : 0) |
             (l->iterable ? STATE_ITERABLE : 0) |
             (l->opt.shuffle ? STATE_SHUFFLE : 0) | bijection_flag(l);
  p->world = l->opt.world_size;
  p->rank = l->opt.rank;
  p->nworkers = l->opt.num_workers;
  if (l->resume.armed) {
    /* Loaded and not begun yet: the same state again, flags and all. */
    *p = l->resume.place;
    p->todo = dup_u64(l->resume.place.todo, p->ntodo);
    p->pos = l->iterable ? dup_u64(l->resume.place.pos, npos) : NULL;
    return p->todo == NULL || (l->iterable && p->pos == NULL) ? FL_ENOMEM
                                                               : 0;
  }
  p->todo = malloc(cap * sizeof(*p->todo));
  p->pos = calloc(npos, sizeof(*p->pos));
  if (p->todo == NULL || p->pos == NULL)
    return FL_ENOMEM;
  if (!l->in_epoch || l->epoch_over ||
      (!l->iterable && l->delivered == l->nbatches)) {
    /* Between epochs: the next one, from its start. */
    p->epoch = l->next_epoch;
    return 0;
  }
  p->epoch = l->epoch;
  p->start = l->sampler.start;
  if (l->iterable) {
    p->pos[0] = l->stream.pos;
    for (w = 0; w < l->opt.num_workers; w++)
      p->pos[w] = l->workers[w].consumed;
    p->w_next = l->opt.num_workers
                    ? (l->last_worker + 1) % l->opt.num_workers
                    : 0;
    return 0;
  }
  p->ntodo = not_handed(l, p->todo, cap);
  p->first = p->ntodo > 0 ? p->todo[0] : l->plain;
  p->next = l->plain;
  if (l->opt.in_order) {
    /* In order, all from the first not handed out on are due. */
    p->next = p->first;
    p->ntodo = 0;
  }
  return 0;
}

static size_t
state_size(const fl_loader *l, const struct fl__place *p)
{
  return STATE_HEAD + 8 * p->ntodo +
         (l->iterable ? 8 * (size_t)(l->opt.num_workers ? l->opt.num_workers
                                                         : 1)
                      : 0) +
         8;
}

static void
place_free(struct fl__place *p)
{
  free(p->todo);
  free(p->pos);
  p->todo = NULL;
  p->pos = NULL;
}

int
fl_loader_state_save(const fl_loader *l, void *buf, size_t cap)
{
  struct fl__place p;
  unsigned char *o = buf;
  size_t need, i, at, npos;
  int rc;

  if (l == NULL || (buf == NULL && cap != 0))
    return FL_EINVAL;
  if (FL__FOREIGN(l))
    return fl__loader_foreign(l, "fl_loader_state_save");
  if ((rc = take_place(l, &p)) != 0)
    goto out;
  need = state_size(l, &p);
  if (buf == NULL || cap < need) {
    rc = buf == NULL ? (int)need : FL_ENOSPC;
    goto out;
  }
  memset(o, 0, need);
  put(o, STATE_MAGIC, 4);
  put(o + 4, version_of(p.flags), 2);
  put(o + 6, p.flags, 2);
  put(o + 8, need, 4);
  put(o + 16, p.epoch, 8);
  put(o + 24, l->iterable ? 0 : l->ds.len, 8);
  put(o + 32, l->sampler.base, 8);
  put(o + 40, l->opt.batch_size, 8);
  put(o + 48, l->opt.seed, 8);
  put(o + 56, fl__state_indices_hash(l), 8);
  put(o + 64, p.world, 4);
  put(o + 68, p.rank, 4);
  put(o + 72, (uint64_t)l->opt.shard_mode, 4);
  put(o + 76, l->opt.num_workers, 4);
  put(o + 80, p.start, 8);
  put(o + 88, p.first, 8);
  put(o + 96, p.next, 8);
  put(o + 104, p.ntodo, 4);
  put(o + 108, p.w_next, 4);
  at = STATE_HEAD;
  for (i = 0; i < p.ntodo; i++, at += 8)
    put(o + at, p.todo[i], 8);
  npos = l->iterable ? (l->opt.num_workers ? l->opt.num_workers : 1) : 0;
  for (i = 0; i < npos; i++, at += 8)
    put(o + at, p.pos[i], 8);
  put(o + at, fnv64(o, at), 8);
  rc = (int)need;
out:
  place_free(&p);
  return rc;
}

/* A field of the state that must match the loader's, or FL_EINVAL. */
static int
same(fl_loader *l, const char *field, uint64_t saved, uint64_t here)
{
  if (saved == here)
    return 0;
  return fl__loader_set_error(l, FL_EINVAL,
                              "fl_loader_state_load: the state was saved "
                              "with %s %llu, and this loader has %llu",
                              field, (unsigned long long)saved,
                              (unsigned long long)here);
}

static int
corrupt(fl_loader *l, const char *why)
{
  return fl__loader_set_error(l, FL_EINVAL,
                              "fl_loader_state_load: not a loader state "
                              "forkload can read: %s", why);
}

/* The blob's frame: magic, version, size and checksum. */
static int
check_frame(fl_loader *l, const unsigned char *in, size_t len)
{
  size_t size;

  if (len < STATE_HEAD + 8)
    return corrupt(l, "shorter than its header");
  if (get(in, 4) != STATE_MAGIC)
    return corrupt(l, "no FLST magic at its start");
  if (get(in + 4, 2) < 1 || get(in + 4, 2) > STATE_VERSION)
    return corrupt(l, "a version this library does not know");
  size = (size_t)get(in + 8, 4);
  if (size != len)
    return corrupt(l, size > len ? "cut short" : "longer than it says");
  if (get(in + len - 8, 8) != fnv64(in, len - 8))
    return corrupt(l, "its checksum does not match (changed or torn)");
  return 0;
}

/* What the state's fields must agree with in this loader. */
static int
check_match(fl_loader *l, const unsigned char *in, const struct fl__place *p,
            unsigned flags)
{
  int rc;

  if (((flags & STATE_ITERABLE) != 0) != (l->iterable != 0))
    return fl__loader_set_error(
        l, FL_EINVAL, "fl_loader_state_load: the state is of %s dataset "
                      "and this loader reads %s one",
        flags & STATE_ITERABLE ? "an iterable" : "a map-style",
        l->iterable ? "an iterable" : "a map-style");
  if ((rc = same(l, "dataset len", get(in + 24, 8),
                 l->iterable ? 0 : l->ds.len)) ||
      (rc = same(l, "an order of length (len, indices_len or sampler_len)",
                 get(in + 32, 8), l->sampler.base)) ||
      (rc = same(l, "batch_size", get(in + 40, 8), l->opt.batch_size)) ||
      (rc = same(l, "seed", get(in + 48, 8), l->opt.seed)) ||
      (rc = same(l, "shuffle", (flags & STATE_SHUFFLE) != 0,
                 l->opt.shuffle != 0)) ||
      (rc = same(l, "shuffle_algorithm", (flags & STATE_BIJECTION) != 0,
                 bijection_flag(l) != 0)) ||
      (rc = same(l, "shard_mode", get(in + 72, 4),
                 (uint64_t)l->opt.shard_mode)))
    return rc;
  if (get(in + 56, 8) != fl__state_indices_hash(l))
    return fl__loader_set_error(l, FL_EINVAL,
                                "fl_loader_state_load: the state was saved "
                                "with another indices list than this "
                                "loader's");
  if (l->iterable && ((rc = same(l, "num_workers", p->nworkers,
                                 l->opt.num_workers)) ||
                      (rc = same(l, "world_size", p->world,
                                 l->opt.world_size))))
    return rc;
  if (!(flags & STATE_IN_ORDER) && !l->iterable &&
      ((rc = same(l, "world_size (with in_order 0 a state goes back to its "
                     "own rank only)", p->world, l->opt.world_size)) ||
       (rc = same(l, "rank (with in_order 0 each rank loads its own state)",
                  p->rank, l->opt.rank))))
    return rc;
  if (!(flags & STATE_IN_ORDER) && !l->iterable && l->opt.in_order)
    return fl__loader_set_error(l, FL_EINVAL,
                                "fl_loader_state_load: the state was saved "
                                "with in_order 0, and this loader hands "
                                "batches out in order: load it into a "
                                "loader with in_order 0");
  return 0;
}

/* The place a checked blob describes; todo and pos are allocated. */
static int
read_place(fl_loader *l, const unsigned char *in, size_t len,
           struct fl__place *p)
{
  size_t i, at = STATE_HEAD, npos;
  int rc;

  memset(p, 0, sizeof(*p));
  p->flags = (unsigned)get(in + 6, 2);
  p->epoch = get(in + 16, 8);
  p->world = (unsigned)get(in + 64, 4);
  p->rank = (unsigned)get(in + 68, 4);
  p->nworkers = (unsigned)get(in + 76, 4);
  p->start = get(in + 80, 8);
  p->first = get(in + 88, 8);
  p->next = get(in + 96, 8);
  p->ntodo = (size_t)get(in + 104, 4);
  p->w_next = (unsigned)get(in + 108, 4);
  npos = (p->flags & STATE_ITERABLE) ? (p->nworkers ? p->nworkers : 1) : 0;
  /* In order, every batch from the first not handed out on is due: such
     a state lists none and asks for nothing beyond it. */
  if (p->world == 0 || p->rank >= p->world || p->first > p->next ||
      get(in + 4, 2) != version_of(p->flags) ||
      ((p->flags & STATE_BIJECTION) && !(p->flags & STATE_SHUFFLE)) ||
      ((p->flags & STATE_IN_ORDER) &&
       (p->ntodo > 0 || p->next != p->first)) ||
      (npos > 0 && p->nworkers > 0 && p->w_next >= p->nworkers) ||
      len != STATE_HEAD + 8 * (p->ntodo + npos) + 8)
    return corrupt(l, "its fields do not hold together");
  p->todo = malloc((p->ntodo ? p->ntodo : 1) * sizeof(*p->todo));
  p->pos = malloc((npos ? npos : 1) * sizeof(*p->pos));
  if (p->todo == NULL || p->pos == NULL) {
    rc = fl__loader_set_error(l, FL_ENOMEM, "out of memory");
    goto fail;
  }
  for (i = 0; i < p->ntodo; i++, at += 8) {
    p->todo[i] = get(in + at, 8);
    if (p->todo[i] < p->first || p->todo[i] >= p->next ||
        (i > 0 && p->todo[i] <= p->todo[i - 1])) {
      rc = corrupt(l, "its list of batches not handed out is not in order");
      goto fail;
    }
  }
  for (i = 0; i < npos; i++, at += 8)
    p->pos[i] = get(in + at, 8);
  return 0;

fail:
  place_free(p);
  return rc;
}

void
fl__resume_clear(fl_loader *l)
{
  place_free(&l->resume.place);
  memset(&l->resume, 0, sizeof(l->resume));
}

int
fl_loader_state_load(fl_loader *l, const void *buf, size_t len)
{
  const unsigned char *in = buf;
  struct fl__place p;
  unsigned flags;
  int rc;

  if (l == NULL)
    return FL_EINVAL;
  if (FL__FOREIGN(l))
    return fl__loader_foreign(l, "fl_loader_state_load");
  if (l->fatal)
    return l->fatal;
  if (l->in_epoch && !l->epoch_over)
    return fl__loader_set_error(l, FL_ESTATE,
                                "fl_loader_state_load: an epoch is under "
                                "way: load a state before the first "
                                "fl_loader_begin or after an epoch ended");
  if (buf == NULL)
    return corrupt(l, "buf is NULL");
  if ((rc = check_frame(l, in, len)) != 0)
    return rc;
  if ((rc = read_place(l, in, len, &p)) != 0)
    return rc;
  flags = p.flags;
  if ((rc = check_match(l, in, &p, flags)) != 0) {
    place_free(&p);
    return rc;
  }
  fl__resume_clear(l);
  l->resume.armed = 1;
  l->resume.place = p;
  l->next_epoch = p.epoch;
  return 0;
}

/*
 * At fl_loader_begin of the saved epoch (map-style): where this rank's
 * list starts in the order, and how many of its batches were handed out.
 * The same world resumes each rank's share where it stood; another one
 * (in order only) splits what was left: ranks consumed in lockstep, so
 * batches x batch_size x the saved world size of the list are gone.
 */
void
fl__resume_start(const fl_loader *l, size_t m, size_t *start,
                 uint64_t *first)
{
  const struct fl__place *p = &l->resume.place;
  uint64_t gone;

  if (p->world == l->opt.world_size) {
    *start = p->start;
    *first = p->first;
    return;
  }
  *start = p->start < m ? p->start : m;
  if (__builtin_mul_overflow(p->first, (uint64_t)l->opt.batch_size, &gone) ||
      __builtin_mul_overflow(gone, (uint64_t)p->world, &gone) ||
      gone > m - *start)
    gone = m - *start;
  *start += (size_t)gone;
  *first = 0;
}
