/*
 * libFuzzer target for forkload's PPM and PGM reader through the image
 * stage: every input is made to start with P1 to P6, mostly P5 and P6
 * (fuzz_format.h).
 */
#include "config.h"

#include <stddef.h>

#define FUZZ_FORMAT "pnm"

static void
fuzz_sign(unsigned char *b, size_t n)
{
  if (n >= 2) {
    b[0] = 'P';
    if (b[1] < '1' || b[1] > '6')
      b[1] = (unsigned char)('5' + (b[1] & 1));
  }
}

#include "fuzz_format.h"
