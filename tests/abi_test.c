/*
 * The ABI rule, call by call: every function that reads a caller's struct
 * reads only the size it is told, over the defaults; every function that
 * writes one writes no further; a struct larger than the library knows is
 * refused when it sets a field the library lacks, and taken when the extra
 * bytes are zero; no struct smaller than 0.1's is taken.
 * tests/abi_compat.sh runs a real 0.1 binary with the current library.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"

#define GUARD 64

/* A struct of `size` bytes followed by GUARD canary bytes. */
static unsigned char *
guarded(size_t size, int fill)
{
  unsigned char *p = malloc(size + GUARD);

  assert_non_null(p);
  memset(p, fill, size + GUARD);
  return p;
}

static void
assert_guard(const unsigned char *p, size_t size, int fill)
{
  size_t i;

  for (i = 0; i < GUARD; i++)
    assert_int_equal(p[size + i], fill);
}

static void
options_init_writes_no_further_than_its_size(void **state)
{
  unsigned char *p = guarded(FL__OPTIONS_SIZE_0_1, 0xa5);
  fl_options *o = (fl_options *)p, full;

  (void)state;
  fl_options_init_sized(o, FL__OPTIONS_SIZE_0_1);
  assert_guard(p, FL__OPTIONS_SIZE_0_1, 0xa5);
  fl_options_init(&full);
  assert_memory_equal(o, &full, FL__OPTIONS_SIZE_0_1);
  free(p);
}

static void
options_of_an_older_size_take_the_defaults_beyond_it(void **state)
{
  size_t size = FL__OPTIONS_SIZE_0_1;
  unsigned char *p = guarded(size, 0xa5), *d = guarded(size, 0xa5);
  fl_options *o = (fl_options *)p;
  flt_baseline base;
  fl_loader *l;
  fl_dataset *ds = (fl_dataset *)d;
  fl_batch *b;
  flt_data data;
  fl_dataset full;

  (void)state;
  flt_baseline_take(&base);
  /* Whatever lies past an older struct must not be read as fields. */
  flt_data_init(&data, &full, 50, 16);
  memcpy(ds, &full, FL__DATASET_SIZE_0_1);
  fl_options_init_sized(o, size);
  /* Through the bytes: the compiler knows o is shorter than fl_options. */
  memcpy(p + offsetof(fl_options, batch_size), &(size_t){10}, sizeof(size_t));
  memcpy(p + offsetof(fl_options, num_workers), &(unsigned){1},
         sizeof(unsigned));
  assert_int_equal(fl_loader_create_sized(&l, ds, FL__DATASET_SIZE_0_1, o,
                                          size),
                   0);
  assert_int_equal(fl_loader_len(l), 5);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(fl_loader_next(l, &b), 1);
  assert_int_equal(fl_batch_count(b), 10);
  fl_batch_release(b);
  fl_loader_destroy(l);
  flt_data_free(&data);
  free(p);
  free(d);
  flt_assert_clean(&base);
}

static void
a_larger_struct_is_taken_when_its_extra_bytes_are_zero(void **state)
{
  size_t size = sizeof(fl_options) + 16;
  unsigned char *p = guarded(size, 0);
  fl_options *o = (fl_options *)p;
  fl_dataset ds;
  fl_loader *l;
  flt_data d;

  (void)state;
  flt_data_init(&d, &ds, 10, 8);
  fl_options_init_sized(o, size);
  /* What this library does not know, its init leaves zero. */
  assert_int_equal(p[sizeof(fl_options)], 0);
  assert_int_equal(p[size - 1], 0);
  assert_int_equal(fl_loader_create_sized(&l, &ds, sizeof(ds), o, size), 0);
  fl_loader_destroy(l);
  p[size - 1] = 1;
  assert_int_equal(fl_loader_create_sized(&l, &ds, sizeof(ds), o, size),
                   FL_EINVAL);
  assert_null(l);
  assert_non_null(strstr(fl_loader_error(NULL),
                         "built against a newer forkload"));
  flt_data_free(&d);
  free(p);
}

static void
a_struct_smaller_than_0_1s_is_refused(void **state)
{
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_stats st;
  flt_data d;

  (void)state;
  flt_data_init(&d, &ds, 10, 8);
  fl_options_init(&opt);
  assert_int_equal(fl_loader_create_sized(&l, &ds, sizeof(ds), &opt,
                                          FL__OPTIONS_SIZE_0_1 - 8),
                   FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "fl_options is"));
  assert_int_equal(fl_loader_create_sized(&l, &ds, 16, &opt, sizeof(opt)),
                   FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "fl_dataset is 16 bytes"));
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_stats_sized(l, &st, 8), FL_EINVAL);
  fl_loader_destroy(l);
  flt_data_free(&d);
}

static void
stats_write_no_further_than_their_size(void **state)
{
  unsigned char *p = guarded(FL__STATS_SIZE_0_1, 0xa5);
  fl_dataset ds;
  fl_loader *l;
  flt_data d;

  (void)state;
  flt_data_init(&d, &ds, 10, 8);
  assert_int_equal(fl_loader_create(&l, &ds, NULL), 0);
  assert_int_equal(fl_loader_stats_sized(l, (fl_stats *)p,
                                         FL__STATS_SIZE_0_1),
                   0);
  assert_guard(p, FL__STATS_SIZE_0_1, 0xa5);
  assert_int_equal(((fl_stats *)p)->batches_held, 0);
  fl_loader_destroy(l);
  flt_data_free(&d);
  free(p);
}

static void
budget_writes_no_further_than_its_size(void **state)
{
  unsigned char *p = guarded(FL__BUDGET_SIZE_0_5, 0xa5);
  fl_budget *b = (fl_budget *)p;
  fl_dataset ds;
  fl_loader *l;
  flt_data d;

  (void)state;
  flt_data_init(&d, &ds, 10, 8);
  assert_int_equal(fl_loader_create(&l, &ds, NULL), 0);
  assert_int_equal(fl_loader_budget_sized(l, b, FL__BUDGET_SIZE_0_5), 0);
  assert_guard(p, FL__BUDGET_SIZE_0_5, 0xa5);
  assert_true(b->n > 0 && b->binding < b->n);
  assert_string_equal(b->item[0].resource, "fds");
  assert_int_equal(fl_loader_budget_sized(l, b, FL__BUDGET_SIZE_0_5 - 1),
                   FL_EINVAL);
  fl_loader_destroy(l);
  flt_data_free(&d);
  free(p);
}

static void
dataset_builders_fill_and_clear_no_further_than_their_size(void **state)
{
  char path[] = "/tmp/forkload-abi-test.XXXXXX";
  size_t size = FL__DATASET_SIZE_0_1;
  unsigned char *p = guarded(size, 0xa5), rec[32];
  fl_dataset *ds = (fl_dataset *)p;
  int fd = mkstemp(path);

  (void)state;
  assert_true(fd >= 0);
  memset(rec, 7, sizeof(rec));
  assert_int_equal(write(fd, rec, sizeof(rec)), (ssize_t)sizeof(rec));
  close(fd);
  assert_int_equal(fl_dataset_raw_sized(ds, size, path, 8, 0), 0);
  assert_guard(p, size, 0xa5);
  assert_int_equal(ds->len, 4);
  fl_dataset_close_sized(ds, size);
  assert_guard(p, size, 0xa5);
  assert_null(ds->ctx);
  /* A failure clears the caller's struct, no further either. */
  memset(p, 0xa5, size + GUARD);
  assert_int_equal(fl_dataset_npy_array_sized(ds, size, path), FL_EINVAL);
  assert_guard(p, size, 0xa5);
  assert_null(ds->ctx);
  assert_int_equal(fl_dataset_npy_dir_sized(ds, 8, "/tmp"), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "fl_dataset is 8 bytes"));
  unlink(path);
  free(p);
}

static void
version_at_run_time_is_the_headers(void **state)
{
  char v[32];

  (void)state;
  assert_int_equal(fl_version(), FL_VERSION_HEX);
  snprintf(v, sizeof(v), "%d.%d.%d", FL_VERSION_MAJOR, FL_VERSION_MINOR,
           FL_VERSION_PATCH);
  assert_string_equal(fl_version_string(), v);
  assert_string_equal(FL_VERSION_STRING, PACKAGE_VERSION);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(options_init_writes_no_further_than_its_size),
      cmocka_unit_test(options_of_an_older_size_take_the_defaults_beyond_it),
      cmocka_unit_test(
          a_larger_struct_is_taken_when_its_extra_bytes_are_zero),
      cmocka_unit_test(a_struct_smaller_than_0_1s_is_refused),
      cmocka_unit_test(stats_write_no_further_than_their_size),
      cmocka_unit_test(
          dataset_builders_fill_and_clear_no_further_than_their_size),
      cmocka_unit_test(version_at_run_time_is_the_headers),
      cmocka_unit_test(budget_writes_no_further_than_its_size),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
