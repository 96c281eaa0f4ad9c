/*
 * Inside the image stage: how its parts meet.  A decoder (jpeg.c, png.c,
 * webp.c, tiff.c, bmp.c, pnm.c) reads the header, asks the stage's plan
 * which region it needs and at which scale, and hands it those rows one by
 * one; crop.c draws the crop; resample.c resizes as PIL does, row by row,
 * and writes the output.
 */
#ifndef FL_IMAGE_DECODE_H
#define FL_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "image.h"

#define FL__IMAGE_ERR_MAX 200

/* A JPEG decoded at scale_num/8 is this wide (libjpeg's rounding). */
static inline unsigned
fl__scaled(unsigned v, unsigned scale_num)
{
  return (unsigned)(((uint64_t)v * scale_num + 7) / 8);
}

/* What the stage needs of an image: set by its plan. */
struct fl__region {
  unsigned scale_num;      /* JPEG only: decode at scale_num/8, 1 to 8 */
  unsigned x0, x1, y0, y1; /* columns and rows needed, of the scaled image */
};

struct fl__sink {
  void *arg;
  /* The image is w x h; may_scale: the decoder can shrink it (JPEG's DCT
     scaling).  0, or FL_EDATASET with err set. */
  int (*plan)(void *arg, unsigned w, unsigned h, int may_scale,
              struct fl__region *p, char *err);
  /* Row y of the scaled image, RGB, from column x0 (at most the plan's x0)
     to at least the plan's x1; rows come in order, y0 to y1 - 1. */
  void (*row)(void *arg, unsigned y, const unsigned char *rgb, unsigned x0);
};

/* Each decoder's state, made on first use and kept. */
struct fl__jpeg;
struct fl__png;
int fl__jpeg_decode(struct fl__jpeg **j, const unsigned char *data, size_t n,
                    const struct fl__sink *s, char *err);
void fl__jpeg_free(struct fl__jpeg *j);
int fl__png_decode(struct fl__png **p, const unsigned char *data, size_t n,
                   const struct fl__sink *s, char *err);
void fl__png_free(struct fl__png *p);
/* The other formats of torchvision's IMG_EXTENSIONS, the same way: WebP
   through libwebp, TIFF through libtiff, BMP and PNM read here. */
struct fl__webp;
struct fl__tiff;
struct fl__bmp;
struct fl__pnm;
int fl__webp_decode(struct fl__webp **w, const unsigned char *data, size_t n,
                    const struct fl__sink *s, char *err);
void fl__webp_free(struct fl__webp *w);
int fl__tiff_decode(struct fl__tiff **t, const unsigned char *data, size_t n,
                    const struct fl__sink *s, char *err);
void fl__tiff_free(struct fl__tiff *t);
int fl__bmp_decode(struct fl__bmp **b, const unsigned char *data, size_t n,
                   const struct fl__sink *s, char *err);
void fl__bmp_free(struct fl__bmp *b);
int fl__pnm_decode(struct fl__pnm **p, const unsigned char *data, size_t n,
                   const struct fl__sink *s, char *err);
void fl__pnm_free(struct fl__pnm *p);

/* The region of the source an output is made from, and where the output
   sits in the resized image (crop.c). */
struct fl__geom {
  double bx0, by0, bx1, by1; /* the box resized, in source pixels */
  unsigned cx0, cy0, cx1, cy1; /* the image the filter sees (its edges) */
  unsigned vw, vh;             /* the box is resized to vw x vh */
  long ox, oy;                 /* the output's corner in it (may be < 0) */
  int flip;
};
/* RandomResizedCrop(scale, ratio) then the flip, drawn from seed. */
void fl__crop_random(const fl_image_options *io, unsigned w, unsigned h,
                     uint64_t seed, struct fl__geom *g);
/* F.resized_crop at box (top, left, height, width), then the flip. */
void fl__crop_box(const fl_image_options *io, const unsigned box[4], int flip,
                  struct fl__geom *g);
/* Resize(resize) then CenterCrop(height, width); -1 where the resized
   image would have a side of 2^31 pixels or more. */
int fl__crop_center(const fl_image_options *io, unsigned w, unsigned h,
                     struct fl__geom *g);

/* resample.c: one output image from rows, as PIL's bilinear resize (with
   its antialiasing) and then torchvision's ToTensor and Normalize. */
struct fl__resample;
/* FL_EINVAL, with fn's sentence, where FL_IMAGE_SIMD names no kernels. */
int fl__resample_new(struct fl__resample **r, const fl_image_options *io,
                     const char *fn);
void fl__resample_free(struct fl__resample *r);
/* Set up for an image of geometry g scaled by sx, sy (a reduced decode)
   and say which rows and columns it needs; 0 or FL_ENOMEM. */
int fl__resample_begin(struct fl__resample *r, const struct fl__geom *g,
                       double sx, double sy, unsigned sw, unsigned sh,
                       struct fl__region *p);
void fl__resample_row(struct fl__resample *r, unsigned y,
                      const unsigned char *rgb, unsigned x0);
void fl__resample_end(struct fl__resample *r, void *dst);
/* The SIMD extensions this CPU runs (cpu.c): FL__CPU_ bits, 0 off x86. */
#define FL__CPU_SSE41 0x01u
#define FL__CPU_AVX2 0x02u
#define FL__CPU_FMA 0x04u
#define FL__CPU_AVX512F 0x08u
#define FL__CPU_AVX512BW 0x10u
#define FL__CPU_AVX512VBMI 0x20u
unsigned fl__cpu_features(void);
/* The kernels r runs: "c", "sse4.1", "avx2", "avx512" or "avx512vbmi"
   (FL_IMAGE_SIMD, read when r is made, asks for at most one of them). */
const char *fl__resample_kernels(const struct fl__resample *r);
/* How the last image's horizontal pass ran: a row at a time ("vbmi" or
   "avx2", where the kernels have that row path and its columns allow),
   else "blocks" of rows. */
const char *fl__resample_horizontal(const struct fl__resample *r);

#endif /* FL_IMAGE_DECODE_H */
