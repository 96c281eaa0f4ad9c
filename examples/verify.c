/*
 * --verify's order checks.  The reference is what an in-process loader
 * with the run's order options (batch size, shuffle, seed, drop_last,
 * indices, rank, world size, shard mode) and a dataset that gives only
 * indices hands out for the same epoch: each batch the run delivers, in
 * order or as it arrives, must be the reference's batch of the same
 * fl_batch_seq, each once, until every one has come.  Unshuffled, the
 * reference itself is checked against DistributedSampler's arithmetic.
 *
 * A resumed epoch's reference is that loader with the same state loaded.
 * Where its batches are the uninterrupted epoch's at the same seq, the
 * state was saved on this world size; where not, on another (elastic:
 * seq restarts at 0 over what was left, split anew), and only the content
 * and each index at most once can be told of it.  What the resumed run
 * and the stopped one delivered together is checked when the state is
 * saved: it must resume exactly the batches the run did not hand out.
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The index-only dataset: the batch's indices are all the reference
   needs, so a sample is 0 bytes. */
static int
no_bytes(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  (void)ctx;
  (void)index;
  (void)dst;
  *nbytes = 0;
  return 0;
}

static void
ref_free(struct ref_epoch *r)
{
  free(r->start);
  free(r->count);
  free(r->idx);
  *r = (struct ref_epoch){0};
}

/* Appends batch b to r: 0, or -1 with why set. */
static int
ref_add(struct ref_epoch *r, const fl_batch *b, char *why, size_t len)
{
  uint64_t seq = fl_batch_seq(b);
  size_t n = fl_batch_count(b), cap = r->cap ? r->cap : 1024;
  size_t *more;

  if (seq >= r->nbatches || r->count[seq] != 0 || n == 0)
    return cli_fail(why, len, "the reference loader handed out batch %"
                    PRIu64 " of %zu samples, twice or past its %zu "
                    "batches", seq, n, r->nbatches);
  while (cap - r->nidx < n)
    cap *= 2;
  if (cap != r->cap) {
    if ((more = realloc(r->idx, cap * sizeof *more)) == NULL)
      return cli_fail(why, len, "%s", fl_strerror(FL_ENOMEM));
    r->idx = more;
    r->cap = cap;
  }
  memcpy(r->idx + r->nidx, fl_batch_indices(b), n * sizeof *r->idx);
  r->start[seq] = r->nidx;
  r->count[seq] = n;
  r->nidx += n;
  return 0;
}

/* The reference of epoch, or (state not NULL) of the epoch the state
   resumes: 0, or -1 with why set. */
static int
ref_build(struct ref_epoch *r, const struct verify *v, uint64_t epoch,
          const void *state, size_t state_len, char *why, size_t len)
{
  fl_dataset ds = {.len = v->data->samples, .sample_bytes = 1,
                   .get = no_bytes};
  fl_loader *l = NULL;
  fl_batch *b;
  int rc, bad = 0;

  *r = (struct ref_epoch){0};
  if ((rc = fl_loader_create(&l, &ds, &v->opt)) < 0)
    return cli_fail(why, len, "the reference loader: %s",
                    cli_loader_error(NULL, rc));
  rc = state != NULL ? fl_loader_state_load(l, state, state_len)
                     : fl_loader_set_epoch(l, epoch);
  if (rc == 0)
    rc = fl_loader_begin(l);
  if (rc == 0) {
    r->epoch = fl_loader_epoch(l);
    r->nbatches = fl_loader_len(l);
    r->start = calloc(r->nbatches + 1, sizeof *r->start);
    r->count = calloc(r->nbatches + 1, sizeof *r->count);
    if (r->start == NULL || r->count == NULL)
      rc = FL_ENOMEM;
  }
  while (rc == 0 && !bad && (rc = fl_loader_next(l, &b)) == 1) {
    bad = ref_add(r, b, why, len) < 0;
    fl_batch_release(b);
    rc = 0;
  }
  if (rc < 0)
    bad = cli_fail(why, len, "the reference loader: %s",
                   cli_loader_error(l, rc)) < 0;
  fl_loader_destroy(l);
  if (bad)
    ref_free(r);
  return bad ? -1 : 0;
}

/* Whether batch s of a and batch t of b hold the same indices. */
static int
same_batch(const struct ref_epoch *a, size_t s, const struct ref_epoch *b,
           size_t t)
{
  return a->count[s] == b->count[t] &&
         memcmp(a->idx + a->start[s], b->idx + b->start[t],
                a->count[s] * sizeof *a->idx) == 0;
}

/* The index at span position k. */
static size_t
span_index(const struct synth_span *sp, size_t k)
{
  return sp->first + k * sp->step;
}

/*
 * An unshuffled epoch, from its start, against DistributedSampler: rank
 * r's j-th sample is the order's position r + j*W, padded by starting the
 * order again (pad), cut at a multiple of W (trim) or at its end (uneven);
 * drop_last cuts the share's short batch.  0, or -1 with why set.
 */
static int
check_arithmetic(const struct verify *v, const struct ref_epoch *r,
                 char *why, size_t len)
{
  size_t m = v->span.count, w = v->opt.world_size, rank = v->opt.rank;
  size_t share, j, pos;

  share = v->opt.shard_mode == FL_SHARD_TRIM ? m / w
          : v->opt.shard_mode == FL_SHARD_UNEVEN
              ? (rank < m ? (m - rank - 1) / w + 1 : 0)
              : m / w + (m % w != 0);
  if (v->opt.drop_last)
    share -= share % v->opt.batch_size;
  if (r->nidx != share)
    return cli_fail(why, len, "epoch %" PRIu64 " has %zu samples, "
                    "expected %zu", r->epoch, r->nidx, share);
  for (j = 0; j < share; j++) {
    pos = (rank + j * w) % m;
    if (r->idx[j] != span_index(&v->span, pos))
      return cli_fail(why, len, "epoch %" PRIu64 " sample %zu of the share "
                      "is index %zu, expected %zu", r->epoch, j, r->idx[j],
                      span_index(&v->span, pos));
  }
  return 0;
}

/* A fresh epoch's reference, checked where that can be done alone. */
static int
ref_fresh(struct ref_epoch *r, const struct verify *v, uint64_t epoch,
          char *why, size_t len)
{
  if (ref_build(r, v, epoch, NULL, 0, why, len) < 0)
    return -1;
  if (!v->opt.shuffle && check_arithmetic(v, r, why, len) < 0) {
    ref_free(r);
    return -1;
  }
  return 0;
}

/* The first seq of r at or after s that is due (in r, not in gone). */
static uint64_t
next_due(const struct ref_epoch *r, const unsigned char *gone, uint64_t s)
{
  while (s < r->nbatches && (r->count[s] == 0 || (gone && gone[s])))
    s++;
  return s;
}

/* A window of what `gen tokens` wrote: its shards cut one stream of
   synth_token, each after its last window's last token, which the next
   shard repeats, so window i holds tokens i*T .. i*T + T of the stream
   whatever shard it is in.  Both fields whole, the inputs those tokens
   but the last and the targets those but the first. */
static int
tokens_check(const struct verify *v, const fl_batch *b, size_t i,
             char *why, size_t len)
{
  const size_t *sizes = fl_batch_sizes(b);
  size_t index = fl_batch_indices(b)[i], T = v->tokens_seq, j, f;
  uint64_t g = (uint64_t)index * T;
  int32_t got;

  if (sizes[i * 2] != T * sizeof got || sizes[i * 2 + 1] != T * sizeof got)
    return cli_fail(why, len, "batch %" PRIu64 " sample %zu: index %zu has "
                    "%zu and %zu bytes, expected %zu and %zu",
                    fl_batch_seq(b), i, index, sizes[i * 2], sizes[i * 2 + 1],
                    T * sizeof got, T * sizeof got);
  for (f = 0; f < 2; f++)
    for (j = 0; j < T; j++) {
      memcpy(&got, (const unsigned char *)fl_batch_field(b, f) +
                       i * fl_batch_stride(b, f) + j * sizeof got,
             sizeof got);
      if (got != synth_token(v->data->seed, g + f + j))
        return cli_fail(why, len, "batch %" PRIu64 " sample %zu: index %zu "
                        "has %s token %zu %" PRId32 ", expected %u",
                        fl_batch_seq(b), i, index, f ? "target" : "input",
                        j, got, synth_token(v->data->seed, g + f + j));
    }
  return 0;
}

/* An image's content is the decoder's to check (image_test does, against
   PIL's pixels): here, that the sample has both fields whole and the
   label of its file's folder. */
static int
image_check(const struct verify *v, const fl_batch *b, size_t i, char *why,
            size_t len)
{
  const fl_dataset *ds = v->images;
  const size_t *sizes = fl_batch_sizes(b);
  size_t index = fl_batch_indices(b)[i];
  int64_t got, want = -1;
  const char *path = fl_image_folder_sample(ds, index, &want);

  if (sizes[i * 2] != ds->field_bytes[0] || sizes[i * 2 + 1] != sizeof got)
    return cli_fail(why, len, "batch %" PRIu64 " sample %zu: index %zu has "
                    "%zu and %zu bytes, expected %zu and %zu",
                    fl_batch_seq(b), i, index, sizes[i * 2], sizes[i * 2 + 1],
                    ds->field_bytes[0], sizeof got);
  memcpy(&got, (const unsigned char *)fl_batch_field(b, 1) +
                   i * fl_batch_stride(b, 1), sizeof got);
  if (path == NULL || got != want)
    return cli_fail(why, len, "batch %" PRIu64 " sample %zu: index %zu (%s) "
                    "has label %" PRId64 ", expected %" PRId64,
                    fl_batch_seq(b), i, index, path ? path : "?", got, want);
  return 0;
}

/* Any other sample: gen's synthetic content for its index. */
static int
synth_check(const struct verify *v, const fl_batch *b, size_t i, char *why,
            size_t len)
{
  return synth_check_sample(v->data, b, i, why, len);
}

int
verify_init(struct verify *v, const struct synth *data,
            const struct synth_span *span, const fl_options *opt,
            const void *state, size_t len)
{
  *v = (struct verify){0};
  v->data = data;
  v->span = *span;
  v->state = state;
  v->state_len = len;
  v->resumed = -1;
  /* The fields that make the order; none of the data path's. */
  fl_options_init(&v->opt);
  v->opt.batch_size = opt->batch_size;
  v->opt.shuffle = opt->shuffle;
  v->opt.shuffle_algorithm = opt->shuffle_algorithm;
  v->opt.seed = opt->seed;
  v->opt.drop_last = opt->drop_last;
  v->opt.in_order = opt->in_order; /* a state saved as they arrive needs it */
  v->opt.indices = opt->indices;
  v->opt.indices_len = opt->indices_len;
  v->opt.rank = opt->rank;
  v->opt.world_size = opt->world_size;
  v->opt.shard_mode = opt->shard_mode;
  v->opt.num_workers = 0;
  v->seen = malloc(span->count);
  return v->seen != NULL ? 0 : FL_ENOMEM;
}

int
verify_begin(struct verify *v, uint64_t epoch, char *why, size_t len)
{
  struct ref_epoch u;
  size_t s;

  if (v->stream.spec != NULL)
    return verify_stream_begin(&v->stream, epoch, why, len);
  ref_free(&v->ref);
  free(v->got);
  v->got = NULL;
  v->began = 0;
  if (v->state != NULL) {
    if (ref_build(&v->ref, v, 0, v->state, v->state_len, why, len) < 0 ||
        ref_fresh(&u, v, v->ref.epoch, why, len) < 0)
      return -1;
    v->resumed_at = next_due(&v->ref, NULL, 0);
    v->resumed = 0;
    for (s = v->resumed_at; s < v->ref.nbatches && !v->resumed; s++)
      v->resumed = v->ref.count[s] != 0 &&
                   (s >= u.nbatches || !same_batch(&v->ref, s, &u, s));
    ref_free(&u);
    v->state = NULL;
  } else if (ref_fresh(&v->ref, v, epoch, why, len) < 0) {
    return -1;
  }
  if (v->ref.epoch != epoch)
    return cli_fail(why, len, "the loader began epoch %" PRIu64 ", the "
                    "reference epoch %" PRIu64, epoch, v->ref.epoch);
  if ((v->got = calloc(v->ref.nbatches + 1, 1)) == NULL)
    return cli_fail(why, len, "%s", fl_strerror(FL_ENOMEM));
  memset(v->seen, 0, v->span.count);
  v->check = v->images != NULL ? image_check
             : v->tokens_seq != 0 ? tokens_check
                                  : synth_check;
  v->due = next_due(&v->ref, NULL, 0);
  v->began = 1;
  return 0;
}

int
verify_batch(struct verify *v, const fl_batch *b, char *why, size_t len)
{
  const struct ref_epoch *r = &v->ref;
  uint64_t seq = fl_batch_seq(b), e = r->epoch;
  const size_t *idx = fl_batch_indices(b), *want;
  size_t i, k, n = fl_batch_count(b);

  if (v->stream.spec != NULL)
    return verify_stream_batch(&v->stream, b, why, len);
  if (seq >= r->nbatches)
    return cli_fail(why, len, "batch %" PRIu64 " is past the %zu of epoch %"
                    PRIu64, seq, r->nbatches, e);
  if (r->count[seq] == 0)
    return cli_fail(why, len, "batch %" PRIu64 " of epoch %" PRIu64 " was "
                    "handed out before the state was saved", seq, e);
  if (v->got[seq])
    return cli_fail(why, len, "batch %" PRIu64 " came twice in epoch %"
                    PRIu64, seq, e);
  if (v->opt.in_order && seq != v->due)
    return cli_fail(why, len, "batch %" PRIu64 " came in place of batch %"
                    PRIu64, seq, v->due);
  if (n != r->count[seq])
    return cli_fail(why, len, "batch %" PRIu64 " holds %zu samples, "
                    "expected %zu", seq, n, r->count[seq]);
  want = r->idx + r->start[seq];
  for (i = 0; i < n; i++) {
    if (idx[i] != want[i])
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: index %zu, "
                      "expected %zu", seq, i, idx[i], want[i]);
    if (idx[i] < v->span.first || (idx[i] - v->span.first) % v->span.step ||
        (k = (idx[i] - v->span.first) / v->span.step) >= v->span.count)
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: index %zu "
                      "is not one the sampler gives", seq, i, idx[i]);
    /* Padding repeats an index on another rank only, never on this. */
    if (v->seen[k])
      return cli_fail(why, len, "batch %" PRIu64 " sample %zu: index %zu "
                      "came twice in epoch %" PRIu64, seq, i, idx[i], e);
    v->seen[k] = 1;
    if (v->check(v, b, i, why, len) < 0)
      return -1;
  }
  v->got[seq] = 1;
  v->due = next_due(r, v->got, v->due);
  return 0;
}

int
verify_poisoned(struct verify *v, uint64_t seq, char *why, size_t len)
{
  const struct ref_epoch *r = &v->ref;

  /* A stream's samples in it are lost: the epoch cannot come whole. */
  if (v->stream.spec != NULL)
    return cli_fail(why, len, "batch %" PRIu64 " of the stream came "
                    "poisoned: its samples are lost", seq);
  if (seq >= r->nbatches || r->count[seq] == 0)
    return cli_fail(why, len, "poisoned batch %" PRIu64 " is not one epoch %"
                    PRIu64 " has left", seq, r->epoch);
  if (v->got[seq])
    return cli_fail(why, len, "batch %" PRIu64 " came twice in epoch %"
                    PRIu64 ", the second time poisoned", seq, r->epoch);
  if (v->opt.in_order && seq != v->due)
    return cli_fail(why, len, "poisoned batch %" PRIu64 " came in place of "
                    "batch %" PRIu64, seq, v->due);
  v->got[seq] = 1;
  v->due = next_due(r, v->got, v->due);
  return 0;
}

int
verify_end(struct verify *v, char *why, size_t len)
{
  uint64_t s = next_due(&v->ref, v->got, 0);

  if (v->stream.spec != NULL)
    return verify_stream_end(&v->stream, why, len);
  if (s < v->ref.nbatches)
    return cli_fail(why, len, "epoch %" PRIu64 ": batch %" PRIu64 " never "
                    "came", v->ref.epoch, s);
  return 0;
}

/* Batch s of the state saved against what was left of want (gone: the
   seqs handed out, or NULL): 0, or -1 with why set. */
static int
saved_batch(const struct ref_epoch *saved, const struct ref_epoch *want,
            const unsigned char *gone, size_t s, char *why, size_t len)
{
  int have = s < saved->nbatches && saved->count[s] != 0;
  int had = s < want->nbatches && want->count[s] != 0;
  int handed = had && gone != NULL && gone[s];

  if (have && handed)
    return cli_fail(why, len, "the state saved hands out batch %zu of epoch "
                    "%" PRIu64 " again, which this run handed out", s,
                    saved->epoch);
  if (have && !had)
    return cli_fail(why, len, "the state saved hands out batch %zu, which "
                    "epoch %" PRIu64 " does not have", s, saved->epoch);
  if (!have && had && !handed)
    return cli_fail(why, len, "the state saved leaves out batch %zu of "
                    "epoch %" PRIu64 ", which this run did not hand out", s,
                    saved->epoch);
  if (have && !same_batch(saved, s, want, s))
    return cli_fail(why, len, "the state saved resumes batch %zu of epoch "
                    "%" PRIu64 " with other samples", s, saved->epoch);
  return 0;
}

int
verify_saved(struct verify *v, const void *state, size_t len, char *why,
             size_t whylen)
{
  struct ref_epoch saved, next = {0};
  const struct ref_epoch *want = &v->ref;
  const unsigned char *gone = v->got;
  size_t s, n;
  int rc;

  if (ref_build(&saved, v, 0, state, len, why, whylen) < 0)
    return -1;
  /* An epoch handed out whole, or none begun: the next from its start,
     or --resume's state again. */
  if (!v->began || next_due(&v->ref, v->got, 0) == v->ref.nbatches) {
    if (v->state != NULL)
      rc = ref_build(&next, v, 0, v->state, v->state_len, why, whylen);
    else
      rc = ref_fresh(&next, v, v->began ? v->ref.epoch + 1 : 0, why, whylen);
    if (rc < 0)
      goto out;
    want = &next;
    gone = NULL;
  }
  rc = saved.epoch == want->epoch
           ? 0
           : cli_fail(why, whylen, "the state saved resumes epoch %" PRIu64
                      ", expected epoch %" PRIu64, saved.epoch, want->epoch);
  n = saved.nbatches > want->nbatches ? saved.nbatches : want->nbatches;
  for (s = 0; s < n && rc == 0; s++)
    rc = saved_batch(&saved, want, gone, s, why, whylen);
out:
  ref_free(&saved);
  ref_free(&next);
  return rc;
}

void
verify_free(struct verify *v)
{
  ref_free(&v->ref);
  free(v->got);
  free(v->seen);
  verify_stream_free(&v->stream);
  *v = (struct verify){0};
}
