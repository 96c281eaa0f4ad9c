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

/*
 * libspng makes its context (and zlib's state, through it) per image.
 * Its allocations come from an arena the decoder keeps, reset for each
 * image, so that the steady state allocates nothing: what does not fit
 * goes to malloc, and the arena grows to it before the next image, up to
 * FL__PNG_ARENA_MAX (past that, malloc as before).  libspng's allocator
 * has no argument of its own, so the arena in use is a thread's (a stage
 * serves one thread).  Under AddressSanitizer, plain malloc: the arena
 * would hide libspng's overflows from it.
 */
#define FL__PNG_ARENA_MAX (16u << 20)
#if defined(__SANITIZE_ADDRESS__)
#define FL__PNG_ARENA 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define FL__PNG_ARENA 0
#endif
#endif
#ifndef FL__PNG_ARENA
#define FL__PNG_ARENA 1
#endif

struct arena {
  unsigned char *base;
  size_t cap, used;
  size_t spilled; /* bytes that went to malloc during this image */
};

struct fl__png {
  unsigned char *buf;
  size_t cap;
  struct arena a;
};

/* Each allocation: 16 bytes of header (its size, and whether it is the
   arena's), then its bytes, 16-aligned. */
struct hdr {
  size_t size;
  size_t heap;
};

static _Thread_local struct arena *cur;

static void *
a_malloc(size_t n)
{
  struct arena *a = cur;
  size_t need;
  struct hdr *h;

  if (n > SIZE_MAX - 64)
    return NULL;
  need = sizeof(struct hdr) + ((n + 15) & ~(size_t)15);
  if (a != NULL && a->cap - a->used >= need) {
    h = (struct hdr *)(a->base + a->used);
    a->used += need;
    h->heap = 0;
  } else {
    if ((h = malloc(sizeof(struct hdr) + n)) == NULL)
      return NULL;
    h->heap = 1;
    if (a != NULL)
      a->spilled += need;
  }
  h->size = n;
  return h + 1;
}

static void
a_free(void *p)
{
  struct hdr *h;

  if (p == NULL)
    return;
  h = (struct hdr *)p - 1;
  if (h->heap)
    free(h); /* the arena's are taken back when the image is done */
}

static void *
a_realloc(void *p, size_t n)
{
  struct hdr *h;
  void *q;

  if (p == NULL)
    return a_malloc(n);
  h = (struct hdr *)p - 1;
  if ((q = a_malloc(n)) == NULL)
    return NULL;
  memcpy(q, p, h->size < n ? h->size : n);
  a_free(p);
  return q;
}

static void *
a_calloc(size_t count, size_t size)
{
  void *p;

  if (size != 0 && count > SIZE_MAX / size)
    return NULL;
  if ((p = a_malloc(count * size)) != NULL)
    memset(p, 0, count * size);
  return p;
}

/* Before an image: grow to what the last one spilled, then start over. */
static void
arena_reset(struct arena *a)
{
  size_t want = a->used + a->spilled;
  void *b;

  if (a->spilled > 0 && want <= FL__PNG_ARENA_MAX) {
    want += want / 2;
    if (want > FL__PNG_ARENA_MAX)
      want = FL__PNG_ARENA_MAX;
    if ((b = realloc(a->base, want)) != NULL) {
      a->base = b;
      a->cap = want;
    }
  }
  a->used = 0;
  a->spilled = 0;
}

void
fl__png_free(struct fl__png *p)
{
  if (p == NULL)
    return;
  free(p->buf);
  free(p->a.base);
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
#if FL__PNG_ARENA
  {
    static struct spng_alloc al = {a_malloc, a_realloc, a_calloc, a_free};

    arena_reset(&p->a);
    cur = &p->a;
    ctx = spng_ctx_new2(&al, 0);
  }
#else
  (void)a_calloc;
  (void)a_realloc;
  (void)arena_reset;
  ctx = spng_ctx_new(0);
#endif
  if (ctx == NULL) {
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
  cur = NULL;
  return rc;
}
