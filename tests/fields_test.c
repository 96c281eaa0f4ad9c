/*
 * Batches of several fields, PyTorch's default collate without copies:
 * each field of every sample is written by the worker straight into that
 * field's own array in the segment (struct of arrays), so field 0 is a
 * ready input tensor and field 1 the labels.  get_fields and get_batch
 * both fill them; the checks of a field's room and size hold per field;
 * bad field descriptions are refused at create.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define N 300
#define NF 3

/* Field sizes that are not multiples of each other or of 8. */
static const size_t sizes3[NF] = {24, 4, 1};

/* Byte k of field f of sample i. */
static unsigned char
byte_of(size_t i, size_t f, size_t k)
{
  return (unsigned char)(i * 7 + f * 31 + k * 3 + 1);
}

struct fds {
  int overrun_field; /* get_fields writes one byte past this field, -1 */
  int oversize_field;
};

static int
get_fields(void *ctx, size_t index, void *const *dst, size_t *nbytes)
{
  const struct fds *c = ctx;
  size_t f, k;

  for (f = 0; f < NF; f++) {
    /* Runs in a worker: report, never assert. */
    if (nbytes[f] != sizes3[f]) {
      fl_worker_error("nbytes[%zu] is %zu on entry", f, nbytes[f]);
      return 1;
    }
    for (k = 0; k < sizes3[f]; k++)
      ((unsigned char *)dst[f])[k] = byte_of(index, f, k);
    if ((int)f == c->overrun_field && index == 5)
      memset(dst[f], 0xee, sizes3[f] + 8);
    nbytes[f] = (int)f == c->oversize_field && index == 5 ? sizes3[f] + 1
                                                          : sizes3[f];
  }
  return 0;
}

static int
get_batch_fields(void *ctx, const size_t *indices, size_t n, void *dst,
                 size_t *nbytes)
{
  unsigned char *const *fields = dst;
  size_t i, f, k;

  (void)ctx;
  for (i = 0; i < n; i++)
    for (f = 0; f < NF; f++) {
      for (k = 0; k < sizes3[f]; k++)
        fields[f][i * sizes3[f] + k] = byte_of(indices[i], f, k);
      nbytes[i * NF + f] = sizes3[f];
    }
  return 0;
}

static void
dataset_of_fields(fl_dataset *ds, struct fds *c, int batched)
{
  memset(ds, 0, sizeof(*ds));
  c->overrun_field = c->oversize_field = -1;
  ds->ctx = c;
  ds->len = N;
  ds->nfields = NF;
  ds->field_bytes = sizes3;
  if (batched)
    ds->get_batch = get_batch_fields;
  else
    ds->get_fields = get_fields;
}

/* Every sample of every field where the batch says, each index once. */
static void
check_epoch(fl_loader *l, unsigned char *seen)
{
  const unsigned char *p;
  const size_t *idx, *sz;
  fl_batch *b;
  size_t i, f, k, n = 0;
  int rc;

  memset(seen, 0, N);
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) == 1) {
    idx = fl_batch_indices(b);
    sz = fl_batch_sizes(b);
    assert_ptr_equal(fl_batch_data(b), fl_batch_field(b, 0));
    assert_null(fl_batch_field(b, NF));
    assert_int_equal(fl_batch_stride(b, NF), 0);
    for (f = 0; f < NF; f++) {
      p = fl_batch_field(b, f);
      assert_non_null(p);
      assert_int_equal((uintptr_t)p % 64, 0);
      assert_int_equal(fl_batch_stride(b, f), sizes3[f]);
      for (i = 0; i < fl_batch_count(b); i++) {
        assert_int_equal(sz[i * NF + f], sizes3[f]);
        for (k = 0; k < sizes3[f]; k++)
          assert_int_equal(p[i * sizes3[f] + k], byte_of(idx[i], f, k));
      }
    }
    for (i = 0; i < fl_batch_count(b); i++) {
      assert_int_equal(seen[idx[i]], 0);
      seen[idx[i]] = 1;
      n++;
    }
    fl_batch_release(b);
  }
  assert_int_equal(rc, 0);
  assert_int_equal(n, N);
}

static void
run_fields(int batched, unsigned workers, fl_sharing sharing)
{
  unsigned char seen[N];
  size_t *copy = malloc(sizeof(sizes3));
  flt_baseline base;
  struct fds c;
  fl_dataset ds;
  fl_options opt;
  fl_loader *l;

  flt_baseline_take(&base);
  dataset_of_fields(&ds, &c, batched);
  /* The loader keeps its own copy of the sizes. */
  memcpy(copy, sizes3, sizeof(sizes3));
  ds.field_bytes = copy;
  fl_options_init(&opt);
  opt.batch_size = 16;
  opt.shuffle = 1;
  opt.num_workers = workers;
  opt.sharing = sharing;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  memset(copy, 0, sizeof(sizes3));
  free(copy);
  check_epoch(l, seen);
  check_epoch(l, seen);
  fl_loader_destroy(l);
  flt_assert_clean(&base);
}

static void
get_fields_fills_each_field_into_its_own_array(void **state)
{
  (void)state;
  run_fields(0, 2, FL_SHARE_FILE_DESCRIPTOR);
  run_fields(0, 2, FL_SHARE_FILE_SYSTEM);
}

static void
get_fields_in_the_calling_process_lays_out_the_same(void **state)
{
  (void)state;
  run_fields(0, 0, FL_SHARE_FILE_DESCRIPTOR);
}

static void
get_batch_with_fields_gets_one_array_per_field(void **state)
{
  (void)state;
  run_fields(1, 2, FL_SHARE_FILE_DESCRIPTOR);
  run_fields(1, 0, FL_SHARE_FILE_DESCRIPTOR);
}

/* The first error of an epoch, with its message. */
static int
first_error(fl_loader *l, char *msg, size_t len)
{
  fl_batch *b;
  int rc;

  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) == 1)
    fl_batch_release(b);
  snprintf(msg, len, "%s", fl_loader_error(l));
  return rc;
}

static void
a_field_written_past_its_room_or_oversized_is_that_batch_error(void **st)
{
  char msg[1024];
  struct fds c;
  fl_dataset ds;
  fl_options opt;
  fl_loader *l;

  (void)st;
  dataset_of_fields(&ds, &c, 0);
  fl_options_init(&opt);
  opt.batch_size = 8;
  opt.num_workers = 1;
  c.overrun_field = 1;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(first_error(l, msg, sizeof(msg)), FL_EDATASET);
  assert_non_null(strstr(msg, "get_fields(index 5) wrote past field 1's "
                              "room of 4 bytes"));
  fl_loader_destroy(l);
  c.overrun_field = -1;
  c.oversize_field = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(first_error(l, msg, sizeof(msg)), FL_EDATASET);
  assert_non_null(strstr(msg, "get_fields(index 5) reported 2 bytes for "
                              "field 2, more than its room of 1 "
                              "(field_bytes[2]"));
  fl_loader_destroy(l);
}

static void
bad_fields_are_refused_naming_the_field(void **state)
{
  static const size_t zero[2] = {4, 0}, many[33] = {1};
  struct fds c;
  fl_dataset ds;
  fl_loader *l;

  (void)state;
  dataset_of_fields(&ds, &c, 0);
  ds.nfields = 33;
  ds.field_bytes = many;
  assert_int_equal(fl_loader_create(&l, &ds, NULL), FL_EINVAL);
  assert_string_equal(fl_loader_error(NULL),
                      "dataset: nfields is 33: at most 32 are allowed");
  dataset_of_fields(&ds, &c, 0);
  ds.field_bytes = NULL;
  assert_int_equal(fl_loader_create(&l, &ds, NULL), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "field_bytes is NULL"));
  dataset_of_fields(&ds, &c, 0);
  ds.nfields = 2;
  ds.field_bytes = zero;
  assert_int_equal(fl_loader_create(&l, &ds, NULL), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "field_bytes[1] is 0"));
  dataset_of_fields(&ds, &c, 0);
  ds.sample_bytes = 30;
  assert_int_equal(fl_loader_create(&l, &ds, NULL), FL_EINVAL);
  assert_string_equal(fl_loader_error(NULL), "dataset: sample_bytes is 30 "
                                             "but the 3 fields add up to 29");
  ds.sample_bytes = 29; /* the sum is fine too */
  assert_int_equal(fl_loader_create(&l, &ds, NULL), 0);
  fl_loader_destroy(l);
  dataset_of_fields(&ds, &c, 0);
  ds.get_fields = NULL;
  ds.get = (int (*)(void *, size_t, void *, size_t *))1;
  assert_int_equal(fl_loader_create(&l, &ds, NULL), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "get_fields or get_batch"));
  dataset_of_fields(&ds, &c, 0);
  ds.nfields = 0;
  ds.field_bytes = NULL;
  ds.sample_bytes = 8;
  assert_int_equal(fl_loader_create(&l, &ds, NULL), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "nfields is 0"));
}

static void
a_dataset_without_fields_has_field_0_of_sample_bytes(void **state)
{
  flt_data d;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;

  (void)state;
  flt_data_init(&d, &ds, 10, 40);
  assert_int_equal(fl_loader_create(&l, &ds, NULL), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(fl_loader_next(l, &b), 1);
  assert_ptr_equal(fl_batch_field(b, 0), fl_batch_data(b));
  assert_int_equal(fl_batch_stride(b, 0), 40);
  assert_null(fl_batch_field(b, 1));
  assert_null(fl_batch_field(NULL, 0));
  fl_batch_release(b);
  fl_loader_destroy(l);
  flt_data_free(&d);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(get_fields_fills_each_field_into_its_own_array),
      cmocka_unit_test(get_fields_in_the_calling_process_lays_out_the_same),
      cmocka_unit_test(get_batch_with_fields_gets_one_array_per_field),
      cmocka_unit_test(
          a_field_written_past_its_room_or_oversized_is_that_batch_error),
      cmocka_unit_test(bad_fields_are_refused_naming_the_field),
      cmocka_unit_test(a_dataset_without_fields_has_field_0_of_sample_bytes),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
