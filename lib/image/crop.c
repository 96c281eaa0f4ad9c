/*
 * Where an output image comes from: torchvision's RandomResizedCrop
 * (get_params: ten tries, then the center-crop fallback) and
 * RandomHorizontalFlip drawn from the sample's seed, so that a sample's
 * crop is a function of (seed, epoch, index) whatever worker fills it; and
 * the evaluation transform, Resize then CenterCrop.  Python's round() is
 * half to even, as rint is in the default rounding mode.
 */
#include "config.h"

#include <math.h>

#include "decode.h"
#include "internal.h"

/* splitmix64: one stream per sample, from its seed (fl__mix64 adds the
   stream's step itself). */
static uint64_t
next64(uint64_t *s)
{
  uint64_t z = fl__mix64(*s);

  *s += 0x9e3779b97f4a7c15ull;
  return z;
}

/* Uniform in [0, 1), 53 bits. */
static double
uniform(uint64_t *s)
{
  return (double)(next64(s) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n]. */
static unsigned
upto(uint64_t *s, unsigned n)
{
  return (unsigned)(((next64(s) >> 32) * ((uint64_t)n + 1)) >> 32);
}

static void
whole(struct fl__geom *g, unsigned w, unsigned h)
{
  g->cx0 = 0;
  g->cy0 = 0;
  g->cx1 = w;
  g->cy1 = h;
  g->bx0 = 0;
  g->by0 = 0;
  g->bx1 = w;
  g->by1 = h;
}

void
fl__crop_random(const fl_image_options *io, unsigned w, unsigned h,
                uint64_t seed, struct fl__geom *g)
{
  double area = (double)w * h, lr0 = log(io->ratio_min);
  double lr1 = log(io->ratio_max), in_ratio = (double)w / h;
  uint64_t s = seed;
  unsigned cw = w, ch = h, top, left;
  int tries, found = 0;

  for (tries = 0; tries < 10 && !found; tries++) {
    double target = area * (io->scale_min +
                            uniform(&s) * (io->scale_max - io->scale_min));
    double ar = exp(lr0 + uniform(&s) * (lr1 - lr0));
    double fw = rint(sqrt(target * ar)), fh = rint(sqrt(target / ar));

    if (fw > 0 && fw <= w && fh > 0 && fh <= h) {
      cw = (unsigned)fw;
      ch = (unsigned)fh;
      found = 1;
    }
  }
  if (found) {
    top = upto(&s, h - ch);
    left = upto(&s, w - cw);
  } else {
    /* The fallback: the whole image, cut to the nearest allowed ratio. */
    if (in_ratio < io->ratio_min) {
      cw = w;
      ch = (unsigned)rint(cw / io->ratio_min);
    } else if (in_ratio > io->ratio_max) {
      ch = h;
      cw = (unsigned)rint(ch * io->ratio_max);
    }
    if (cw > w)
      cw = w;
    if (ch > h)
      ch = h;
    top = (h - ch) / 2;
    left = (w - cw) / 2;
  }
  fl__crop_box(io, (unsigned[]){top, left, ch, cw},
               io->hflip > 0 && uniform(&s) < io->hflip, g);
}

void
fl__crop_box(const fl_image_options *io, const unsigned box[4], int flip,
             struct fl__geom *g)
{
  /* The crop is the image the filter sees: its edges clip the taps. */
  g->cx0 = box[1];
  g->cy0 = box[0];
  g->cx1 = box[1] + box[3];
  g->cy1 = box[0] + box[2];
  g->bx0 = g->cx0;
  g->by0 = g->cy0;
  g->bx1 = g->cx1;
  g->by1 = g->cy1;
  g->vw = io->width;
  g->vh = io->height;
  g->ox = 0;
  g->oy = 0;
  g->flip = flip;
}

/* CenterCrop along one axis of size n (already resized) to c: pad
   (c - n) / 2 zeros first where c is larger, as torchvision does. */
static long
center(unsigned n, unsigned c)
{
  if (c > n)
    return -(long)((c - n) / 2);
  return (long)rint((n - c) / 2.0);
}

int
fl__crop_center(const fl_image_options *io, unsigned w, unsigned h,
                struct fl__geom *g)
{
  unsigned size = io->resize ? io->resize : io->height, scaled;
  unsigned shorter = w <= h ? w : h, longer = w <= h ? h : w;
  /* Resize(size): int(size * long / short), as Python computes it. */
  double fscaled = (double)size * longer / shorter;

  if (fscaled >= 2147483648.0) /* 20000000 x 1 pixels, say */
    return -1;
  scaled = (unsigned)fscaled;

  whole(g, w, h);
  g->vw = w <= h ? size : scaled;
  g->vh = w <= h ? scaled : size;
  if (shorter == size) { /* torchvision returns the image as it is */
    g->vw = w;
    g->vh = h;
  }
  g->ox = center(g->vw, io->width);
  g->oy = center(g->vh, io->height);
  g->flip = 0;
  return 0;
}
