/*
 * libFuzzer target for forkload's BMP reader through the image stage:
 * every input is made to start with "BM" (fuzz_format.h).
 */
#include "config.h"

#include <stddef.h>
#include <string.h>

#define FUZZ_FORMAT "bmp"

static void
fuzz_sign(unsigned char *b, size_t n)
{
  if (n >= 2)
    memcpy(b, "BM", 2);
}

#include "fuzz_format.h"
