/*
 * BMP, read here: uncompressed Windows bitmaps are a header, a palette and
 * raw rows, and PIL's reader (BmpImagePlugin) is a short Python file whose
 * choices a library would not make (a palette that is a grey ramp read as
 * grey, indices past the palette grey).  Decoded as PIL decodes them:
 * the OS/2 12-byte header and Windows' 40, 64, 108 and 124-byte ones;
 * uncompressed (BI_RGB) 1, 4 and 8-bit palette images (grey ones too),
 * 24-bit BGR and 32-bit BGRX (the fourth byte is not alpha, as in PIL);
 * bottom-up or top-down rows; the pixel data where bfOffBits says, or
 * after the palette where it points at the palette (PIL's rule).  Refused,
 * with the reason: RLE and bitfield compression, 16-bit pixels, palettes
 * of more than 256 colours, and grey palettes PIL misreads (a grey ramp
 * at 4 bits, or black-and-white at 4 or 8 bits).  Rows are read in
 * place; palette and 24/32-bit rows become RGB in a row buffer kept for
 * the next image.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "internal.h"

struct fl__bmp {
  unsigned char *row;
  size_t cap;
};

void
fl__bmp_free(struct fl__bmp *b)
{
  if (b == NULL)
    return;
  free(b->row);
  free(b);
}

static unsigned
u16(const unsigned char *p)
{
  return (unsigned)p[0] | (unsigned)p[1] << 8;
}

static uint32_t
u32(const unsigned char *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static int
refuse(char *err, const char *what)
{
  snprintf(err, FL__IMAGE_ERR_MAX, "%s", what);
  return FL_EDATASET;
}

int
fl__bmp_decode(struct fl__bmp **bp, const unsigned char *data, size_t n,
               const struct fl__sink *s, char *err)
{
  struct fl__bmp *b = *bp;
  struct fl__region plan;
  unsigned char pal[256][3];
  uint32_t hsize, w, h, compression = 0, colors = 0, offset;
  unsigned bits, pad, i, grey = 1;
  size_t stride, y, x, at;
  int topdown = 0, rc;

  if (n < 18)
    return refuse(err, "truncated BMP: the data ends in its header");
  offset = u32(data + 10);
  hsize = u32(data + 14);
  if (hsize != 12 && hsize != 40 && hsize != 64 && hsize != 108 &&
      hsize != 124) {
    snprintf(err, FL__IMAGE_ERR_MAX, "a BMP header of %lu bytes, which PIL "
             "does not read either", (unsigned long)hsize);
    return FL_EDATASET;
  }
  if (n < 14 + (size_t)hsize)
    return refuse(err, "truncated BMP: the data ends in its header");
  if (hsize == 12) {
    w = u16(data + 18);
    h = u16(data + 20);
    bits = u16(data + 24);
    pad = 3;
  } else {
    w = u32(data + 18);
    topdown = data[25] == 0xff; /* PIL's test: the height's top byte */
    h = topdown ? (uint32_t)0 - u32(data + 22) : u32(data + 22);
    bits = u16(data + 28);
    compression = u32(data + 30);
    colors = u32(data + 46);
    pad = 4;
  }
  if (compression == 1 || compression == 2)
    return refuse(err, "an RLE-compressed BMP, which forkload does not "
                       "decode");
  if (compression == 3)
    return refuse(err, "a BMP with bitfields, which forkload does not "
                       "decode");
  if (compression != 0) {
    snprintf(err, FL__IMAGE_ERR_MAX, "a BMP of compression %lu, which PIL "
             "does not read either", (unsigned long)compression);
    return FL_EDATASET;
  }
  if (bits == 16)
    return refuse(err, "a 16-bit BMP, which forkload does not decode");
  if (bits != 1 && bits != 4 && bits != 8 && bits != 24 && bits != 32) {
    snprintf(err, FL__IMAGE_ERR_MAX, "a BMP of %u bits per pixel, which PIL "
             "does not read either", bits);
    return FL_EDATASET;
  }
  if (colors == 0)
    colors = bits >= 32 ? 0 : (uint32_t)1 << bits;
  /* Indices past the palette are grey, as PIL's palette starts as a
     ramp. */
  for (i = 0; i < 256; i++)
    pal[i][0] = pal[i][1] = pal[i][2] = (unsigned char)i;
  if (bits <= 8) {
    if (colors > 256)
      return refuse(err, "a BMP palette of more than 256 colours, which "
                         "PIL does not read either");
    if (offset == 14 + hsize)
      offset += 4 * colors; /* PIL's rule, 4 even for OS/2's 3 */
    at = 14 + (size_t)hsize;
    if (n - at < (size_t)pad * colors)
      return refuse(err, "truncated BMP: the data ends in its palette");
    for (i = 0; i < colors; i++) {
      const unsigned char *q = data + at + (size_t)i * pad;
      unsigned v = colors == 2 ? i * 255 : i;

      if (q[0] != v || q[1] != v || q[2] != v)
        grey = 0;
      pal[i][0] = q[2];
      pal[i][1] = q[1];
      pal[i][2] = q[0];
    }
    /* PIL reads a grey palette's indices as 1-bit (2 colours) or 8-bit
       grey, whatever the depth: where that is not the depth it misreads
       the rows. */
    if (grey && colors == 2 && bits != 1)
      return refuse(err, "a black-and-white BMP of more than 1 bit per "
                         "pixel, which PIL misreads");
    if (grey && colors != 2 && bits != 8)
      return refuse(err, "a grey BMP of fewer than 8 bits per pixel, which "
                         "PIL misreads");
  }
  if (w > 0x7fffffffu || h > 0x7fffffffu) {
    snprintf(err, FL__IMAGE_ERR_MAX, "bad BMP: %lu x %lu pixels",
             (unsigned long)w, (unsigned long)h);
    return FL_EDATASET;
  }
  /* The size is known: the bomb guard, and the crop's plan. */
  if ((rc = s->plan(s->arg, w, h, 0, &plan, err)) != 0)
    return rc;
  stride = (((size_t)w * bits + 31) >> 3) & ~(size_t)3;
  if (offset > n || (n - offset) / stride < h) {
    snprintf(err, FL__IMAGE_ERR_MAX, "truncated BMP: its %lu x %lu pixels "
             "need %zu bytes from offset %lu, and the file is %zu",
             (unsigned long)w, (unsigned long)h, stride * h,
             (unsigned long)offset, n);
    return FL_EDATASET;
  }
  if (b == NULL) {
    if ((b = calloc(1, sizeof(*b))) == NULL)
      return FL_ENOMEM;
    *bp = b;
  }
  if (b->cap < (size_t)w * 3) {
    unsigned char *r = realloc(b->row, (size_t)w * 3);

    if (r == NULL) {
      snprintf(err, FL__IMAGE_ERR_MAX, "out of memory for a row of %lu "
               "pixels", (unsigned long)w);
      return FL_ENOMEM;
    }
    b->row = r;
    b->cap = (size_t)w * 3;
  }
  for (y = plan.y0; y < plan.y1; y++) {
    const unsigned char *in =
        data + offset + (topdown ? y : h - 1 - y) * stride;
    unsigned char *out = b->row;

    for (x = 0; x < w; x++, out += 3) {
      const unsigned char *c;

      switch (bits) {
      case 1:
        c = pal[in[x >> 3] >> (7 - (x & 7)) & 1];
        break;
      case 4:
        c = pal[in[x >> 1] >> (x & 1 ? 0 : 4) & 15];
        break;
      case 8:
        c = pal[in[x]];
        break;
      case 24:
        out[0] = in[3 * x + 2];
        out[1] = in[3 * x + 1];
        out[2] = in[3 * x];
        continue;
      default:
        out[0] = in[4 * x + 2];
        out[1] = in[4 * x + 1];
        out[2] = in[4 * x];
        continue;
      }
      memcpy(out, c, 3);
    }
    s->row(s->arg, (unsigned)y, b->row, 0);
  }
  return 0;
}
