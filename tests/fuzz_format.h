/*
 * The body of the libFuzzer targets of the image stage's other decoders
 * (fuzz_webp.c, fuzz_tiff.c, fuzz_bmp.c, fuzz_pnm.c), built by `make fuzz`
 * with the whole core library: each defines FUZZ_FORMAT (its name) and
 * fuzz_sign(), which writes the format's signature over the file's first
 * bytes, so that every input reaches that decoder.  The input's first
 * byte picks one of three stages, made once (Resize + CenterCrop to
 * 16 x 16; RandomResizedCrop to 16 x 16 with a flip, as float CHW;
 * Resize(10) then a CenterCrop of 24 x 20, padding) and seeds the random
 * crop; the rest is the file, copied to a heap buffer of exactly its size
 * so that AddressSanitizer sees a read past it.  max_pixels is 4,000,000.
 * Whatever the bytes, the stage must return 0, or FL_EDATASET with a
 * sentence that names the file.  The seeds in tests/fuzz_FORMAT_corpus,
 * written by tools/golden_images.py, are its decode fixtures after a
 * mode byte.  A build without the format's library reaches its sentence
 * at once, which is checked the same way.  The file that includes this
 * includes config.h first.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { CENTER, RANDOM, PADDED, NSTAGES };

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
    rc = fl__image_stage_new(&stages[k], &io, sizeof(io), "fuzz_" FUZZ_FORMAT);
    if (rc == FL_ENOTSUP) { /* no image stage in this build */
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
  unsigned char *file;
  const char *e;
  int rc;

  if (!made)
    setup();
  if (no_decoders || size < 2)
    return 0;
  if ((file = malloc(size - 1)) == NULL)
    abort();
  memcpy(file, data + 1, size - 1);
  fuzz_sign(file, size - 1);
  fl__worker_error_clear();
  rc = fl__image_stage_run(stages[data[0] % NSTAGES], file, size - 1,
                           (uint64_t)data[0] * 0x9e3779b97f4a7c15ull,
                           out[data[0] % NSTAGES], "fuzz.img");
  e = fl__worker_error_text();
  if (rc != 0 && (rc != FL_EDATASET || strstr(e, "fuzz.img: ") != e ||
                  strlen(e) <= strlen("fuzz.img: ")))
    abort();
  free(file);
  return 0;
}
