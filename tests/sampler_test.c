/*
 * The sampler (lib/sampler.c): the order each epoch visits, how shuffling
 * depends on (seed, epoch) and nothing else, how the order is cut into
 * batches, and a crude check that the shuffle is not biased.  Then a
 * sampler of the caller's through real loaders: PyTorch's
 * WeightedRandomSampler (with replacement) delivers its frequencies, bad
 * orders are refused naming the position, and fl_loader_set_epoch repeats
 * an epoch exactly.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "common.h"

static fl__sampler
make(size_t n, int shuffle, uint64_t seed)
{
  fl__sampler s = {0};

  s.base = s.m = s.n = n;
  s.world = 1;
  s.mode = FL_SHARD_PAD;
  s.shuffle = shuffle;
  s.seed = seed;
  s.batch_size = 1;
  return s;
}

/*
 * This rank's share of epoch's order from start on, into out (room for
 * base indices), as the workers compute it: batch by batch, the parent
 * drawing each batch before it is read.  The order is a new mapping's.
 */
static int
share(fl__sampler *s, uint64_t epoch, size_t start, size_t *out)
{
  fl__order *o = calloc(1, sizeof(*o) + (s->base ? s->base : 1) *
                               sizeof(size_t));
  size_t seq, off, count;
  int rc;

  assert_non_null(o);
  rc = fl__sampler_order(s, o, epoch, start, NULL, 0);
  for (seq = 0; rc == 0 && seq < fl__sampler_batches(s); seq++) {
    fl__sampler_batch(s, o, seq, &off, &count);
    fl__sampler_indices(s, o, off, count, out + off);
  }
  free(o);
  return rc;
}

static size_t *
order_of(fl__sampler *s, uint64_t epoch)
{
  size_t *o = malloc((s->base ? s->base : 1) * sizeof(*o));

  assert_non_null(o);
  assert_int_equal(share(s, epoch, 0, o), 0);
  return o;
}

/* Every value below n exactly once. */
static void
assert_permutation(const size_t *o, size_t n)
{
  unsigned char *seen = calloc(n ? n : 1, 1);
  size_t i;

  assert_non_null(seen);
  for (i = 0; i < n; i++) {
    if (o[i] >= n)
      fail_msg("order[%zu] = %zu is out of range for n = %zu", i, o[i], n);
    if (seen[o[i]])
      fail_msg("index %zu appears twice (again at %zu)", o[i], i);
    seen[o[i]] = 1;
  }
  free(seen);
}

static size_t
count_fixed_points(const size_t *o, size_t n)
{
  size_t i, k = 0;

  for (i = 0; i < n; i++)
    k += o[i] == i;
  return k;
}

static int
cmp_size(const void *a, const void *b)
{
  size_t x = *(const size_t *)a, y = *(const size_t *)b;

  return x < y ? -1 : x > y;
}

static int
cmp_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

  return x < y ? -1 : x > y;
}

static void
sequential_order_is_identity(void **state)
{
  fl__sampler s = make(1000, 0, 42);
  size_t *o, i;

  (void)state;
  o = order_of(&s, 3);
  for (i = 0; i < s.n; i++)
    assert_int_equal(o[i], i);
  free(o);
}

static void
custom_indices_are_used_as_given(void **state)
{
  /* Repeats and gaps are allowed: a weighted or subset sampler. */
  static const size_t custom[] = {5, 3, 3, 9, 0, 7, 7, 7};
  fl__sampler s = make(8, 0, 1);
  size_t *o, i;

  (void)state;
  s.custom = custom;
  o = order_of(&s, 0);
  for (i = 0; i < s.n; i++)
    assert_int_equal(o[i], custom[i]);
  free(o);
}

static void
shuffle_gives_permutation_for_several_sizes(void **state)
{
  static const size_t sizes[] = {1, 2, 1000, 100003};
  fl__sampler s;
  size_t *o, k;

  (void)state;
  for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    s = make(sizes[k], 1, 12345);
    o = order_of(&s, 0);
    assert_permutation(o, s.n);
    /* A shuffle that moved nothing is a permutation too: a random one of
       this size leaves about one index in place. */
    if (s.n >= 1000)
      assert_true(count_fixed_points(o, s.n) < 10);
    free(o);
  }
}

static void
shuffle_of_two_gives_both_orders_over_epochs(void **state)
{
  fl__sampler s = make(2, 1, 7);
  size_t o[2];
  unsigned e, swapped = 0;

  (void)state;
  for (e = 0; e < 64; e++) {
    share(&s, e, 0, o);
    assert_permutation(o, 2);
    swapped += o[0] == 1;
  }
  /* Binomial(64, 1/2): 0 or 64 would be a broken shuffle. */
  assert_in_range(swapped, 12, 52);
}

static void
shuffle_same_seed_same_epoch_gives_same_order(void **state)
{
  fl__sampler s = make(1000, 1, 99);
  fl__sampler t = make(1000, 1, 99);
  size_t *a, *b;

  (void)state;
  a = order_of(&s, 4);
  b = order_of(&t, 4);
  assert_memory_equal(a, b, s.n * sizeof(*a));
  free(a);
  free(b);
}

static void
shuffle_different_epochs_give_different_orders(void **state)
{
  fl__sampler s = make(1000, 1, 99);
  size_t *a, *b;

  (void)state;
  a = order_of(&s, 0);
  b = order_of(&s, 1);
  assert_memory_not_equal(a, b, s.n * sizeof(*a));
  free(a);
  free(b);
}

static void
shuffle_different_seeds_give_different_orders(void **state)
{
  fl__sampler s = make(1000, 1, 99);
  fl__sampler t = make(1000, 1, 100);
  size_t *a, *b;

  (void)state;
  a = order_of(&s, 0);
  b = order_of(&t, 0);
  assert_memory_not_equal(a, b, s.n * sizeof(*a));
  free(a);
  free(b);
}

/* Epoch 5 is the same whether or not epochs 0..4 were computed first. */
static void
shuffle_order_is_pure_function_of_seed_and_epoch(void **state)
{
  fl__sampler s = make(1000, 1, 2024);
  size_t *direct, *after = NULL;
  uint64_t e;

  (void)state;
  direct = order_of(&s, 5);
  for (e = 0; e <= 5; e++) {
    free(after);
    after = order_of(&s, e);
  }
  assert_memory_equal(direct, after, s.n * sizeof(*direct));
  free(direct);
  free(after);
  /* The seed derivation too: equal inputs, equal output. */
  assert_int_equal(fl__epoch_seed(2024, 5, 1), fl__epoch_seed(2024, 5, 1));
  assert_true(fl__epoch_seed(2024, 5, 1) != fl__epoch_seed(2024, 5, 2));
  assert_true(fl__epoch_seed(2024, 5, 1) != fl__epoch_seed(2024, 6, 1));
  assert_true(fl__epoch_seed(2024, 5, 1) != fl__epoch_seed(2025, 5, 1));
}

static void
shuffled_custom_list_is_permutation_of_that_list(void **state)
{
  enum { N = 500 };
  size_t custom[N], sorted_in[N], *o, i;
  fl__sampler s = make(N, 1, 31337);

  (void)state;
  /* Repeated values, so a multiset comparison is needed. */
  for (i = 0; i < N; i++)
    custom[i] = (i * 7919) % 211 + 1000;
  s.custom = custom;
  o = order_of(&s, 2);
  assert_memory_not_equal(o, custom, sizeof(custom));
  memcpy(sorted_in, custom, sizeof(custom));
  qsort(sorted_in, N, sizeof(size_t), cmp_size);
  qsort(o, N, sizeof(size_t), cmp_size);
  assert_memory_equal(o, sorted_in, sizeof(custom));
  /* The caller's list is read, not shuffled in place. */
  for (i = 0; i < N; i++)
    assert_int_equal(custom[i], (i * 7919) % 211 + 1000);
  free(o);
}

static size_t
batches(size_t n, size_t bs, int drop_last)
{
  fl__sampler s = make(n, 0, 0);

  s.batch_size = bs;
  s.drop_last = drop_last;
  return fl__sampler_batches(&s);
}

static void
batch_count_rounds_up_or_drops_last(void **state)
{
  (void)state;
  assert_int_equal(batches(100, 7, 0), 15);
  assert_int_equal(batches(100, 7, 1), 14);
  assert_int_equal(batches(0, 7, 0), 0);
  assert_int_equal(batches(0, 7, 1), 0);
  assert_int_equal(batches(7, 7, 0), 1);
  assert_int_equal(batches(7, 7, 1), 1);
  assert_int_equal(batches(6, 7, 0), 1);
  assert_int_equal(batches(6, 7, 1), 0);
  assert_int_equal(batches(1, 1, 1), 1);
}

static void
span_gives_offsets_and_short_last_count(void **state)
{
  fl__sampler s = make(100, 0, 0);
  size_t seq, off, count, covered = 0;

  (void)state;
  s.batch_size = 7;
  for (seq = 0; seq < fl__sampler_batches(&s); seq++) {
    fl__sampler_span(&s, seq, &off, &count);
    assert_int_equal(off, seq * 7);
    assert_int_equal(count, seq < 14 ? 7 : 2);
    assert_int_equal(off, covered); /* no gap, no overlap */
    covered += count;
  }
  assert_int_equal(covered, 100);
  fl__sampler_span(&s, 14, &off, &count);
  assert_int_equal(off, 98);
  assert_int_equal(count, 2);
}

static void
drop_last_drops_short_final_batch(void **state)
{
  fl__sampler s = make(100, 0, 0);
  size_t off, count, nb;

  (void)state;
  s.batch_size = 7;
  s.drop_last = 1;
  nb = fl__sampler_batches(&s);
  assert_int_equal(nb, 14);
  /* The last batch handed out is a full one. */
  fl__sampler_span(&s, nb - 1, &off, &count);
  assert_int_equal(off, 91);
  assert_int_equal(count, 7);
}

/*
 * Over 2000 epochs of n = 4 each index should lead 500 times; 400..600 is
 * more than four standard deviations wide, so only a bias fails it (an
 * off-by-one Fisher-Yates or a modulo shuffle skews these counts).
 */
static void
shuffle_is_roughly_uniform_over_epochs(void **state)
{
  fl__sampler s = make(4, 1, 5);
  unsigned first[4] = {0}, last[4] = {0};
  size_t o[4], i;
  uint64_t e;

  (void)state;
  for (e = 0; e < 2000; e++) {
    share(&s, e, 0, o);
    assert_permutation(o, 4);
    first[o[0]]++;
    last[o[3]]++;
  }
  for (i = 0; i < 4; i++) {
    assert_in_range(first[i], 400, 600);
    assert_in_range(last[i], 400, 600);
  }
}

/*
 * The finer check: the whole index x position matrix over 20000 epochs.
 * Each cell expects 5000 with a standard deviation near 61; the naive
 * "swap i with any j" shuffle puts index 3 first only 4219 times and
 * index 1 first 5859 times, far outside the +-300 allowed here.
 */
static void
shuffle_position_matrix_is_uniform_over_20000_epochs(void **state)
{
  fl__sampler s = make(4, 1, 77);
  unsigned m[4][4] = {{0}};
  size_t o[4], i, p;
  uint64_t e;

  (void)state;
  for (e = 0; e < 20000; e++) {
    share(&s, e, 0, o);
    for (p = 0; p < 4; p++)
      m[o[p]][p]++;
  }
  for (i = 0; i < 4; i++)
    for (p = 0; p < 4; p++)
      if (m[i][p] < 4700 || m[i][p] > 5300)
        fail_msg("index %zu at position %zu %u times in 20000", i, p,
                 m[i][p]);
}

/* splitmix64's known first output, and no collision over a range. */
static void
mix64_is_splitmix_finaliser_without_collisions(void **state)
{
  enum { N = 100000 };
  uint64_t *v = malloc(N * sizeof(*v));
  size_t i;

  (void)state;
  assert_non_null(v);
  assert_int_equal(fl__mix64(0), 0xe220a8397b1dcdafull);
  for (i = 0; i < N; i++)
    v[i] = fl__mix64(i);
  qsort(v, N, sizeof(*v), cmp_u64);
  for (i = 1; i < N; i++)
    assert_true(v[i] != v[i - 1]);
  free(v);
}

/* --- the lazy torch order and the bijection --------------------------- */

static fl__sampler
make_bijection(size_t n, uint64_t seed)
{
  fl__sampler s = make(n, 1, seed);

  s.algorithm = FL_SHUFFLE_BIJECTION;
  return s;
}

/* torch's order of epoch e permutes 0..n-1 whole, at begin. */
static size_t *
torch_whole(size_t n, uint64_t seed)
{
  size_t *a = malloc((n ? n : 1) * sizeof(*a)), i;

  assert_non_null(a);
  for (i = 0; i < n; i++)
    a[i] = i;
  fl__randperm(seed, a, n);
  return a;
}

/*
 * The torch order is drawn a batch at a time: the first batch of rank 1 of
 * 2 (batch 10: positions 1, 3, ..., 19) draws 20 swaps of 100000, and
 * the whole share, resumed from position 37, is still torch's: the list's
 * tail from 37, every other one from rank 1's.
 */
static void
torch_order_is_drawn_only_as_far_as_the_batches_sent(void **state)
{
  enum { N = 100000, BS = 10, START = 37 };
  fl__sampler s = make(N, 1, 8);
  fl__order *o = calloc(1, sizeof(*o) + N * sizeof(size_t));
  size_t *whole = torch_whole(N, 8 + 3), *out = malloc(N * sizeof(*out));
  size_t off, count, seq, j, k;

  (void)state;
  assert_non_null(o);
  assert_non_null(out);
  s.batch_size = BS;
  s.world = 2;
  s.rank = 1;
  assert_int_equal(fl__sampler_order(&s, o, 3, 0, NULL, 0), 0);
  assert_int_equal(o->kind, FL__ORDER_LAZY);
  assert_int_equal(s.drawn, 0);
  fl__sampler_batch(&s, o, 0, &off, &count);
  assert_int_equal(s.drawn, 20);
  fl__sampler_indices(&s, o, off, count, out);
  for (j = 0; j < count; j++)
    assert_int_equal(out[j], whole[1 + 2 * j]);
  /* Again from position START: the same swaps, a new tag. */
  assert_int_equal(fl__sampler_order(&s, o, 3, START, NULL, 0), 0);
  assert_int_equal(s.n, (N - START + 1) / 2);
  for (seq = 0; seq < fl__sampler_batches(&s); seq++) {
    fl__sampler_batch(&s, o, seq, &off, &count);
    fl__sampler_indices(&s, o, off, count, out + off);
  }
  /* Rank 1's last is padding: the list's first. */
  for (j = 0; j < s.n; j++) {
    k = 1 + 2 * j < N - START ? 1 + 2 * j : 0;
    if (out[j] != whole[START + k])
      fail_msg("share position %zu: %zu, torch's %zu", j, out[j],
               whole[START + k]);
  }
  free(out);
  free(whole);
  free(o);
}

/*
 * Each epoch's lazy entries carry its tag, so the last epoch's are not
 * cleared; when the tag wraps, they are, or an entry written 2^32 epochs
 * before would read as drawn.  Epoch 0 draws every entry with tag 1;
 * epoch 1 begins with the tag at its last value.
 */
static void
torch_order_is_torchs_when_the_lazy_tag_wraps(void **state)
{
  enum { N = 1000 };
  fl__sampler s = make(N, 1, 21);
  fl__order *o = calloc(1, sizeof(*o) + N * sizeof(size_t));
  size_t *whole, out[N], off, count, seq;
  uint64_t e;

  (void)state;
  assert_non_null(o);
  for (e = 0; e < 2; e++) {
    if (e == 1)
      o->tag = UINT32_MAX;
    assert_int_equal(fl__sampler_order(&s, o, e, 0, NULL, 0), 0);
    assert_int_equal(o->tag, 1);
    for (seq = 0; seq < fl__sampler_batches(&s); seq++) {
      fl__sampler_batch(&s, o, seq, &off, &count);
      fl__sampler_indices(&s, o, off, count, out + off);
    }
    whole = torch_whole(N, 21 + e);
    assert_memory_equal(out, whole, sizeof(out));
    free(whole);
  }
  free(o);
}

/*
 * The values a swap moves ahead of the frontier wait in the parent's own
 * table while it has room, then go to the shared one: with no such table,
 * one of 64 slots (full after 32 moves, so most go to the shared table)
 * and one of 2^17 (never full here), rank 0 of 3's share over three
 * epochs (its last is the order's last, fixed by the last swap) is
 * torch's, batch of 100 by batch of 100.
 */
static void
torch_order_is_torchs_with_moves_kept_aside_or_spilled(void **state)
{
  enum { N = 100003, W = 3, R = 0 };
  static const size_t slots[] = {0, 64, (size_t)1 << 17};
  size_t *whole, *out = malloc(N * sizeof(*out)), off, count, seq, j, k;
  fl__order *o = calloc(1, sizeof(*o) + N * sizeof(size_t));
  fl__sampler s;
  uint64_t e;

  (void)state;
  assert_non_null(o);
  assert_non_null(out);
  for (k = 0; k < 3; k++) {
    s = make(N, 1, 60 + k);
    s.batch_size = 100;
    s.world = W;
    s.rank = R;
    if (slots[k] > 0)
      assert_int_equal(fl__moved_init(&s.moved, slots[k]), 0);
    for (e = 0; e < 3; e++) {
      assert_int_equal(fl__sampler_order(&s, o, e, 0, NULL, 0), 0);
      for (seq = 0; seq < fl__sampler_batches(&s); seq++) {
        fl__sampler_batch(&s, o, seq, &off, &count);
        fl__sampler_indices(&s, o, off, count, out + off);
      }
      assert_int_equal(s.spilled, k < 2);
      whole = torch_whole(N, 60 + k + e);
      for (j = 0; j < s.n; j++)
        if (out[j] != whole[(R + j * W) % N])
          fail_msg("slots %zu epoch %llu: share position %zu is %zu, "
                   "torch's %zu", slots[k], (unsigned long long)e, j,
                   out[j], whole[(R + j * W) % N]);
      free(whole);
    }
    fl__sampler_free(&s);
  }
  free(out);
  free(o);
}

/* Every n to 4099 (1, 2, 3 and the primes among them), and larger primes
   and powers of two and their neighbours, in two epochs each. */
static void
bijection_is_a_permutation_for_every_n_to_4099_and_large_primes(void **state)
{
  static const size_t large[] = {65521, 65536, 65537, 1000003, 1u << 20,
                                 (1u << 20) + 1};
  fl__sampler s;
  size_t n, k, *o;
  uint64_t e;

  (void)state;
  for (n = 1; n <= 4099 + 6; n++) {
    k = n <= 4099 ? n : large[n - 4100];
    for (e = 0; e < 2; e++) {
      s = make_bijection(k, 5 + n);
      o = order_of(&s, e);
      assert_permutation(o, k);
      free(o);
    }
  }
}

static void
bijection_orders_are_pure_functions_of_seed_and_epoch(void **state)
{
  fl__sampler s = make_bijection(1000, 99), t = make_bijection(1000, 99);
  fl__sampler u = make_bijection(1000, 100);
  size_t *a = order_of(&s, 4), *b = order_of(&t, 4), *c = order_of(&s, 5);
  size_t *d = order_of(&u, 4);

  (void)state;
  assert_memory_equal(a, b, 1000 * sizeof(*a));
  assert_memory_not_equal(a, c, 1000 * sizeof(*a));
  assert_memory_not_equal(a, d, 1000 * sizeof(*a));
  /* About one fixed point in a random permutation of any size. */
  assert_true(count_fixed_points(a, 1000) < 10);
  free(a);
  free(b);
  free(c);
  free(d);
}

/*
 * The index x position matrix over 100000 epochs, as for torch's order,
 * for n = 3 and 4 (1-bit halves), 5 and 7 (cycle-walking over 8) and 13:
 * each cell expects E / n, here within 4.5 standard deviations.  Six
 * rounds for every width put index 0 at position 1 of 5 7% too often,
 * 11 deviations.
 */
static void
bijection_position_matrix_is_uniform_over_100000_epochs(void **state)
{
  enum { E = 100000 };
  static const size_t sizes[] = {3, 4, 5, 7, 13};
  unsigned m[13][13];
  size_t o[13], i, p, k, n;
  double want, sd;
  fl__sampler s;
  uint64_t e;

  (void)state;
  for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    n = sizes[k];
    s = make_bijection(n, 77);
    memset(m, 0, sizeof(m));
    for (e = 0; e < E; e++) {
      share(&s, e, 0, o);
      for (p = 0; p < n; p++)
        m[o[p]][p]++;
    }
    want = (double)E / n;
    sd = sqrt(want * (1 - 1.0 / n));
    for (i = 0; i < n; i++)
      for (p = 0; p < n; p++)
        if (fabs(m[i][p] - want) > 4.5 * sd)
          fail_msg("n %zu: index %zu at position %zu %u times in %d", n, i,
                   p, m[i][p], E);
  }
}

/*
 * DistributedSampler's shares over positions: rank r's j-th sample is the
 * bijection's order at the position the torch order's share would read
 * (padding, trimming and uneven alike), here from the share of the
 * unshuffled order, which is its positions.
 */
static void
bijection_shares_are_distributed_sampler_shares_of_positions(void **state)
{
  static const fl_shard_mode modes[] = {FL_SHARD_PAD, FL_SHARD_TRIM,
                                        FL_SHARD_UNEVEN};
  size_t whole[64], pos[64], got[64], n, j, start, checked = 0;
  fl__sampler s, plain;
  unsigned w, r, k;

  (void)state;
  for (n = 1; n < 48; n++)
    for (w = 1; w <= 5; w++)
      for (r = 0; r < w; r++)
        for (k = 0; k < 3; k++)
          for (start = 0; start < n; start += 7) {
            s = make_bijection(n, 2 + n);
            plain = make(n, 0, 2 + n);
            assert_int_equal(share(&s, 9, 0, whole), 0);
            s.world = plain.world = w;
            s.rank = plain.rank = r;
            s.mode = plain.mode = modes[k];
            assert_int_equal(share(&plain, 9, start, pos), 0);
            assert_int_equal(share(&s, 9, start, got), 0);
            assert_int_equal(s.n, plain.n);
            for (j = 0; j < s.n; j++)
              assert_int_equal(got[j], whole[pos[j]]);
            checked += s.n;
          }
  assert_true(checked > 10000);
}

/*
 * 10^10 positions with an order that is only its header (ASan says so if
 * a table were read): rank 3 of 8's first and last batches are distinct
 * indices below n, and the loader's options ask for no table.
 */
static void
bijection_of_ten_billion_reads_no_table(void **state)
{
  enum { BS = 4096 };
  const size_t n = 10000000000ull;
  fl__sampler s = make_bijection(n, 4);
  fl__order *o = malloc(sizeof(*o));
  size_t *out = malloc(2 * BS * sizeof(*out)), off, count, i;
  fl_options opt;

  (void)state;
  assert_non_null(o);
  assert_non_null(out);
  s.batch_size = BS;
  s.world = 8;
  s.rank = 3;
  assert_int_equal(fl__sampler_order(&s, o, 2, 0, NULL, 0), 0);
  assert_int_equal(s.n, n / 8);
  fl__sampler_batch(&s, o, 0, &off, &count);
  fl__sampler_indices(&s, o, off, count, out);
  fl__sampler_batch(&s, o, fl__sampler_batches(&s) - 1, &off, &count);
  assert_int_equal(off + count, n / 8);
  assert_true(count <= BS);
  fl__sampler_indices(&s, o, off, count, out + BS);
  /* The last batch is short: 1.25e9 is 3200 past a multiple of 4096. */
  count += BS;
  for (i = 0; i < count; i++)
    assert_true(out[i] < n);
  qsort(out, count, sizeof(*out), cmp_size);
  for (i = 1; i < count; i++)
    assert_true(out[i] != out[i - 1]);
  fl_options_init(&opt);
  opt.shuffle = 1;
  assert_true(fl__order_table(&opt));
  opt.shuffle_algorithm = FL_SHUFFLE_BIJECTION;
  assert_false(fl__order_table(&opt));
  free(out);
  free(o);
}

/* --- PyTorch's orders, from the golden lists torch wrote -------------- */

/*
 * One record of tests/golden/distributed.txt (tools/golden_distributed.py
 * made it with Debian's torch): its kind, its numbers before the colon and
 * the list after it.
 */
struct golden {
  char kind[16];
  char mode[8];
  unsigned long long key[7];
  size_t nkey, *v, nv, cap;
};

static FILE *
golden_open(void)
{
  const char *dir = getenv("srcdir");
  char path[512];
  FILE *f;

  snprintf(path, sizeof(path), "%s/tests/golden/distributed.txt",
           dir != NULL ? dir : ".");
  f = fopen(path, "r");
  if (f == NULL)
    fail_msg("cannot open %s", path);
  return f;
}

/* The next record, or 0 at the end. */
static int
golden_next(FILE *f, struct golden *g, char **line, size_t *len)
{
  char *p, *end, *colon;

  while (getline(line, len, f) > 0) {
    if ((*line)[0] == '#')
      continue;
    colon = strchr(*line, ':');
    assert_non_null(colon);
    *colon = '\0';
    p = *line;
    assert_int_equal(sscanf(p, "%15s", g->kind), 1);
    p += strlen(g->kind);
    g->nkey = 0;
    g->mode[0] = '\0';
    while (*p == ' ' && g->nkey < 7) {
      if (strcmp(g->kind, "shard") == 0 && g->nkey == 2 && g->mode[0] == 0) {
        assert_int_equal(sscanf(p, " %7s", g->mode), 1);
        p += 1 + strlen(g->mode);
        continue;
      }
      g->key[g->nkey++] = strtoull(p, &end, 10);
      if (end == p)
        break;
      p = end;
    }
    g->nv = 0;
    for (p = colon + 1; *p != '\0' && *p != '\n'; p = end) {
      if (g->nv == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->v = realloc(g->v, g->cap * sizeof(*g->v));
        assert_non_null(g->v);
      }
      g->v[g->nv] = strtoull(p, &end, 10);
      if (end == p)
        break;
      g->nv++;
    }
    return 1;
  }
  return 0;
}

static size_t *
identity(size_t n)
{
  size_t *a = malloc((n ? n : 1) * sizeof(*a)), i;

  assert_non_null(a);
  for (i = 0; i < n; i++)
    a[i] = i;
  return a;
}

/* torch.randperm(n, generator=manual_seed(s)) for every record, seeds of
   64 bits among them (torch keeps the low 32), and torch 2's wide path. */
static void
randperm_is_torchs_for_every_golden_record(void **state)
{
  struct golden g = {0};
  size_t len = 0, *a, checked = 0, wide = 0;
  char *line = NULL;
  FILE *f = golden_open();
  fl__mt mt;

  (void)state;
  while (golden_next(f, &g, &line, &len)) {
    if (strcmp(g.kind, "randperm") != 0 &&
        strcmp(g.kind, "randperm_wide") != 0)
      continue;
    a = identity(g.key[1]);
    if (strcmp(g.kind, "randperm") == 0) {
      fl__randperm(g.key[0], a, g.key[1]);
    } else {
      fl__mt_seed(&mt, g.key[0]);
      fl__randperm_wide(&mt, a, g.key[1]);
      wide++;
    }
    assert_int_equal(g.nv, g.key[1]);
    if (g.nv > 0 && memcmp(a, g.v, g.nv * sizeof(*a)) != 0)
      fail_msg("%s seed %llu n %llu differs from torch's", g.kind,
               g.key[0], g.key[1]);
    free(a);
    checked++;
  }
  assert_true(checked >= 40);
  assert_true(wide >= 10);
  free(g.v);
  free(line);
  fclose(f);
}

static fl_shard_mode
mode_of(const char *name)
{
  return strcmp(name, "pad") == 0    ? FL_SHARD_PAD
         : strcmp(name, "trim") == 0 ? FL_SHARD_TRIM
                                     : FL_SHARD_UNEVEN;
}

/*
 * Every rank's share, for n in {0, 1, 5, 7, 103, 1000} x world sizes
 * {1, 2, 3, 8} x the three modes x shuffle x epochs 0..2: what
 * DistributedSampler yields after set_epoch (and order[rank::W] unpadded),
 * n < W among them.
 */
static void
shards_are_distributed_samplers_for_every_golden_record(void **state)
{
  struct golden g = {0};
  size_t len = 0, *o, checked = 0;
  char *line = NULL;
  FILE *f = golden_open();
  fl__sampler s;

  (void)state;
  while (golden_next(f, &g, &line, &len)) {
    if (strcmp(g.kind, "shard") != 0)
      continue;
    /* shard N W MODE SHUFFLE SEED EPOCH RANK */
    s = make(g.key[0], (int)g.key[2], g.key[3]);
    s.world = (unsigned)g.key[1];
    s.rank = (unsigned)g.key[5];
    s.mode = mode_of(g.mode);
    o = identity(g.key[0]);
    assert_int_equal(share(&s, g.key[4], 0, o), 0);
    if (s.n != g.nv || (g.nv > 0 && memcmp(o, g.v, g.nv * sizeof(*o))))
      fail_msg("n %llu W %llu %s shuffle %llu seed %llu epoch %llu rank "
               "%llu: %zu indices, torch's %zu, or others", g.key[0],
               g.key[1], g.mode, g.key[2], g.key[3], g.key[4], g.key[5],
               s.n, g.nv);
    assert_int_equal(fl__shard_len(s.mode, g.key[0], s.world, s.rank), g.nv);
    free(o);
    checked++;
  }
  assert_true(checked >= 1764);
  free(g.v);
  free(line);
  fclose(f);
}

/* indices, shuffled: the list permuted by torch's randperm of its length
   (SubsetRandomSampler's rule), from seed + epoch. */
static void
shuffled_indices_follow_torchs_randperm_of_their_length(void **state)
{
  struct golden g = {0};
  size_t len = 0, *o, custom[103], i, found = 0;
  char *line = NULL;
  FILE *f = golden_open();
  fl__sampler s = make(103, 1, 40);

  (void)state;
  for (i = 0; i < 103; i++)
    custom[i] = 5000 + 3 * i;
  s.custom = custom;
  o = malloc(103 * sizeof(*o));
  assert_non_null(o);
  assert_int_equal(share(&s, 2, 0, o), 0);
  while (golden_next(f, &g, &line, &len)) {
    if (strcmp(g.kind, "randperm") != 0 || g.key[0] != 42 || g.key[1] != 103)
      continue;
    for (i = 0; i < 103; i++)
      assert_int_equal(o[i], custom[g.v[i]]);
    found = 1;
  }
  assert_true(found);
  free(o);
  free(g.v);
  free(line);
  fclose(f);
}

/* --- shares through loaders ------------------------------------------ */

/* A sample: its index, what fl_get_worker_info said of the world and the
   epoch (all ones without a worker), and its fl_sample_seed. */
struct seen {
  uint64_t index, rank, world, epoch, seed;
};

static int
get_seen(void *ctx, size_t i, void *dst, size_t *nbytes)
{
  const fl_worker_info *w = fl_get_worker_info();
  struct seen v = {i, UINT64_MAX, UINT64_MAX, UINT64_MAX, fl_sample_seed(i)};

  (void)ctx;
  if (w != NULL) {
    v.rank = w->rank;
    v.world = w->world_size;
    v.epoch = w->epoch;
  }
  memcpy(dst, &v, sizeof(v));
  *nbytes = sizeof(v);
  return 0;
}

/* Epoch `epoch` of rank r of 3, with nw workers: the samples, in order. */
static size_t
rank_epoch(unsigned r, unsigned nw, uint64_t epoch, struct seen *out)
{
  fl_dataset ds = {0};
  fl_options opt;
  fl_loader *l;
  fl_batch *b;
  size_t n = 0;
  int rc;

  ds.len = 103;
  ds.sample_bytes = sizeof(struct seen);
  ds.get = get_seen;
  fl_options_init(&opt);
  opt.batch_size = 4;
  opt.num_workers = nw;
  opt.shuffle = 1;
  opt.world_size = 3;
  opt.rank = r;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  /* 103 over 3, padded: 35 each, in 9 batches. */
  assert_int_equal(fl_loader_len(l), 9);
  assert_int_equal(fl_loader_set_epoch(l, epoch), 0);
  assert_int_equal(fl_loader_epoch(l), epoch);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(fl_loader_epoch(l), epoch);
  while ((rc = fl_loader_next(l, &b)) == 1) {
    memcpy(out + n, fl_batch_data(b), fl_batch_count(b) * sizeof(*out));
    n += fl_batch_count(b);
    fl_batch_release(b);
  }
  assert_int_equal(rc, 0);
  fl_loader_destroy(l);
  return n;
}

/*
 * Three ranks, each its own loader with workers, deliver torch's shares
 * for epoch 1; the workers see rank, world_size and epoch; and
 * fl_sample_seed gives each index the same seed whoever fills it (no
 * workers, or workers).
 */
static void
ranks_of_a_world_deliver_torchs_shares_and_know_their_rank(void **state)
{
  struct golden g = {0};
  struct seen got[3][40], inline_[40];
  size_t len = 0, n[3], i, r, matched = 0;
  char *line = NULL;
  flt_baseline base;
  FILE *f;

  (void)state;
  flt_baseline_take(&base);
  f = golden_open();
  for (r = 0; r < 3; r++)
    n[r] = rank_epoch((unsigned)r, 2, 1, got[r]);
  while (golden_next(f, &g, &line, &len)) {
    /* shard N W MODE SHUFFLE SEED EPOCH RANK */
    if (strcmp(g.kind, "shard") != 0 || g.key[0] != 103 || g.key[1] != 3 ||
        strcmp(g.mode, "pad") != 0 || g.key[2] != 1 || g.key[3] != 0 ||
        g.key[4] != 1)
      continue;
    r = g.key[5];
    assert_int_equal(n[r], g.nv);
    for (i = 0; i < n[r]; i++) {
      assert_int_equal(got[r][i].index, g.v[i]);
      assert_int_equal(got[r][i].rank, r);
      assert_int_equal(got[r][i].world, 3);
      assert_int_equal(got[r][i].epoch, 1);
    }
    matched++;
  }
  assert_int_equal(matched, 3);
  assert_int_equal(rank_epoch(1, 0, 1, inline_), n[1]);
  for (i = 0; i < n[1]; i++) {
    assert_int_equal(inline_[i].index, got[1][i].index);
    assert_int_equal(inline_[i].seed, got[1][i].seed);
    assert_int_equal(inline_[i].rank, UINT64_MAX);
  }
  /* The padding repeats index got[0][0] at the end of rank 1's share: the
     same index, the same seed, from another worker. */
  for (i = 0; i < n[1]; i++)
    if (got[1][i].index == got[0][0].index)
      assert_int_equal(got[1][i].seed, got[0][0].seed);
  assert_true(got[0][0].seed != got[0][1].seed);
  free(g.v);
  free(line);
  fclose(f);
  flt_assert_clean(&base);
}

/* --- a sampler of the caller's, through loaders ---------------------- */

/*
 * PyTorch's WeightedRandomSampler(weights, num_samples, replacement=True):
 * num_samples independent draws, index i with probability w[i] / sum(w),
 * here from a splitmix64 stream seeded by the epoch alone.
 */
struct weighted {
  const double *w;
  size_t n;
  size_t calls;
};

static double
unit(uint64_t *state)
{
  return (double)(fl__mix64((*state)++) >> 11) * 0x1p-53;
}

static size_t
weighted_sampler(void *ctx, uint64_t epoch, size_t *order, size_t cap)
{
  struct weighted *ws = ctx;
  uint64_t state = epoch * 0x9e3779b97f4a7c15ull + 1;
  double total = 0, u;
  size_t i, k;

  ws->calls++;
  for (k = 0; k < ws->n; k++)
    total += ws->w[k];
  for (i = 0; i < cap; i++) {
    u = unit(&state) * total;
    for (k = 0; k + 1 < ws->n && u >= ws->w[k]; k++)
      u -= ws->w[k];
    order[i] = k;
  }
  return cap;
}

/* One epoch's indices, in the order handed out. */
static size_t
epoch_indices(fl_loader *l, size_t *out, size_t cap)
{
  fl_batch *b;
  size_t i, n = 0;
  int rc;

  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) == 1) {
    for (i = 0; i < fl_batch_count(b); i++) {
      assert_true(n < cap);
      assert_true(flt_sample_ok((const char *)fl_batch_data(b) + i * 16, 16,
                                fl_batch_indices(b)[i]));
      out[n++] = fl_batch_indices(b)[i];
    }
    fl_batch_release(b);
  }
  assert_int_equal(rc, 0);
  return n;
}

static void
weighted_sampler_with_replacement_delivers_its_frequencies(void **state)
{
  static const double w[5] = {1, 2, 3, 4, 10};
  enum { LEN = 2000, EPOCHS = 10 };
  struct weighted ws = {w, 5, 0};
  size_t *got = malloc(LEN * sizeof(*got)), *want = malloc(LEN * sizeof(*want));
  double counts[5] = {0}, chi2 = 0, expect;
  flt_case c;
  size_t e, i;

  (void)state;
  flt_case_init(&c, 5, 16);
  c.opt.batch_size = 64;
  c.opt.num_workers = 2;
  c.opt.sampler = weighted_sampler;
  c.opt.sampler_ctx = &ws;
  c.opt.sampler_len = LEN;
  flt_case_create(&c);
  assert_int_equal(fl_loader_len(c.l), (LEN + 63) / 64);
  for (e = 0; e < EPOCHS; e++) {
    assert_int_equal(epoch_indices(c.l, got, LEN), LEN);
    /* Exactly the sampler's order, as it wrote it for this epoch. */
    assert_int_equal(weighted_sampler(&ws, e, want, LEN), LEN);
    assert_memory_equal(got, want, LEN * sizeof(*got));
    for (i = 0; i < LEN; i++)
      counts[got[i]]++;
  }
  /* It ran in the parent, once per begin (and once per check here). */
  assert_int_equal(ws.calls, 2 * EPOCHS);
  for (i = 0; i < 5; i++) {
    expect = (double)LEN * EPOCHS * w[i] / 20;
    chi2 += (counts[i] - expect) * (counts[i] - expect) / expect;
  }
  /* 4 degrees of freedom: above 18.5 happens once in a thousand. */
  if (chi2 > 18.5)
    fail_msg("chi-square %.1f over counts %g %g %g %g %g", chi2, counts[0],
             counts[1], counts[2], counts[3], counts[4]);
  free(got);
  free(want);
  flt_case_end(&c);
}

/* Writes cap indices i % 10, with one bad entry in odd epochs. */
static size_t
flawed_sampler(void *ctx, uint64_t epoch, size_t *order, size_t cap)
{
  size_t i;

  (void)ctx;
  for (i = 0; i < cap; i++)
    order[i] = i % 10;
  if (epoch % 2 == 1)
    order[7] = 99;
  /* Epoch 4 asks for more than there is room for; 6 returns fewer. */
  return epoch == 4 ? cap + 1 : epoch == 6 ? cap / 2 : cap;
}

static void
sampler_index_out_of_range_is_refused_naming_its_position(void **state)
{
  flt_case c;
  fl_batch *b;
  size_t got[40];

  (void)state;
  flt_case_init(&c, 10, 16);
  c.opt.batch_size = 4;
  c.opt.num_workers = 2;
  c.opt.persistent_workers = 1;
  c.opt.sampler = flawed_sampler;
  c.opt.sampler_len = 40;
  flt_case_create(&c);
  assert_int_equal(fl_loader_set_epoch(c.l, 1), 0);
  assert_int_equal(fl_loader_begin(c.l), FL_EINVAL);
  assert_string_equal(fl_loader_error(c.l),
                      "sampler: order[7] is 99 in epoch 1, out of range for "
                      "a dataset of 10");
  assert_int_equal(fl_loader_next(c.l, &b), FL_ESTATE);
  /* Not final: another epoch goes. */
  assert_int_equal(fl_loader_set_epoch(c.l, 2), 0);
  assert_int_equal(epoch_indices(c.l, got, 40), 40);
  assert_int_equal(fl_loader_set_epoch(c.l, 4), 0);
  assert_int_equal(fl_loader_begin(c.l), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(c.l), "sampler returned 41 for "
                                               "epoch 4, more than "
                                               "sampler_len 40"));
  /* A shorter order makes a shorter epoch. */
  assert_int_equal(fl_loader_set_epoch(c.l, 6), 0);
  assert_int_equal(epoch_indices(c.l, got, 40), 20);
  assert_int_equal(fl_loader_len(c.l), 5);
  flt_case_end(&c);
}

static void
sampler_is_refused_with_shuffle_indices_or_without_a_length(void **state)
{
  static const size_t idx[2] = {0, 1};
  fl_iterable it = {0};
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  flt_data d;

  (void)state;
  flt_data_init(&d, &ds, 10, 16);
  fl_options_init(&opt);
  opt.sampler = flawed_sampler;
  opt.sampler_len = 10;
  opt.shuffle = 1;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), FL_EINVAL);
  assert_string_equal(fl_loader_error(NULL), "sampler and shuffle are both "
                                             "set: the sampler gives the "
                                             "whole order");
  opt.shuffle = 0;
  opt.indices = idx;
  opt.indices_len = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "sampler and indices"));
  opt.indices = NULL;
  opt.indices_len = 0;
  opt.sampler_len = 0;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "sampler_len is 0"));
  opt.sampler_len = 10;
  it.sample_bytes = 8;
  it.next = (int (*)(void *, void *, size_t *))1;
  assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "iterable"));
  opt.sampler = NULL;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "sampler is NULL"));
  flt_data_free(&d);
}

/*
 * Epochs 0, 1, 2 shuffled; then epoch 1 again, cut short after a batch
 * with others still being filled, and begun once more: it gives epoch 1
 * from its first batch, and then epoch 2 follows as before.
 */
static void
set_epoch_repeats_an_epoch_exactly_even_one_cut_short(void **state)
{
  enum { LEN = 300 };
  size_t *seq[3], *again = malloc(LEN * sizeof(size_t));
  flt_case c;
  fl_batch *b;
  int e, persistent;

  (void)state;
  for (persistent = 0; persistent <= 1; persistent++) {
    flt_case_init(&c, LEN, 16);
    c.d.slow_index = -1;
    c.opt.batch_size = 8;
    c.opt.shuffle = 1;
    c.opt.seed = 11;
    c.opt.num_workers = 2;
    c.opt.prefetch_factor = 4;
    c.opt.persistent_workers = persistent;
    flt_case_create(&c);
    for (e = 0; e < 3; e++) {
      seq[e] = malloc(LEN * sizeof(size_t));
      assert_int_equal(epoch_indices(c.l, seq[e], LEN), LEN);
    }
    assert_memory_not_equal(seq[0], seq[1], LEN * sizeof(size_t));
    /* Epoch 1 again, cut short in its middle, then from the top. */
    assert_int_equal(fl_loader_set_epoch(c.l, 1), 0);
    assert_int_equal(fl_loader_begin(c.l), 0);
    assert_int_equal(fl_loader_next(c.l, &b), 1);
    fl_batch_release(b);
    assert_int_equal(fl_loader_set_epoch(c.l, 1), 0);
    assert_int_equal(epoch_indices(c.l, again, LEN), LEN);
    assert_memory_equal(again, seq[1], LEN * sizeof(size_t));
    /* Then on to epoch 2, as if nothing had been repeated. */
    assert_int_equal(epoch_indices(c.l, again, LEN), LEN);
    assert_memory_equal(again, seq[2], LEN * sizeof(size_t));
    for (e = 0; e < 3; e++)
      free(seq[e]);
    flt_case_end(&c);
  }
  assert_int_equal(fl_loader_set_epoch(NULL, 1), FL_EINVAL);
  free(again);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sequential_order_is_identity),
      cmocka_unit_test(custom_indices_are_used_as_given),
      cmocka_unit_test(shuffle_gives_permutation_for_several_sizes),
      cmocka_unit_test(shuffle_of_two_gives_both_orders_over_epochs),
      cmocka_unit_test(shuffle_same_seed_same_epoch_gives_same_order),
      cmocka_unit_test(shuffle_different_epochs_give_different_orders),
      cmocka_unit_test(shuffle_different_seeds_give_different_orders),
      cmocka_unit_test(shuffle_order_is_pure_function_of_seed_and_epoch),
      cmocka_unit_test(shuffled_custom_list_is_permutation_of_that_list),
      cmocka_unit_test(batch_count_rounds_up_or_drops_last),
      cmocka_unit_test(span_gives_offsets_and_short_last_count),
      cmocka_unit_test(drop_last_drops_short_final_batch),
      cmocka_unit_test(shuffle_is_roughly_uniform_over_epochs),
      cmocka_unit_test(shuffle_position_matrix_is_uniform_over_20000_epochs),
      cmocka_unit_test(mix64_is_splitmix_finaliser_without_collisions),
      cmocka_unit_test(torch_order_is_drawn_only_as_far_as_the_batches_sent),
      cmocka_unit_test(torch_order_is_torchs_when_the_lazy_tag_wraps),
      cmocka_unit_test(
          torch_order_is_torchs_with_moves_kept_aside_or_spilled),
      cmocka_unit_test(
          bijection_is_a_permutation_for_every_n_to_4099_and_large_primes),
      cmocka_unit_test(bijection_orders_are_pure_functions_of_seed_and_epoch),
      cmocka_unit_test(
          bijection_position_matrix_is_uniform_over_100000_epochs),
      cmocka_unit_test(
          bijection_shares_are_distributed_sampler_shares_of_positions),
      cmocka_unit_test(bijection_of_ten_billion_reads_no_table),
      cmocka_unit_test(randperm_is_torchs_for_every_golden_record),
      cmocka_unit_test(shards_are_distributed_samplers_for_every_golden_record),
      cmocka_unit_test(shuffled_indices_follow_torchs_randperm_of_their_length),
      cmocka_unit_test(
          ranks_of_a_world_deliver_torchs_shares_and_know_their_rank),
      cmocka_unit_test(
          weighted_sampler_with_replacement_delivers_its_frequencies),
      cmocka_unit_test(
          sampler_index_out_of_range_is_refused_naming_its_position),
      cmocka_unit_test(
          sampler_is_refused_with_shuffle_indices_or_without_a_length),
      cmocka_unit_test(
          set_epoch_repeats_an_epoch_exactly_even_one_cut_short),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
