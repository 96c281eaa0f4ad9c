/*
 * --verify over a WebDataset stream that `forkload gen webdataset` wrote.
 * A stream has no order to compare, so the reference is a set: the keys
 * of this rank's shards (shard s is rank s % world_size's, as
 * split_by_node gives it), read once in this process with no workers.
 * Each sample the workers hand out must be one of them, once an epoch,
 * with gen's content for its key (.bin) and label (.cls); by the epoch's
 * end every one must have come.  The split is worked out here from the
 * shard list, not asked of the library, so a wrong split is caught.
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

/* gen's keys are %08zu: at most 20 digits, and room for a longer one to
   be reported as not gen's. */
#define KEY_BYTES 32

static const char *const key_ext[] = {"__key__"};
static const size_t key_max[] = {KEY_BYTES};

/* The number the key's len bytes spell in decimal, or -1 when they are
   not all digits (or overflow). */
static int
key_index(const unsigned char *key, size_t len, size_t *out)
{
  char s[KEY_BYTES + 1], *end;
  uint64_t v;

  if (len == 0 || len > KEY_BYTES)
    return -1;
  memcpy(s, key, len);
  s[len] = '\0';
  if (cli_scan_uint(s, &end, &v) != 0 || *end != '\0' || v > SIZE_MAX)
    return -1;
  *out = (size_t)v;
  return 0;
}

static int
cmp_size(const void *a, const void *b)
{
  size_t x = *(const size_t *)a, y = *(const size_t *)b;

  return x < y ? -1 : x > y;
}

/* Appends batch b's keys to s->keys: 0, or -1 with why set. */
static int
ref_keys(struct verify_stream *s, const fl_batch *b, char *why, size_t len)
{
  const unsigned char *keys = fl_batch_field(b, 0);
  const size_t *sizes = fl_batch_sizes(b);
  size_t i, n = fl_batch_count(b), stride = fl_batch_stride(b, 0), cap;
  size_t *more;

  for (i = 0; i < n; i++) {
    if (s->nkeys == VERIFY_MAX_SAMPLES)
      return cli_fail(why, len, "this rank's shards hold more than the "
                      "%llu samples it checks",
                      (unsigned long long)VERIFY_MAX_SAMPLES);
    if (s->nkeys == s->cap) {
      cap = s->cap ? s->cap * 2 : 1024;
      if ((more = realloc(s->keys, cap * sizeof *more)) == NULL)
        return cli_fail(why, len, "%s", fl_strerror(FL_ENOMEM));
      s->keys = more;
      s->cap = cap;
    }
    if (key_index(keys + i * stride, sizes[i], &s->keys[s->nkeys]) < 0)
      return cli_fail(why, len, "the shards hold a sample of key '%.*s', "
                      "which is not one gen writes (a decimal number)",
                      (int)sizes[i], (const char *)(keys + i * stride));
    s->nkeys++;
  }
  return 0;
}

/* The keys of this rank's shards, sorted: 0, or -1 with why set. */
static int
ref_build(struct verify_stream *s, char *why, size_t len)
{
  const struct dataset_spec *d = s->spec;
  const char **mine = calloc(d->nshards, sizeof *mine);
  fl_iterable it;
  fl_options o;
  fl_loader *l = NULL;
  fl_batch *b;
  size_t k, n = 0;
  int rc, bad = 0, open = 0;

  if (mine == NULL)
    return cli_fail(why, len, "%s", fl_strerror(FL_ENOMEM));
  for (k = s->rank; k < d->nshards; k += s->world)
    mine[n++] = d->shards[k];
  fl_options_init(&o);
  o.batch_size = 256;
  o.num_workers = 0;
  /* A rank with no shard has no sample to expect. */
  rc = n == 0 ? 0
              : fl_dataset_webdataset(&it, mine, n, key_ext, key_max, 1);
  open = n > 0 && rc == 0;
  if (open && (rc = fl_loader_create_iterable(&l, &it, &o)) == 0)
    rc = fl_loader_begin(l);
  while (open && rc == 0 && !bad && (rc = fl_loader_next(l, &b)) == 1) {
    bad = ref_keys(s, b, why, len) < 0;
    fl_batch_release(b);
    rc = 0;
  }
  if (rc < 0)
    bad = cli_fail(why, len, "reading this rank's shards for the "
                   "reference: %s", cli_loader_error(l, rc)) < 0;
  fl_loader_destroy(l);
  if (open)
    fl_iterable_close(&it);
  free(mine);
  if (bad)
    return -1;
  qsort(s->keys, s->nkeys, sizeof *s->keys, cmp_size);
  for (k = 1; k < s->nkeys; k++)
    if (s->keys[k] == s->keys[k - 1])
      return cli_fail(why, len, "the shards hold key %08zu twice (is a "
                      "shard listed twice?)", s->keys[k]);
  if ((s->seen = malloc(s->nkeys + 1)) == NULL)
    return cli_fail(why, len, "%s", fl_strerror(FL_ENOMEM));
  return 0;
}

/* The field of extension ext among the spec's, or SIZE_MAX. */
static size_t
field_of(const struct dataset_spec *d, const char *ext)
{
  size_t f;

  for (f = 0; f < d->nexts; f++)
    if (strcasecmp(d->exts[f], ext) == 0)
      return f;
  return SIZE_MAX;
}

int
verify_stream_spec(struct dataset_spec *d)
{
  if (field_of(d, key_ext[0]) != SIZE_MAX)
    return 0;
  if (d->nexts == SYNTH_MAX_FIELDS)
    return -1;
  d->exts[d->nexts] = key_ext[0];
  d->max_bytes[d->nexts++] = KEY_BYTES;
  return 0;
}

void
verify_stream_init(struct verify *v, const struct dataset_spec *d,
                   const fl_options *opt, uint64_t seed)
{
  struct verify_stream *s = &v->stream;

  *s = (struct verify_stream){0};
  s->spec = d;
  s->seed = seed;
  s->rank = opt->rank;
  s->world = opt->world_size > 0 ? opt->world_size : 1;
  s->nf = d->nexts;
  s->keyf = field_of(d, key_ext[0]);
  s->binf = field_of(d, "bin");
  s->clsf = field_of(d, "cls");
}

int
verify_stream_begin(struct verify_stream *s, uint64_t epoch, char *why,
                    size_t len)
{
  if (s->seen == NULL && ref_build(s, why, len) < 0)
    return -1;
  memset(s->seen, 0, s->nkeys);
  s->epoch = epoch;
  s->came = 0;
  return 0;
}

/* Sample i of b, of key index: its .bin and .cls as gen wrote them. */
static int
content(struct verify_stream *s, const fl_batch *b, size_t i, size_t index,
        char *why, size_t len)
{
  const size_t *sizes = fl_batch_sizes(b);
  const unsigned char *p;
  struct synth d = {.seed = s->seed};
  char label[24];
  size_t n, off;

  if (s->binf != SIZE_MAX) {
    n = sizes[i * s->nf + s->binf];
    p = (const unsigned char *)fl_batch_field(b, s->binf) +
        i * fl_batch_stride(b, s->binf);
    /* gen writes every .bin of one size: the first sets it. */
    if (s->bin_bytes == 0)
      s->bin_bytes = n;
    if (n != s->bin_bytes)
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: key %08zu "
                      "has a .bin of %zu bytes, others %zu", fl_batch_seq(b),
                      i, index, n, s->bin_bytes);
    d.sample_bytes = n;
    if ((off = synth_mismatch(&d, index, 0, p)) != n)
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: key %08zu's "
                      ".bin is wrong from byte %zu on", fl_batch_seq(b), i,
                      index, off);
  }
  if (s->clsf != SIZE_MAX) {
    n = sizes[i * s->nf + s->clsf];
    p = (const unsigned char *)fl_batch_field(b, s->clsf) +
        i * fl_batch_stride(b, s->clsf);
    snprintf(label, sizeof label, "%zu", index % 10);
    if (n != strlen(label) || memcmp(p, label, n) != 0)
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: key %08zu "
                      "has label '%.*s', expected %s", fl_batch_seq(b), i,
                      index, (int)n, (const char *)p, label);
  }
  return 0;
}

int
verify_stream_batch(struct verify_stream *s, const fl_batch *b, char *why,
                    size_t len)
{
  const size_t *sizes = fl_batch_sizes(b);
  const unsigned char *key;
  const size_t *at;
  size_t i, n = fl_batch_count(b), index, klen;

  for (i = 0; i < n; i++) {
    key = (const unsigned char *)fl_batch_field(b, s->keyf) +
          i * fl_batch_stride(b, s->keyf);
    klen = sizes[i * s->nf + s->keyf];
    if (key_index(key, klen, &index) < 0)
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: key '%.*s' "
                      "is not one gen writes", fl_batch_seq(b), i, (int)klen,
                      (const char *)key);
    at = bsearch(&index, s->keys, s->nkeys, sizeof *s->keys, cmp_size);
    if (at == NULL)
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: key %08zu "
                      "is not in rank %u's shards", fl_batch_seq(b), i,
                      index, s->rank);
    if (s->seen[at - s->keys])
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: key %08zu "
                      "came twice in epoch %" PRIu64, fl_batch_seq(b), i,
                      index, s->epoch);
    s->seen[at - s->keys] = 1;
    s->came++;
    if (content(s, b, i, index, why, len) < 0)
      return -1;
  }
  return 0;
}

int
verify_stream_end(const struct verify_stream *s, char *why, size_t len)
{
  size_t k;

  for (k = 0; k < s->nkeys; k++)
    if (!s->seen[k])
      return cli_fail(why, len, "epoch %" PRIu64 ": key %08zu never came "
                      "(%zu of rank %u's %zu samples did)", s->epoch,
                      s->keys[k], s->came, s->rank, s->nkeys);
  return 0;
}

void
verify_stream_free(struct verify_stream *s)
{
  free(s->keys);
  free(s->seen);
  *s = (struct verify_stream){0};
}
