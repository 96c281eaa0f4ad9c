/*
 * PPM and PGM (binary P6 and P5), read here: the format is a text header
 * and raw samples, and PIL's reader (PpmImagePlugin) is a few lines that
 * a library would not make simpler.  The header is tokenized as PIL does
 * (whitespace, '#' comments anywhere in it, tokens of at most 10
 * characters, one whitespace byte after the maxval); maxval 255 is the
 * samples as they are, a maxval below 255 scales each sample as PIL's
 * PpmDecoder does, min(255, round(v / maxval * 255)) with Python's round
 * (half to even).  Refused, with the reason: a maxval above 255 (PIL makes
 * 16-bit PGM a 32-bit "I" image that convert('RGB') clips), the plain
 * (ASCII) P2 and P3 and the bitmaps P1 and P4.  The samples are read in
 * place: a P6 row goes to the stage as it is, a P5 row is widened to RGB
 * in a row buffer kept for the next image.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "internal.h"

struct fl__pnm {
  unsigned char *row;
  size_t cap;
};

void
fl__pnm_free(struct fl__pnm *p)
{
  if (p == NULL)
    return;
  free(p->row);
  free(p);
}

static int
is_space(unsigned char c)
{
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
         c == '\r';
}

/* The next header token as a number, PIL's _read_token: leading
   whitespace skipped, a '#' skips to the end of its line (also inside a
   token), the token ends at a whitespace byte, which is consumed. */
static int
token(const unsigned char *b, size_t n, size_t *at, unsigned long *v,
      char *err)
{
  char tok[12];
  size_t len = 0, i = *at;

  while (len <= 10) {
    unsigned char c;

    if (i >= n)
      break;
    c = b[i++];
    if (is_space(c)) {
      if (len == 0)
        continue;
      break;
    }
    if (c == '#') {
      while (i < n && b[i] != '\r' && b[i] != '\n')
        i++;
      if (i < n)
        i++;
      continue;
    }
    tok[len++] = (char)c;
  }
  *at = i;
  if (len == 0) {
    snprintf(err, FL__IMAGE_ERR_MAX, "truncated PNM: the data ends in its "
             "header");
    return FL_EDATASET;
  }
  if (len > 10) {
    snprintf(err, FL__IMAGE_ERR_MAX, "bad PNM header: a token of more than "
             "10 characters");
    return FL_EDATASET;
  }
  tok[len] = '\0';
  if (strspn(tok, "0123456789") != len) {
    snprintf(err, FL__IMAGE_ERR_MAX, "bad PNM header: \"%s\" is not a "
             "number", tok);
    return FL_EDATASET;
  }
  *v = strtoul(tok, NULL, 10);
  return 0;
}

int
fl__pnm_decode(struct fl__pnm **pp, const unsigned char *data, size_t n,
               const struct fl__sink *s, char *err)
{
  struct fl__pnm *p = *pp;
  struct fl__region plan;
  unsigned char lut[256];
  unsigned long w, h, maxval;
  size_t at = 2, bands, row, y, x;
  int rc;

  if (n < 3 || data[0] != 'P' || !is_space(data[2]) ||
      (data[1] != '5' && data[1] != '6')) {
    if (n >= 2 && data[0] == 'P' && data[1] >= '1' && data[1] <= '4')
      snprintf(err, FL__IMAGE_ERR_MAX, "a %s PNM (P%c), and forkload "
               "decodes only binary PGM (P5) and PPM (P6)",
               data[1] == '4' ? "bitmap" : data[1] == '1' ? "plain bitmap"
                                                          : "plain (ASCII)",
               data[1]);
    else
      snprintf(err, FL__IMAGE_ERR_MAX, "bad PNM: not P5 or P6 and a "
               "whitespace");
    return FL_EDATASET;
  }
  bands = data[1] == '6' ? 3 : 1;
  at = 3;
  if ((rc = token(data, n, &at, &w, err)) != 0 ||
      (rc = token(data, n, &at, &h, err)) != 0 ||
      (rc = token(data, n, &at, &maxval, err)) != 0)
    return rc;
  if (maxval == 0 || maxval > 65535) {
    snprintf(err, FL__IMAGE_ERR_MAX, "bad PNM: maxval %lu, not 1 to 65535",
             maxval);
    return FL_EDATASET;
  }
  if (maxval > 255) {
    snprintf(err, FL__IMAGE_ERR_MAX, "a PNM of 16-bit samples (maxval %lu), "
             "which forkload does not decode", maxval);
    return FL_EDATASET;
  }
  if (w > 0xffffffffu || h > 0xffffffffu) {
    snprintf(err, FL__IMAGE_ERR_MAX, "bad PNM: %lu x %lu pixels", w, h);
    return FL_EDATASET;
  }
  /* The size is known: the bomb guard, and the crop's plan. */
  if ((rc = s->plan(s->arg, (unsigned)w, (unsigned)h, 0, &plan, err)) != 0)
    return rc;
  row = (size_t)w * bands;
  if ((n - at) / row < h) {
    snprintf(err, FL__IMAGE_ERR_MAX, "truncated PNM: %zu bytes of samples, "
             "too few for %lu x %lu pixels", n - at, w, h);
    return FL_EDATASET;
  }
  for (x = 0; x < 256; x++) {
    double v = nearbyint((double)x / (double)maxval * 255.0);

    lut[x] = maxval == 255 ? (unsigned char)x
                           : (unsigned char)(v > 255 ? 255 : v);
  }
  if (bands == 1 || maxval != 255) {
    if (p == NULL) {
      if ((p = calloc(1, sizeof(*p))) == NULL)
        return FL_ENOMEM;
      *pp = p;
    }
    if (p->cap < (size_t)w * 3) {
      unsigned char *r = realloc(p->row, (size_t)w * 3);

      if (r == NULL) {
        snprintf(err, FL__IMAGE_ERR_MAX, "out of memory for a row of %lu "
                 "pixels", w);
        return FL_ENOMEM;
      }
      p->row = r;
      p->cap = (size_t)w * 3;
    }
  }
  for (y = plan.y0; y < plan.y1; y++) {
    const unsigned char *in = data + at + y * row;

    if (bands == 3 && maxval == 255) {
      s->row(s->arg, (unsigned)y, in, 0);
      continue;
    }
    if (bands == 1)
      for (x = 0; x < w; x++)
        p->row[3 * x] = p->row[3 * x + 1] = p->row[3 * x + 2] = lut[in[x]];
    else
      for (x = 0; x < row; x++)
        p->row[x] = lut[in[x]];
    s->row(s->arg, (unsigned)y, p->row, 0);
  }
  return 0;
}
