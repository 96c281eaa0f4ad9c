/*
 * `forkload gen images DIR`: a folder of JPEGs in torchvision's ImageFolder
 * layout (DIR/classNNN/NNNNNNNN.jpg, sample i in class i % K) to try
 * --dataset images: on.  Each image is of ImageNet's usual size (360 to
 * 500 x 300 to 400) and photo-like enough to cost what a photo costs to
 * decode: gradients, a disc and mild noise, at quality 90, all a function
 * of (seed, i).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef HAVE_LIBJPEG
#include <jpeglib.h>
#endif

#include "cli.h"

#ifdef HAVE_LIBJPEG
/* The pixels of sample i, w x h RGB, into px. */
static void
paint(uint64_t seed, size_t i, unsigned cls, unsigned w, unsigned h,
      unsigned char *px)
{
  uint64_t k = synth_mix64(seed ^ synth_mix64(i + 1)), n = k;
  unsigned cx = (unsigned)(k % w), cy = (unsigned)((k >> 16) % h);
  unsigned r2 = (unsigned)((k >> 32) % (h / 2) + h / 8), x, y, c;
  int base[3] = {(int)(cls * 67 % 200), (int)(cls * 131 % 200),
                 (int)(cls * 29 % 200)};

  r2 *= r2;
  for (y = 0; y < h; y++)
    for (x = 0; x < w; x++) {
      unsigned d2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);

      n = n * 6364136223846793005ull + 1442695040888963407ull;
      for (c = 0; c < 3; c++) {
        int v = base[c] + (int)(x * 40 / w) + (int)(y * (c + 1) * 15 / h) +
                (d2 < r2 ? 40 * (int)c - 30 : 0) +
                (int)((n >> (40 + 8 * c)) & 15) - 8;

        px[((size_t)y * w + x) * 3 + c] =
            (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
}

static int
write_jpeg(const char *path, const unsigned char *px, unsigned w, unsigned h,
           int force, uint64_t *bytes)
{
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  FILE *out = fopen(path, force ? "w" : "wx");
  JSAMPROW row;
  long end;

  if (out == NULL) {
    cli_error("gen: %s: %s%s", path, strerror(errno),
              errno == EEXIST ? " (--force writes over it)" : "");
    return -1;
  }
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, out);
  c.image_width = w;
  c.image_height = h;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < h) {
    row = (JSAMPROW)(px + (size_t)c.next_scanline * w * 3);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  end = ftell(out);
  if (ferror(out) || fclose(out) != 0) {
    cli_error("gen: %s: cannot write: %s", path, strerror(errno));
    return -1;
  }
  *bytes += end > 0 ? (uint64_t)end : 0;
  return 0;
}
#endif

int
gen_images(const char *dir, size_t samples, unsigned classes, uint64_t seed,
           int force, char *what, size_t len, uint64_t *bytes)
{
#ifdef HAVE_LIBJPEG
  char path[PATH_MAX];
  unsigned char *px = malloc((size_t)500 * 400 * 3);
  unsigned c, w, h;
  size_t i;
  int rc = -1;

  if (px == NULL) {
    cli_error("gen: %s", fl_strerror(FL_ENOMEM));
    return -1;
  }
  for (c = 0; c <= classes; c++) {
    int n = c == 0 ? snprintf(path, sizeof path, "%s", dir)
                   : snprintf(path, sizeof path, "%s/class%03u", dir, c - 1);

    if (n >= (int)sizeof path || (mkdir(path, 0777) != 0 && errno != EEXIST)) {
      cli_error("gen: %s: %s", path,
                n >= (int)sizeof path ? strerror(ENAMETOOLONG)
                                      : strerror(errno));
      goto out;
    }
  }
  for (i = 0; i < samples; i++) {
    uint64_t k = synth_mix64(seed ^ synth_mix64(~(uint64_t)i));

    w = 360 + (unsigned)(k % 141);
    h = 300 + (unsigned)((k >> 20) % 101);
    paint(seed, i, (unsigned)(i % classes), w, h, px);
    if (snprintf(path, sizeof path, "%s/class%03u/%08zu.jpg", dir,
                 (unsigned)(i % classes), i) >= (int)sizeof path) {
      cli_error("gen: %s: %s", dir, strerror(ENAMETOOLONG));
      goto out;
    }
    if (write_jpeg(path, px, w, h, force, bytes) < 0)
      goto out;
  }
  snprintf(what, len, "%zu JPEGs in %u class folders class000 to class%03u",
           samples, classes, classes - 1);
  rc = 0;
out:
  free(px);
  return rc;
#else
  (void)dir;
  (void)samples;
  (void)classes;
  (void)seed;
  (void)force;
  (void)what;
  (void)len;
  (void)bytes;
  cli_error("gen: images: this forkload was built without libjpeg-turbo: "
            "install libjpeg-dev (sh tools/setup.sh) and build it "
            "again");
  return -1;
#endif
}
