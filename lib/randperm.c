/*
 * PyTorch's CPU generator and its randperm, so that a shuffled epoch is the
 * permutation torch draws from the same seed: a DistributedSampler user
 * moving a run to forkload sees the same order, rank by rank.  The
 * generator is MT19937 seeded with init_genrand from the seed's low 32
 * bits, as torch.Generator().manual_seed is.
 */
#include "config.h"

#include "internal.h"

#define MT_N 624
#define MT_M 397

void
fl__mt_seed(fl__mt *mt, uint64_t seed)
{
  unsigned k;

  mt->s[0] = (uint32_t)seed;
  for (k = 1; k < MT_N; k++)
    mt->s[k] = 1812433253u * (mt->s[k - 1] ^ (mt->s[k - 1] >> 30)) + k;
  mt->i = MT_N;
}

static void
twist(fl__mt *mt)
{
  uint32_t y;
  unsigned k;

  for (k = 0; k < MT_N; k++) {
    y = (mt->s[k] & 0x80000000u) | (mt->s[(k + 1) % MT_N] & 0x7fffffffu);
    mt->s[k] = mt->s[(k + MT_M) % MT_N] ^ (y >> 1) ^
               ((y & 1) ? 0x9908b0dfu : 0);
  }
  mt->i = 0;
}

uint32_t
fl__mt_next(fl__mt *mt)
{
  uint32_t y;

  if (mt->i >= MT_N)
    twist(mt);
  y = mt->s[mt->i++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  return y ^ (y >> 18);
}

/* torch's random64(): the first draw is the high half. */
static uint64_t
next64(fl__mt *mt)
{
  uint64_t hi = fl__mt_next(mt);

  return hi << 32 | fl__mt_next(mt);
}

void
fl__randperm_narrow(fl__mt *mt, size_t *a, size_t n)
{
  size_t i, z, t;

  for (i = 0; i + 1 < n; i++) {
    z = fl__mt_next(mt) % (n - i);
    t = a[i];
    a[i] = a[i + z];
    a[i + z] = t;
  }
}

/*
 * torch 2's path for large n ("inside-out" Fisher-Yates with 64-bit
 * draws, where a 32-bit modulus would be biased).  torch 1.13 keeps the
 * narrow path for every n; the two agree below the threshold.
 */
void
fl__randperm_wide(fl__mt *mt, size_t *a, size_t n)
{
  size_t i, z, t;

  for (i = 0; i < n; i++) {
    z = (size_t)(next64(mt) % (i + 1));
    t = a[i];
    a[i] = a[z];
    a[z] = t;
  }
}

void
fl__randperm(uint64_t seed, size_t *a, size_t n)
{
  fl__mt mt;

  fl__mt_seed(&mt, seed);
  if (n < FL__RANDPERM_NARROW_MAX)
    fl__randperm_narrow(&mt, a, n);
  else
    fl__randperm_wide(&mt, a, n);
}
