/*
 * The sampler: which dataset indices each epoch visits, in what order, and
 * how they are cut into batches: 0 to len - 1 or a list of the caller's,
 * either shuffled (as torch.randperm would, or by a keyed bijection), or
 * the order a sampler function of the caller's writes; then this rank's
 * share of it, as PyTorch's DistributedSampler takes (or, resuming on
 * another world size, of what was left of it).  The parent decides the
 * epoch's order in a mapping the workers share; a task names a span of the
 * share's positions, and the worker turns them into indices itself, so
 * that no order need exist beyond what the shuffle keeps.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A lazy entry packs a 32-bit tag and a value below 2^32 in a size_t. */
_Static_assert(sizeof(size_t) == 8, "forkload needs a 64-bit size_t");

/*
 * A seed for one use in one epoch, a pure function of its arguments, so
 * that epoch e's permutation does not depend on what came before it.
 */
uint64_t
fl__epoch_seed(uint64_t seed, uint64_t epoch, uint64_t stream)
{
  return fl__mix64(fl__mix64(fl__mix64(seed) ^ epoch) ^ stream);
}

size_t
fl__batches(size_t n, size_t batch_size, int drop_last)
{
  if (drop_last)
    return n / batch_size;
  return n / batch_size + (n % batch_size != 0);
}

size_t
fl__sampler_batches(const fl__sampler *s)
{
  return fl__batches(s->n, s->batch_size, s->drop_last);
}

void
fl__sampler_span(const fl__sampler *s, uint64_t seq, size_t *offset,
                 size_t *count)
{
  size_t off = (size_t)seq * s->batch_size;
  size_t left = s->n - off;

  *offset = off;
  *count = left < s->batch_size ? left : s->batch_size;
}

/*
 * A sampler of the caller's: its order for the epoch, checked.  It may
 * return fewer than cap indices; the epoch then has fewer batches.
 */
static int
custom_order(fl__sampler *s, uint64_t epoch, size_t *order, char *err,
             size_t errlen)
{
  size_t i, n = s->fn(s->fn_ctx, epoch, order, s->base);

  if (n > s->base) {
    snprintf(err, errlen, "sampler returned %zu for epoch %llu, more than "
             "sampler_len %zu", n, (unsigned long long)epoch, s->base);
    return FL_EINVAL;
  }
  for (i = 0; i < n; i++) {
    if (order[i] >= s->len) {
      snprintf(err, errlen, "sampler: order[%zu] is %zu in epoch %llu, out "
               "of range for a dataset of %zu", i, order[i],
               (unsigned long long)epoch, s->len);
      return FL_EINVAL;
    }
  }
  s->m = n;
  return 0;
}

/* The length of rank r's share of m indices split among W. */
size_t
fl__shard_len(fl_shard_mode mode, size_t m, unsigned w, unsigned r)
{
  switch (mode) {
  case FL_SHARD_TRIM:
    return m / w;
  case FL_SHARD_UNEVEN:
    return r < m ? (m - r - 1) / w + 1 : 0;
  default:
    return m / w + (m % w != 0);
  }
}

/*
 * The lazy order's moved values: room for the swaps of the window's
 * batches twice over (what the first batch waits for), at most 65536 in
 * 131072 slots (2 MB), and never more than a byte a sample beside the
 * table's 8; 0 where the order is not lazy or is too small for it.
 */
size_t
fl__order_moved_slots(const fl_options *opt, size_t n, size_t window)
{
  size_t most = (size_t)1 << 17, slots = 1024, swaps;

  if (opt->sampler != NULL || !opt->shuffle ||
      opt->shuffle_algorithm != FL_SHUFFLE_TORCH ||
      n >= FL__RANDPERM_NARROW_MAX)
    return 0;
  if (__builtin_mul_overflow(window, opt->batch_size, &swaps) ||
      __builtin_mul_overflow(swaps, (size_t)opt->world_size * 4, &swaps))
    swaps = most;
  while (slots < swaps && slots < most)
    slots <<= 1;
  return 2 * slots * sizeof(size_t) <= n ? slots : 0;
}

void
fl__sampler_free(fl__sampler *s)
{
  fl__moved_free(&s->moved);
  free((void *)s->custom);
  s->custom = NULL;
}

/* Only a sampler's order and torch's are kept, 8 bytes a position. */
int
fl__order_table(const fl_options *opt)
{
  return opt->sampler != NULL ||
         (opt->shuffle && opt->shuffle_algorithm == FL_SHUFFLE_TORCH);
}

int
fl__sampler_fill(fl__sampler *s, fl__order *o, uint64_t epoch, char *err,
                 size_t errlen)
{
  size_t i;
  int rc = 0;

  o->start = 0;
  s->m = s->base;
  if (s->fn != NULL) {
    o->kind = FL__ORDER_TABLE;
    rc = custom_order(s, epoch, o->table, err, errlen);
  } else if (!s->shuffle) {
    o->kind = FL__ORDER_IDENTITY;
  } else if (s->algorithm == FL_SHUFFLE_BIJECTION) {
    o->kind = FL__ORDER_BIJECTION;
    fl__bijection_init(&o->bijection, fl__epoch_seed(s->seed, epoch, 3),
                       s->m);
  } else if (s->m < FL__RANDPERM_NARROW_MAX) {
    /*
     * DistributedSampler's generator, seeded with seed + epoch.  Forward
     * Fisher-Yates fixes position i at swap i, so batches are drawn as
     * they are sent.  A new tag undoes the last epoch's entries without a
     * pass over them; they are cleared only when the tag wraps (once in
     * 2^32 epochs), and are zero in a new mapping.
     */
    fl__mt_seed(&s->mt, s->seed + epoch);
    s->drawn = 0;
    o->kind = FL__ORDER_LAZY;
    fl__moved_clear(&s->moved);
    s->spilled = 0;
    if (++o->tag == 0) {
      memset(o->table, 0, s->base * sizeof(*o->table));
      o->tag = 1;
    }
  } else {
    /* torch's inside-out shuffle moves every position to its end. */
    o->kind = FL__ORDER_TABLE;
    for (i = 0; i < s->m; i++)
      o->table[i] = i;
    fl__randperm(s->seed + epoch, o->table, s->m);
  }
  o->m = s->m;
  return rc;
}

void
fl__sampler_shard(fl__sampler *s, fl__order *o, size_t start)
{
  s->start = start < s->m ? start : s->m;
  o->start = s->start;
  s->n = fl__shard_len(s->mode, s->m - s->start, s->world, s->rank);
}

int
fl__sampler_order(fl__sampler *s, fl__order *o, uint64_t epoch,
                  size_t start, char *err, size_t errlen)
{
  int rc = fl__sampler_fill(s, o, epoch, err, errlen);

  if (rc == 0)
    fl__sampler_shard(s, o, start);
  return rc;
}

/*
 * The order's position that share position j reads: rank r's j-th is the
 * list's r + j * W, and beyond the list, padding repeats it from its
 * start (as often as it takes, when the list is shorter than W).
 */
static size_t
position(const fl__sampler *s, const fl__order *o, size_t j)
{
  size_t left = o->m - o->start, k = s->rank + j * (size_t)s->world;

  return o->start + (k < left ? k : (k - left) % left);
}

/* A lazy entry: drawn this epoch, or still where it started. */
static size_t
lazy_get(const fl__order *o, size_t p)
{
  uint64_t e = o->table[p];

  return e >> 32 == o->tag ? (uint32_t)e : p;
}

static void
lazy_put(fl__order *o, size_t p, size_t v)
{
  o->table[p] = (size_t)o->tag << 32 | v;
}

/*
 * torch's narrow swaps (fl__randperm_narrow) up to position p.  Swap i
 * fixes position i in the shared table, where the workers read it, and
 * moves its value ahead to z: into the parent's table of moved values
 * while it has room, else into the shared one.  Until the first such
 * spill, no entry ahead of the frontier is of this epoch, so none is read.
 */
static void
draw_to(fl__sampler *s, fl__order *o, size_t p)
{
  size_t i, z, vi, vz;

  for (i = s->drawn; i <= p && i + 1 < s->m; i++) {
    z = i + fl__mt_next(&s->mt) % (s->m - i);
    if (!fl__moved_take(&s->moved, i, &vi))
      vi = lazy_get(o, i);
    if (z == i)
      vz = vi;
    else if (!fl__moved_get(&s->moved, z, &vz))
      vz = s->spilled ? lazy_get(o, z) : z;
    lazy_put(o, i, vz);
    if (z != i && fl__moved_put(&s->moved, z, vi) != 0) {
      lazy_put(o, z, vi);
      s->spilled = 1;
    }
  }
  /* The last position is fixed with the swap before it. */
  if (i + 1 == s->m && fl__moved_take(&s->moved, i, &vi))
    lazy_put(o, i, vi);
  s->drawn = i;
}

void
fl__sampler_batch(fl__sampler *s, fl__order *o, uint64_t seq,
                  size_t *offset, size_t *count)
{
  size_t j, p, last = 0;

  fl__sampler_span(s, seq, offset, count);
  if (o->kind != FL__ORDER_LAZY)
    return;
  for (j = *offset; j < *offset + *count; j++) {
    p = position(s, o, j);
    last = p > last ? p : last;
  }
  if (*count > 0)
    draw_to(s, o, last);
}

void
fl__sampler_indices(const fl__sampler *s, const fl__order *o, size_t offset,
                    size_t count, size_t *out)
{
  size_t i, p, v;

  for (i = 0; i < count; i++) {
    p = position(s, o, offset + i);
    switch (o->kind) {
    case FL__ORDER_TABLE:
      v = o->table[p];
      break;
    case FL__ORDER_LAZY:
      v = lazy_get(o, p);
      break;
    case FL__ORDER_BIJECTION:
      v = fl__bijection_at(&o->bijection, p);
      break;
    default:
      v = p;
    }
    out[i] = s->custom != NULL ? s->custom[v] : v;
  }
}
