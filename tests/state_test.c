/*
 * Loader state (lib/state.c), through real loaders and workers: a state
 * saved mid-epoch and loaded into a new loader resumes exactly where the
 * batches handed out stopped (in order byte for byte; as they arrive each
 * batch left exactly once); another world size splits what was left; an
 * iterable's streams skip to where they stood; and every blob that does
 * not fit is refused with a sentence, never a crash.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common.h"

#define LEN 103
#define BS 4

/* The shuffle every case's options ask for: the torch order, or the
   bijection for the cases run again with it (set up below). */
static fl_shuffle_algorithm algorithm;

/* What one delivered batch was: its position in the epoch, its samples. */
struct got {
  uint64_t seq;
  size_t n, idx[BS];
};

struct run {
  struct got b[2 * LEN];
  size_t n;
};

/* One batch, checked against the content its indices must have. */
static void
take(struct run *r, fl_batch *b, size_t sample_bytes)
{
  const unsigned char *data = fl_batch_data(b);
  struct got *g = &r->b[r->n++];
  size_t i;

  g->seq = fl_batch_seq(b);
  g->n = fl_batch_count(b);
  assert_true(g->n <= BS);
  for (i = 0; i < g->n; i++) {
    g->idx[i] = fl_batch_indices(b)[i];
    assert_true(flt_sample_ok(data + i * sample_bytes, sample_bytes,
                              g->idx[i]));
  }
}

/* The rest of the epoch under way into r. */
static void
drain_into(fl_loader *l, struct run *r)
{
  fl_batch *b;
  int rc;

  while ((rc = fl_loader_next(l, &b)) == 1) {
    take(r, b, 32);
    fl_batch_release(b);
  }
  if (rc != 0)
    fail_msg("fl_loader_next returned %d: %s", rc, fl_loader_error(l));
}

static void
options(flt_case *c, unsigned workers, int in_order)
{
  c->opt.batch_size = BS;
  c->opt.num_workers = workers;
  c->opt.prefetch_factor = 3;
  c->opt.persistent_workers = 1;
  c->opt.shuffle = 1;
  c->opt.shuffle_algorithm = algorithm;
  c->opt.seed = 7;
  c->opt.in_order = in_order;
  c->opt.timeout_ms = 20000;
}

/* A state of the loader, in a buffer the caller frees. */
static unsigned char *
save(fl_loader *l, size_t *len)
{
  int need = fl_loader_state_save(l, NULL, 0);
  unsigned char *buf;

  assert_true(need > 0);
  buf = malloc((size_t)need);
  assert_non_null(buf);
  assert_int_equal(fl_loader_state_save(l, buf, (size_t)need), need);
  *len = (size_t)need;
  return buf;
}

static int
same_batches(const struct got *a, const struct got *b, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++)
    if (a[i].seq != b[i].seq || a[i].n != b[i].n ||
        memcmp(a[i].idx, b[i].idx, a[i].n * sizeof(size_t)) != 0)
      return 0;
  return 1;
}

/*
 * A run stopped as a job is: c's loader made, epoch begun, k batches
 * handed out into part (from part->n on), its state saved, the loader gone.
 */
static unsigned char *
stop_after(flt_case *c, uint64_t epoch, size_t k, struct run *part,
           size_t *len)
{
  unsigned char *buf;
  fl_batch *b;

  flt_case_create(c);
  assert_int_equal(fl_loader_set_epoch(c->l, epoch), 0);
  assert_int_equal(fl_loader_begin(c->l), 0);
  for (k += part->n; part->n < k;) {
    assert_int_equal(fl_loader_next(c->l, &b), 1);
    take(part, b, 32);
    fl_batch_release(b);
  }
  buf = save(c->l, len);
  fl_loader_destroy(c->l);
  c->l = NULL;
  return buf;
}

/* The same, as they arrive with 3 workers, sample 5 holding its batch
   back so that later ones pass it: some batches left are not the last. */
static unsigned char *
stop_overtaken(flt_case *c, uint64_t epoch, size_t k, struct run *part,
               size_t *len)
{
  flt_case_init(c, LEN, 32);
  options(c, 3, 0);
  c->d.slow_index = 5;
  c->d.slow_us = 300000;
  return stop_after(c, epoch, k, part, len);
}

/* The indices of r's batches, in order, into out: how many. */
static size_t
indices_of(const struct run *r, size_t *out)
{
  size_t i, j, n = 0;

  for (i = 0; i < r->n; i++)
    for (j = 0; j < r->b[i].n; j++)
      out[n++] = r->b[i].idx[j];
  return n;
}

/*
 * In order: stopped after k batches of epoch 1 (with more prefetched),
 * resumed by a loader with another num_workers (3, or 0), the rest of
 * epoch 1 and all of epoch 2 are what an uninterrupted run delivers,
 * batch for batch; k = 0 and k = all (the epoch over, next not yet told
 * so: epoch 2 comes next, none lost) among the stops.
 */
static void
in_order_resume_delivers_exactly_the_rest_of_the_run(void **state)
{
  static const size_t stops[] = {0, 1, 7, 25, 26};
  static struct run whole[3], part, rest;
  unsigned char *buf;
  size_t s, k, len, e;
  flt_case c;

  (void)state;
  flt_case_init(&c, LEN, 32);
  options(&c, 2, 1);
  flt_case_create(&c);
  assert_int_equal(fl_loader_len(c.l), 26);
  for (e = 0; e < 3; e++) {
    whole[e].n = 0;
    assert_int_equal(fl_loader_begin(c.l), 0);
    drain_into(c.l, &whole[e]);
  }
  fl_loader_destroy(c.l);
  for (s = 0; s < sizeof(stops) / sizeof(stops[0]); s++) {
    k = stops[s];
    c.opt.num_workers = 2;
    part.n = 0;
    buf = stop_after(&c, 1, k, &part, &len);
    /* Another process would do this: a new loader, another worker count
       (none, every other time). */
    c.opt.num_workers = s % 2 ? 0 : 3;
    flt_case_create(&c);
    assert_int_equal(fl_loader_state_load(c.l, buf, len), 0);
    assert_int_equal(fl_loader_epoch(c.l), k == 26 ? 2 : 1);
    rest.n = 0;
    assert_int_equal(fl_loader_begin(c.l), 0);
    drain_into(c.l, &rest);
    if (k < 26) {
      assert_int_equal(part.n + rest.n, 26);
      assert_true(same_batches(whole[1].b, part.b, part.n));
      assert_true(same_batches(whole[1].b + k, rest.b, rest.n));
      rest.n = 0;
      assert_int_equal(fl_loader_begin(c.l), 0);
      drain_into(c.l, &rest);
    }
    assert_int_equal(fl_loader_epoch(c.l), 2);
    assert_int_equal(rest.n, 26);
    assert_true(same_batches(whole[2].b, rest.b, 26));
    free(buf);
    fl_loader_destroy(c.l);
  }
  c.l = NULL;
  flt_case_end(&c);
}

/*
 * As they arrive (one slow sample holds its batch back): the state says
 * which batches of the window were handed out, and the resumed epoch
 * delivers exactly the others, each once.  Its size stays within the
 * window, whatever the dataset's length.
 */
static void
arrival_resume_delivers_each_batch_left_exactly_once(void **state)
{
  static struct run part, rest;
  unsigned char count[26];
  unsigned char *buf;
  size_t len, i;
  flt_case c;

  (void)state;
  buf = stop_overtaken(&c, 3, 12, &part, &len);
  /* At most the window (prefetch 3 x 3 workers) of batches listed. */
  assert_true(len <= 112 + 8 * 9 + 8);
  c.opt.num_workers = 2;
  flt_case_create(&c);
  assert_int_equal(fl_loader_state_load(c.l, buf, len), 0);
  assert_int_equal(fl_loader_begin(c.l), 0);
  assert_int_equal(fl_loader_epoch(c.l), 3);
  drain_into(c.l, &rest);
  memset(count, 0, sizeof(count));
  for (i = 0; i < part.n; i++)
    count[part.b[i].seq]++;
  for (i = 0; i < rest.n; i++)
    count[rest.b[i].seq]++;
  for (i = 0; i < 26; i++)
    if (count[i] != 1)
      fail_msg("batch %zu came %u times over the stop and the resume", i,
               count[i]);
  free(buf);
  flt_case_end(&c);
}

/*
 * Rank r of w's indices of one epoch: the one the state in buf resumes, or
 * `epoch` from its start; with after, those of the epoch after it.
 */
static size_t
rank_indices(flt_case *c, unsigned w, unsigned r, fl_shard_mode mode,
             const unsigned char *buf, size_t len, uint64_t epoch,
             int after, size_t *out)
{
  static struct run got;
  size_t n;

  c->opt.world_size = w;
  c->opt.rank = r;
  c->opt.shard_mode = mode;
  flt_case_create(c);
  if (buf != NULL)
    assert_int_equal(fl_loader_state_load(c->l, buf, len), 0);
  else
    assert_int_equal(fl_loader_set_epoch(c->l, epoch), 0);
  assert_int_equal(fl_loader_begin(c->l), 0);
  assert_int_equal(fl_loader_epoch(c->l), epoch);
  got.n = 0;
  drain_into(c->l, &got);
  if (after) {
    assert_int_equal(fl_loader_begin(c->l), 0);
    assert_int_equal(fl_loader_epoch(c->l), epoch + 1);
    got.n = 0;
    drain_into(c->l, &got);
  }
  n = indices_of(&got, out);
  fl_loader_destroy(c->l);
  c->l = NULL;
  return n;
}

/*
 * Elastic: a world of 2 stopped after 5 batches per rank of epoch 1
 * (rank 0's state) resumes on 1, 3 and 8 ranks.  Across the stopped and
 * the resumed runs every index comes, and the only repeats are the
 * padding; under FL_SHARD_UNEVEN, none.  The epoch after is the new
 * world's own.
 */
static void
another_world_size_splits_what_was_left_among_its_ranks(void **state)
{
  static const unsigned worlds[] = {1, 3, 8};
  static const fl_shard_mode modes[] = {FL_SHARD_PAD, FL_SHARD_UNEVEN};
  static size_t idx[4 * LEN];
  unsigned char *buf = NULL, *rbuf[2], seen[LEN];
  size_t len = 0, n, i, extra, m, w, r;
  static struct run part;
  flt_case c;

  (void)state;
  for (m = 0; m < 2; m++) {
    for (w = 0; w < 3; w++) {
      flt_case_init(&c, LEN, 32);
      options(&c, 2, 1);
      memset(seen, 0, sizeof(seen));
      n = extra = 0;
      /* The stopped world: both ranks, 5 batches each. */
      for (r = 0; r < 2; r++) {
        c.opt.world_size = 2;
        c.opt.rank = (unsigned)r;
        c.opt.shard_mode = modes[m];
        part.n = 0;
        rbuf[r] = stop_after(&c, 1, 5, &part, &len);
        n += indices_of(&part, idx + n);
      }
      buf = rbuf[0];
      free(rbuf[1]);
      /* Every rank of the new world loads rank 0's state. */
      for (r = 0; r < worlds[w]; r++)
        n += rank_indices(&c, worlds[w], (unsigned)r, modes[m], buf, len, 1,
                          0, idx + n);
      for (i = 0; i < n; i++) {
        if (seen[idx[i]])
          extra++;
        seen[idx[i]] = 1;
      }
      for (i = 0; i < LEN; i++)
        if (!seen[i])
          fail_msg("world 2 -> %u: index %zu never came", worlds[w], i);
      /* Padding: below a world's size, once per world. */
      if (modes[m] == FL_SHARD_UNEVEN)
        assert_int_equal(extra, 0);
      else
        assert_true(extra < 2 + worlds[w]);
      /* The epoch after is the new world's own, from its start. */
      n = rank_indices(&c, worlds[w], 0, modes[m], buf, len, 1, 1, idx);
      assert_int_equal(rank_indices(&c, worlds[w], 0, modes[m], NULL, 0, 2,
                                    0, idx + n),
                       n);
      assert_memory_equal(idx, idx + n, n * sizeof(size_t));
      free(buf);
      flt_case_end(&c);
    }
  }
}

/* The bytes of a state with one field changed: the loader refuses it,
   naming the field. */
static void
expect_refused(flt_case *c, const unsigned char *buf, size_t len,
               const char *says)
{
  int rc;

  flt_case_create(c);
  rc = fl_loader_state_load(c->l, buf, len);
  assert_int_equal(rc, FL_EINVAL);
  if (strstr(fl_loader_error(c->l), says) == NULL)
    fail_msg("\"%s\" does not say \"%s\"", fl_loader_error(c->l), says);
  /* Refused, it changed nothing: the loader starts at epoch 0. */
  assert_int_equal(fl_loader_epoch(c->l), 0);
  assert_int_equal(fl_loader_begin(c->l), 0);
  fl_loader_destroy(c->l);
  c->l = NULL;
}

/*
 * Blobs that do not fit: torn, cut, grown, flipped, another dataset
 * length, batch size, seed, shuffle, shard mode or indices, as they arrive
 * on another world; and a load while an epoch is under way (FL_ESTATE),
 * a save into too small a buffer (FL_ENOSPC).
 */
static void
states_that_do_not_fit_are_refused_with_the_field_and_both_values(void **s)
{
  static const size_t list[] = {3, 1, 4, 1, 5};
  unsigned char *buf, *bad;
  size_t len, i;
  flt_case c;
  fl_batch *b;

  (void)s;
  flt_case_init(&c, LEN, 32);
  options(&c, 2, 1);
  flt_case_create(&c);
  assert_int_equal(fl_loader_begin(c.l), 0);
  assert_int_equal(fl_loader_next(c.l, &b), 1);
  fl_batch_release(b);
  buf = save(c.l, &len);
  assert_int_equal(fl_loader_state_save(c.l, buf, len - 1), FL_ENOSPC);
  assert_int_equal(fl_loader_state_load(c.l, buf, len), FL_ESTATE);
  assert_non_null(strstr(fl_loader_error(c.l), "under way"));
  fl_loader_destroy(c.l);
  bad = malloc(len + 8);
  assert_non_null(bad);
  for (i = 0; i < len; i += 7) {
    memcpy(bad, buf, len);
    bad[i] ^= 0x10;
    expect_refused(&c, bad, len, "not a loader state");
  }
  expect_refused(&c, buf, len - 8, "not a loader state");
  memcpy(bad, buf, len);
  memset(bad + len, 0, 8);
  expect_refused(&c, bad, len + 8, "not a loader state");
  expect_refused(&c, buf, 3, "shorter than its header");
  c.opt.batch_size = 5;
  expect_refused(&c, buf, len, "batch_size 4, and this loader has 5");
  c.opt.batch_size = BS;
  c.opt.seed = 8;
  expect_refused(&c, buf, len, "seed 7, and this loader has 8");
  c.opt.seed = 7;
  c.opt.shuffle = 0;
  expect_refused(&c, buf, len, "shuffle 1, and this loader has 0");
  c.opt.shuffle = 1;
  c.opt.shard_mode = FL_SHARD_TRIM;
  expect_refused(&c, buf, len, "shard_mode 0, and this loader has 1");
  c.opt.shard_mode = FL_SHARD_PAD;
  c.opt.indices = list;
  c.opt.indices_len = 5;
  expect_refused(&c, buf, len, "length");
  c.opt.indices = NULL;
  c.opt.indices_len = 0;
  c.ds.len = LEN + 1;
  expect_refused(&c, buf, len, "len 103, and this loader has 104");
  c.ds.len = LEN;
  free(buf);
  /* As they arrive, a state is its own rank's, on its own world. */
  c.opt.in_order = 0;
  flt_case_create(&c);
  buf = save(c.l, &len);
  fl_loader_destroy(c.l);
  c.opt.world_size = 2;
  expect_refused(&c, buf, len, "world_size");
  c.opt.world_size = 1;
  c.opt.in_order = 1;
  expect_refused(&c, buf, len, "in_order 0");
  free(bad);
  free(buf);
  c.l = NULL;
  flt_case_end(&c);
}

/*
 * A loaded state applies to the begin of its epoch: fl_loader_set_epoch
 * to another drops it, and a state saved right after a load (before any
 * begin) is the same state again.
 */
static void
a_loaded_state_is_the_next_begins_unless_another_epoch_is_set(void **state)
{
  static struct run part, rest;
  unsigned char *buf, *again;
  size_t len, len2;
  flt_case c;

  (void)state;
  flt_case_init(&c, LEN, 32);
  options(&c, 2, 1);
  buf = stop_after(&c, 0, 1, &part, &len);
  flt_case_create(&c);
  assert_int_equal(fl_loader_state_load(c.l, buf, len), 0);
  again = save(c.l, &len2);
  assert_int_equal(len2, len);
  assert_memory_equal(again, buf, len);
  assert_int_equal(fl_loader_set_epoch(c.l, 4), 0);
  assert_int_equal(fl_loader_begin(c.l), 0);
  rest.n = 0;
  drain_into(c.l, &rest);
  assert_int_equal(rest.n, 26);
  assert_int_equal(rest.b[0].seq, 0);
  free(again);
  free(buf);
  flt_case_end(&c);
}

/* A blob's checksum (FNV-1a over all but its last 8 bytes, which hold
   it, little-endian), made right again after a field was changed. */
static void
restamp(unsigned char *buf, size_t len)
{
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i;

  for (i = 0; i + 8 < len; i++)
    h = (h ^ buf[i]) * 0x100000001b3ull;
  for (i = 0; i < 8; i++)
    buf[len - 8 + i] = (unsigned char)(h >> (8 * i));
}

/*
 * Found by the state fuzzer.  A state flagged in order but listing batches
 * not handed out (only a state saved as they arrive lists any) is refused:
 * an in-order loader would skip the batches between them, or with workers
 * wait for them for ever.  And a state loaded but not begun is saved with
 * its own flags: an in_order 0 loader that took an in-order state of a
 * world of 2 writes one that it loads again.
 */
static void
flags_and_lists_of_a_state_hold_together(void **state)
{
  static struct run part;
  unsigned char *buf, *again;
  size_t len, len2;
  flt_case c;

  (void)state;
  buf = stop_overtaken(&c, 0, 8, &part, &len);
  c.d.slow_index = -1;
  assert_true(len > 120); /* batch 1 is not handed out yet: listed */
  buf[6] |= 1;            /* flagged in order */
  restamp(buf, len);
  c.opt.in_order = 1;
  expect_refused(&c, buf, len, "do not hold together");
  free(buf);
  /* An in-order state of rank 0 of 2, into an in_order 0 loader. */
  c.opt.world_size = 2;
  part.n = 0;
  buf = stop_after(&c, 0, 1, &part, &len);
  c.opt.world_size = 1;
  c.opt.in_order = 0;
  flt_case_create(&c);
  assert_int_equal(fl_loader_state_load(c.l, buf, len), 0);
  again = save(c.l, &len2);
  assert_int_equal(len2, len);
  assert_memory_equal(again, buf, len);
  assert_int_equal(fl_loader_state_load(c.l, again, len2), 0);
  free(again);
  free(buf);
  flt_case_end(&c);
}

/*
 * A state's size is the window's business, not the dataset's or the
 * epoch's: the same for 10 samples and for a million, at epoch 0 and 5,
 * and as they arrive at most the window's batches long.
 */
static void
a_states_size_depends_on_the_window_not_the_dataset(void **state)
{
  static const size_t lens[] = {10, 1000000};
  int sizes[2][2], e, i, o;
  flt_case c;
  fl_batch *b;

  (void)state;
  for (o = 0; o < 2; o++) {
    for (i = 0; i < 2; i++) {
      for (e = 0; e < 2; e++) {
        flt_case_init(&c, lens[i], 8);
        options(&c, 2, !o);
        c.opt.shuffle = 0;
        flt_case_create(&c);
        assert_int_equal(fl_loader_set_epoch(c.l, (uint64_t)e * 5), 0);
        assert_int_equal(fl_loader_begin(c.l), 0);
        assert_int_equal(fl_loader_next(c.l, &b), 1);
        sizes[i][e] = fl_loader_state_save(c.l, NULL, 0);
        fl_batch_release(b);
        flt_case_end(&c);
      }
    }
    /* prefetch 3 x 2 workers: a header, at most 6 batches, a checksum. */
    for (i = 0; i < 2; i++)
      for (e = 0; e < 2; e++)
        assert_true(sizes[i][e] >= 120 && sizes[i][e] <= 120 + 6 * 8);
    if (!o)
      assert_true(sizes[0][0] == 120 && sizes[1][0] == 120 &&
                  sizes[0][1] == 120 && sizes[1][1] == 120);
  }
}

/* --- the bijection ---------------------------------------------------- */

static int
bijection_on(void **state)
{
  (void)state;
  algorithm = FL_SHUFFLE_BIJECTION;
  return 0;
}

static int
bijection_off(void **state)
{
  (void)state;
  algorithm = FL_SHUFFLE_TORCH;
  return 0;
}

/* The two cases above, shuffled by the bijection (set up so). */
static void
in_order_resume_with_the_bijection_delivers_the_rest_of_the_run(void **s)
{
  in_order_resume_delivers_exactly_the_rest_of_the_run(s);
}

static void
another_world_size_splits_what_the_bijection_left(void **state)
{
  another_world_size_splits_what_was_left_among_its_ranks(state);
}

/*
 * A state says which shuffle made its order: the bijection's is version
 * 2, torch's still version 1 (what 0.6 reads), and each is refused by a
 * loader of the other, naming the option.
 */
static void
a_state_of_one_shuffle_is_refused_by_a_loader_of_the_other(void **state)
{
  static const fl_shuffle_algorithm algs[] = {FL_SHUFFLE_TORCH,
                                              FL_SHUFFLE_BIJECTION};
  unsigned char *buf;
  size_t len;
  flt_case c;
  fl_batch *b;
  int a;

  (void)state;
  for (a = 0; a < 2; a++) {
    flt_case_init(&c, LEN, 32);
    options(&c, 2, 1);
    c.opt.shuffle_algorithm = algs[a];
    flt_case_create(&c);
    assert_int_equal(fl_loader_begin(c.l), 0);
    assert_int_equal(fl_loader_next(c.l, &b), 1);
    fl_batch_release(b);
    buf = save(c.l, &len);
    fl_loader_destroy(c.l);
    assert_int_equal(buf[4] | buf[5] << 8, a + 1);
    c.opt.shuffle_algorithm = algs[!a];
    expect_refused(&c, buf, len,
                   a ? "shuffle_algorithm 1, and this loader has 0"
                     : "shuffle_algorithm 0, and this loader has 1");
    free(buf);
    c.l = NULL;
    flt_case_end(&c);
  }
}

/*
 * 10^10 samples, 2 workers, shuffled by the bijection: the state is the
 * header and its checksum, as for 103, and a new loader that loads it
 * hands out the very batch the first would have handed out next.
 */
static void
a_bijection_state_of_ten_billion_samples_resumes_batch_for_batch(void **s)
{
  static struct run first, second;
  unsigned char *buf;
  size_t len;
  flt_case c;
  fl_batch *b;
  int k;

  (void)s;
  flt_case_init(&c, 10000000000ull, 32);
  options(&c, 2, 1);
  c.opt.shuffle_algorithm = FL_SHUFFLE_BIJECTION;
  flt_case_create(&c);
  assert_int_equal(fl_loader_set_epoch(c.l, 4), 0);
  assert_int_equal(fl_loader_begin(c.l), 0);
  first.n = second.n = 0;
  for (k = 0; k < 3; k++) {
    assert_int_equal(fl_loader_next(c.l, &b), 1);
    take(&first, b, 32);
    fl_batch_release(b);
  }
  buf = save(c.l, &len);
  assert_int_equal(len, 120);
  for (k = 0; k < 2; k++) {
    assert_int_equal(fl_loader_next(c.l, &b), 1);
    take(&first, b, 32);
    fl_batch_release(b);
  }
  fl_loader_destroy(c.l);
  c.opt.num_workers = 1;
  flt_case_create(&c);
  assert_int_equal(fl_loader_state_load(c.l, buf, len), 0);
  assert_int_equal(fl_loader_begin(c.l), 0);
  for (k = 0; k < 2; k++) {
    assert_int_equal(fl_loader_next(c.l, &b), 1);
    take(&second, b, 32);
    fl_batch_release(b);
  }
  assert_int_equal(second.b[0].seq, 3);
  assert_true(same_batches(first.b + 3, second.b, 2));
  free(buf);
  flt_case_end(&c);
}

/* --- iterable streams ------------------------------------------------ */

/* Worker w's stream: 10 + 3w samples, each its position and worker; the
   skips it was asked for are counted in shared memory. */
struct stream {
  unsigned w, pos, len;
  int use_skip;
  flt_counters *counters;
};

static int
s_open(void *ctx, const fl_worker_info *wi)
{
  struct stream *s = ctx;

  s->w = wi != NULL ? wi->id : 0;
  s->len = 10 + 3 * s->w;
  s->pos = 0;
  return 0;
}

static int
s_next(void *ctx, void *dst, size_t *nbytes)
{
  struct stream *s = ctx;
  uint64_t v[2];

  if (s->pos == s->len)
    return 0;
  v[0] = s->w;
  v[1] = s->pos++;
  memcpy(dst, v, sizeof(v));
  *nbytes = sizeof(v);
  return 1;
}

static int
s_skip(void *ctx, uint64_t n)
{
  struct stream *s = ctx;

  __atomic_add_fetch(&s->counters->batch_calls, 1, __ATOMIC_SEQ_CST);
  s->pos = n < s->len ? (unsigned)n : s->len;
  return 0;
}

/* (worker, position) of every sample of the rest of the epoch. */
static size_t
stream_rest(fl_loader *l, uint64_t *out)
{
  fl_batch *b;
  size_t n = 0, i;
  int rc;

  while ((rc = fl_loader_next(l, &b)) == 1) {
    for (i = 0; i < fl_batch_count(b); i++, n++)
      memcpy(out + 2 * n, (const char *)fl_batch_data(b) + 16 * i, 16);
    fl_batch_release(b);
  }
  assert_int_equal(rc, 0);
  return n;
}

/*
 * An iterable's state holds each worker's stream position: the resumed
 * epoch reopens the streams and skips (with the dataset's skip, or next
 * when it has none), and delivers, in order, exactly what the
 * uninterrupted run delivered after the stop.  Another num_workers is
 * refused, saying why.
 */
static void
iterable_resume_skips_each_stream_to_where_it_stood(void **state)
{
  static uint64_t whole[2 * 64], part[2 * 64], rest[2 * 64];
  flt_counters *counters = mmap(NULL, sizeof(*counters),
                                PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  struct stream st = {0};
  unsigned char *buf;
  fl_iterable it = {0};
  fl_options opt;
  flt_baseline base;
  size_t n, k, len, u;
  fl_loader *l;
  fl_batch *b;

  (void)state;
  assert_true(counters != MAP_FAILED);
  flt_baseline_take(&base);
  st.counters = counters;
  it.ctx = &st;
  it.sample_bytes = 16;
  it.open = s_open;
  it.next = s_next;
  fl_options_init(&opt);
  opt.batch_size = 2;
  opt.num_workers = 3;
  opt.persistent_workers = 1;
  opt.timeout_ms = 20000;
  for (u = 0; u < 2; u++) {
    it.skip = u ? s_skip : NULL;
    counters->batch_calls = 0;
    assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), 0);
    assert_int_equal(fl_loader_begin(l), 0);
    n = stream_rest(l, whole);
    assert_int_equal(n, 10 + 13 + 16);
    fl_loader_destroy(l);
    assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), 0);
    assert_int_equal(fl_loader_begin(l), 0);
    for (k = 0; k < 8; k++) {
      assert_int_equal(fl_loader_next(l, &b), 1);
      memcpy(part + 4 * k, fl_batch_data(b), 32);
      fl_batch_release(b);
    }
    buf = save(l, &len);
    fl_loader_destroy(l);
    assert_memory_equal(part, whole, 16 * 16);
    assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), 0);
    assert_int_equal(fl_loader_state_load(l, buf, len), 0);
    assert_int_equal(fl_loader_begin(l), 0);
    assert_int_equal(stream_rest(l, rest), n - 16);
    assert_memory_equal(rest, whole + 2 * 16, 16 * (n - 16));
    fl_loader_destroy(l);
    /* Each worker skipped once, with skip when the dataset has one. */
    assert_int_equal(counters->batch_calls, u ? 3 : 0);
    opt.num_workers = 2;
    assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), 0);
    assert_int_equal(fl_loader_state_load(l, buf, len), FL_EINVAL);
    assert_non_null(strstr(fl_loader_error(l), "num_workers 3"));
    fl_loader_destroy(l);
    opt.num_workers = 3;
    free(buf);
  }
  munmap(counters, sizeof(*counters));
  flt_assert_clean(&base);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(in_order_resume_delivers_exactly_the_rest_of_the_run),
      cmocka_unit_test(arrival_resume_delivers_each_batch_left_exactly_once),
      cmocka_unit_test(another_world_size_splits_what_was_left_among_its_ranks),
      cmocka_unit_test(
          states_that_do_not_fit_are_refused_with_the_field_and_both_values),
      cmocka_unit_test(
          a_loaded_state_is_the_next_begins_unless_another_epoch_is_set),
      cmocka_unit_test(a_states_size_depends_on_the_window_not_the_dataset),
      cmocka_unit_test_setup_teardown(
          in_order_resume_with_the_bijection_delivers_the_rest_of_the_run,
          bijection_on, bijection_off),
      cmocka_unit_test_setup_teardown(
          another_world_size_splits_what_the_bijection_left, bijection_on,
          bijection_off),
      cmocka_unit_test(
          a_state_of_one_shuffle_is_refused_by_a_loader_of_the_other),
      cmocka_unit_test(
          a_bijection_state_of_ten_billion_samples_resumes_batch_for_batch),
      cmocka_unit_test(flags_and_lists_of_a_state_hold_together),
      cmocka_unit_test(iterable_resume_skips_each_stream_to_where_it_stood),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
