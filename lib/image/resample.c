/*
 * Resizing as PIL's Image.resize(BILINEAR) does it, in one pass over the
 * rows a decoder hands over: PIL's coefficients (a triangle filter widened
 * by the reduction, which is its antialiasing), in its fixed point (22
 * bits), horizontal pass first into 8-bit rows, then the vertical one.
 * Only the output's own columns and rows are computed, so a resize
 * followed by a crop costs only the crop, and the results are PIL's to the
 * bit.  The flip and torchvision's ToTensor and Normalize are folded into
 * the write (Normalize through a table of the 256 values per channel,
 * computed with torch's float32 operations).
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "internal.h"

#define PRECISION_BITS (32 - 8 - 2)

/* One axis: for output position k, count taps from source position
   first[k], weights at w[k * ksize]. */
struct axis {
  unsigned n, ksize, cap;
  unsigned *first, *count;
  int32_t *w;
  double *pre;
};

struct fl__resample {
  unsigned width, height;
  int chw_float;
  float lut[3][256];
  struct axis h, v;
  unsigned ylo, yhi; /* source rows the vertical pass reads */
  unsigned char *tmp; /* (yhi - ylo) rows of width x 3 */
  size_t tmp_cap;
  int32_t *acc;        /* a row's sums, width x 3 */
  unsigned char *line; /* and the row they make */
  int flip;
};

static double
triangle(double x)
{
  if (x < 0)
    x = -x;
  return x < 1 ? 1 - x : 0;
}

static void
axis_free(struct axis *a)
{
  free(a->first);
  free(a->count);
  free(a->w);
  free(a->pre);
}

/* Grow an axis's tables to n positions of ksize taps; kept for later
   images, so the steady state allocates nothing. */
static int
axis_room(struct axis *a, unsigned n, unsigned ksize)
{
  size_t need = (size_t)n * ksize;
  void *p;

  if (n > a->n || need > a->cap) {
    if ((p = realloc(a->first, n * sizeof(*a->first))) == NULL)
      return FL_ENOMEM;
    a->first = p;
    if ((p = realloc(a->count, n * sizeof(*a->count))) == NULL)
      return FL_ENOMEM;
    a->count = p;
    if (need > a->cap) {
      if ((p = realloc(a->w, need * sizeof(*a->w))) == NULL)
        return FL_ENOMEM;
      a->w = p;
      if ((p = realloc(a->pre, ksize * sizeof(*a->pre))) == NULL)
        return FL_ENOMEM;
      a->pre = p;
      a->cap = need;
    }
    a->n = n;
  }
  a->ksize = ksize;
  return 0;
}

/*
 * PIL's precompute_coeffs and normalize_coeffs_8bpc, for the n outputs
 * from position o of an axis resized from the box [b0, b1) to v pixels,
 * the filter seeing the source [c0, c1).  Positions outside [0, v) are the
 * zeros CenterCrop pads with: no taps.  Reports the source span read.
 */
static int
axis_plan(struct axis *a, double b0, double b1, unsigned c0, unsigned c1,
          unsigned v, long o, unsigned n, unsigned *lo, unsigned *hi)
{
  double scale = (b1 - b0) / v, fscale = scale < 1 ? 1 : scale;
  double support = fscale, ss = 1 / fscale;
  unsigned k, x, ksize = (unsigned)ceil(support) * 2 + 1;
  int rc;

  if ((rc = axis_room(a, n, ksize)) != 0)
    return rc;
  *lo = c1;
  *hi = c0;
  for (k = 0; k < n; k++) {
    long pos = o + (long)k;
    double center, ww = 0;
    long xmin, xmax;

    a->count[k] = 0;
    a->first[k] = c0;
    if (pos < 0 || pos >= (long)v)
      continue;
    center = (b0 - c0) + (pos + 0.5) * scale;
    xmin = (long)(center - support + 0.5);
    if (xmin < 0)
      xmin = 0;
    xmax = (long)(center + support + 0.5);
    if (xmax > (long)(c1 - c0))
      xmax = c1 - c0;
    xmax -= xmin;
    if (xmax > (long)ksize)
      xmax = ksize;
    for (x = 0; x < (unsigned)xmax; x++) {
      a->pre[x] = triangle((x + xmin - center + 0.5) * ss);
      ww += a->pre[x];
    }
    for (x = 0; x < (unsigned)xmax; x++) {
      double w = ww != 0 ? a->pre[x] / ww : a->pre[x];
      a->w[(size_t)k * ksize + x] =
          (int32_t)(w < 0 ? -0.5 + w * (1 << PRECISION_BITS)
                          : 0.5 + w * (1 << PRECISION_BITS));
    }
    if (xmax <= 0)
      continue;
    a->first[k] = c0 + (unsigned)xmin;
    a->count[k] = (unsigned)xmax;
    if (a->first[k] < *lo)
      *lo = a->first[k];
    if (a->first[k] + a->count[k] > *hi)
      *hi = a->first[k] + a->count[k];
  }
  if (*lo >= *hi) { /* nothing but padding: read one pixel anyway */
    *lo = c0;
    *hi = c0 + 1;
  }
  return 0;
}

static unsigned char
clip8(int32_t v)
{
  v >>= PRECISION_BITS;
  return v < 0 ? 0 : v > 255 ? 255 : (unsigned char)v;
}

int
fl__resample_new(struct fl__resample **out, const fl_image_options *io)
{
  struct fl__resample *r;
  unsigned c, v;

  if ((r = calloc(1, sizeof(*r))) == NULL)
    return FL_ENOMEM;
  r->width = io->width;
  r->height = io->height;
  r->chw_float = io->chw_float;
  for (c = 0; c < 3; c++)
    for (v = 0; v < 256; v++) {
      volatile float x = (float)v / 255.0f; /* torch's float32 steps */

      x = x - io->mean[c];
      r->lut[c][v] = x / io->std[c];
    }
  r->acc = malloc((size_t)io->width * 3 * sizeof(*r->acc));
  r->line = malloc((size_t)io->width * 3);
  if (r->acc == NULL || r->line == NULL) {
    fl__resample_free(r);
    return FL_ENOMEM;
  }
  *out = r;
  return 0;
}

void
fl__resample_free(struct fl__resample *r)
{
  if (r == NULL)
    return;
  axis_free(&r->h);
  axis_free(&r->v);
  free(r->tmp);
  free(r->acc);
  free(r->line);
  free(r);
}

int
fl__resample_begin(struct fl__resample *r, const struct fl__geom *g,
                   double sx, double sy, unsigned sw, unsigned sh,
                   struct fl__region *p)
{
  unsigned cx0 = (unsigned)floor(g->cx0 * sx);
  unsigned cy0 = (unsigned)floor(g->cy0 * sy);
  unsigned cx1 = (unsigned)ceil(g->cx1 * sx);
  unsigned cy1 = (unsigned)ceil(g->cy1 * sy);
  size_t need;
  void *t;
  int rc;

  if (cx1 > sw)
    cx1 = sw;
  if (cy1 > sh)
    cy1 = sh;
  rc = axis_plan(&r->h, g->bx0 * sx, g->bx1 * sx, cx0, cx1, g->vw, g->ox,
                 r->width, &p->x0, &p->x1);
  if (rc == 0)
    rc = axis_plan(&r->v, g->by0 * sy, g->by1 * sy, cy0, cy1, g->vh, g->oy,
                   r->height, &p->y0, &p->y1);
  if (rc != 0)
    return rc;
  r->ylo = p->y0;
  r->yhi = p->y1;
  need = (size_t)(r->yhi - r->ylo) * r->width * 3;
  if (need > r->tmp_cap) {
    if ((t = realloc(r->tmp, need)) == NULL)
      return FL_ENOMEM;
    r->tmp = t;
    r->tmp_cap = need;
  }
  r->flip = g->flip;
  return 0;
}

/* The horizontal pass of one source row into its 8-bit row. */
void
fl__resample_row(struct fl__resample *r, unsigned y, const unsigned char *rgb,
                 unsigned x0)
{
  const struct axis *a = &r->h;
  unsigned char *out;
  unsigned k, x;

  if (y < r->ylo || y >= r->yhi)
    return;
  out = r->tmp + (size_t)(y - r->ylo) * r->width * 3;
  for (k = 0; k < r->width; k++) {
    const int32_t *w = a->w + (size_t)k * a->ksize;
    const unsigned char *in;
    int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;

    if (a->count[k] == 0) { /* CenterCrop's padding */
      memset(out + k * 3, 0, 3);
      continue;
    }
    in = rgb + (size_t)(a->first[k] - x0) * 3;
    for (x = 0; x < a->count[k]; x++) {
      s0 += in[x * 3] * w[x];
      s1 += in[x * 3 + 1] * w[x];
      s2 += in[x * 3 + 2] * w[x];
    }
    out[k * 3] = clip8(s0);
    out[k * 3 + 1] = clip8(s1);
    out[k * 3 + 2] = clip8(s2);
  }
}

/* acc[i] += in[i] * w for n values (first: acc[i] starts at PIL's
   rounding half), in blocks of a fixed count that the compiler vectorizes
   at -O2. */
static void
mac(int32_t *restrict acc, const unsigned char *restrict in, int32_t w,
    size_t n, int first)
{
  const int32_t half = 1 << (PRECISION_BITS - 1);
  size_t i = 0, j;

  if (first) {
    for (; i + 16 <= n; i += 16)
      for (j = 0; j < 16; j++)
        acc[i + j] = half + in[i + j] * w;
    for (; i < n; i++)
      acc[i] = half + in[i] * w;
    return;
  }
  for (; i + 16 <= n; i += 16)
    for (j = 0; j < 16; j++)
      acc[i + j] += in[i + j] * w;
  for (; i < n; i++)
    acc[i] += in[i] * w;
}

/* clip8 over a row, in blocks the compiler vectorizes. */
static void
clip_row(unsigned char *restrict out, const int32_t *restrict acc, size_t n)
{
  size_t i = 0, j;

  for (; i + 16 <= n; i += 16)
    for (j = 0; j < 16; j++) {
      int32_t v = acc[i + j] >> PRECISION_BITS;

      v = v < 0 ? 0 : v;
      out[i + j] = (unsigned char)(v > 255 ? 255 : v);
    }
  for (; i < n; i++)
    out[i] = clip8(acc[i]);
}

/* The vertical pass, one output row at a time into an 8-bit row, then
   the flip and the output's layout. */
void
fl__resample_end(struct fl__resample *r, void *dst)
{
  const struct axis *a = &r->v;
  size_t row = (size_t)r->width * 3, plane = (size_t)r->width * r->height;
  unsigned char *line = r->line;
  unsigned k, t, x, c;

  for (k = 0; k < r->height; k++) {
    const int32_t *w = a->w + (size_t)k * a->ksize;
    unsigned char *u8 = (unsigned char *)dst + (size_t)k * row;
    float *f32 = (float *)dst + (size_t)k * r->width;

    if (a->count[k] == 0) { /* CenterCrop's padding */
      memset(line, 0, row);
    } else {
      for (t = 0; t < a->count[k]; t++)
        mac(r->acc, r->tmp + (size_t)(a->first[k] + t - r->ylo) * row,
            w[t], row, t == 0);
      clip_row(line, r->acc, row);
    }
    if (!r->chw_float && !r->flip) {
      memcpy(u8, line, row);
      continue;
    }
    if (!r->chw_float) {
      for (x = 0; x < r->width; x++)
        memcpy(u8 + (size_t)(r->width - 1 - x) * 3, line + (size_t)x * 3, 3);
      continue;
    }
    /* A plane at a time: three streams of stores, each in order. */
    for (c = 0; c < 3; c++) {
      const float *lut = r->lut[c];
      float *out = f32 + c * plane;

      if (r->flip)
        for (x = 0; x < r->width; x++)
          out[r->width - 1 - x] = lut[line[x * 3 + c]];
      else
        for (x = 0; x < r->width; x++)
          out[x] = lut[line[x * 3 + c]];
    }
  }
}
