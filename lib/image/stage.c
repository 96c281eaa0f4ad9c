/*
 * The image stage: fl_image_options checked and defaulted, the format told
 * from the bytes (as PIL does, never from the name), the plan that joins a
 * decoder to the crop and the resampler, and one clear sentence for every
 * image that cannot be made.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "decode.h"
#include "internal.h"

/* PIL's Image.MAX_IMAGE_PIXELS. */
#define FL__MAX_PIXELS 89478485u
/* JPEGs are decoded at a reduced DCT scale only where the box keeps at
   least this many times the output's pixels on each side: nearer, the
   DCT's box average shows (on noisy images a mean difference of 4.5 levels
   from PIL's pixels at 1x; at 2x, 0.24 to 1.6 over image_test's crops,
   PSNR 39 dB or more). */
#define FL__SCALE_GAP 2
/* An output side past this is a mistake, not a configuration. */
#define FL__IMAGE_SIDE_MAX 16384u

struct fl__image_stage {
  fl_image_options io;
  struct fl__jpeg *jpeg;
  struct fl__png *png;
  struct fl__webp *webp;
  struct fl__tiff *tiff;
  struct fl__bmp *bmp;
  struct fl__pnm *pnm;
  struct fl__resample *rs;
  struct fl__geom g;
  uint64_t seed;
  int forced;           /* fl__image_stage_force: a crop given, not drawn */
  unsigned box[4];      /* its top, left, height, width */
  int forced_flip;
  char err[FL__IMAGE_ERR_MAX];
};

void
fl_image_options_init_sized(fl_image_options *io, size_t size)
{
  fl_image_options d = {
      .crop = FL_CROP_CENTER,
      .scale_min = 0.08,
      .scale_max = 1.0,
      .ratio_min = 3.0 / 4.0,
      .ratio_max = 4.0 / 3.0,
      .mean = {0.485f, 0.456f, 0.406f},
      .std = {0.229f, 0.224f, 0.225f},
      .max_pixels = FL__MAX_PIXELS,
  };

  if (io != NULL)
    fl__struct_out(io, size, &d, sizeof(d));
}

int
fl__image_extension(const char *name)
{
  static const char *const ext[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                    ".pgm", ".tif",  ".tiff", ".webp"};
  size_t n = strlen(name), i, e;

  for (i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
    e = strlen(ext[i]);
    if (n >= e && strcasecmp(name + n - e, ext[i]) == 0)
      return 1;
  }
  return 0;
}

static int
bad_option(const char *fn, const char *what)
{
  return fl__error_set(FL_EINVAL, "%s: fl_image_options: %s", fn, what);
}

static int
options_check(const fl_image_options *io, const char *fn)
{
  unsigned c;

  if (io->height == 0 || io->width == 0 || io->height > FL__IMAGE_SIDE_MAX ||
      io->width > FL__IMAGE_SIDE_MAX)
    return bad_option(fn, "height and width must be 1 to 16384");
  if (io->crop != FL_CROP_CENTER && io->crop != FL_CROP_RANDOM_RESIZED)
    return bad_option(fn, "crop must be FL_CROP_CENTER or "
                          "FL_CROP_RANDOM_RESIZED");
  if (io->resize > FL__IMAGE_SIDE_MAX)
    return bad_option(fn, "resize must be at most 16384");
  if (!(io->scale_min > 0 && io->scale_min <= io->scale_max &&
        isfinite(io->scale_max)))
    return bad_option(fn, "scale must satisfy 0 < scale_min <= scale_max");
  if (!(io->ratio_min > 0 && io->ratio_min <= io->ratio_max &&
        isfinite(io->ratio_max)))
    return bad_option(fn, "ratio must satisfy 0 < ratio_min <= ratio_max");
  if (!(io->hflip >= 0 && io->hflip <= 1))
    return bad_option(fn, "hflip is a probability, 0 to 1");
  if (io->chw_float != 0 && io->chw_float != 1)
    return bad_option(fn, "chw_float must be 0 or 1");
  for (c = 0; c < 3; c++)
    if (!isfinite(io->mean[c]) || !isfinite(io->std[c]) || io->std[c] == 0)
      return bad_option(fn, "mean and std must be finite, std non-zero");
  if (io->max_pixels == 0)
    return bad_option(fn, "max_pixels must be at least 1");
  return 0;
}

int
fl__image_stage_new(struct fl__image_stage **out, const fl_image_options *io,
                    size_t io_size, const char *fn)
{
  struct fl__image_stage *st;
  char err[160];
  int rc;

#if !defined(HAVE_LIBJPEG) || !defined(HAVE_SPNG)
  (void)io;
  (void)io_size;
  (void)out;
  return fl__error_set(FL_ENOTSUP, "%s: this forkload was built without %s: "
                       "install %s (sh tools/setup.sh) and build it again",
                       fn,
#if !defined(HAVE_LIBJPEG) && !defined(HAVE_SPNG)
                       "libjpeg-turbo and libspng",
                       "libjpeg-dev and libspng-dev"
#elif !defined(HAVE_LIBJPEG)
                       "libjpeg-turbo", "libjpeg-dev"
#else
                       "libspng", "libspng-dev"
#endif
  );
#endif
  if (io == NULL)
    return bad_option(fn, "io is NULL");
  if ((st = calloc(1, sizeof(*st))) == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory", fn);
  fl_image_options_init(&st->io);
  if (fl__struct_in(&st->io, sizeof(st->io), io, io_size, sizeof(st->io),
                    "fl_image_options", err, sizeof(err)) != 0) {
    free(st);
    return fl__error_set(FL_EINVAL, "%s: %s", fn, err);
  }
  if ((rc = options_check(&st->io, fn)) != 0 ||
      (rc = fl__resample_new(&st->rs, &st->io, fn)) != 0) {
    free(st);
    return rc == FL_ENOMEM ? fl__error_set(rc, "%s: out of memory", fn) : rc;
  }
  *out = st;
  return 0;
}

void
fl__image_stage_force(struct fl__image_stage *st, unsigned top, unsigned left,
                      unsigned height, unsigned width, int flip)
{
  st->forced = 1;
  st->box[0] = top;
  st->box[1] = left;
  st->box[2] = height;
  st->box[3] = width;
  st->forced_flip = flip;
}

const char *
fl__image_stage_kernels(const struct fl__image_stage *st)
{
  return fl__resample_kernels(st->rs);
}

const char *
fl__image_stage_horizontal(const struct fl__image_stage *st)
{
  return fl__resample_horizontal(st->rs);
}

size_t
fl__image_stage_bytes(const struct fl__image_stage *st)
{
  return (size_t)st->io.height * st->io.width * 3 *
         (st->io.chw_float ? sizeof(float) : 1);
}

void
fl__image_stage_free(struct fl__image_stage *st)
{
  if (st == NULL)
    return;
#ifdef HAVE_LIBJPEG
  fl__jpeg_free(st->jpeg);
#endif
#ifdef HAVE_SPNG
  fl__png_free(st->png);
#endif
#ifdef HAVE_WEBP
  fl__webp_free(st->webp);
#endif
#ifdef HAVE_TIFF
  fl__tiff_free(st->tiff);
#endif
  fl__bmp_free(st->bmp);
  fl__pnm_free(st->pnm);
  fl__resample_free(st->rs);
  free(st);
}

/* The decoder knows the image's size: refuse a bomb before any pixel is
   allocated, draw the crop, pick the DCT scale, and plan the rows. */
static int
plan(void *arg, unsigned w, unsigned h, int may_scale, struct fl__region *p,
     char *err)
{
  struct fl__image_stage *st = arg;
  struct fl__geom *g = &st->g;
  unsigned num = 8, sw = w, sh = h;

  if (w == 0 || h == 0) {
    snprintf(err, FL__IMAGE_ERR_MAX, "the image is %u x %u pixels", w, h);
    return FL_EDATASET;
  }
  if ((uint64_t)w * h > st->io.max_pixels) {
    snprintf(err, FL__IMAGE_ERR_MAX, "the image is %u x %u pixels, more than "
             "max_pixels (%llu): a decompression bomb?", w, h,
             (unsigned long long)st->io.max_pixels);
    return FL_EDATASET;
  }
  if (st->forced &&
      (st->box[0] + st->box[2] > h || st->box[1] + st->box[3] > w)) {
    snprintf(err, FL__IMAGE_ERR_MAX, "the crop given is outside the image");
    return FL_EDATASET;
  }
  if (st->forced)
    fl__crop_box(&st->io, st->box, st->forced_flip, g);
  else if (st->io.crop == FL_CROP_RANDOM_RESIZED)
    fl__crop_random(&st->io, w, h, st->seed, g);
  else if (fl__crop_center(&st->io, w, h, g) != 0) {
    snprintf(err, FL__IMAGE_ERR_MAX, "the image is %u x %u pixels: resized "
             "to %u on its shorter side, its longer would pass 2^31", w, h,
             st->io.resize ? st->io.resize : st->io.height);
    return FL_EDATASET;
  }
  /* The smallest scale at which the box still has the output's pixels. */
  if (may_scale)
    for (num = 1; num < 8; num++) {
      sw = fl__scaled(w, num);
      sh = fl__scaled(h, num);
      if ((g->bx1 - g->bx0) * sw / w >= FL__SCALE_GAP * g->vw &&
          (g->by1 - g->by0) * sh / h >= FL__SCALE_GAP * g->vh)
        break;
    }
  if (num == 8) {
    sw = w;
    sh = h;
  }
  p->scale_num = num;
  if (fl__resample_begin(st->rs, g, (double)sw / w, (double)sh / h, sw, sh,
                         p) != 0) {
    snprintf(err, FL__IMAGE_ERR_MAX, "out of memory to resize it");
    return FL_ENOMEM;
  }
  return 0;
}

static void
row(void *arg, unsigned y, const unsigned char *rgb, unsigned x0)
{
  fl__resample_row(((struct fl__image_stage *)arg)->rs, y, rgb, x0);
}

/* The formats told from their first bytes, as PIL tells them. */
enum format { F_NONE, F_JPEG, F_PNG, F_WEBP, F_TIFF, F_BMP, F_PNM, F_GIF };

static enum format
format_of(const unsigned char *b, size_t n)
{
  static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G',
                                           '\r', '\n', 0x1a, '\n'};

  if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
    return F_JPEG;
  if (n >= 8 && memcmp(b, png_sig, 8) == 0)
    return F_PNG;
  if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0)
    return F_WEBP;
  if (n >= 4 && (memcmp(b, "II*\0", 4) == 0 || memcmp(b, "MM\0*", 4) == 0))
    return F_TIFF;
  if (n >= 2 && b[0] == 'B' && b[1] == 'M')
    return F_BMP;
  if (n >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6')
    return F_PNM;
  if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0))
    return F_GIF;
  return F_NONE;
}

#if !defined(HAVE_LIBJPEG) || !defined(HAVE_SPNG) || !defined(HAVE_WEBP) || \
    !defined(HAVE_TIFF)
/* A format this build cannot decode: FL_ENOTSUP's words, at its batch. */
static int
not_built(const char *name, const char *format, const char *lib,
          const char *pkg)
{
  fl_worker_error("%s: a %s image, and this forkload was built without %s "
                  "(not supported by this build): apt-get install %s and "
                  "build it again", name, format, lib, pkg);
  return FL_EDATASET;
}
#endif

int
fl__image_stage_run(struct fl__image_stage *st, const void *data, size_t n,
                    uint64_t seed, void *dst, const char *name)
{
  const unsigned char *b = data;
  struct fl__sink sink = {st, plan, row};
  int rc;

  st->seed = seed;
  st->err[0] = '\0';
  if (n == 0) {
    fl_worker_error("%s: the file is empty", name);
    return FL_EDATASET;
  }
  switch (format_of(b, n)) {
  case F_JPEG:
#ifdef HAVE_LIBJPEG
    rc = fl__jpeg_decode(&st->jpeg, b, n, &sink, st->err);
    break;
#else
    return not_built(name, "JPEG", "libjpeg-turbo", "libjpeg-dev");
#endif
  case F_PNG:
#ifdef HAVE_SPNG
    rc = fl__png_decode(&st->png, b, n, &sink, st->err);
    break;
#else
    return not_built(name, "PNG", "libspng", "libspng-dev");
#endif
  case F_WEBP:
#ifdef HAVE_WEBP
    rc = fl__webp_decode(&st->webp, b, n, &sink, st->err);
    break;
#else
    return not_built(name, "WebP", "libwebp", "libwebp-dev");
#endif
  case F_TIFF:
#ifdef HAVE_TIFF
    rc = fl__tiff_decode(&st->tiff, b, n, &sink, st->err);
    break;
#else
    return not_built(name, "TIFF", "libtiff", "libtiff-dev");
#endif
  case F_BMP:
    rc = fl__bmp_decode(&st->bmp, b, n, &sink, st->err);
    break;
  case F_PNM:
    rc = fl__pnm_decode(&st->pnm, b, n, &sink, st->err);
    break;
  case F_GIF:
    fl_worker_error("%s: a GIF image, which forkload does not decode (nor "
                    "does torchvision's ImageFolder take .gif)", name);
    return FL_EDATASET;
  default:
    fl_worker_error("%s: not an image (no JPEG, PNG, WebP, TIFF, BMP or "
                    "PNM signature)", name);
    return FL_EDATASET;
  }
  if (rc != 0) {
    fl_worker_error("%s: %s", name, st->err[0] ? st->err : "out of memory");
    return FL_EDATASET;
  }
  fl__resample_end(st->rs, dst);
  return 0;
}
