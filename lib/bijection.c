/*
 * FL_SHUFFLE_BIJECTION: a keyed pseudo-random permutation of [0, m) that
 * gives the value at any position in O(1) time and no memory, so that an
 * epoch of 10^10 samples is shuffled without an order in memory.  A
 * Feistel network permutes the b-bit numbers, 2^b the power of two at or
 * above m; a value at or above m is fed through again (cycle-walking),
 * which stays in [0, m) because the network is a permutation of [0, 2^b)
 * and returns, on fewer than two passes on average since 2^b < 2m.
 */
#include "config.h"

#include "internal.h"

/*
 * Rounds: with halves of 2 bits or more, 8 put every index at every
 * position equally often within sampling noise (sampler_test measures
 * n = 9 to 17 over 200000 keys); with 1-bit halves the round functions
 * are too few to mix in 8, and 24 do.  A round costs about 9 ns.
 */
#define ROUNDS 8
#define ROUNDS_NARROW FL__BIJECTION_ROUNDS_MAX

static uint64_t
mask(unsigned bits)
{
  return bits == 0 ? 0 : ~0ull >> (64 - bits);
}

void
fl__bijection_init(fl__bijection *b, uint64_t key, uint64_t m)
{
  unsigned r;

  b->m = m;
  b->bits = m > 1 ? 64 - (unsigned)__builtin_clzll(m - 1) : 0;
  b->rounds = b->bits < 4 ? ROUNDS_NARROW : ROUNDS;
  for (r = 0; r < b->rounds; r++)
    b->keys[r] = fl__mix64(key + r);
}

/*
 * One pass of the network over b bits, x = L:R with L the high hi bits
 * and R the low lo.  A round makes R the high part and L ^ F(R) the low:
 * invertible whatever F, and an odd b only swaps the halves' widths.
 */
static uint64_t
feistel(const fl__bijection *b, uint64_t x)
{
  unsigned lo = b->bits / 2, hi = b->bits - lo, t, r;
  uint64_t left, right;

  for (r = 0; r < b->rounds; r++) {
    left = x >> lo;
    right = x & mask(lo);
    x = right << hi | ((left ^ fl__mix64(right ^ b->keys[r])) & mask(hi));
    t = lo;
    lo = hi;
    hi = t;
  }
  return x;
}

uint64_t
fl__bijection_at(const fl__bijection *b, uint64_t p)
{
  if (b->m <= 1)
    return 0;
  do
    p = feistel(b, p);
  while (p >= b->m);
  return p;
}
