/*
 * The soak's iterable dataset, and its check.  Worker w of W reads the
 * indices w, w + W, ... below the dataset's samples, as an
 * IterableDataset shards itself by get_worker_info(); each sample carries
 * its index in its first 8 bytes, so that the consumer can tell which it
 * got, then the synthetic content of that index.  The check: every sample
 * is the one its worker's stream gives next (none lost, none twice, none
 * out of its stream's order, through restarts that reopen and skip), of
 * the right size and content, and each fl_batch_seq once an epoch; an
 * epoch handed out whole has every index.  Where the order cannot be
 * asked for (a batch kept for want of /dev/shm is filled later, from
 * where its stream stands then: the library hands a worker's samples out
 * of its stream's order), each sample must still come from its stream's
 * worker, once.
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* A sample as the stream gives it. */
static void
make(const struct soak_stream *s, uint64_t index, unsigned char *dst)
{
  synth_fill(s->data, (size_t)index, 0, dst);
  memcpy(dst, &index, sizeof index);
}

/* In the reader (a worker, or this process without workers), at each
   epoch's start. */
static int
s_open(void *ctx, const fl_worker_info *w)
{
  struct soak_stream *s = ctx;

  s->next = w != NULL ? w->id : 0;
  s->step = w != NULL ? w->num_workers : 1;
  return 0;
}

static int
s_next(void *ctx, void *dst, size_t *nbytes)
{
  struct soak_stream *s = ctx;

  if (s->next >= s->data->samples)
    return 0;
  make(s, s->next, dst);
  *nbytes = s->data->sample_bytes;
  s->next += s->step;
  return 1;
}

static int
s_skip(void *ctx, uint64_t n)
{
  struct soak_stream *s = ctx;

  s->next += n * s->step;
  return 0;
}

int
soak_stream_init(struct soak_stream *s, const struct synth *data,
                 unsigned num_workers, int skip, int ordered,
                 fl_iterable *it)
{
  *s = (struct soak_stream){0};
  s->data = data;
  s->streams = num_workers > 0 ? num_workers : 1;
  s->ordered = ordered;
  s->seen = malloc(data->samples);
  s->due = malloc(s->streams * sizeof *s->due);
  s->want = malloc(data->sample_bytes);
  /* An epoch has a batch per sample at most, and an end and a few
     poisoned places per stream: a seq past those is garbage. */
  s->nseqs = 4 * (data->samples + s->streams) + 1025;
  s->seqs = malloc(s->nseqs);
  *it = (fl_iterable){0};
  it->ctx = s;
  it->sample_bytes = data->sample_bytes;
  it->open = s_open;
  it->next = s_next;
  it->skip = skip ? s_skip : NULL;
  if (s->seen == NULL || s->due == NULL || s->want == NULL ||
      s->seqs == NULL) {
    soak_stream_free(s);
    return FL_ENOMEM;
  }
  return 0;
}

void
soak_stream_free(struct soak_stream *s)
{
  free(s->seen);
  free(s->due);
  free(s->want);
  free(s->seqs);
  *s = (struct soak_stream){0};
}

static int
begin(void *ctx, uint64_t epoch, char *why, size_t len)
{
  struct soak_stream *s = ctx;
  size_t w;

  (void)why;
  (void)len;
  s->epoch = epoch;
  memset(s->seen, 0, s->data->samples);
  for (w = 0; w < s->streams; w++)
    s->due[w] = w;
  memset(s->seqs, 0, s->nseqs);
  return 0;
}

/* Each fl_batch_seq once an epoch, a batch or a poisoned place. */
static int
take_seq(struct soak_stream *s, uint64_t seq, char *why, size_t len)
{
  if (seq >= s->nseqs)
    return cli_fail(why, len, "batch %" PRIu64 " of epoch %" PRIu64 " is "
                    "past any the stream has", seq, s->epoch);
  if (s->seqs[seq])
    return cli_fail(why, len, "batch %" PRIu64 " came twice in epoch %"
                    PRIu64, seq, s->epoch);
  s->seqs[seq] = 1;
  return 0;
}

/* Sample i of b: 0, or -1 with why set.  The index it holds, in *index. */
static int
sample_ok(struct soak_stream *s, const fl_batch *b, size_t i,
          uint64_t *index, char *why, size_t len)
{
  const unsigned char *p = (const unsigned char *)fl_batch_data(b) +
                           i * s->data->sample_bytes;
  uint64_t seq = fl_batch_seq(b);
  size_t got = fl_batch_sizes(b)[i];

  if (got != s->data->sample_bytes)
    return cli_fail(why, len, "batch %" PRIu64 " sample %zu has %zu bytes, "
                    "expected %zu", seq, i, got, s->data->sample_bytes);
  memcpy(index, p, sizeof *index);
  if (*index >= s->data->samples)
    return cli_fail(why, len, "batch %" PRIu64 " sample %zu holds index %"
                    PRIu64 ", past the %zu samples", seq, i, *index,
                    s->data->samples);
  make(s, *index, s->want);
  if (memcmp(p, s->want, s->data->sample_bytes) != 0)
    return cli_fail(why, len, "batch %" PRIu64 " sample %zu: index %"
                    PRIu64 " is wrong", seq, i, *index);
  return 0;
}

static int
batch(void *ctx, const fl_batch *b, char *why, size_t len)
{
  struct soak_stream *s = ctx;
  size_t i, n = fl_batch_count(b);
  unsigned w = fl_batch_worker(b);
  uint64_t seq = fl_batch_seq(b), index;

  if (take_seq(s, seq, why, len) < 0)
    return -1;
  if (w >= s->streams)
    return cli_fail(why, len, "batch %" PRIu64 " names worker %u of %zu",
                    seq, w, s->streams);
  for (i = 0; i < n; i++) {
    if (sample_ok(s, b, i, &index, why, len) < 0)
      return -1;
    if (s->seen[index])
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: index %"
                      PRIu64 " came twice in epoch %" PRIu64, seq, i, index,
                      s->epoch);
    if (index % s->streams != w)
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: index %"
                      PRIu64 " came from worker %u, not from its stream's",
                      seq, i, index, w);
    if (s->ordered && index != s->due[w])
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: worker %u's "
                      "stream gave index %" PRIu64 " where %zu was due",
                      seq, i, w, index, s->due[w]);
    s->seen[index] = 1;
    s->due[w] = index + s->streams;
  }
  return 0;
}

static int
poisoned(void *ctx, uint64_t seq, char *why, size_t len)
{
  return take_seq(ctx, seq, why, len);
}

static int
end(void *ctx, char *why, size_t len)
{
  struct soak_stream *s = ctx;
  size_t i;

  for (i = 0; i < s->data->samples; i++)
    if (!s->seen[i])
      return cli_fail(why, len, "epoch %" PRIu64 " ended without index "
                      "%zu", s->epoch, i);
  return 0;
}

static int
again(void *ctx, const fl_batch *b, char *why, size_t len)
{
  size_t i, n = fl_batch_count(b);
  uint64_t index;

  for (i = 0; i < n; i++)
    if (sample_ok(ctx, b, i, &index, why, len) < 0)
      return -1;
  return 0;
}

void
soak_stream_check(struct soak_stream *s, struct soak_check *check)
{
  *check = (struct soak_check){s, begin, batch, poisoned, end, again};
}
