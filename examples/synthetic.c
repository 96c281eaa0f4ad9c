/*
 * The embedded dataset, and the check of each sample's content that
 * --verify makes (verify.c checks which samples come, and in what order).
 *
 * Every byte of a sample is a pure function of (seed, sample index, field,
 * byte offset): float32 elements from a 64-bit mix hash mapped to [0, 1),
 * the last one cut short when the field's size is not a multiple of 4.
 * So the consumer can check any sample against its index alone, whichever
 * worker made it, and `forkload gen` writes the same content to files for
 * --verify to check after the library has read them back.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define GOLDEN 0x9e3779b97f4a7c15ull

/* splitmix64's finaliser: every input bit reaches every output bit. */
uint64_t
synth_mix64(uint64_t x)
{
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Puts the bytes at off (a multiple of 4) of the field keyed `key`, of
   nbytes, in out: 4 of them, or fewer at its end.  Returns how many. */
static size_t
element(uint64_t key, size_t off, size_t nbytes, unsigned char out[4])
{
  /* The hash's top 24 bits scale exactly into a float in [0, 1). */
  float v =
      (float)(synth_mix64(key + (off / 4 + 1) * GOLDEN) >> 40) * 0x1p-24f;
  size_t n = nbytes - off < 4 ? nbytes - off : 4;

  memcpy(out, &v, n);
  return n;
}

/* Seed 0 keeps the content that came before seeds did. */
static uint64_t
sample_key(const struct synth *s, size_t index)
{
  return synth_mix64(index + s->seed * GOLDEN);
}

/* Field 0 is keyed by the sample alone, so that it holds what a sample of
   one field held before there were fields, and files gen wrote then still
   verify; each other field has a key of its own. */
static uint64_t
field_key(const struct synth *s, size_t index, size_t f)
{
  uint64_t key = sample_key(s, index);

  return f == 0 ? key : synth_mix64(key ^ (f * 0xd1b54a32d192ed03ull));
}

size_t
synth_nfields(const struct synth *s)
{
  return s->nfields > 0 ? s->nfields : 1;
}

uint16_t
synth_token(uint64_t seed, uint64_t g)
{
  return (uint16_t)(synth_mix64(g + seed * GOLDEN) % 50257);
}

size_t
synth_field_bytes(const struct synth *s, size_t f)
{
  return s->nfields > 0 ? s->field_bytes[f] : s->sample_bytes;
}

void
synth_fill(const struct synth *s, size_t index, size_t f, void *dst)
{
  uint64_t key = field_key(s, index, f);
  size_t off, nbytes = synth_field_bytes(s, f);

  for (off = 0; off < nbytes; off += 4)
    element(key, off, nbytes, (unsigned char *)dst + off);
}

const char *
synth_sizes(const struct synth *s, char *buf, size_t len)
{
  size_t f, used;

  used = (size_t)snprintf(buf, len, "%zu bytes", s->sample_bytes);
  if (s->nfields > 0 && used < len)
    used += (size_t)snprintf(buf + used, len - used, " in %zu fields of ",
                             s->nfields);
  for (f = 0; f < s->nfields && used < len; f++)
    used += (size_t)snprintf(buf + used, len - used, "%s%zu",
                             f > 0 ? "," : "", s->field_bytes[f]);
  return buf;
}

size_t
synth_mismatch(const struct synth *s, size_t index, size_t f,
         const unsigned char *src)
{
  uint64_t key = field_key(s, index, f);
  size_t off, n, nbytes = synth_field_bytes(s, f);
  unsigned char want[4];

  for (off = 0; off < nbytes; off += 4) {
    n = element(key, off, nbytes, want);
    if (memcmp(src + off, want, n) != 0)
      return off;
  }
  return nbytes;
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
  synth_fill(s, index, 0, dst);
  *nbytes = s->sample_bytes;
  return 0;
}

static int
get_fields(void *ctx, size_t index, void *const *dst, size_t *nbytes)
{
  const struct synth *s = ctx;
  size_t f;

  delay(s->delay_us);
  for (f = 0; f < s->nfields; f++) {
    synth_fill(s, index, f, dst[f]);
    nbytes[f] = s->field_bytes[f];
  }
  return 0;
}

/* The batched fetch pays its delay once per batch: that is its point.
   With fields, dst is the array of each field; without, the one array. */
static int
get_batch(void *ctx, const size_t *indices, size_t n, void *dst,
          size_t *nbytes)
{
  const struct synth *s = ctx;
  unsigned char *whole = dst;
  unsigned char *const *arrays = s->nfields > 0 ? dst : &whole;
  size_t i, f, fb, nf = synth_nfields(s);

  delay(s->delay_us);
  for (f = 0; f < nf; f++) {
    fb = synth_field_bytes(s, f);
    for (i = 0; i < n; i++) {
      synth_fill(s, indices[i], f, arrays[f] + i * fb);
      nbytes[i * nf + f] = fb;
    }
  }
  return 0;
}

/* get writes one whole sample: samples of fields come by get_fields. */
void
synth_dataset(struct synth *s, int batched, fl_dataset *ds)
{
  *ds = (fl_dataset){0};
  ds->ctx = s;
  ds->len = s->samples;
  ds->sample_bytes = s->sample_bytes;
  ds->get_batch = batched ? get_batch : NULL;
  if (s->nfields == 0) {
    ds->get = get;
    return;
  }
  ds->nfields = s->nfields;
  ds->field_bytes = s->field_bytes;
  ds->get_fields = get_fields;
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

/* " field F" where samples have fields, else "", in buf: for messages. */
static const char *
field_name(const struct synth *s, size_t f, char *buf, size_t len)
{
  buf[0] = '\0';
  if (s->nfields > 0)
    snprintf(buf, len, " field %zu", f);
  return buf;
}

/* A field's stride is the library's to choose. */
int
synth_check_sample(const struct synth *s, const fl_batch *b, size_t i,
                   char *why, size_t len)
{
  const size_t *sizes = fl_batch_sizes(b);
  size_t index = fl_batch_indices(b)[i], nf = synth_nfields(s);
  const unsigned char *base;
  size_t f, fb, off;
  char field[32];

  for (f = 0; f < nf; f++) {
    fb = synth_field_bytes(s, f);
    base = fl_batch_field(b, f);
    if (base == NULL)
      return cli_fail(why, len, "batch %" PRIu64 " has no%s",
                      fl_batch_seq(b), field_name(s, f, field, sizeof field));
    if (sizes[i * nf + f] != fb)
      return cli_fail(why, len,
                      "batch %" PRIu64 " sample %zu: index %zu%s has %zu "
                      "bytes, expected %zu", fl_batch_seq(b), i, index,
                      field_name(s, f, field, sizeof field),
                      sizes[i * nf + f], fb);
    off = synth_mismatch(s, index, f, base + i * fl_batch_stride(b, f));
    if (off != fb)
      return cli_fail(why, len,
                      "batch %" PRIu64 " sample %zu: index %zu%s is wrong "
                      "from byte %zu on", fl_batch_seq(b), i, index,
                      field_name(s, f, field, sizeof field), off);
  }
  return 0;
}
