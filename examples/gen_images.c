/*
 * `forkload gen images DIR`: a folder of JPEGs in torchvision's ImageFolder
 * layout (DIR/classNNN/NNNNNNNN.jpg, sample i in class i % K) to try
 * --dataset images: on.  Each image is of ImageNet's usual size (360 to
 * 500 x 300 to 400) and photo-like enough to cost what a photo costs to
 * decode: a gradient, ellipses, a wave and mild noise, at quality 90, all
 * a function of (seed, i).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef HAVE_LIBJPEG
#include <jpeglib.h>
#endif

#include "cli.h"

#ifdef HAVE_LIBJPEG
/* splitmix64: the content of sample i is a function of (seed, i). */
static uint64_t
rng(uint64_t *s)
{
  return synth_mix64(*s += 0x9e3779b97f4a7c15ull);
}

static unsigned char
clamp255(double v)
{
  return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5);
}

/* An image w x h (w at most 500) into rgb: a gradient, ellipses, a faint
   wave and noise, which at quality 90 is tens of KB, as photographs of
   this size are. */
#define SHAPES 10
static void
paint(unsigned char *rgb, unsigned w, unsigned h, uint64_t seed)
{
  double base[3], gx[3], gy[3], col[SHAPES][3], cx[SHAPES], cy[SHAPES];
  double kx[SHAPES], ky[SHAPES], sx[500], cosx[500];
  double fx, fy, px[3], a, d, v, sy, cosy, r;
  uint64_t s = seed;
  uint32_t noise = (uint32_t)rng(&s) | 1;
  unsigned x, y, c, k;

  for (c = 0; c < 3; c++) {
    base[c] = 40 + (double)(rng(&s) % 150);
    gx[c] = (double)(rng(&s) % 121) - 60;
    gy[c] = (double)(rng(&s) % 121) - 60;
  }
  for (k = 0; k < SHAPES; k++) {
    cx[k] = (double)(rng(&s) % w);
    cy[k] = (double)(rng(&s) % h);
    r = 20 + (double)(rng(&s) % 130);
    kx[k] = 1 / (r * r);
    r = 20 + (double)(rng(&s) % 130);
    ky[k] = 1 / (r * r);
    for (c = 0; c < 3; c++)
      col[k][c] = (double)(rng(&s) % 256);
  }
  fx = 0.02 + (double)(rng(&s) % 100) / 1000;
  fy = 0.02 + (double)(rng(&s) % 100) / 1000;
  for (x = 0; x < w; x++) { /* sin(x fx + y fy), a sum of products */
    sx[x] = sin(x * fx);
    cosx[x] = cos(x * fx);
  }
  for (y = 0; y < h; y++) {
    sy = sin(y * fy);
    cosy = cos(y * fy);
    for (x = 0; x < w; x++) {
      for (c = 0; c < 3; c++)
        px[c] = base[c] + gx[c] * x / w + gy[c] * y / h;
      for (k = 0; k < SHAPES; k++) {
        d = (x - cx[k]) * (x - cx[k]) * kx[k] +
            (y - cy[k]) * (y - cy[k]) * ky[k];
        a = d >= 1 ? 0 : (1 - d) * 10 > 1 ? 0.8 : (1 - d) * 8;
        for (c = 0; c < 3; c++)
          px[c] += a * (col[k][c] - px[c]);
      }
      v = 12 * (sx[x] * cosy + cosx[x] * sy);
      noise ^= noise << 13; /* xorshift32: cheap noise per pixel */
      noise ^= noise >> 17;
      noise ^= noise << 5;
      v += (double)(noise % 17) - 8;
      for (c = 0; c < 3; c++)
        rgb[((size_t)y * w + x) * 3 + c] = clamp255(px[c] + v);
    }
  }
}

/* Encoded in memory, where libjpeg can fail only for want of it, then
   written to path, a new file in gen's fresh directory. */
static int
write_jpeg(const char *path, const unsigned char *px, unsigned w, unsigned h,
           uint64_t *bytes)
{
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  unsigned char *jpg = NULL;
  unsigned long n = 0;
  JSAMPROW row;
  FILE *out;
  int err = 0;

  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &jpg, &n);
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
  if ((out = fopen(path, "wx")) == NULL) {
    cli_error("gen: %s: %s", path, strerror(errno));
    free(jpg);
    return -1;
  }
  if (fwrite(jpg, 1, n, out) != n)
    err = errno;
  if (fclose(out) != 0 && err == 0)
    err = errno;
  free(jpg);
  if (err != 0) {
    cli_error("gen: %s: cannot write: %s", path, strerror(err));
    return -1;
  }
  *bytes += n;
  return 0;
}
#endif

int
gen_images(const char *dir, size_t samples, unsigned classes, uint64_t seed,
           char *what, size_t len, uint64_t *bytes)
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
  for (c = 0; c < classes; c++) {
    int n = snprintf(path, sizeof path, "%s/class%03u", dir, c);

    if (n >= (int)sizeof path || mkdir(path, 0777) != 0) {
      cli_error("gen: %s: %s", path,
                n >= (int)sizeof path ? strerror(ENAMETOOLONG)
                                      : strerror(errno));
      goto out;
    }
  }
  /* A signal stops it early: gen_out_place then puts nothing in place. */
  for (i = 0; i < samples && !cli_interrupted; i++) {
    uint64_t k = synth_mix64(seed ^ synth_mix64(i));

    w = 360 + (unsigned)(k % 141);
    h = 300 + (unsigned)((k >> 20) % 101);
    paint(px, w, h, k);
    if (snprintf(path, sizeof path, "%s/class%03u/%08zu.jpg", dir,
                 (unsigned)(i % classes), i) >= (int)sizeof path) {
      cli_error("gen: %s: %s", dir, strerror(ENAMETOOLONG));
      goto out;
    }
    if (write_jpeg(path, px, w, h, bytes) < 0)
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
  (void)what;
  (void)len;
  (void)bytes;
  cli_error("gen: images: this forkload was built without libjpeg-turbo: "
            "install libjpeg-dev (sh tools/setup.sh) and build it "
            "again");
  return -1;
#endif
}
