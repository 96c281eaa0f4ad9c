/*
 * splitmix64's finaliser, the one hash every part of the library draws
 * from (the sampler's seeds, the bijection's keys, the moved table's
 * slots, segment names, fault draws): in a file of its own, below them
 * all.
 */
#include "config.h"

#include "internal.h"

/* A bijective mix with good avalanche. */
uint64_t
fl__mix64(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
