/*
 * libFuzzer target for the TIFF decoder (libtiff) through the image
 * stage: every input is made a little- or big-endian TIFF header
 * (fuzz_format.h).
 */
#include "config.h"

#include <stddef.h>
#include <string.h>

#define FUZZ_FORMAT "tiff"

static void
fuzz_sign(unsigned char *b, size_t n)
{
  if (n >= 4)
    memcpy(b, b[0] == 'M' ? "MM\0*" : "II*\0", 4);
}

#include "fuzz_format.h"
