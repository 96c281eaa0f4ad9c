/*
 * Canaries: a known word right after the room a dataset's call may write,
 * planted before the call (fetch, and grow when a batch moves) and looked
 * at after it: a contiguous overrun starts there, so it cannot go
 * unnoticed (the segment's guard holds the last one).
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "internal.h"

static const uint64_t canary = 0x5a17c0ffee0dd5a1ull;

void
fl__canary_plant(unsigned char *at)
{
  memcpy(at, &canary, sizeof(canary));
}

int
fl__canary_trampled(const unsigned char *at)
{
  return memcmp(at, &canary, sizeof(canary)) != 0;
}
