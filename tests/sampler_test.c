/*
 * The sampler (lib/sampler.c): the order each epoch visits, how shuffling
 * depends on (seed, epoch) and nothing else, how the order is cut into
 * batches, and a crude check that the shuffle is not biased.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "common.h"

static fl__sampler
make(size_t n, int shuffle, uint64_t seed)
{
  fl__sampler s = {0};

  s.n = n;
  s.shuffle = shuffle;
  s.seed = seed;
  s.batch_size = 1;
  return s;
}

static size_t *
order_of(const fl__sampler *s, uint64_t epoch)
{
  size_t *o = malloc((s->n ? s->n : 1) * sizeof(*o));

  assert_non_null(o);
  fl__sampler_order(s, epoch, o);
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
    fl__sampler_order(&s, e, o);
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
    fl__sampler_order(&s, e, o);
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
    fl__sampler_order(&s, e, o);
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
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
