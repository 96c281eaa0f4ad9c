/*
 * The embedded dataset and the checks of what a loader makes of it.
 *
 * Every byte of a sample is a pure function of (seed, sample index, byte
 * offset): float32 elements from a 64-bit mix hash mapped to [0, 1), the
 * last one cut short when the sample size is not a multiple of 4.  So the
 * consumer can check any sample against its index alone, whichever worker
 * made it, and `forkload gen` writes the same content to files for
 * --verify to check after the library has read them back.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define GOLDEN 0x9e3779b97f4a7c15ull

/* splitmix64's finaliser: every input bit reaches every output bit. */
static uint64_t
mix64(uint64_t x)
{
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Puts the bytes at off (a multiple of 4) of the sample keyed `key` in out:
   4 of them, or fewer at the end of the sample.  Returns how many. */
static size_t
element(uint64_t key, size_t off, size_t nbytes, unsigned char out[4])
{
  /* The hash's top 24 bits scale exactly into a float in [0, 1). */
  float v = (float)(mix64(key + (off / 4 + 1) * GOLDEN) >> 40) * 0x1p-24f;
  size_t n = nbytes - off < 4 ? nbytes - off : 4;

  memcpy(out, &v, n);
  return n;
}

/* Seed 0 keeps the content that came before seeds did. */
static uint64_t
sample_key(const struct synth *s, size_t index)
{
  return mix64(index + s->seed * GOLDEN);
}

void
synth_fill(const struct synth *s, size_t index, void *dst)
{
  uint64_t key = sample_key(s, index);
  size_t off;

  for (off = 0; off < s->sample_bytes; off += 4)
    element(key, off, s->sample_bytes, (unsigned char *)dst + off);
}

/* Returns the offset of the first element that is not sample index's, or
   sample_bytes when all are. */
static size_t
mismatch(const struct synth *s, size_t index, const unsigned char *src)
{
  uint64_t key = sample_key(s, index);
  unsigned char want[4];
  size_t off, n;

  for (off = 0; off < s->sample_bytes; off += 4) {
    n = element(key, off, s->sample_bytes, want);
    if (memcmp(src + off, want, n) != 0)
      return off;
  }
  return s->sample_bytes;
}

/* Stands for the I/O or decoding a real dataset would do. */
static void
delay(unsigned us)
{
  struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};

  if (us == 0)
    return;
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
    ;
}

static int
get(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  const struct synth *s = ctx;

  delay(s->delay_us);
  synth_fill(s, index, dst);
  *nbytes = s->sample_bytes;
  return 0;
}

/* The batched fetch pays its delay once per batch: that is its point. */
static int
get_batch(void *ctx, const size_t *indices, size_t n, void *dst,
          size_t *nbytes)
{
  const struct synth *s = ctx;
  unsigned char *p = dst;
  size_t i;

  delay(s->delay_us);
  for (i = 0; i < n; i++) {
    synth_fill(s, indices[i], p + i * s->sample_bytes);
    nbytes[i] = s->sample_bytes;
  }
  return 0;
}

void
synth_dataset(struct synth *s, int batched, fl_dataset *ds)
{
  *ds = (fl_dataset){0};
  ds->ctx = s;
  ds->len = s->samples;
  ds->sample_bytes = s->sample_bytes;
  ds->get = get;
  ds->get_batch = batched ? get_batch : NULL;
}

/* Runs in each worker before its first batch (--show-workers). */
void
synth_worker_init(unsigned id, void *arg)
{
  const fl_worker_info *info = fl_get_worker_info();

  (void)arg;
  if (info == NULL) {
    fprintf(stderr, "worker %u: pid %ld has no worker info\n", id,
            (long)getpid());
    return;
  }
  fprintf(stderr, "worker %u: pid %ld seed %" PRIu64 "\n", info->id,
          (long)getpid(), info->seed);
}

static int fail(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
fail(char *why, size_t len, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return -1;
}

/* Finds index's position k in the span: 0, or -1 when it is not there. */
static int
span_find(const struct synth_span *sp, size_t index, size_t *k)
{
  if (index < sp->first || (index - sp->first) % sp->step != 0)
    return -1;
  *k = (index - sp->first) / sp->step;
  return *k < sp->count ? 0 : -1;
}

int
synth_check_init(struct synth_check *c, const struct synth *data,
                 const struct synth_span *span, const fl_options *opt)
{
  size_t bs = opt->batch_size;

  *c = (struct synth_check){0};
  c->data = data;
  c->span = *span;
  c->batch_size = bs;
  c->shuffle = opt->shuffle;
  c->in_order = opt->in_order;
  c->nbatches = span->count / bs + (!opt->drop_last && span->count % bs);
  c->expect = opt->drop_last ? c->nbatches * bs : span->count;
  c->seen = malloc(span->count);
  return c->seen != NULL ? 0 : FL_ENOMEM;
}

void
synth_check_begin(struct synth_check *c)
{
  memset(c->seen, 0, c->span.count);
  c->got = 0;
  c->batches = 0;
  c->epoch++;
}

int
synth_check_batch(struct synth_check *c, const fl_batch *b, char *why,
                  size_t len)
{
  uint64_t seq = fl_batch_seq(b);
  size_t n = fl_batch_count(b);
  const size_t *idx = fl_batch_indices(b);
  const size_t *sizes = fl_batch_sizes(b);
  const unsigned char *data = fl_batch_data(b);
  size_t sb = c->data->sample_bytes;
  size_t i, k, pos, off;

  if (c->in_order && seq != c->batches)
    return fail(why, len, "batch %" PRIu64 " came in place of batch %zu",
                seq, c->batches);
  if (seq >= c->nbatches)
    return fail(why, len, "batch %" PRIu64 " is past the %zu of an epoch",
                seq, c->nbatches);
  pos = seq * c->batch_size;
  if (n != (c->span.count - pos < c->batch_size ? c->span.count - pos
                                                 : c->batch_size))
    return fail(why, len, "batch %" PRIu64 " holds %zu samples", seq, n);
  for (i = 0; i < n; i++, pos++) {
    if (span_find(&c->span, idx[i], &k) < 0)
      return fail(why, len,
                  "batch %" PRIu64 " sample %zu: index %zu is not one the "
                  "sampler gives", seq, i, idx[i]);
    if (!c->shuffle && k != pos)
      return fail(why, len,
                  "batch %" PRIu64 " sample %zu: index %zu, expected %zu",
                  seq, i, idx[i], c->span.first + pos * c->span.step);
    if (c->seen[k])
      return fail(why, len,
                  "batch %" PRIu64 " sample %zu: index %zu came twice in "
                  "epoch %u", seq, i, idx[i], c->epoch);
    c->seen[k] = 1;
    if (sizes[i] != sb)
      return fail(why, len,
                  "batch %" PRIu64 " sample %zu: index %zu has %zu bytes, "
                  "expected %zu", seq, i, idx[i], sizes[i], sb);
    off = mismatch(c->data, idx[i], data + i * sb);
    if (off != sb)
      return fail(why, len,
                  "batch %" PRIu64 " sample %zu: index %zu is wrong from "
                  "byte %zu on", seq, i, idx[i], off);
  }
  c->got += n;
  c->batches++;
  return 0;
}

int
synth_check_end(struct synth_check *c, char *why, size_t len)
{
  char missing[64] = "";
  size_t k = 0;

  if (c->got == c->expect)
    return 0;
  /* The first `expect` positions are due, unless a shuffle hid which. */
  if (!c->shuffle || c->expect == c->span.count) {
    while (k < c->expect && c->seen[k])
      k++;
    if (k < c->expect)
      snprintf(missing, sizeof missing, "; index %zu never came",
               c->span.first + k * c->span.step);
  }
  return fail(why, len, "epoch %u: %zu samples came, expected %zu%s",
              c->epoch, c->got, c->expect, missing);
}

void
synth_check_free(struct synth_check *c)
{
  free(c->seen);
}
