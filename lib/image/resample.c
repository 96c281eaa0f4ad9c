/*
 * Resizing as PIL's Image.resize(BILINEAR) does it, in one pass over the
 * rows a decoder hands over: PIL's coefficients (a triangle filter widened
 * by the reduction, which is its antialiasing), in its fixed point (22
 * bits), horizontal pass first into 8-bit rows, then the vertical one.
 * The horizontal pass runs on blocks of rows stored column by column, so
 * that one vector holds a source column of every row of the block and an
 * output column is a sum of whole vectors, each times one weight (with
 * AVX-512, the block's rows are staged as they come, then transposed).  Its
 * rows are planar (the row's R, then its G, then its B), so that the
 * vertical pass makes rows of each channel, which the float write takes
 * as they are.
 * Where the CPU has AVX2 (or AVX-512's byte permutes, VBMI) and the
 * columns allow it, the horizontal pass takes each row as it comes
 * instead: a shuffle (a permute) puts each output column's source bytes in
 * its lane, so no block and no transpose.
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
/* Bytes a vector kernel may read or write past the pixels it uses, in
   its own buffers (tmp, line, blk); rows a decoder hands over are never
   read past the plan's columns. */
#define FL__ROW_SLACK 32
/* Rows in a block of the horizontal pass (the most any kernel takes), and
   the bytes a column of them takes in blk: a row's RGB at 3 x its place,
   and room for a 4-byte store of the last row's. */
#define FL__BLOCK_MAX 16
#define FL__COL(rows) ((rows) * 3 + 4)

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
  float mean[3], std[3];
  float inv[3]; /* 1 / std, once: not a division every 8 or 16 values */
  struct axis h, v;
  unsigned ylo, yhi; /* source rows the vertical pass reads */
  unsigned char *tmp; /* (yhi - ylo) planar rows of width x 3 */
  size_t tmp_cap;
  unsigned char *line; /* a row of the vertical pass (planar) */
  int flip;
  int stream; /* the float write goes past the cache (frow_avx2) */
  int fma;    /* and computes torch's steps with FMA (norm_fma) */
  unsigned x0, x1;    /* the columns the horizontal pass reads */
  unsigned char *blk; /* a block of rows, column by column, from x0 */
  size_t blk_cap;
  unsigned char *stage; /* or its rows as they came, where kernels->fill */
  size_t stage_row, stage_cap;
  /* Or, where the kernels have a row path whose reach the image's
     columns allow (row_plan), a row at a time: per chunk of output
     columns, its first source pixel (from x0), taps and span, and per tap
     its plan; and, for a path that takes a row's channels apart first,
     their rows, plane_row bytes apart. */
  const struct row_path *rp; /* NULL: blocks */
  unsigned chunks;
  unsigned *cbase, *ctaps, *cspan;
  unsigned char *cplan;
  size_t cplan_cap;
  unsigned char *planes;
  size_t planes_cap, plane_row;
  const struct kernels *k;
};

struct kernels;
struct row_path;
static const struct kernels *kernels_pick(void);
static int kernels_unknown(const char *fn);
static int float_fma(struct fl__resample *r);
static int row_plan(struct fl__resample *r);
static int stages_rows(const struct fl__resample *r);

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
fl__resample_new(struct fl__resample **out, const fl_image_options *io,
                 const char *fn)
{
  const struct kernels *k = kernels_pick();
  struct fl__resample *r;
  unsigned c, v, n;

  if (k == NULL)
    return kernels_unknown(fn);
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
  for (c = 0; c < 3; c++) {
    r->mean[c] = io->mean[c];
    r->std[c] = io->std[c];
    r->inv[c] = 1 / io->std[c];
  }
  r->k = k;
  /* A float image past 256 KiB (3 x 224 x 224 is 588 KiB) comes in
     batches far larger than any cache: reading each line before writing
     it, as a plain store does, would double the memory traffic. */
  r->stream = io->chw_float && (size_t)io->width * io->height * 12 >= 262144;
  r->fma = float_fma(r);
  r->line = malloc((size_t)io->width * 3 + FL__ROW_SLACK);
  /* Room for the most chunks a row path makes: 8 columns each. */
  n = (io->width + 7) / 8;
  r->cbase = malloc(n * 3 * sizeof(*r->cbase));
  r->ctaps = r->cbase + n;
  r->cspan = r->ctaps + n;
  if (r->line == NULL || r->cbase == NULL) {
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
  free(r->line);
  free(r->blk);
  free(r->stage);
  free(r->cbase);
  free(r->cplan);
  free(r->planes);
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
  r->x0 = p->x0;
  r->x1 = p->x1;
  r->flip = g->flip;
  need = (size_t)(r->yhi - r->ylo) * r->width * 3 + FL__ROW_SLACK;
  if (need > r->tmp_cap) {
    if ((t = realloc(r->tmp, need)) == NULL)
      return FL_ENOMEM;
    r->tmp = t;
    r->tmp_cap = need;
  }
  if ((rc = row_plan(r)) < 0)
    return rc;
  if (r->rp != NULL)
    return 0;
  need = (size_t)(r->x1 - r->x0) * FL__COL(FL__BLOCK_MAX) + FL__ROW_SLACK;
  if (need > r->blk_cap) {
    /* Zeroed once: a block's rows past the image's last are summed (and
       the sums dropped), never left uninitialised. */
    if ((t = realloc(r->blk, need)) == NULL)
      return FL_ENOMEM;
    memset(t, 0, need);
    r->blk = t;
    r->blk_cap = need;
  }
  /* Only the kernels with a fill stage rows; a staged row has room for
     a 64-byte load at its last 16 pixels. */
  if (!stages_rows(r))
    return 0;
  r->stage_row = (size_t)(r->x1 - r->x0) * 3 + 16;
  need = r->stage_row * FL__BLOCK_MAX;
  if (need > r->stage_cap) {
    /* Zeroed as blk is: rows past the image's last are read. */
    if ((t = realloc(r->stage, need)) == NULL)
      return FL_ENOMEM;
    memset(t, 0, need);
    r->stage = t;
    r->stage_cap = need;
  }
  return 0;
}

/*
 * The kernels: the horizontal pass over a block of source rows, the
 * vertical pass over one output row, and the float write of a planar row
 * (ToTensor and Normalize, with the flip), each in portable C and, on
 * x86, in SSE4.1, AVX2 and AVX-512 (from AVX2 on, the horizontal pass a
 * row at a time too), chosen at run time (FL_IMAGE_SIMD=c, sse4.1, avx2,
 * avx512 or avx512vbmi asks for at most that one).  All are integer sums
 * of the same products (exact, in any order: no sum leaves int32, as
 * PIL's weights are positive and sum to 2^22) and the float write is
 * torch's float32 steps lane by lane (IEEE division and subtraction,
 * correctly rounded in any width) or values checked against them: every
 * path gives the same bytes.
 */
struct kernels {
  const char *name;
  unsigned rows; /* of a block of the horizontal pass */
  /* n rows of the block in r->blk (column x at x - x0) into n planar
     8-bit rows from out, row bytes apart. */
  void (*hblock)(const struct fl__resample *r, unsigned char *out,
                 size_t row, unsigned n);
  void (*vrow)(unsigned char *line, const unsigned char *tmp, size_t row,
               const int32_t *w, unsigned count);
  void (*frow)(const struct fl__resample *r, float *out, size_t plane,
               const unsigned char *line);
  /* Or both at once, for a float image (NULL: vrow, then frow). */
  void (*vfrow)(const struct fl__resample *r, float *out, size_t plane,
                const unsigned char *tmp, size_t row, const int32_t *w,
                unsigned count);
  /* The block from a whole block of rows in r->stage, transposed (NULL:
     each row goes into the block as it comes). */
  void (*fill)(const struct fl__resample *r);
  /* Or the horizontal pass a row at a time, for an image whose columns
     its reach allows (NULL: always blocks). */
  const struct row_path *by_rows;
};

/* A horizontal pass a row at a time, in chunks of output columns. */
struct row_path {
  const char *name;
  /* One row, its pixel x0 at in, into its planar 8-bit row, by r->cplan. */
  void (*hrow)(const struct fl__resample *r, unsigned char *out,
               const unsigned char *in);
  /* Where lane i of a tap's entry finds its source pixel, at pixels
     from the chunk's first. */
  void (*place)(unsigned char *entry, unsigned i, unsigned at);
  /* Output columns a chunk, the most source pixels their taps may span,
     where a tap's entry in the plan has its lanes' 32-bit weights (the
     bytes before them blank where no lane's are; tap_bytes: the whole
     entry), and whether hrow reads the row's channels apart
     (r->planes). */
  unsigned chunk, reach, weights;
  unsigned char blank;
  int planar;
};

/* The taps of output k in the block: its first column's bytes (none
   for CenterCrop's padding, whose sum is PIL's half alone: 0). */
static inline const unsigned char *
taps(const struct fl__resample *r, unsigned k)
{
  if (r->h.count[k] == 0)
    return r->blk;
  return r->blk + (size_t)(r->h.first[k] - r->x0) * FL__COL(r->k->rows);
}

static void
hblock_c(const struct fl__resample *r, unsigned char *out, size_t row,
         unsigned n)
{
  const struct axis *a = &r->h;
  const size_t col = FL__COL(r->k->rows);
  unsigned k, i, c, x;

  for (k = 0; k < r->width; k++) {
    const int32_t *w = a->w + (size_t)k * a->ksize;
    const unsigned char *in = taps(r, k);

    for (i = 0; i < n; i++)
      for (c = 0; c < 3; c++) {
        int32_t s = 1 << (PRECISION_BITS - 1);

        for (x = 0; x < a->count[k]; x++)
          s += in[x * col + i * 3 + c] * w[x];
        out[i * row + c * r->width + k] = clip8(s);
      }
  }
}

/* Columns from to row - 1 of the vertical pass. */
static void
vcols_c(unsigned char *line, const unsigned char *tmp, size_t row,
        size_t from, const int32_t *w, unsigned count)
{
  const int32_t half = 1 << (PRECISION_BITS - 1);
  size_t i;
  unsigned t;

  for (i = from; i < row; i++) {
    int32_t s = half;

    for (t = 0; t < count; t++)
      s += tmp[t * row + i] * w[t];
    line[i] = clip8(s);
  }
}

static void
vrow_c(unsigned char *line, const unsigned char *tmp, size_t row,
       const int32_t *w, unsigned count)
{
  vcols_c(line, tmp, row, 0, w, count);
}

static void
frow_c(const struct fl__resample *r, float *f32, size_t plane,
       const unsigned char *line)
{
  unsigned c, x;

  for (c = 0; c < 3; c++) {
    const float *lut = r->lut[c];
    const unsigned char *in = line + c * r->width;
    float *out = f32 + c * plane;

    if (r->flip)
      for (x = 0; x < r->width; x++)
        out[r->width - 1 - x] = lut[in[x]];
    else
      for (x = 0; x < r->width; x++)
        out[x] = lut[in[x]];
  }
}

static const struct kernels k_c = {"c", 1, hblock_c, vrow_c, frow_c, NULL,
                                   NULL, NULL};

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define FL__X86 1

static inline uint32_t
load32(const unsigned char *p)
{
  uint32_t v;

  memcpy(&v, p, 4);
  return v;
}

static inline uint64_t
load64(const unsigned char *p)
{
  uint64_t v;

  memcpy(&v, p, 8);
  return v;
}

/* Output column k of n rows, their R G B at b + 3 x the row, to its
   place in each planar row. */
static inline void
hstore(unsigned char *out, size_t row, unsigned k, unsigned width,
       const unsigned char *b, unsigned n)
{
  unsigned i, c;

  for (i = 0; i < n; i++)
    for (c = 0; c < 3; c++)
      out[i * row + c * width + k] = b[i * 3 + c];
}

/* Output columns k to k + 7 the same way, an 8-byte store a row and
   channel: the eight columns' bytes transposed (SSE2, which every x86-64
   has).  Byte j of a column is row j / 3's channel j % 3, at at[j] (its
   row's and plane's offset; 24 of them, the last past n rows unused). */
static inline __attribute__((always_inline)) void
hstore8(unsigned char *out, const size_t *at, unsigned k,
        unsigned char b[8][64], unsigned from, unsigned n)
{
  __m128i p[12], q[6], t[6], o[12];
  unsigned j, m;

  for (j = 0; j < 8; j += 2) {
    __m128i x = _mm_loadu_si128((const __m128i *)(b[j] + from));
    __m128i y = _mm_loadu_si128((const __m128i *)(b[j + 1] + from));

    p[j] = _mm_unpacklo_epi8(x, y);     /* bytes 0-7 of columns j, j + 1 */
    p[j + 1] = _mm_unpackhi_epi8(x, y); /* 8-15 */
    p[8 + j / 2] = _mm_unpacklo_epi8(   /* 16-23 */
        _mm_loadl_epi64((const __m128i *)(b[j] + from + 16)),
        _mm_loadl_epi64((const __m128i *)(b[j + 1] + from + 16)));
  }
  /* Bytes 4m to 4m + 3 of columns 0-3 (q) and 4-7 (t). */
  q[0] = _mm_unpacklo_epi16(p[0], p[2]);
  q[1] = _mm_unpackhi_epi16(p[0], p[2]);
  q[2] = _mm_unpacklo_epi16(p[1], p[3]);
  q[3] = _mm_unpackhi_epi16(p[1], p[3]);
  q[4] = _mm_unpacklo_epi16(p[8], p[9]);
  q[5] = _mm_unpackhi_epi16(p[8], p[9]);
  t[0] = _mm_unpacklo_epi16(p[4], p[6]);
  t[1] = _mm_unpackhi_epi16(p[4], p[6]);
  t[2] = _mm_unpacklo_epi16(p[5], p[7]);
  t[3] = _mm_unpackhi_epi16(p[5], p[7]);
  t[4] = _mm_unpacklo_epi16(p[10], p[11]);
  t[5] = _mm_unpackhi_epi16(p[10], p[11]);
  /* Bytes 2m and 2m + 1 of the eight columns, 8 bytes each. */
  for (m = 0; m < 6; m++) {
    o[2 * m] = _mm_unpacklo_epi32(q[m], t[m]);
    o[2 * m + 1] = _mm_unpackhi_epi32(q[m], t[m]);
  }
  for (j = 0; j < 3 * n; j += 2) {
    _mm_storel_epi64((__m128i *)(out + at[j] + k), o[j / 2]);
    if (j + 1 < 3 * n)
      /* Not _mm_storeh_pd: its double store is undefined unaligned. */
      _mm_storel_epi64((__m128i *)(out + at[j + 1] + k),
                       _mm_unpackhi_epi64(o[j / 2], o[j / 2]));
  }
}

/* Output columns into b[k % 8], stored eight at a time, then the last
   ones. */
#define HBLOCK(r, out, row, n, hcol)                                           \
  do {                                                                         \
    unsigned char b_[8][64];                                                   \
    size_t at_[24];                                                            \
    unsigned k_;                                                               \
                                                                               \
    for (k_ = 0; k_ < 24; k_++)                                                \
      at_[k_] = k_ / 3 * (row) + k_ % 3 * (r)->width;                          \
    for (k_ = 0; k_ < (r)->width; k_++) {                                      \
      hcol((r), k_, b_[k_ & 7]);                                               \
      if ((k_ & 7) == 7) { /* rows 8-15 where the block has them */         \
        hstore8((out), at_, k_ - 7, b_, 0, (n) < 8 ? (n) : 8);                 \
        if ((n) > 8)                                                           \
          hstore8((out) + 8 * (row), at_, k_ - 7, b_, 24, (n) - 8);            \
      }                                                                        \
    }                                                                          \
    for (k_ = (r)->width & ~7u; k_ < (r)->width; k_++)                         \
      hstore((out), (row), k_, (r)->width, b_[k_ & 7], (n));                   \
  } while (0)

/* Eight rows a block: a column's 24 bytes in six vectors of 4 lanes. */
static inline __attribute__((target("sse4.1"))) void
hcol_sse41(const struct fl__resample *r, unsigned k, unsigned char *b)
{
  const struct axis *a = &r->h;
  const __m128i half = _mm_set1_epi32(1 << (PRECISION_BITS - 1));
  const size_t col = FL__COL(8);
  const int32_t *w = a->w + (size_t)k * a->ksize;
  const unsigned char *in = taps(r, k);
  __m128i s[6];
  unsigned x, j;

  for (j = 0; j < 6; j++)
    s[j] = half;
  for (x = 0; x < a->count[k]; x++) {
    const __m128i wt = _mm_set1_epi32(w[x]);

    for (j = 0; j < 6; j++)
      s[j] = _mm_add_epi32(s[j], _mm_mullo_epi32(_mm_cvtepu8_epi32(
                 _mm_cvtsi32_si128((int)load32(in + x * col + j * 4))), wt));
  }
  for (j = 0; j < 6; j++)
    s[j] = _mm_srai_epi32(s[j], PRECISION_BITS);
  s[0] = _mm_packs_epi32(s[0], s[1]);
  s[2] = _mm_packs_epi32(s[2], s[3]);
  s[4] = _mm_packs_epi32(s[4], s[5]);
  _mm_storeu_si128((__m128i *)b, _mm_packus_epi16(s[0], s[2]));
  _mm_storeu_si128((__m128i *)(b + 16), _mm_packus_epi16(s[4], s[4]));
}

__attribute__((target("sse4.1"))) static void
hblock_sse41(const struct fl__resample *r, unsigned char *out, size_t row,
             unsigned n)
{
  HBLOCK(r, out, row, n, hcol_sse41);
}

__attribute__((target("sse4.1"))) static void
vrow_sse41(unsigned char *line, const unsigned char *tmp, size_t row,
           const int32_t *w, unsigned count)
{
  const __m128i half = _mm_set1_epi32(1 << (PRECISION_BITS - 1));
  size_t i = 0;
  unsigned t;

  for (; i + 8 <= row; i += 8) {
    __m128i lo = half, hi = half;

    for (t = 0; t < count; t++) {
      __m128i p = _mm_cvtsi64_si128((long long)load64(tmp + t * row + i));
      __m128i wt = _mm_set1_epi32(w[t]);

      lo = _mm_add_epi32(lo, _mm_mullo_epi32(_mm_cvtepu8_epi32(p), wt));
      hi = _mm_add_epi32(hi, _mm_mullo_epi32(
                                 _mm_cvtepu8_epi32(_mm_srli_si128(p, 4)), wt));
    }
    lo = _mm_packs_epi32(_mm_srai_epi32(lo, PRECISION_BITS),
                         _mm_srai_epi32(hi, PRECISION_BITS));
    _mm_storel_epi64((__m128i *)(line + i), _mm_packus_epi16(lo, lo));
  }
  vcols_c(line, tmp, row, i, w, count);
}

/* torch's steps, x / 255 then - mean then / std, four lanes at once. */
__attribute__((target("sse4.1"))) static void
frow_sse41(const struct fl__resample *r, float *f32, size_t plane,
           const unsigned char *line)
{
  const __m128 k255 = _mm_set1_ps(255.0f);
  unsigned c, x, n = r->width;

  for (c = 0; c < 3; c++) {
    const __m128 mean = _mm_set1_ps(r->mean[c]), sd = _mm_set1_ps(r->std[c]);
    float *out = f32 + c * plane;

    for (x = 0; x + 4 <= n; x += 4) {
      __m128 v = _mm_cvtepi32_ps(_mm_cvtepu8_epi32(
          _mm_cvtsi32_si128((int)load32(line + c * n + x))));

      v = _mm_div_ps(_mm_sub_ps(_mm_div_ps(v, k255), mean), sd);
      if (r->flip)
        _mm_storeu_ps(out + n - 4 - x,
                      _mm_shuffle_ps(v, v, _MM_SHUFFLE(0, 1, 2, 3)));
      else
        _mm_storeu_ps(out + x, v);
    }
    for (; x < n; x++)
      out[r->flip ? n - 1 - x : x] = r->lut[c][line[c * n + x]];
  }
}

static const struct kernels k_sse41 = {"sse4.1", 8, hblock_sse41, vrow_sse41,
                                       frow_sse41, NULL, NULL, NULL};

/* Eight rows a block: a column's 24 bytes in three vectors of 8 lanes,
   packed back in their order (the packs work within 128-bit halves). */
static inline __attribute__((target("avx2"))) void
hcol_avx2(const struct fl__resample *r, unsigned k, unsigned char *b)
{
  const struct axis *a = &r->h;
  const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const size_t col = FL__COL(8);
  const int32_t *w = a->w + (size_t)k * a->ksize;
  const unsigned char *in = taps(r, k);
  __m256i s0 = half, s1 = half, s2 = half;
  unsigned x;

  for (x = 0; x < a->count[k]; x++) {
    const unsigned char *p = in + x * col;
    const __m256i wt = _mm256_set1_epi32(w[x]);

    s0 = _mm256_add_epi32(s0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(
             _mm_loadl_epi64((const __m128i *)p)), wt));
    s1 = _mm256_add_epi32(s1, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(
             _mm_loadl_epi64((const __m128i *)(p + 8))), wt));
    s2 = _mm256_add_epi32(s2, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(
             _mm_loadl_epi64((const __m128i *)(p + 16))), wt));
  }
  s0 = _mm256_srai_epi32(s0, PRECISION_BITS);
  s1 = _mm256_srai_epi32(s1, PRECISION_BITS);
  s2 = _mm256_srai_epi32(s2, PRECISION_BITS);
  s0 = _mm256_packus_epi16(_mm256_packs_epi32(s0, s1),
                           _mm256_packs_epi32(s2, s2));
  _mm256_storeu_si256((__m256i *)b, _mm256_permutevar8x32_epi32(s0, order));
}

__attribute__((target("avx2"))) static void
hblock_avx2(const struct fl__resample *r, unsigned char *out, size_t row,
            unsigned n)
{
  HBLOCK(r, out, row, n, hcol_avx2);
}

static inline __attribute__((target("avx2"))) __m128i
vpack_avx2(__m256i s)
{
  s = _mm256_srai_epi32(s, PRECISION_BITS);
  return _mm_packs_epi32(_mm256_castsi256_si128(s),
                         _mm256_extracti128_si256(s, 1));
}

__attribute__((target("avx2"))) static void
vrow_avx2(unsigned char *line, const unsigned char *tmp, size_t row,
          const int32_t *w, unsigned count)
{
  const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
  size_t i = 0;
  unsigned t;

  for (; i + 16 <= row; i += 16) {
    __m256i lo = half, hi = half;

    for (t = 0; t < count; t++) {
      __m128i p = _mm_loadu_si128((const __m128i *)(tmp + t * row + i));
      __m256i wt = _mm256_set1_epi32(w[t]);

      lo = _mm256_add_epi32(lo, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(p),
                                                   wt));
      hi = _mm256_add_epi32(hi, _mm256_mullo_epi32(
                                    _mm256_cvtepu8_epi32(_mm_srli_si128(p, 8)),
                                    wt));
    }
    _mm_storeu_si128((__m128i *)(line + i),
                     _mm_packus_epi16(vpack_avx2(lo), vpack_avx2(hi)));
  }
  vcols_c(line, tmp, row, i, w, count);
}

/*
 * Torch's steps for channel c, eight bytes at once, without a division:
 * each quotient as the product by the divisor's reciprocal, corrected by
 * its remainder (an FMA gives it exactly).  That is the correctly rounded
 * quotient for most divisors, not all, so a stage uses it only where it
 * gives every one of the 256 values of each channel's table (norm_fma_ok).
 */
static inline __attribute__((target("avx2,fma"))) __m256
norm_fma(const struct fl__resample *r, unsigned c, __m128i bytes)
{
  const __m256 d0 = _mm256_set1_ps(255.0f), i0 = _mm256_set1_ps(1 / 255.0f);
  const __m256 d1 = _mm256_set1_ps(r->std[c]);
  const __m256 i1 = _mm256_set1_ps(r->inv[c]);
  __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)), q;

  q = _mm256_mul_ps(x, i0);
  q = _mm256_fmadd_ps(_mm256_fnmadd_ps(q, d0, x), i0, q);
  x = _mm256_sub_ps(q, _mm256_set1_ps(r->mean[c]));
  q = _mm256_mul_ps(x, i1);
  return _mm256_fmadd_ps(_mm256_fnmadd_ps(q, d1, x), i1, q);
}

__attribute__((target("avx2,fma"))) static int
norm_fma_ok(const struct fl__resample *r)
{
  unsigned c, v, j;
  float got[8];

  for (c = 0; c < 3; c++)
    for (v = 0; v < 256; v += 8) {
      _mm256_storeu_ps(got, norm_fma(r, c, _mm_setr_epi8(
          (char)v, (char)(v + 1), (char)(v + 2), (char)(v + 3),
          (char)(v + 4), (char)(v + 5), (char)(v + 6), (char)(v + 7), 0, 0,
          0, 0, 0, 0, 0, 0)));
      for (j = 0; j < 8; j++)
        if (memcmp(&got[j], &r->lut[c][v + j], sizeof(float)) != 0)
          return 0;
    }
  return 1;
}

/* The table's values (torch's steps, exact): computed with FMA where that
   gives them all, else gathered; written past the cache where the stage
   says so and the rows are aligned (fenced once an image, in
   fl__resample_end). */
__attribute__((target("avx2,fma"))) static void
frow_avx2(const struct fl__resample *r, float *f32, size_t plane,
          const unsigned char *line)
{
  const __m256i rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  unsigned c, x, n = r->width;
  int nt = r->stream && n % 8 == 0 && (uintptr_t)f32 % 32 == 0 &&
           plane % 8 == 0;

  for (c = 0; c < 3; c++) {
    const float *lut = r->lut[c];
    const unsigned char *in = line + c * n;
    float *out = f32 + c * plane;

    for (x = 0; x + 8 <= n; x += 8) {
      __m128i b = _mm_loadl_epi64((const __m128i *)(in + x));
      __m256 v = r->fma ? norm_fma(r, c, b)
                        : _mm256_i32gather_ps(lut, _mm256_cvtepu8_epi32(b), 4);
      float *to = out + (r->flip ? n - 8 - x : x);

      if (r->flip)
        v = _mm256_permutevar8x32_ps(v, rev);
      if (nt)
        _mm256_stream_ps(to, v);
      else
        _mm256_storeu_ps(to, v);
    }
    for (; x < n; x++)
      out[r->flip ? n - 1 - x : x] = lut[in[x]];
  }
}

/* A row's n pixels into its three channels' rows, 16 pixels at a time:
   byte i of channel c's is byte 3i + c of the 48 (split[c][v] picks it
   from their v-th 16). */
__attribute__((target("avx2"))) static void
split_avx2(unsigned char *pl, size_t pr, const unsigned char *in, unsigned n)
{
  static const signed char split[3][3][16] = {
      {{0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
       {-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1},
       {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13}},
      {{1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
       {-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1},
       {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14}},
      {{2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
       {-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1},
       {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15}}};
  unsigned x, c;

  for (x = 0; x + 16 <= n; x += 16) {
    const __m128i a = _mm_loadu_si128((const __m128i *)(in + x * 3));
    const __m128i b = _mm_loadu_si128((const __m128i *)(in + x * 3 + 16));
    const __m128i d = _mm_loadu_si128((const __m128i *)(in + x * 3 + 32));

    for (c = 0; c < 3; c++) {
      const __m128i *m = (const __m128i *)split[c];

      _mm_storeu_si128((__m128i *)(pl + c * pr + x),
                       _mm_or_si128(_mm_or_si128(
                           _mm_shuffle_epi8(a, _mm_loadu_si128(m)),
                           _mm_shuffle_epi8(b, _mm_loadu_si128(m + 1))),
                           _mm_shuffle_epi8(d, _mm_loadu_si128(m + 2))));
    }
  }
  for (; x < n; x++)
    for (c = 0; c < 3; c++)
      pl[c * pr + x] = in[x * 3 + c];
}

/*
 * A row by row_plan's chunks of 8 output columns, from its channels'
 * rows (split_avx2): per channel, the chunk's source bytes (at most 32)
 * in two vectors, 16 bytes each, in both halves, and per tap each lane's
 * byte picked from them and zero-extended in the same shuffles, times the
 * lane's weight (the second vector only where the chunk spans more than
 * 16 pixels).
 */
__attribute__((target("avx2"))) static void
hrow_avx2(const struct fl__resample *r, unsigned char *out,
          const unsigned char *in)
{
  const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const unsigned ksize = r->h.ksize;
  const size_t pr = r->plane_row;
  const unsigned char *pl0 = r->planes, *pl1 = pl0 + pr, *pl2 = pl1 + pr;
  unsigned j, t, c;

  split_avx2(r->planes, pr, in, r->x1 - r->x0);
  for (j = 0; j < r->chunks; j++) {
    const unsigned char *pl = r->cplan + (size_t)j * ksize * 96;
    const unsigned char *p0 = pl0 + r->cbase[j], *p1 = pl1 + r->cbase[j],
                        *p2 = pl2 + r->cbase[j];
    const __m256i a0 = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)p0));
    const __m256i a1 = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)p1));
    const __m256i a2 = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)p2));
    __m256i s0 = half, s1 = half, s2 = half, v;
    unsigned char o[32];

    if (r->cspan[j] <= 16)
      for (t = 0; t < r->ctaps[j]; t++, pl += 96) {
        const __m256i i0 = _mm256_load_si256((const __m256i *)pl);
        const __m256i w = _mm256_load_si256((const __m256i *)(pl + 64));

        s0 = _mm256_add_epi32(s0, _mm256_mullo_epi32(
                 _mm256_shuffle_epi8(a0, i0), w));
        s1 = _mm256_add_epi32(s1, _mm256_mullo_epi32(
                 _mm256_shuffle_epi8(a1, i0), w));
        s2 = _mm256_add_epi32(s2, _mm256_mullo_epi32(
                 _mm256_shuffle_epi8(a2, i0), w));
      }
    else {
      const __m256i b0 = _mm256_broadcastsi128_si256(
          _mm_loadu_si128((const __m128i *)(p0 + 16)));
      const __m256i b1 = _mm256_broadcastsi128_si256(
          _mm_loadu_si128((const __m128i *)(p1 + 16)));
      const __m256i b2 = _mm256_broadcastsi128_si256(
          _mm_loadu_si128((const __m128i *)(p2 + 16)));

      for (t = 0; t < r->ctaps[j]; t++, pl += 96) {
        const __m256i i0 = _mm256_load_si256((const __m256i *)pl);
        const __m256i i1 = _mm256_load_si256((const __m256i *)(pl + 32));
        const __m256i w = _mm256_load_si256((const __m256i *)(pl + 64));

        s0 = _mm256_add_epi32(s0, _mm256_mullo_epi32(_mm256_or_si256(
                 _mm256_shuffle_epi8(a0, i0), _mm256_shuffle_epi8(b0, i1)),
                 w));
        s1 = _mm256_add_epi32(s1, _mm256_mullo_epi32(_mm256_or_si256(
                 _mm256_shuffle_epi8(a1, i0), _mm256_shuffle_epi8(b1, i1)),
                 w));
        s2 = _mm256_add_epi32(s2, _mm256_mullo_epi32(_mm256_or_si256(
                 _mm256_shuffle_epi8(a2, i0), _mm256_shuffle_epi8(b2, i1)),
                 w));
      }
    }
    v = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(
            _mm256_packs_epi32(_mm256_srai_epi32(s0, PRECISION_BITS),
                               _mm256_srai_epi32(s1, PRECISION_BITS)),
            _mm256_packs_epi32(_mm256_srai_epi32(s2, PRECISION_BITS),
                               _mm256_srai_epi32(s2, PRECISION_BITS))),
        order);
    if (r->width - j * 8 >= 8) {
      _mm_storel_epi64((__m128i *)(out + j * 8), _mm256_castsi256_si128(v));
      _mm_storel_epi64((__m128i *)(out + r->width + j * 8),
                       _mm_unpackhi_epi64(_mm256_castsi256_si128(v),
                                          _mm256_castsi256_si128(v)));
      _mm_storel_epi64((__m128i *)(out + 2 * r->width + j * 8),
                       _mm256_extracti128_si256(v, 1));
    } else {
      _mm256_storeu_si256((__m256i *)o, v);
      for (c = 0; c < 3; c++)
        memcpy(out + c * r->width + j * 8, o + c * 8, r->width - j * 8);
    }
  }
}

/* Lane i of a tap of hrow_avx2's plan: the place of its source byte in
   the first 16 bytes of the chunk, else in the next 16 (the other 0x80:
   zero). */
static void
place_avx2(unsigned char *e, unsigned i, unsigned at)
{
  e[(at < 16 ? 0 : 32) + i * 4] = (unsigned char)(at % 16);
}

static const struct row_path rows_avx2 = {"avx2", hrow_avx2, place_avx2, 8,
                                         32, 64, 0x80, 1};

static const struct kernels k_avx2 = {"avx2", 8, hblock_avx2, vrow_avx2,
                                      frow_avx2, NULL, NULL, &rows_avx2};

/* Sixteen rows a block: a column's 48 bytes in three vectors of 16
   lanes, each saturated to bytes in its order (the sums are never
   negative: PIL's weights are not). */
static inline __attribute__((target("avx512f"))) void
hcol_avx512(const struct fl__resample *r, unsigned k, unsigned char *b)
{
  const struct axis *a = &r->h;
  const __m512i half = _mm512_set1_epi32(1 << (PRECISION_BITS - 1));
  const size_t col = FL__COL(16);
  const int32_t *w = a->w + (size_t)k * a->ksize;
  const unsigned char *in = taps(r, k);
  __m512i s0 = half, s1 = half, s2 = half;
  unsigned x;

  for (x = 0; x < a->count[k]; x++) {
    const unsigned char *p = in + x * col;
    const __m512i wt = _mm512_set1_epi32(w[x]);

    s0 = _mm512_add_epi32(s0, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(
             _mm_loadu_si128((const __m128i *)p)), wt));
    s1 = _mm512_add_epi32(s1, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(
             _mm_loadu_si128((const __m128i *)(p + 16))), wt));
    s2 = _mm512_add_epi32(s2, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(
             _mm_loadu_si128((const __m128i *)(p + 32))), wt));
  }
  _mm_storeu_si128((__m128i *)b, _mm512_cvtusepi32_epi8(
                                     _mm512_srai_epi32(s0, PRECISION_BITS)));
  _mm_storeu_si128((__m128i *)(b + 16), _mm512_cvtusepi32_epi8(
                                            _mm512_srai_epi32(s1,
                                                              PRECISION_BITS)));
  _mm_storeu_si128((__m128i *)(b + 32), _mm512_cvtusepi32_epi8(
                                            _mm512_srai_epi32(s2,
                                                              PRECISION_BITS)));
}

__attribute__((target("avx512f"))) static void
hblock_avx512(const struct fl__resample *r, unsigned char *out, size_t row,
              unsigned n)
{
  HBLOCK(r, out, row, n, hcol_avx512);
}

/* The float write as frow_avx2 does it, 16 lanes at once, from the
   vertical pass's sums (clipped as clip8 does). */
static inline __attribute__((target("avx512f"))) __m512
norm_avx512(const struct fl__resample *r, unsigned c, __m512i v)
{
  const __m512 d0 = _mm512_set1_ps(255.0f), i0 = _mm512_set1_ps(1 / 255.0f);
  const __m512 d1 = _mm512_set1_ps(r->std[c]);
  const __m512 i1 = _mm512_set1_ps(r->inv[c]);
  __m512 x = _mm512_cvtepi32_ps(v), q;

  if (!r->fma)
    return _mm512_i32gather_ps(v, r->lut[c], 4);
  q = _mm512_mul_ps(x, i0);
  q = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, d0, x), i0, q);
  x = _mm512_sub_ps(q, _mm512_set1_ps(r->mean[c]));
  q = _mm512_mul_ps(x, i1);
  return _mm512_fmadd_ps(_mm512_fnmadd_ps(q, d1, x), i1, q);
}

/* Whether norm_avx512 computes every value of the tables with FMA (it
   sets r->fma to try; the caller sets it to the answer). */
__attribute__((target("avx512f"))) static int
norm_avx512_ok(struct fl__resample *r)
{
  unsigned c, v, j;
  float got[16];

  r->fma = 1;
  for (c = 0; c < 3; c++)
    for (v = 0; v < 256; v += 16) {
      _mm512_storeu_ps(got, norm_avx512(r, c, _mm512_add_epi32(
          _mm512_set1_epi32((int)v), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7,
                                                   8, 9, 10, 11, 12, 13,
                                                   14, 15))));
      for (j = 0; j < 16; j++)
        if (memcmp(&got[j], &r->lut[c][v + j], sizeof(float)) != 0)
          return 0;
    }
  return 1;
}

/* The vertical pass and the float write of one output row at once, 16
   columns of a channel a step, written past the cache where the stage
   says so and the rows are aligned: the row's bytes are never stored. */
__attribute__((target("avx512f"))) static void
vfrow_avx512(const struct fl__resample *r, float *f32, size_t plane,
             const unsigned char *tmp, size_t row, const int32_t *w,
             unsigned count)
{
  const __m512i half = _mm512_set1_epi32(1 << (PRECISION_BITS - 1));
  const __m512i zero = _mm512_setzero_si512(), top = _mm512_set1_epi32(255);
  const __m512i rev = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                        5, 4, 3, 2, 1, 0);
  unsigned c, x, t, n = r->width;
  int nt = r->stream && n % 16 == 0 && (uintptr_t)f32 % 64 == 0 &&
           plane % 16 == 0;

  for (c = 0; c < 3; c++) {
    const unsigned char *in = tmp + c * n;
    float *out = f32 + c * plane;

    for (x = 0; x + 16 <= n; x += 16) {
      __m512i s = half;
      __m512 v;
      float *to = out + (r->flip ? n - 16 - x : x);

      for (t = 0; t < count; t++)
        s = _mm512_add_epi32(s, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(
                _mm_loadu_si128((const __m128i *)(in + t * row + x))),
                _mm512_set1_epi32(w[t])));
      s = _mm512_min_epi32(_mm512_max_epi32(
              _mm512_srai_epi32(s, PRECISION_BITS), zero), top);
      v = norm_avx512(r, c, s);
      if (r->flip)
        v = _mm512_permutexvar_ps(rev, v);
      if (nt)
        _mm512_stream_ps(to, v);
      else
        _mm512_storeu_ps(to, v);
    }
    for (; x < n; x++) {
      int32_t s = 1 << (PRECISION_BITS - 1);

      for (t = 0; t < count; t++)
        s += in[t * row + x] * w[t];
      out[r->flip ? n - 1 - x : x] = r->lut[c][clip8(s)];
    }
  }
}

/*
 * The block from 16 staged rows, 16 columns at a time: each row's 16
 * pixels widened to 32-bit lanes (RGB and a zero), the 16 x 16 lanes
 * transposed, each column's lanes narrowed to its 48 bytes; far fewer
 * stores than a 4-byte store a pixel.  The last columns pixel by pixel.
 */
__attribute__((target("avx512f,avx512bw"))) static void
fill_avx512(const struct fl__resample *r)
{
  const __m512i spread = _mm512_setr_epi32(0, 1, 2, 3, 3, 4, 5, 6, 6, 7, 8,
                                           9, 9, 10, 11, 12);
  const __m512i widen = _mm512_broadcast_i32x4(_mm_setr_epi8(
      0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1));
  const __m512i narrow = _mm512_broadcast_i32x4(_mm_setr_epi8(
      0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
  const __m512i gather = _mm512_setr_epi32(0, 1, 2, 4, 5, 6, 8, 9, 10, 12,
                                           13, 14, 0, 0, 0, 0);
  const size_t col = FL__COL(16);
  const unsigned n = r->x1 - r->x0;
  unsigned x, i;

  for (x = 0; x + 16 <= n; x += 16) {
    __m512i a[16], b[16];

    for (i = 0; i < 16; i++)
      a[i] = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(spread,
                 _mm512_loadu_si512(r->stage + i * r->stage_row + x * 3)),
                 widen);
    for (i = 0; i < 16; i += 2) { /* pairs of lanes, then quads */
      b[i] = _mm512_unpacklo_epi32(a[i], a[i + 1]);
      b[i + 1] = _mm512_unpackhi_epi32(a[i], a[i + 1]);
    }
    for (i = 0; i < 16; i += 4) {
      a[i] = _mm512_unpacklo_epi64(b[i], b[i + 2]);
      a[i + 1] = _mm512_unpackhi_epi64(b[i], b[i + 2]);
      a[i + 2] = _mm512_unpacklo_epi64(b[i + 1], b[i + 3]);
      a[i + 3] = _mm512_unpackhi_epi64(b[i + 1], b[i + 3]);
    }
    /* a[4q + j]'s 128-bit lane l: rows 4q to 4q + 3 of column 4l + j. */
    for (i = 0; i < 4; i++) {
      b[i] = _mm512_shuffle_i32x4(a[i], a[4 + i], 0x88);      /* l 0, 2 */
      b[4 + i] = _mm512_shuffle_i32x4(a[i], a[4 + i], 0xdd);  /* 1, 3 */
      b[8 + i] = _mm512_shuffle_i32x4(a[8 + i], a[12 + i], 0x88);
      b[12 + i] = _mm512_shuffle_i32x4(a[8 + i], a[12 + i], 0xdd);
    }
    for (i = 0; i < 4; i++) {
      a[i] = _mm512_shuffle_i32x4(b[i], b[8 + i], 0x88);      /* column i */
      a[8 + i] = _mm512_shuffle_i32x4(b[i], b[8 + i], 0xdd);  /* 8 + i */
      a[4 + i] = _mm512_shuffle_i32x4(b[4 + i], b[12 + i], 0x88);
      a[12 + i] = _mm512_shuffle_i32x4(b[4 + i], b[12 + i], 0xdd);
    }
    for (i = 0; i < 16; i++)
      _mm512_mask_storeu_epi32(r->blk + (x + i) * col, 0x0fff,
                               _mm512_permutexvar_epi32(gather,
                                   _mm512_shuffle_epi8(a[i], narrow)));
  }
  for (; x < n; x++)
    for (i = 0; i < 16; i++)
      memcpy(r->blk + x * col + i * 3, r->stage + i * r->stage_row + x * 3,
             3);
}

static const struct kernels k_avx512 = {"avx512", 16, hblock_avx512,
                                        vrow_avx2, NULL, vfrow_avx512,
                                        fill_avx512, &rows_avx2};

/*
 * A row by row_plan's chunks: the chunk's source bytes (at most 128, read
 * no further than the row's last pixel) in two vectors, and per tap each
 * lane's byte of each channel picked from them, zero-extended in the same
 * permute, times the lane's weight.
 */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void
hrow_vbmi(const struct fl__resample *r, unsigned char *out,
          const unsigned char *in)
{
  const __m512i half = _mm512_set1_epi32(1 << (PRECISION_BITS - 1));
  const __mmask64 low = 0x1111111111111111ull; /* each lane's first byte */
  const unsigned n = (r->x1 - r->x0) * 3, ksize = r->h.ksize;
  unsigned j, t;

  for (j = 0; j < r->chunks; j++) {
    const unsigned char *src = in + (size_t)r->cbase[j] * 3;
    const unsigned char *pl = r->cplan + (size_t)j * ksize * 256;
    const unsigned avail = n - r->cbase[j] * 3; /* 3 or more */
    const __mmask16 m = r->width - j * 16 >= 16
                            ? 0xffff
                            : (__mmask16)((1u << (r->width - j * 16)) - 1);
    __m512i lo, hi, s0 = half, s1 = half, s2 = half;

    lo = avail >= 64 ? _mm512_loadu_si512(src)
                     : _mm512_maskz_loadu_epi8(~0ull >> (64 - avail), src);
    hi = avail >= 128 ? _mm512_loadu_si512(src + 64)
         : avail > 64 ? _mm512_maskz_loadu_epi8(~0ull >> (128 - avail),
                                                src + 64)
                      : _mm512_setzero_si512();
    for (t = 0; t < r->ctaps[j]; t++, pl += 256) {
      const __m512i w = _mm512_load_si512(pl + 192);

      s0 = _mm512_add_epi32(s0, _mm512_mullo_epi32(
               _mm512_maskz_permutex2var_epi8(low, lo,
                   _mm512_load_si512(pl), hi), w));
      s1 = _mm512_add_epi32(s1, _mm512_mullo_epi32(
               _mm512_maskz_permutex2var_epi8(low, lo,
                   _mm512_load_si512(pl + 64), hi), w));
      s2 = _mm512_add_epi32(s2, _mm512_mullo_epi32(
               _mm512_maskz_permutex2var_epi8(low, lo,
                   _mm512_load_si512(pl + 128), hi), w));
    }
    _mm512_mask_cvtusepi32_storeu_epi8(out + j * 16, m,
        _mm512_srai_epi32(s0, PRECISION_BITS));
    _mm512_mask_cvtusepi32_storeu_epi8(out + r->width + j * 16, m,
        _mm512_srai_epi32(s1, PRECISION_BITS));
    _mm512_mask_cvtusepi32_storeu_epi8(out + 2 * r->width + j * 16, m,
        _mm512_srai_epi32(s2, PRECISION_BITS));
  }
}

/* Lane i of a tap of hrow_vbmi's plan: per channel, the byte of the
   chunk's source it takes (a lane's first byte, the rest unread). */
static void
place_vbmi(unsigned char *e, unsigned i, unsigned at)
{
  unsigned c;

  for (c = 0; c < 3; c++)
    e[c * 64 + i * 4] = (unsigned char)(at * 3 + c);
}

static const struct row_path rows_vbmi = {"vbmi", hrow_vbmi, place_vbmi, 16,
                                         42, 192, 0, 0};

static const struct kernels k_avx512vbmi = {"avx512vbmi", 16, hblock_avx512,
                                            vrow_avx2, NULL, vfrow_avx512,
                                            fill_avx512, &rows_vbmi};
#endif

/* The best kernels this CPU runs of the first most + 1 of simd_names. */
static const struct kernels *
kernels_best(unsigned most)
{
#ifdef FL__X86
  const unsigned avx512 = FL__CPU_AVX512F | FL__CPU_AVX512BW | FL__CPU_AVX2;
  unsigned f = fl__cpu_features();

  if (most >= 4 && (f & (avx512 | FL__CPU_AVX512VBMI)) ==
                       (avx512 | FL__CPU_AVX512VBMI))
    return &k_avx512vbmi;
  if (most >= 3 && (f & avx512) == avx512)
    return &k_avx512;
  if (most >= 2 && (f & FL__CPU_AVX2))
    return &k_avx2;
  if (most >= 1 && (f & FL__CPU_SSE41))
    return &k_sse41;
#else
  (void)most;
#endif
  return &k_c;
}

/* What FL_IMAGE_SIMD may name, from the least to the most. */
static const char *const simd_names[] = {"c", "sse4.1", "avx2", "avx512",
                                         "avx512vbmi"};
#define FL__SIMD_NAMES (sizeof(simd_names) / sizeof(simd_names[0]))

/* The best kernels this CPU runs, at most those FL_IMAGE_SIMD names
   (unset or empty: the best); NULL where it names none. */
static const struct kernels *
kernels_pick(void)
{
  const char *want = getenv("FL_IMAGE_SIMD");
  unsigned most = FL__SIMD_NAMES - 1;

  if (want != NULL && *want != '\0') {
    for (most = 0; most < FL__SIMD_NAMES; most++)
      if (strcmp(want, simd_names[most]) == 0)
        break;
    if (most == FL__SIMD_NAMES)
      return NULL;
  }
  return kernels_best(most);
}

/* FL_EINVAL, saying that FL_IMAGE_SIMD is none of simd_names. */
static int
kernels_unknown(const char *fn)
{
  char list[64] = "";
  unsigned i;

  for (i = 0; i < FL__SIMD_NAMES; i++)
    snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
             i == 0 ? "" : i + 1 < FL__SIMD_NAMES ? ", " : " and ",
             simd_names[i]);
  return fl__error_set(FL_EINVAL, "%s: FL_IMAGE_SIMD=%s is none of %s "
                       "(unset, the best this CPU has)", fn,
                       getenv("FL_IMAGE_SIMD"), list);
}

/* Whether r's float write may compute with FMA (norm_fma). */
static int
float_fma(struct fl__resample *r)
{
#ifdef FL__X86
  if (r->k == &k_avx512 || r->k == &k_avx512vbmi)
    return norm_avx512_ok(r);
  return r->k == &k_avx2 && (fl__cpu_features() & FL__CPU_FMA) &&
         norm_fma_ok(r);
#else
  (void)r;
  return 0;
#endif
}

/* Whether r's kernels stage a block's rows (kernels->fill). */
static int
stages_rows(const struct fl__resample *r)
{
  return r->k->fill != NULL;
}

/* The bytes of a tap's entry in rp's plan: up to its weights, then a
   32-bit weight a lane. */
static size_t
tap_bytes(const struct row_path *rp)
{
  return rp->weights + rp->chunk * sizeof(int32_t);
}

/*
 * The row path's plan, where the kernels have one: per chunk of output
 * columns, the first source pixel its taps read, the most taps a column
 * of it has and the pixels they span, and per tap an entry: where each
 * lane's bytes are (the path's place) and its weight.  1 where
 * every chunk spans at most the kernels' reach (42 pixels for 16 columns
 * with VBMI, 32 for 8 with AVX2: a reduction of up to about 2.4 or 3.4),
 * else 0: blocks.
 */
static int
row_plan(struct fl__resample *r)
{
  const struct axis *a = &r->h;
  const struct row_path *rp = r->k->by_rows;
  unsigned i, j, k, t, base, end;
  size_t need;
  void *p;

  r->rp = NULL;
  if (rp == NULL)
    return 0;
  r->chunks = (r->width + rp->chunk - 1) / rp->chunk;
  for (j = 0; j < r->chunks; j++) {
    base = r->x1;
    end = r->x0;
    r->ctaps[j] = 0;
    for (k = j * rp->chunk; k < r->width && k < (j + 1) * rp->chunk; k++)
      if (a->count[k] > 0) {
        if (a->first[k] < base)
          base = a->first[k];
        if (a->first[k] + a->count[k] > end)
          end = a->first[k] + a->count[k];
        if (a->count[k] > r->ctaps[j])
          r->ctaps[j] = a->count[k];
      }
    if (r->ctaps[j] == 0) /* padding alone: no taps, sums of 0 */
      base = end = r->x0;
    if (end - base > rp->reach)
      return 0;
    r->cbase[j] = base - r->x0;
    r->cspan[j] = end - base;
  }
  need = (size_t)r->chunks * a->ksize * tap_bytes(rp);
  if (need > r->cplan_cap) {
    /* Aligned for whole-vector loads. */
    if (posix_memalign(&p, 64, need) != 0)
      return FL_ENOMEM;
    free(r->cplan);
    r->cplan = p;
    r->cplan_cap = need;
  }
  /* A channel's row has room for a chunk's two 16-byte loads at its last
     pixel; zeroed once, as those loads read past the row. */
  r->plane_row = (size_t)(r->x1 - r->x0) + 32;
  need = r->plane_row * 3;
  if (rp->planar && need > r->planes_cap) {
    if ((p = realloc(r->planes, need)) == NULL)
      return FL_ENOMEM;
    memset(p, 0, need);
    r->planes = p;
    r->planes_cap = need;
  }
  for (j = 0; j < r->chunks; j++)
    for (t = 0; t < r->ctaps[j]; t++) {
      unsigned char *e =
          r->cplan + ((size_t)j * a->ksize + t) * tap_bytes(rp);
      int32_t *w = (int32_t *)(void *)(e + rp->weights);

      /* Weight 0 past a column's taps, and for padding. */
      memset(e, rp->blank, rp->weights);
      memset(w, 0, rp->chunk * sizeof(*w));
      for (i = 0; i < rp->chunk && (k = j * rp->chunk + i) < r->width; i++)
        if (t < a->count[k]) {
          w[i] = a->w[(size_t)k * a->ksize + t];
          rp->place(e, i, a->first[k] + t - r->x0 - r->cbase[j]);
        }
    }
  r->rp = rp;
  return 1;
}

const char *
fl__resample_kernels(const struct fl__resample *r)
{
  return r->k->name;
}

const char *
fl__resample_horizontal(const struct fl__resample *r)
{
  return r->rp != NULL ? r->rp->name : "blocks";
}

/* One source row into its place in the block, and the horizontal pass
   of the block into its 8-bit rows once it is whole or the last. */
void
fl__resample_row(struct fl__resample *r, unsigned y, const unsigned char *rgb,
                 unsigned x0)
{
  const unsigned rows = r->k->rows, i = (y - r->ylo) % rows;
  const size_t col = FL__COL(rows);
  const unsigned char *in;
  unsigned char *to;
  unsigned x, n;

  if (y < r->ylo || y >= r->yhi)
    return;
  in = rgb + (size_t)(r->x0 - x0) * 3;
  if (r->rp != NULL) {
    r->rp->hrow(r, r->tmp + (size_t)(y - r->ylo) * r->width * 3, in);
    return;
  }
  to = r->blk + i * 3;
  n = r->x1 - r->x0;
  if (r->k->fill != NULL) {
    memcpy(r->stage + i * r->stage_row, in, (size_t)n * 3);
  } else {
    /* 4 bytes a pixel, the fourth the next row's (or slack), but at the
       row's last pixel, which may be the decoder's last byte. */
    for (x = 0; x + 1 < n; x++)
      memcpy(to + x * col, in + x * 3, 4);
    memcpy(to + x * col, in + x * 3, 3);
  }
  if (i + 1 == rows || y + 1 == r->yhi) {
    if (r->k->fill != NULL)
      r->k->fill(r);
    r->k->hblock(r, r->tmp + (size_t)(y - i - r->ylo) * r->width * 3,
                 (size_t)r->width * 3, i + 1);
  }
}

/* The vertical pass, one output row at a time into an 8-bit row, then
   the flip and the output's layout. */
void
fl__resample_end(struct fl__resample *r, void *dst)
{
  const struct axis *a = &r->v;
  size_t row = (size_t)r->width * 3, plane = (size_t)r->width * r->height;
  unsigned char *line = r->line;
  unsigned k, x, c;

  for (k = 0; k < r->height; k++) {
    unsigned char *u8 = (unsigned char *)dst + (size_t)k * row;
    float *f32 = (float *)dst + (size_t)k * r->width;

    if (r->chw_float && r->k->vfrow != NULL) { /* no taps: padding, 0 */
      r->k->vfrow(r, f32, plane,
                  a->count[k] ? r->tmp + (size_t)(a->first[k] - r->ylo) * row
                              : r->tmp,
                  row, a->w + (size_t)k * a->ksize, a->count[k]);
      continue;
    }
    if (a->count[k] == 0) /* CenterCrop's padding */
      memset(line, 0, row);
    else
      r->k->vrow(line, r->tmp + (size_t)(a->first[k] - r->ylo) * row, row,
                 a->w + (size_t)k * a->ksize, a->count[k]);
    if (!r->chw_float) { /* interleaved again, flipped or not */
      for (x = 0; x < r->width; x++)
        for (c = 0; c < 3; c++)
          u8[(size_t)(r->flip ? r->width - 1 - x : x) * 3 + c] =
              line[(size_t)c * r->width + x];
      continue;
    }
    r->k->frow(r, f32, plane, line);
  }
#ifdef FL__X86
  if (r->stream) /* the float write's stores, before the batch is handed */
    _mm_sfence();
#endif
}
