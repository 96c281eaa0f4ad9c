/*
 * The sampler: which dataset indices each epoch visits, in what order, and
 * how they are cut into batches: 0 to len - 1 or a list of the caller's,
 * either shuffled as torch.randperm would, or the order a sampler function
 * of the caller's writes; then this rank's share of it, as PyTorch's
 * DistributedSampler takes (or, resuming on another world size, of what
 * was left of it).  It runs only in the parent; the share is written into
 * a mapping the workers share, and a task names a span of it.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* splitmix64's finaliser: a bijective mix with good avalanche. */
uint64_t
fl__mix64(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

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
fl__sampler_batches(const fl__sampler *s)
{
  if (s->drop_last)
    return s->n / s->batch_size;
  return s->n / s->batch_size + (s->n % s->batch_size != 0);
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
 * Rank r's share of list (m indices), written from order[0] on, in place:
 * position j takes list[r + j * W], at or after j, so it is read before it
 * is overwritten.  Padding repeats the list's first indices (all of them,
 * as often as it takes, when m < W), which are saved first.
 */
static int
shard(fl__sampler *s, size_t *order, const size_t *list, size_t m,
      char *err, size_t errlen)
{
  size_t n = fl__shard_len(s->mode, m, s->world, s->rank), j, k;
  size_t nstash = m < s->world ? m : s->world, *stash = NULL;

  if (s->world > 1 && n * s->world > m) {
    stash = malloc(nstash * sizeof(*stash));
    if (stash == NULL) {
      snprintf(err, errlen, "out of memory for the padding of rank %u's "
               "share", s->rank);
      return FL_ENOMEM;
    }
    memcpy(stash, list, nstash * sizeof(*stash));
  }
  for (j = 0; j < n; j++) {
    k = s->rank + j * (size_t)s->world;
    order[j] = k < m ? list[k] : stash[(k - m) % m];
  }
  free(stash);
  s->n = n;
  return 0;
}

int
fl__sampler_fill(fl__sampler *s, uint64_t epoch, size_t *order, char *err,
                 size_t errlen)
{
  size_t i;

  if (s->fn != NULL)
    return custom_order(s, epoch, order, err, errlen);
  s->m = s->base;
  for (i = 0; i < s->m; i++)
    order[i] = s->custom != NULL ? s->custom[i] : i;
  /* DistributedSampler's generator: seeded with seed + epoch. */
  if (s->shuffle)
    fl__randperm(s->seed + epoch, order, s->m);
  return 0;
}

int
fl__sampler_shard(fl__sampler *s, size_t start, size_t *order, char *err,
                  size_t errlen)
{
  s->start = start < s->m ? start : s->m;
  return shard(s, order, order + s->start, s->m - s->start, err, errlen);
}

int
fl__sampler_order(fl__sampler *s, uint64_t epoch, size_t start,
                  size_t *order, char *err, size_t errlen)
{
  int rc = fl__sampler_fill(s, epoch, order, err, errlen);

  return rc != 0 ? rc : fl__sampler_shard(s, start, order, err, errlen);
}
