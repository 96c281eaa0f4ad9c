/*
 * WebP through libwebp, as PIL decodes it (its WebPAnimDecoder over
 * libwebp's defaults: fancy upsampling, no dithering), lossy, lossless and
 * with alpha, which convert('RGB') drops: the first frame of a still image
 * is decoded into the canvas as it is, never blended, so the colours
 * under a transparent pixel are the file's, as here.  The size comes from
 * WebPGetFeatures, which reads the header alone, before anything is
 * allocated.  An animated WebP is refused (PIL composites its frames on a
 * canvas).  libwebp decodes the whole image (VP8 and VP8L cannot skip
 * rows) into an RGB buffer of ours, kept for the next image; the rows the
 * crop needs then go to the stage.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>

#include "decode.h"
#include "internal.h"

struct fl__webp {
  unsigned char *buf;
  size_t cap;
  WebPDecoderConfig config;
};

void
fl__webp_free(struct fl__webp *w)
{
  if (w == NULL)
    return;
  free(w->buf);
  free(w);
}

static const char *
status_text(VP8StatusCode v)
{
  switch (v) {
  case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
  case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
  case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
  case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
  case VP8_STATUS_SUSPENDED: return "suspended";
  case VP8_STATUS_USER_ABORT: return "aborted";
  case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data";
  default: return "error";
  }
}

static int
bad(VP8StatusCode v, char *err)
{
  snprintf(err, FL__IMAGE_ERR_MAX, "%s WebP: %s",
           v == VP8_STATUS_NOT_ENOUGH_DATA ? "truncated" : "bad",
           status_text(v));
  return v == VP8_STATUS_OUT_OF_MEMORY ? FL_ENOMEM : FL_EDATASET;
}

int
fl__webp_decode(struct fl__webp **wp, const unsigned char *data, size_t n,
                const struct fl__sink *s, char *err)
{
  struct fl__webp *w = *wp;
  struct fl__region plan;
  WebPBitstreamFeatures *f;
  size_t row, bytes, y;
  VP8StatusCode v;
  int rc;

  if (w == NULL) {
    if ((w = calloc(1, sizeof(*w))) == NULL)
      return FL_ENOMEM;
    *wp = w;
  }
  if (!WebPInitDecoderConfig(&w->config)) {
    snprintf(err, FL__IMAGE_ERR_MAX, "libwebp's decoder is of another "
             "version than its header");
    return FL_EDATASET;
  }
  f = &w->config.input;
  if ((v = WebPGetFeatures(data, n, f)) != VP8_STATUS_OK)
    return bad(v, err);
  if (f->has_animation) {
    snprintf(err, FL__IMAGE_ERR_MAX, "an animated WebP, which forkload does "
             "not decode");
    return FL_EDATASET;
  }
  /* The size is known: the bomb guard, and the crop's plan. */
  if ((rc = s->plan(s->arg, (unsigned)f->width, (unsigned)f->height, 0,
                    &plan, err)) != 0)
    return rc;
  row = (size_t)f->width * 3;
  bytes = row * (size_t)f->height;
  if (bytes > w->cap) {
    unsigned char *b = realloc(w->buf, bytes);

    if (b == NULL) {
      snprintf(err, FL__IMAGE_ERR_MAX, "out of memory for %d x %d pixels",
               f->width, f->height);
      return FL_ENOMEM;
    }
    w->buf = b;
    w->cap = bytes;
  }
  w->config.output.colorspace = MODE_RGB;
  w->config.output.is_external_memory = 1;
  w->config.output.u.RGBA.rgba = w->buf;
  w->config.output.u.RGBA.stride = (int)row;
  w->config.output.u.RGBA.size = bytes;
  v = WebPDecode(data, n, &w->config);
  WebPFreeDecBuffer(&w->config.output);
  if (v != VP8_STATUS_OK)
    return bad(v, err);
  for (y = plan.y0; y < plan.y1; y++)
    s->row(s->arg, (unsigned)y, w->buf + y * row, 0);
  return 0;
}
