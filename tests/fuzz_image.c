/*
 * libFuzzer target for the image stage, built by `make fuzz` with the
 * whole core library: arbitrary bytes through fl__image_stage_run, the
 * entry of both decoders (libjpeg-turbo, libspng), the crop and the
 * resampler.  libFuzzer hands over exactly size bytes on the heap and the
 * output is a heap buffer of exactly the stage's size, so AddressSanitizer
 * sees a read past the input or a write past the image; UBSan sees any
 * overflow in the geometry.  Whatever the bytes, the stage must return 0,
 * or FL_EDATASET with a sentence that names the file.
 *
 * The input's first byte picks the stage and the rest is the file.  Its
 * bits 0 and 1 pick one of four stages, made once: Resize + CenterCrop to
 * 16 x 16; RandomResizedCrop to 16 x 16 with a flip, as float CHW; a
 * forced box (F.resized_crop to 16 x 16, flipped if bit 7 is set) whose
 * top, left, height - 1 and width - 1 are bytes 1 to 4, the file after
 * them; Resize(10) then a CenterCrop of 24 x 20 (padding).  The whole
 * byte seeds the random crop.  max_pixels is 4,000,000, so that the time
 * goes on the decoders' paths, not on decoding huge images.  The seeds in
 * tests/fuzz_image_corpus, written by tools/golden_images.py, are small
 * JPEGs and PNGs of tests/images/decode after such a prefix.  A build
 * without the decoders has nothing to fuzz: every input returns at once.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { CENTER, RANDOM, FORCED, PADDED, NSTAGES };

static struct fl__image_stage *stages[NSTAGES];
static void *out[NSTAGES];
static int made, no_decoders;

static void
setup(void)
{
  fl_image_options io;
  int k, rc;

  made = 1;

  for (k = 0; k < NSTAGES; k++) {
    fl_image_options_init(&io);
    io.height = 16;
    io.width = 16;
    io.max_pixels = 4000000;
    if (k == RANDOM) {
      io.crop = FL_CROP_RANDOM_RESIZED;
      io.hflip = 0.5;
      io.chw_float = 1;
    } else if (k == PADDED) {
      io.resize = 10;
      io.height = 24;
      io.width = 20;
    }
    rc = fl__image_stage_new(&stages[k], &io, sizeof(io), "fuzz_image");
    if (rc == FL_ENOTSUP) { /* a build without decoders: nothing to fuzz */
      fprintf(stderr, "%s\n", fl_loader_error(NULL));
      no_decoders = 1;
      return;
    }
    if (rc != 0)
      abort();
    if ((out[k] = malloc(fl__image_stage_bytes(stages[k]))) == NULL)
      abort();
  }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const char *e;
  size_t skip = 1;
  int k, rc;

  if (!made)
    setup();
  if (no_decoders || size < 1)
    return 0;
  k = data[0] & 3;
  if (k == FORCED) {
    if (size < 5)
      return 0;
    /* Every box of 1 to 256 pixels a side within 255 of the corner. */
    fl__image_stage_force(stages[k], data[1], data[2], data[3] + 1u,
                          data[4] + 1u, data[0] >> 7);
    skip = 5;
  }
  fl__worker_error_clear();
  rc = fl__image_stage_run(stages[k], data + skip, size - skip,
                           (uint64_t)data[0] * 0x9e3779b97f4a7c15ull, out[k],
                           "fuzz.img");
  e = fl__worker_error_text();
  if (rc != 0 && (rc != FL_EDATASET || strstr(e, "fuzz.img: ") != e ||
                  strlen(e) <= strlen("fuzz.img: ")))
    abort();
  return 0;
}
