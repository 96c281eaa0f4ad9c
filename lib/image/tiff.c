/*
 * TIFF through libtiff, as PIL decodes it (its own reader for uncompressed
 * strips, libtiff's strip decoder for the compressed ones; both give the
 * samples as stored): the first image of the file, stripped, contiguous
 * samples of 8 bits, uncompressed or compressed as libtiff can (LZW,
 * deflate, PackBits; a predictor undone), as RGB (its fourth sample
 * dropped where it is unassociated alpha or unspecified, as PIL's RGBA
 * and RGBX), greyscale (MinIsBlack, or MinIsWhite inverted as PIL's
 * "L;I") or an 8-bit palette (each 16-bit colour's high byte, as PIL
 * takes it).  Refused, with the reason: tiles, other depths (bilevel
 * included), planar samples, premultiplied alpha, YCbCr, JPEG
 * compression, CMYK and the rest.  The size is read from the first IFD,
 * before any row is allocated.  Every row is decoded in order (strips of
 * compressed rows cannot be skipped), so that damage anywhere in the file
 * is found, as PIL finds it; those outside the crop are dropped.  libtiff
 * allocates its handle per file (it cannot be reused); the row buffer
 * and the open options are kept for the next image.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tiffio.h>

#include "decode.h"
#include "internal.h"

/* libtiff may allocate this much at once for one strip or tag. */
#define FL__TIFF_ALLOC_MAX (256 << 20)

struct fl__tiff {
  TIFFOpenOptions *opts;
  unsigned char *raw, *row;
  size_t raw_cap, row_cap;
  /* The image being decoded. */
  const unsigned char *data;
  size_t n, at;
  char *err;
  int failed;
};

void
fl__tiff_free(struct fl__tiff *t)
{
  if (t == NULL)
    return;
  if (t->opts != NULL)
    TIFFOpenOptionsFree(t->opts);
  free(t->raw);
  free(t->row);
  free(t);
}

/* The first error libtiff reports is the image's; warnings pass, as in
   PIL. */
static int
on_error(TIFF *tif, void *arg, const char *module, const char *fmt,
         va_list ap)
{
  struct fl__tiff *t = arg;
  char msg[160];

  (void)tif;
  if (!t->failed) {
    vsnprintf(msg, sizeof(msg), fmt, ap);
    snprintf(t->err, FL__IMAGE_ERR_MAX, "bad TIFF: %s%s%.150s",
             module ? module : "", module ? ": " : "", msg);
  }
  t->failed = 1;
  return 1;
}

static int
on_warning(TIFF *tif, void *arg, const char *module, const char *fmt,
           va_list ap)
{
  (void)tif;
  (void)arg;
  (void)module;
  (void)fmt;
  (void)ap;
  return 1;
}

/* The file is in memory: libtiff reads it through these. */
static tmsize_t
mem_read(thandle_t h, void *buf, tmsize_t size)
{
  struct fl__tiff *t = h;
  size_t k = size < 0 ? 0 : (size_t)size;

  if (k > t->n - t->at)
    k = t->n - t->at;
  memcpy(buf, t->data + t->at, k);
  t->at += k;
  return (tmsize_t)k;
}

static tmsize_t
mem_write(thandle_t h, void *buf, tmsize_t size)
{
  (void)h;
  (void)buf;
  (void)size;
  return -1;
}

static toff_t
mem_seek(thandle_t h, toff_t off, int whence)
{
  struct fl__tiff *t = h;
  uint64_t base = whence == SEEK_CUR ? t->at : whence == SEEK_END ? t->n : 0;

  if (off > UINT64_MAX - base || base + off > t->n)
    return (toff_t)-1;
  t->at = (size_t)(base + off);
  return t->at;
}

static int
mem_close(thandle_t h)
{
  (void)h;
  return 0;
}

static toff_t
mem_size(thandle_t h)
{
  return ((struct fl__tiff *)h)->n;
}

static int
mem_map(thandle_t h, void **base, toff_t *size)
{
  struct fl__tiff *t = h;

  *base = (void *)t->data;
  *size = t->n;
  return 1;
}

static void
mem_unmap(thandle_t h, void *base, toff_t size)
{
  (void)h;
  (void)base;
  (void)size;
}

static int
room(unsigned char **p, size_t *cap, size_t bytes)
{
  void *q;

  if (bytes <= *cap)
    return 0;
  if ((q = realloc(*p, bytes)) == NULL)
    return FL_ENOMEM;
  *p = q;
  *cap = bytes;
  return 0;
}

static int
refuse(char *err, const char *what)
{
  snprintf(err, FL__IMAGE_ERR_MAX, "%s, which forkload does not decode",
           what);
  return FL_EDATASET;
}

int
fl__tiff_decode(struct fl__tiff **tp, const unsigned char *data, size_t n,
                const struct fl__sink *s, char *err)
{
  struct fl__tiff *t = *tp;
  struct fl__region plan;
  TIFF *tif = NULL;
  uint32_t w = 0, h = 0, y, x;
  uint16_t bps = 0, spp = 0, photo = 0, planar = 0, comp = 0, fmt = 1;
  uint16_t fill = FILLORDER_MSB2LSB, nextra = 0, *extra = NULL;
  uint16_t *cr = NULL, *cg = NULL, *cb = NULL;
  unsigned char pal[256][3];
  int rc = FL_EDATASET;

  if (t == NULL) {
    if ((t = calloc(1, sizeof(*t))) == NULL ||
        (t->opts = TIFFOpenOptionsAlloc()) == NULL) {
      free(t);
      return FL_ENOMEM;
    }
    TIFFOpenOptionsSetMaxSingleMemAlloc(t->opts, FL__TIFF_ALLOC_MAX);
    TIFFOpenOptionsSetErrorHandlerExtR(t->opts, on_error, t);
    TIFFOpenOptionsSetWarningHandlerExtR(t->opts, on_warning, t);
    *tp = t;
  }
  t->data = data;
  t->n = n;
  t->at = 0;
  t->err = err;
  t->failed = 0;
  tif = TIFFClientOpenExt("image", "r", t, mem_read, mem_write, mem_seek,
                          mem_close, mem_size, mem_map, mem_unmap, t->opts);
  if (tif == NULL) {
    if (!t->failed)
      snprintf(err, FL__IMAGE_ERR_MAX, "bad TIFF: libtiff cannot open it");
    return FL_EDATASET;
  }
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bps);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &fmt);
  TIFFGetFieldDefaulted(tif, TIFFTAG_FILLORDER, &fill);
  TIFFGetFieldDefaulted(tif, TIFFTAG_EXTRASAMPLES, &nextra, &extra);
  if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photo)) {
    rc = refuse(err, "a TIFF without PhotometricInterpretation");
    goto out;
  }
  if (TIFFIsTiled(tif)) {
    rc = refuse(err, "a tiled TIFF");
    goto out;
  }
  if (comp == COMPRESSION_JPEG || comp == COMPRESSION_OJPEG) {
    rc = refuse(err, "a JPEG-compressed TIFF");
    goto out;
  }
  if (bps != 8 || fmt != SAMPLEFORMAT_UINT || fill != FILLORDER_MSB2LSB) {
    snprintf(err, FL__IMAGE_ERR_MAX, "a TIFF of %u-bit samples%s, which "
             "forkload does not decode (it decodes 8-bit ones)", bps,
             fmt != SAMPLEFORMAT_UINT ? " (not unsigned integers)"
             : fill != FILLORDER_MSB2LSB ? " (fill order LSB first)" : "");
    goto out;
  }
  if (spp > 1 && planar != PLANARCONFIG_CONTIG) {
    rc = refuse(err, "a TIFF of planar samples");
    goto out;
  }
  if (photo == PHOTOMETRIC_RGB) {
    if (spp != 3 && spp != 4) {
      snprintf(err, FL__IMAGE_ERR_MAX, "an RGB TIFF of %u samples a pixel, "
               "which forkload does not decode", spp);
      goto out;
    }
    if (spp == 4 && (nextra != 1 || extra[0] == EXTRASAMPLE_ASSOCALPHA)) {
      rc = refuse(err, "a TIFF of premultiplied (associated) alpha");
      goto out;
    }
  } else if (photo == PHOTOMETRIC_MINISBLACK ||
             photo == PHOTOMETRIC_MINISWHITE ||
             photo == PHOTOMETRIC_PALETTE) {
    if (spp != 1) {
      snprintf(err, FL__IMAGE_ERR_MAX, "a %s TIFF of %u samples a pixel, "
               "which forkload does not decode",
               photo == PHOTOMETRIC_PALETTE ? "palette" : "grey", spp);
      goto out;
    }
  } else {
    snprintf(err, FL__IMAGE_ERR_MAX, "a TIFF of photometric "
             "interpretation %u (%s), which forkload does not decode",
             photo, photo == PHOTOMETRIC_YCBCR ? "YCbCr"
                    : photo == PHOTOMETRIC_SEPARATED ? "CMYK" : "not RGB, "
                    "grey or palette");
    goto out;
  }
  if (photo == PHOTOMETRIC_PALETTE) {
    if (!TIFFGetField(tif, TIFFTAG_COLORMAP, &cr, &cg, &cb)) {
      snprintf(err, FL__IMAGE_ERR_MAX, "bad TIFF: a palette image without "
               "a colour map");
      goto out;
    }
    for (x = 0; x < 256; x++) {
      pal[x][0] = (unsigned char)(cr[x] >> 8);
      pal[x][1] = (unsigned char)(cg[x] >> 8);
      pal[x][2] = (unsigned char)(cb[x] >> 8);
    }
  }
  /* The size is known: the bomb guard, and the crop's plan. */
  if ((rc = s->plan(s->arg, w, h, 0, &plan, err)) != 0)
    goto out;
  if ((uint64_t)TIFFScanlineSize64(tif) < (uint64_t)w * spp) {
    snprintf(err, FL__IMAGE_ERR_MAX, "bad TIFF: rows of %lld bytes for %u "
             "pixels", (long long)TIFFScanlineSize64(tif), (unsigned)w);
    rc = FL_EDATASET;
    goto out;
  }
  if (room(&t->raw, &t->raw_cap, (size_t)TIFFScanlineSize64(tif)) != 0 ||
      room(&t->row, &t->row_cap, (size_t)w * 3) != 0) {
    snprintf(err, FL__IMAGE_ERR_MAX, "out of memory for a row of %u pixels",
             (unsigned)w);
    rc = FL_ENOMEM;
    goto out;
  }
  for (y = 0; y < h; y++) {
    const unsigned char *in = t->raw;
    unsigned char *o = t->row;

    if (TIFFReadScanline(tif, t->raw, y, 0) < 0 || t->failed) {
      if (!t->failed)
        snprintf(err, FL__IMAGE_ERR_MAX, "bad TIFF: row %u cannot be read",
                 (unsigned)y);
      rc = FL_EDATASET;
      goto out;
    }
    if (y < plan.y0 || y >= plan.y1)
      continue;
    for (x = 0; x < w; x++, o += 3, in += spp) {
      switch (photo) {
      case PHOTOMETRIC_RGB:
        memcpy(o, in, 3);
        break;
      case PHOTOMETRIC_PALETTE:
        memcpy(o, pal[in[0]], 3);
        break;
      case PHOTOMETRIC_MINISWHITE:
        o[0] = o[1] = o[2] = (unsigned char)(255 - in[0]);
        break;
      default:
        o[0] = o[1] = o[2] = in[0];
      }
    }
    s->row(s->arg, y, t->row, 0);
  }
  rc = 0;
out:
  TIFFClose(tif);
  return rc;
}
