/*
 * The reorder buffer (lib/reorder.c): in order, a batch waits until every
 * earlier seq has been handed out; as they arrive, batches leave in arrival
 * order.  Only fl_batch.seq is read, so the batches here are zeroed structs
 * with a seq and nothing behind them.
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

/* n fake batches with seq 0..n-1. */
static fl_batch *
fake_batches(size_t n)
{
  fl_batch *b = malloc(n * sizeof(*b));
  size_t i;

  assert_non_null(b);
  memset(b, 0, n * sizeof(*b));
  for (i = 0; i < n; i++)
    b[i].seq = i;
  return b;
}

static void
in_order_waits_for_seq_zero_then_pops_in_order(void **state)
{
  static const uint64_t arrival[] = {3, 1, 0, 2};
  fl_batch *b = fake_batches(4);
  fl__reorder r;
  fl_batch *got;
  size_t i;

  (void)state;
  assert_int_equal(fl__reorder_init(&r, 4, 1), 0);
  for (i = 0; i < 4; i++) {
    fl__reorder_put(&r, &b[arrival[i]]);
    if (arrival[i] == 0)
      break;
    /* 0 has not arrived: nothing may leave. */
    assert_null(fl__reorder_pop(&r));
    assert_int_equal(r.next_seq, 0);
  }
  assert_int_equal(r.depth, 3);
  for (i = 0; i < 2; i++) {
    got = fl__reorder_pop(&r);
    assert_non_null(got);
    assert_int_equal(got->seq, i);
  }
  /* 2 is still missing. */
  assert_null(fl__reorder_pop(&r));
  assert_int_equal(r.next_seq, 2);
  fl__reorder_put(&r, &b[2]);
  for (i = 2; i < 4; i++) {
    got = fl__reorder_pop(&r);
    assert_ptr_equal(got, &b[i]);
  }
  assert_null(fl__reorder_pop(&r));
  assert_int_equal(r.next_seq, 4);
  assert_int_equal(r.depth, 0);
  fl__reorder_free(&r);
  free(b);
}

static void
in_order_pop_on_empty_returns_null(void **state)
{
  fl__reorder r;

  (void)state;
  assert_int_equal(fl__reorder_init(&r, 4, 1), 0);
  assert_null(fl__reorder_pop(&r));
  assert_null(fl__reorder_pop(&r));
  assert_int_equal(r.next_seq, 0);
  assert_int_equal(r.depth, 0);
  fl__reorder_free(&r);
}

static void
in_order_next_seq_advances_with_each_pop(void **state)
{
  fl_batch *b = fake_batches(8);
  fl__reorder r;
  uint64_t i;

  (void)state;
  assert_int_equal(fl__reorder_init(&r, 2, 1), 0);
  for (i = 0; i < 8; i++) {
    assert_int_equal(r.next_seq, i);
    fl__reorder_put(&r, &b[i]);
    assert_ptr_equal(fl__reorder_pop(&r), &b[i]);
    assert_int_equal(r.next_seq, i + 1);
  }
  fl__reorder_free(&r);
  free(b);
}

/* A small deterministic generator: the shuffle must be reproducible. */
static uint64_t
next_rand(uint64_t *s)
{
  *s += 0x9e3779b97f4a7c15ull;
  return fl__mix64(*s);
}

/*
 * 10,000 seqs through a window of 8: at each step one of the seqs the
 * window allows (next_seq .. next_seq+7) that has not arrived yet arrives,
 * at random; everything poppable is popped and must come out in order.
 * The ring index wraps more than a thousand times.
 */
static void
in_order_wraps_around_across_many_windows(void **state)
{
  enum { N = 10000, W = 8 };
  fl_batch *b = fake_batches(N);
  unsigned char *arrived = calloc(N, 1);
  size_t cand[W], ncand, waiting = 0, max_waiting = 0;
  uint64_t rng = 1, lo, s, expect = 0;
  fl__reorder r;
  fl_batch *got;

  (void)state;
  assert_non_null(arrived);
  assert_int_equal(fl__reorder_init(&r, W, 1), 0);
  assert_int_equal(r.cap, W);
  while (expect < N) {
    lo = expect;
    ncand = 0;
    for (s = lo; s < lo + W && s < N; s++)
      if (!arrived[s])
        cand[ncand++] = s;
    assert_true(ncand > 0);
    s = cand[next_rand(&rng) % ncand];
    arrived[s] = 1;
    fl__reorder_put(&r, &b[s]);
    waiting++;
    if (waiting > max_waiting)
      max_waiting = waiting;
    assert_int_equal(r.depth, waiting);
    while ((got = fl__reorder_pop(&r)) != NULL) {
      if (got->seq != expect)
        fail_msg("popped seq %llu, expected %llu",
                 (unsigned long long)got->seq, (unsigned long long)expect);
      expect++;
      waiting--;
    }
    assert_int_equal(r.depth, waiting);
    assert_int_equal(r.next_seq, expect);
  }
  assert_int_equal(r.depth, 0);
  assert_int_equal(r.peak, max_waiting);
  /* With random arrival the window fills up at some point. */
  assert_true(max_waiting > 3 && max_waiting <= W);
  fl__reorder_free(&r);
  free(arrived);
  free(b);
}

static void
depth_and_peak_track_waiting_batches(void **state)
{
  fl_batch *b = fake_batches(6);
  fl__reorder r;

  (void)state;
  assert_int_equal(fl__reorder_init(&r, 8, 1), 0);
  assert_int_equal(r.depth, 0);
  assert_int_equal(r.peak, 0);
  fl__reorder_put(&r, &b[5]);
  fl__reorder_put(&r, &b[4]);
  fl__reorder_put(&r, &b[2]);
  assert_int_equal(r.depth, 3);
  assert_int_equal(r.peak, 3);
  fl__reorder_put(&r, &b[0]);
  assert_int_equal(r.depth, 4);
  assert_ptr_equal(fl__reorder_pop(&r), &b[0]);
  assert_null(fl__reorder_pop(&r)); /* 1 missing */
  assert_int_equal(r.depth, 3);
  assert_int_equal(r.peak, 4);
  fl__reorder_put(&r, &b[1]);
  fl__reorder_put(&r, &b[3]);
  assert_int_equal(r.depth, 5);
  assert_int_equal(r.peak, 5);
  while (fl__reorder_pop(&r) != NULL)
    ;
  assert_int_equal(r.next_seq, 6);
  assert_int_equal(r.depth, 0);
  /* The peak is a high-water mark: draining does not lower it. */
  assert_int_equal(r.peak, 5);
  fl__reorder_free(&r);
  free(b);
}

static void
arrival_order_pops_in_arrival_order(void **state)
{
  static const uint64_t arrival[] = {3, 1, 0, 2, 7, 4};
  fl_batch *b = fake_batches(8);
  fl__reorder r;
  size_t i;

  (void)state;
  assert_int_equal(fl__reorder_init(&r, 8, 0), 0);
  assert_null(fl__reorder_pop(&r));
  for (i = 0; i < 6; i++)
    fl__reorder_put(&r, &b[arrival[i]]);
  assert_int_equal(r.depth, 6);
  assert_int_equal(r.peak, 6);
  for (i = 0; i < 6; i++)
    assert_ptr_equal(fl__reorder_pop(&r), &b[arrival[i]]);
  assert_null(fl__reorder_pop(&r));
  assert_int_equal(r.depth, 0);
  fl__reorder_free(&r);
  free(b);
}

/* The FIFO ring wraps too: interleaved puts and pops over many laps. */
static void
arrival_order_wraps_around(void **state)
{
  enum { N = 1000 };
  fl_batch *b = fake_batches(N);
  size_t put = 0, popped = 0, k;
  uint64_t rng = 9;
  fl__reorder r;
  fl_batch *got;

  (void)state;
  assert_int_equal(fl__reorder_init(&r, 4, 0), 0);
  while (popped < N) {
    /* Up to the free room, put the next ones (seq order is irrelevant
       here: arrival order is what must come out). */
    for (k = next_rand(&rng) % 5; k > 0 && put < N && put - popped < 4; k--)
      fl__reorder_put(&r, &b[N - 1 - put++]);
    if (put - popped > 0) {
      got = fl__reorder_pop(&r);
      assert_ptr_equal(got, &b[N - 1 - popped]);
      popped++;
    }
    assert_int_equal(r.depth, put - popped);
  }
  assert_null(fl__reorder_pop(&r));
  fl__reorder_free(&r);
  free(b);
}

static void
reset_starts_again_from_seq_zero(void **state)
{
  fl_batch *old = fake_batches(4), *fresh = fake_batches(4);
  fl__reorder r;

  (void)state;
  assert_int_equal(fl__reorder_init(&r, 4, 1), 0);
  fl__reorder_put(&r, &old[0]);
  fl__reorder_put(&r, &old[2]);
  assert_ptr_equal(fl__reorder_pop(&r), &old[0]);
  assert_int_equal(r.next_seq, 1);
  fl__reorder_reset(&r);
  assert_int_equal(r.next_seq, 0);
  assert_int_equal(r.depth, 0);
  /* The new epoch's 0 comes out; the old epoch's 2 must not. */
  fl__reorder_put(&r, &fresh[0]);
  fl__reorder_put(&r, &fresh[1]);
  assert_ptr_equal(fl__reorder_pop(&r), &fresh[0]);
  assert_ptr_equal(fl__reorder_pop(&r), &fresh[1]);
  assert_null(fl__reorder_pop(&r));
  fl__reorder_put(&r, &fresh[2]);
  assert_ptr_equal(fl__reorder_pop(&r), &fresh[2]);
  fl__reorder_free(&r);

  /* As they arrive: what waited before the reset is gone. */
  assert_int_equal(fl__reorder_init(&r, 4, 0), 0);
  fl__reorder_put(&r, &old[3]);
  fl__reorder_put(&r, &old[1]);
  fl__reorder_reset(&r);
  assert_null(fl__reorder_pop(&r));
  assert_int_equal(r.depth, 0);
  fl__reorder_put(&r, &fresh[3]);
  assert_ptr_equal(fl__reorder_pop(&r), &fresh[3]);
  assert_null(fl__reorder_pop(&r));
  fl__reorder_free(&r);
  free(old);
  free(fresh);
}

static void
window_rounds_capacity_up_to_power_of_two(void **state)
{
  static const size_t window[] = {0, 1, 2, 3, 5, 8, 9, 100};
  static const size_t cap[] = {1, 1, 2, 4, 8, 8, 16, 128};
  fl__reorder r;
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(window) / sizeof(window[0]); i++) {
    assert_int_equal(fl__reorder_init(&r, window[i], 1), 0);
    assert_non_null(r.ring);
    assert_int_equal(r.cap, cap[i]);
    fl__reorder_free(&r);
    assert_null(r.ring);
  }
}

/* Window 5 rounds up to 8, and all 8 seqs of the ring can wait at once. */
static void
window_five_holds_eight_waiting(void **state)
{
  fl_batch *b = fake_batches(8);
  fl__reorder r;
  size_t i;

  (void)state;
  assert_int_equal(fl__reorder_init(&r, 5, 1), 0);
  assert_int_equal(r.cap, 8);
  for (i = 8; i-- > 1;)
    fl__reorder_put(&r, &b[i]);
  assert_null(fl__reorder_pop(&r));
  fl__reorder_put(&r, &b[0]);
  for (i = 0; i < 8; i++)
    assert_ptr_equal(fl__reorder_pop(&r), &b[i]);
  assert_null(fl__reorder_pop(&r));
  fl__reorder_free(&r);
  free(b);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(in_order_waits_for_seq_zero_then_pops_in_order),
      cmocka_unit_test(in_order_pop_on_empty_returns_null),
      cmocka_unit_test(in_order_next_seq_advances_with_each_pop),
      cmocka_unit_test(in_order_wraps_around_across_many_windows),
      cmocka_unit_test(depth_and_peak_track_waiting_batches),
      cmocka_unit_test(arrival_order_pops_in_arrival_order),
      cmocka_unit_test(arrival_order_wraps_around),
      cmocka_unit_test(reset_starts_again_from_seq_zero),
      cmocka_unit_test(window_rounds_capacity_up_to_power_of_two),
      cmocka_unit_test(window_five_holds_eight_waiting),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
