/*
 * fl_dataset_tokens: llm.c's token shards (a header of 256 little-endian
 * int32, magic 20240520, version 1, the token count, then that many
 * uint16 tokens) as a dataset of windows of seq_len + 1 tokens, each
 * shard cut where llm.c's DataLoader cuts it.  Every shard is mapped once,
 * before any loader forks, and a batch is converted from uint16 to int32
 * straight into its two fields: the inputs and the targets.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dataset.h"
#include "internal.h"

struct shard {
  void *map;
  size_t map_bytes;
  const unsigned char *tokens; /* after the header */
  size_t first;                /* the dataset index of its first window */
  char *path;
};

struct tokens {
  struct fl__ds_base base;
  size_t n, len, seq_len;
  size_t field_bytes[2];
  struct shard shard[]; /* n */
};

static uint32_t
le32(const unsigned char *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

int
fl__tokens_check(const void *head, size_t file_bytes, size_t seq_len,
                 size_t *windows, char *err, size_t errlen)
{
  const unsigned char *h = head;
  int32_t magic, version, count;

  if (file_bytes < FL__TOKENS_HEADER) {
    snprintf(err, errlen, "%zu bytes, shorter than the %d-byte header of "
             "an llm.c token shard", file_bytes, FL__TOKENS_HEADER);
    return FL_EINVAL;
  }
  magic = (int32_t)le32(h);
  version = (int32_t)le32(h + 4);
  count = (int32_t)le32(h + 8);
  if (magic != FL_TOKENS_MAGIC) {
    snprintf(err, errlen, "magic %d, not llm.c's %d: not a token shard",
             magic, FL_TOKENS_MAGIC);
    return FL_EINVAL;
  }
  if (version != FL_TOKENS_VERSION) {
    snprintf(err, errlen, "version %d: only version %d is read", version,
             FL_TOKENS_VERSION);
    return FL_EINVAL;
  }
  if (count <= 0) {
    snprintf(err, errlen, "the header counts %d tokens", count);
    return FL_EINVAL;
  }
  /* Exactly, as llm.c: bytes short of the count are a truncated file,
     bytes past it a count that does not say what the file holds. */
  if (file_bytes - FL__TOKENS_HEADER != 2 * (uint64_t)count) {
    snprintf(err, errlen, "the header counts %d tokens (%llu bytes) but "
             "%zu bytes follow it", count, 2 * (unsigned long long)count,
             file_bytes - FL__TOKENS_HEADER);
    return FL_EINVAL;
  }
  /* Windows advance by seq_len and take one token more (the last
     target), as llm.c's advance by B*T and read B*T + 1. */
  *windows = ((size_t)count - 1) / seq_len;
  if (*windows == 0) {
    snprintf(err, errlen, "%d tokens make no window of seq_len + 1 = %zu",
             count, seq_len + 1);
    return FL_EINVAL;
  }
  return 0;
}

/* The shard holding dataset index i (< len): the last whose first is at
   most i. */
static const struct shard *
find_shard(const struct tokens *t, size_t i)
{
  size_t lo = 0, hi = t->n, mid;

  while (hi - lo > 1) {
    mid = lo + (hi - lo) / 2;
    if (t->shard[mid].first <= i)
      lo = mid;
    else
      hi = mid;
  }
  return &t->shard[lo];
}

/* Window index, as seq_len inputs and seq_len targets (one token on). */
static int
window(const struct tokens *t, size_t index, int32_t *in, int32_t *tg)
{
  const struct shard *s;
  const unsigned char *p;
  size_t j, T = t->seq_len;

  if (index >= t->len) {
    fl_worker_error("%s: index %zu is out of range (%zu samples)",
                    t->shard[0].path, index, t->len);
    return FL_EINVAL;
  }
  s = find_shard(t, index);
  p = s->tokens + (index - s->first) * T * 2;
  for (j = 0; j < T; j++)
    in[j] = (int32_t)(p[2 * j] | p[2 * j + 1] << 8);
  memcpy(tg, in + 1, (T - 1) * sizeof(*tg));
  tg[T - 1] = (int32_t)(p[2 * T] | p[2 * T + 1] << 8);
  return 0;
}

static int
tokens_get_fields(void *ctx, size_t index, void *const *dst, size_t *nbytes)
{
  const struct tokens *t = ctx;

  nbytes[0] = nbytes[1] = t->field_bytes[0];
  return window(t, index, dst[0], dst[1]);
}

static int
tokens_get_batch(void *ctx, const size_t *indices, size_t n, void *dst,
                 size_t *nbytes)
{
  const struct tokens *t = ctx;
  unsigned char *const *fields = dst;
  size_t i, fb = t->field_bytes[0];
  int rc;

  for (i = 0; i < n; i++) {
    rc = window(t, indices[i], (int32_t *)(void *)(fields[0] + i * fb),
                (int32_t *)(void *)(fields[1] + i * fb));
    if (rc != 0)
      return rc;
    nbytes[2 * i] = nbytes[2 * i + 1] = fb;
  }
  return 0;
}

static void
tokens_free(void *ctx)
{
  struct tokens *t = ctx;
  size_t f;

  for (f = 0; f < t->n; f++) {
    munmap(t->shard[f].map, t->shard[f].map_bytes);
    free(t->shard[f].path);
  }
  free(t);
}

/* Map shard f and count its windows, which follow those before it. */
static int
shard_open(struct tokens *t, size_t f, const char *path)
{
  struct shard *s = &t->shard[f];
  char err[FL__ERRMSG_MAX - 64];
  size_t windows;
  int rc;

  rc = fl__map_file(path, &s->map, &s->map_bytes);
  if (rc != 0)
    return rc;
  s->path = strdup(path);
  t->n = f + 1; /* from here on tokens_free unmaps it */
  if (s->path == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory", path);
  rc = fl__tokens_check(s->map, s->map_bytes, t->seq_len, &windows, err,
                        sizeof(err));
  if (rc != 0)
    return fl__error_set(rc, "%s: %s", path, err);
  if (windows > SIZE_MAX - t->len)
    return fl__error_set(FL_EINVAL, "%s: too many windows in all", path);
  s->tokens = (const unsigned char *)s->map + FL__TOKENS_HEADER;
  s->first = t->len;
  t->len += windows;
  return 0;
}

int
fl_dataset_tokens_sized(fl_dataset *out, size_t size,
                        const char *const *paths, size_t n, size_t seq_len)
{
  struct tokens *t;
  size_t f;
  int rc;

  rc = fl__dataset_out_check(out, size, "fl_dataset_tokens");
  if (rc != 0)
    return rc;
  if (size < FL__SIZE_TO(fl_dataset, get_fields))
    return fl__error_set(FL_EINVAL, "fl_dataset_tokens: fl_dataset is %zu "
                         "bytes here: too old to hold fields", size);
  if (paths == NULL || n == 0)
    return fl__error_set(FL_EINVAL, "fl_dataset_tokens: %s", paths == NULL
                         ? "paths is NULL" : "n is 0: no shard to read");
  for (f = 0; f < n; f++)
    if (paths[f] == NULL)
      return fl__error_set(FL_EINVAL, "fl_dataset_tokens: paths[%zu] is "
                           "NULL", f);
  /* A shard holds fewer than 2^31 tokens: a longer window fits none;
     and a sample's 8 x seq_len bytes must fit in a size_t. */
  if (seq_len == 0 || seq_len > INT32_MAX || seq_len > SIZE_MAX / 8)
    return fl__error_set(FL_EINVAL, "%s: seq_len %zu: a window holds 1 "
                         "to %d tokens and the one after", paths[0],
                         seq_len, INT32_MAX);
  if (n > (SIZE_MAX - sizeof(*t)) / sizeof(t->shard[0]))
    return fl__error_set(FL_ENOMEM, "%s: out of memory", paths[0]);
  t = calloc(1, sizeof(*t) + n * sizeof(t->shard[0]));
  if (t == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory", paths[0]);
  t->base.magic = FL__DS_MAGIC;
  t->base.free = tokens_free;
  t->seq_len = seq_len;
  t->field_bytes[0] = t->field_bytes[1] = seq_len * sizeof(int32_t);
  for (f = 0; f < n; f++) {
    rc = shard_open(t, f, paths[f]);
    if (rc != 0) {
      tokens_free(t);
      return rc;
    }
  }
  return fl__dataset_out(out, size,
                         &(fl_dataset){.ctx = t, .len = t->len,
                                       .sample_bytes = 2 * t->field_bytes[0],
                                       .nfields = 2,
                                       .field_bytes = t->field_bytes,
                                       .get_fields = tokens_get_fields,
                                       .get_batch = tokens_get_batch});
}
