/*
 * JPEG through libjpeg-turbo's libjpeg API (not its TurboJPEG API: the
 * TurboJPEG of Debian 12, 2.1, cannot decode part of an image).  With
 * libjpeg's defaults, as PIL decodes, so that an image read whole is PIL's
 * to the byte; but only the rows and columns the crop needs
 * (jpeg_skip_scanlines, jpeg_crop_scanline), at the smallest DCT scale that
 * still covers the output.  CMYK and YCCK become RGB as PIL makes them:
 * inverted (Adobe's convention, which PIL assumes), then cmyk2rgb.
 */
#include "config.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "decode.h"
#include "internal.h"

struct fl__jpeg {
  struct jpeg_decompress_struct d;
  struct jpeg_error_mgr e;
  jmp_buf jb;
  char *err; /* of the image being decoded */
  int truncated;
  unsigned char *row_mem, *row, *rgb; /* row: row_mem + 1 */
  size_t row_cap;
};

static void
on_error(j_common_ptr c)
{
  struct fl__jpeg *j = (struct fl__jpeg *)c;
  char msg[JMSG_LENGTH_MAX];

  c->err->format_message(c, msg);
  snprintf(j->err, FL__IMAGE_ERR_MAX, "bad JPEG data: %.150s", msg);
  longjmp(j->jb, 1);
}

/* Warnings (stray bytes, an unknown marker) pass, as in PIL, except that
   the data ended: PIL refuses a truncated image, and so do we. */
static void
on_message(j_common_ptr c, int level)
{
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF)
    ((struct fl__jpeg *)c)->truncated = 1;
}

/* A scan ends with EOI (FF D9), which entropy-coded data cannot hold;
   without one after the first scan began, the file was cut short.  This
   also catches a cut in rows a crop never decodes. */
static int
has_eoi(const unsigned char *from, const unsigned char *end)
{
  while (end - from >= 2) {
    if (end[-1] == 0xd9 && end[-2] == 0xff)
      return 1;
    end--;
  }
  return 0;
}

static int
room(struct fl__jpeg *j, size_t bytes)
{
  void *p;

  if (bytes <= j->row_cap)
    return 0;
  /* libjpeg-turbo writes a row that starts 16-byte aligned with
     non-temporal stores, past the cache, and the row is read at once: one
     byte off, it stays in the cache (reading it into the resampler took
     13 cycles a pixel aligned, 1.7 unaligned, on an AMD EPYC). */
  if ((p = realloc(j->row_mem, bytes + 1)) == NULL)
    return FL_ENOMEM;
  j->row_mem = p;
  j->row = j->row_mem + 1;
  if ((p = realloc(j->rgb, bytes)) == NULL)
    return FL_ENOMEM;
  j->rgb = p;
  j->row_cap = bytes;
  return 0;
}

static void
cmyk_to_rgb(unsigned char *out, const unsigned char *in, unsigned n)
{
  unsigned x, c;

  for (x = 0; x < n; x++, in += 4, out += 3) {
    int nk = in[3]; /* 255 minus the inverted K */

    for (c = 0; c < 3; c++) {
      int t = (255 - in[c]) * nk + 128, v = nk - (((t >> 8) + t) >> 8);

      out[c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

void
fl__jpeg_free(struct fl__jpeg *j)
{
  if (j == NULL)
    return;
  jpeg_destroy_decompress(&j->d);
  free(j->row_mem);
  free(j->rgb);
  free(j);
}

static int
make(struct fl__jpeg **jp, char *err)
{
  struct fl__jpeg *j;

  if ((j = calloc(1, sizeof(*j))) == NULL)
    return FL_ENOMEM;
  j->d.err = jpeg_std_error(&j->e);
  j->e.error_exit = on_error;
  j->e.emit_message = on_message;
  j->err = err;
  if (setjmp(j->jb)) {
    free(j);
    return FL_ENOMEM;
  }
  jpeg_create_decompress(&j->d);
  *jp = j;
  return 0;
}

int
fl__jpeg_decode(struct fl__jpeg **jp, const unsigned char *data, size_t n,
                const struct fl__sink *s, char *err)
{
  struct fl__jpeg *j;
  struct fl__region p;
  JDIMENSION xoff, width, y, imcu, edge, end;
  int cmyk, rc;

  if (*jp == NULL && make(jp, err) != 0) {
    snprintf(err, FL__IMAGE_ERR_MAX, "out of memory for a JPEG decoder");
    return FL_ENOMEM;
  }
  j = *jp;
  j->err = err;
  j->truncated = 0;
  if (setjmp(j->jb)) {
    jpeg_abort_decompress(&j->d);
    return FL_EDATASET;
  }
  jpeg_mem_src(&j->d, data, (unsigned long)n);
  jpeg_read_header(&j->d, TRUE);
  if (!has_eoi(j->d.src->next_input_byte, data + n)) {
    jpeg_abort_decompress(&j->d);
    snprintf(err, FL__IMAGE_ERR_MAX, "truncated JPEG: the data ends before "
             "the image does");
    return FL_EDATASET;
  }
  if ((rc = s->plan(s->arg, j->d.image_width, j->d.image_height, 1, &p,
                    err)) != 0) {
    jpeg_abort_decompress(&j->d);
    return rc;
  }
  cmyk = j->d.jpeg_color_space == JCS_CMYK ||
         j->d.jpeg_color_space == JCS_YCCK;
  j->d.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  j->d.scale_num = p.scale_num;
  j->d.scale_denom = 8;
  jpeg_start_decompress(&j->d);
  /* The plan counted rows of this size: a libjpeg that rounds otherwise
     would be read at the wrong rows. */
  if (j->d.output_width != fl__scaled(j->d.image_width, p.scale_num) ||
      j->d.output_height != fl__scaled(j->d.image_height, p.scale_num)) {
    jpeg_abort_decompress(&j->d);
    snprintf(err, FL__IMAGE_ERR_MAX, "libjpeg scaled it to %u x %u pixels, "
             "not as expected", (unsigned)j->d.output_width,
             (unsigned)j->d.output_height);
    return FL_EDATASET;
  }
  /* The columns decoded start and end at iMCUs, where the upsampler
     sees no neighbour and replicates the edge's chroma: the pixels of the
     edge's chroma sample are not a whole decode's.  Where a column used is
     among them, an iMCU more on that side. */
  imcu = (JDIMENSION)j->d.max_h_samp_factor * j->d.min_DCT_scaled_size;
  edge = (JDIMENSION)j->d.max_h_samp_factor;
  xoff = p.x0 / imcu * imcu;
  if (p.x0 - xoff < edge && xoff > 0)
    xoff -= imcu;
  end = (p.x1 + imcu - 1) / imcu * imcu;
  if (end - p.x1 < edge)
    end += imcu;
  width = (end < j->d.output_width ? end : j->d.output_width) - xoff;
  if (width < j->d.output_width)
    jpeg_crop_scanline(&j->d, &xoff, &width);
  else
    xoff = 0;
  if ((rc = room(j, (size_t)j->d.output_width * 4)) != 0) {
    jpeg_abort_decompress(&j->d);
    snprintf(err, FL__IMAGE_ERR_MAX, "out of memory for a row of %u pixels",
             (unsigned)j->d.output_width);
    return rc;
  }
  if (p.y0 > 0)
    jpeg_skip_scanlines(&j->d, p.y0);
  for (y = p.y0; y < p.y1 && !j->truncated; y++) {
    JSAMPROW r = j->row;

    jpeg_read_scanlines(&j->d, &r, 1);
    if (cmyk)
      cmyk_to_rgb(j->rgb, j->row, j->d.output_width);
    s->row(s->arg, y, cmyk ? j->rgb : j->row, xoff);
  }
  jpeg_abort_decompress(&j->d);
  if (j->truncated) {
    snprintf(err, FL__IMAGE_ERR_MAX, "truncated JPEG: the data ends before "
             "the image does");
    return FL_EDATASET;
  }
  return 0;
}
