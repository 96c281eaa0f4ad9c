/*
 * The sampler: which dataset indices each epoch visits, in what order, and
 * how they are cut into batches: 0 to len - 1, a list of the caller's,
 * either shuffled, or the order a sampler function of the caller's writes.
 * It runs only in the parent; the order is written into a mapping the
 * workers share, and a task names a span of it.
 */
#include "config.h"

#include <stdio.h>

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

/* A uniform integer below bound (Lemire's method, without modulo bias). */
static size_t
bounded(uint64_t *state, size_t bound)
{
  uint64_t x, threshold;
  __uint128_t m;

  *state += 0x9e3779b97f4a7c15ull;
  x = fl__mix64(*state);
  m = (__uint128_t)x * bound;
  if ((uint64_t)m < bound) {
    threshold = -(uint64_t)bound % bound;
    while ((uint64_t)m < threshold) {
      *state += 0x9e3779b97f4a7c15ull;
      x = fl__mix64(*state);
      m = (__uint128_t)x * bound;
    }
  }
  return (size_t)(m >> 64);
}

/*
 * A sampler of the caller's: its order for the epoch, checked.  It may
 * return fewer than cap indices; the epoch then has fewer batches.
 */
static int
custom_order(fl__sampler *s, uint64_t epoch, size_t *order, char *err,
             size_t errlen)
{
  size_t i, n = s->fn(s->fn_ctx, epoch, order, s->cap);

  if (n > s->cap) {
    snprintf(err, errlen, "sampler returned %zu for epoch %llu, more than "
             "sampler_len %zu", n, (unsigned long long)epoch, s->cap);
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
  s->n = n;
  return 0;
}

int
fl__sampler_order(fl__sampler *s, uint64_t epoch, size_t *order, char *err,
                  size_t errlen)
{
  uint64_t state;
  size_t i, j, t;

  if (s->fn != NULL)
    return custom_order(s, epoch, order, err, errlen);
  for (i = 0; i < s->n; i++)
    order[i] = s->custom != NULL ? s->custom[i] : i;
  if (!s->shuffle)
    return 0;
  /* Fisher-Yates from the back. */
  state = fl__epoch_seed(s->seed, epoch, 1);
  for (i = s->n; i > 1; i--) {
    j = bounded(&state, i);
    t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }
  return 0;
}
