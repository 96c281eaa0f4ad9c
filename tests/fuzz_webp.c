/*
 * libFuzzer target for the WebP decoder (libwebp) through the image
 * stage: every input is made a RIFF WEBP container (fuzz_format.h).
 */
#include "config.h"

#include <stddef.h>
#include <string.h>

#define FUZZ_FORMAT "webp"

static void
fuzz_sign(unsigned char *b, size_t n)
{
  if (n >= 12) {
    memcpy(b, "RIFF", 4);
    memcpy(b + 8, "WEBP", 4);
  }
}

#include "fuzz_format.h"
