/*
 * PNG through libspng: one library, small and fuzzed, that decodes from
 * memory row by row and converts every colour type and depth to RGB8 as
 * PIL's convert('RGB') does (palette looked up, grey replicated, alpha and
 * tRNS dropped, low depths scaled); libpng would need that conversion
 * written here.  One difference: a 16-bit image keeps its high byte,
 * where PIL clips 16-bit grey to 255.  Rows are decoded in order and those
 * outside the crop dropped (deflate cannot skip); an interlaced image is
 * decoded whole, as its rows come in passes.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spng.h>

#include "decode.h"
#include "internal.h"

/* Chunks beyond these are refused, not allocated (PNG's own limit is
   2^31 - 1 bytes). */
#define FL__PNG_CHUNK_MAX (16u << 20)
#define FL__PNG_CACHE_MAX (64u << 20)

struct fl__png {
  unsigned char *buf;
  size_t cap;
};

void
fl__png_free(struct fl__png *p)
{
  if (p == NULL)
    return;
  free(p->buf);
  free(p);
}

static int
room(struct fl__png *p, size_t bytes)
{
  void *b;

  if (bytes <= p->cap)
    return 0;
  if ((b = realloc(p->buf, bytes)) == NULL)
    return FL_ENOMEM;
  p->buf = b;
  p->cap = bytes;
  return 0;
}

static int
bad(int e, char *err)
{
  snprintf(err, FL__IMAGE_ERR_MAX, "%s PNG: %s",
           e == SPNG_IO_EOF ? "truncated" : "bad", spng_strerror(e));
  return FL_EDATASET;
}

int
fl__png_decode(struct fl__png **pp, const unsigned char *data, size_t n,
               const struct fl__sink *s, char *err)
{
  struct fl__png *p = *pp;
  struct spng_ihdr ih;
  struct fl__region plan;
  spng_ctx *ctx;
  size_t row, y;
  int e, rc = 0;

  if (p == NULL) {
    if ((p = calloc(1, sizeof(*p))) == NULL)
      return FL_ENOMEM;
    *pp = p;
  }
  if ((ctx = spng_ctx_new(0)) == NULL) {
    snprintf(err, FL__IMAGE_ERR_MAX, "out of memory for a PNG decoder");
    return FL_ENOMEM;
  }
  spng_set_chunk_limits(ctx, FL__PNG_CHUNK_MAX, FL__PNG_CACHE_MAX);
  if ((e = spng_set_png_buffer(ctx, data, n)) != 0 ||
      (e = spng_get_ihdr(ctx, &ih)) != 0) {
    rc = bad(e, err);
    goto out;
  }
  if ((rc = s->plan(s->arg, ih.width, ih.height, 0, &plan, err)) != 0)
    goto out;
  row = (size_t)ih.width * 3;
  if ((rc = room(p, ih.interlace_method ? row * ih.height : row)) != 0) {
    snprintf(err, FL__IMAGE_ERR_MAX, "out of memory for %u x %u pixels",
             ih.width, ih.interlace_method ? ih.height : 1);
    goto out;
  }
  if (ih.interlace_method) {
    if ((e = spng_decode_image(ctx, p->buf, row * ih.height, SPNG_FMT_RGB8,
                               0)) != 0) {
      rc = bad(e, err);
      goto out;
    }
    for (y = plan.y0; y < plan.y1; y++)
      s->row(s->arg, (unsigned)y, p->buf + y * row, 0);
    goto out;
  }
  if ((e = spng_decode_image(ctx, NULL, 0, SPNG_FMT_RGB8,
                             SPNG_DECODE_PROGRESSIVE)) != 0) {
    rc = bad(e, err);
    goto out;
  }
  for (y = 0; y < ih.height; y++) {
    e = spng_decode_row(ctx, p->buf, row);
    if (e != 0 && !(e == SPNG_EOI && y + 1 == ih.height)) {
      rc = bad(e, err);
      goto out;
    }
    if (y >= plan.y0 && y < plan.y1)
      s->row(s->arg, (unsigned)y, p->buf, 0);
  }
out:
  spng_ctx_free(ctx);
  return rc;
}
