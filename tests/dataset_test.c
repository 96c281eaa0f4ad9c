/*
 * The built-in datasets: NPY files in a directory, one NPY array, a flat
 * file of records.  Files are written by a tiny NPY writer of our own into
 * a fresh directory per case, read back directly and through real loaders,
 * and every malformed file must give FL_EINVAL and a message naming it.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"
#include "datasets/dataset.h"

/* A fresh directory for one case, and everything in it removed after. */
static void
dir_make(char *dir, size_t len)
{
  snprintf(dir, len, "/tmp/fl-dataset-XXXXXX");
  assert_non_null(mkdtemp(dir));
}

static void
dir_remove(const char *dir)
{
  char path[512];
  struct dirent *e;
  DIR *d = opendir(dir);

  assert_non_null(d);
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    assert_int_equal(unlink(path), 0);
  }
  closedir(d);
  assert_int_equal(rmdir(dir), 0);
}

static void
write_file(const char *path, const void *buf, size_t n)
{
  FILE *f = fopen(path, "wb");

  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/*
 * An NPY file as numpy writes it: magic, version, little-endian header
 * length (2 bytes in 1.0, 4 in 2.0 and 3.0), the dict padded with spaces
 * and a newline so that the data starts at a multiple of 64, then data.
 * Returns the bytes of the file in *out (the caller frees).
 */
static size_t
npy_bytes(unsigned char **out, int version, const char *dict,
          const void *data, size_t n)
{
  size_t prefix = version == 1 ? 10 : 12, dlen = strlen(dict), hlen, total;
  unsigned char *b;

  hlen = dlen + 1;
  hlen += (64 - (prefix + hlen) % 64) % 64;
  total = prefix + hlen + n;
  b = malloc(total);
  assert_non_null(b);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)version;
  b[7] = 0;
  b[8] = (unsigned char)(hlen & 0xff);
  b[9] = (unsigned char)(hlen >> 8);
  if (version != 1) {
    b[10] = (unsigned char)(hlen >> 16);
    b[11] = (unsigned char)(hlen >> 24);
  }
  memcpy(b + prefix, dict, dlen);
  memset(b + prefix + dlen, ' ', hlen - dlen - 1);
  b[prefix + hlen - 1] = '\n';
  if (n > 0)
    memcpy(b + prefix + hlen, data, n);
  *out = b;
  return total;
}

static void
write_npy(const char *path, int version, const char *dict, const void *data,
          size_t n)
{
  unsigned char *b;
  size_t total = npy_bytes(&b, version, dict, data, n);

  write_file(path, b, total);
  free(b);
}

/* The dict numpy writes for descr and shape, in C order. */
static void
dict_of(char *buf, size_t len, const char *descr, const char *shape)
{
  snprintf(buf, len,
           "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
           shape);
}

/* Deterministic bytes that differ for every sample and position. */
static void
fill(unsigned char *p, size_t n, unsigned seed)
{
  size_t i;

  for (i = 0; i < n; i++)
    p[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 8));
}

/* The error of the last dataset call names the file and says why. */
static void
assert_error(const char *path, const char *why)
{
  const char *e = fl_loader_error(NULL);

  assert_non_null(e);
  if (strstr(e, path) == NULL || strstr(e, why) == NULL)
    fail_msg("error \"%s\" should name %s and say \"%s\"", e, path, why);
}

static void
v1_v2_and_v3_headers_give_the_same_array(void **state)
{
  unsigned char data[2 * 3 * 4], got[12];
  char dir[64], path[128], dict[128];
  flt_baseline base;
  fl_dataset ds;
  size_t nb;
  int v;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  fill(data, sizeof(data), 1);
  dict_of(dict, sizeof(dict), "<f4", "(2, 3)");
  for (v = 1; v <= 3; v++) {
    snprintf(path, sizeof(path), "%s/v%d.npy", dir, v);
    write_npy(path, v, dict, data, sizeof(data));
    assert_int_equal(fl_dataset_npy_array(&ds, path), 0);
    assert_int_equal(ds.len, 2);
    assert_int_equal(ds.sample_bytes, 12);
    nb = ds.sample_bytes;
    assert_int_equal(ds.get(ds.ctx, 1, got, &nb), 0);
    assert_int_equal(nb, 12);
    assert_memory_equal(got, data + 12, 12);
    fl_dataset_close(&ds);
    assert_null(ds.ctx);
  }
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* Big-endian data comes out as stored: forkload does not byte-swap. */
static void
f4_big_endian_i8_and_u1_have_their_item_sizes(void **state)
{
  static const struct {
    const char *descr, *shape;
    size_t len, sample_bytes;
  } cases[] = {
      {"<f4", "(2, 3)", 2, 12},
      {">i8", "(3,)", 3, 8},
      {"|u1", "(4, 5)", 4, 5},
      {"<i2", "(6, 1, 2)", 6, 4},
      {"|b1", "(7,)", 7, 1},
      {"<f8", "(2, 2)", 2, 16},
      {">c16", "(1,)", 1, 16},
  };
  unsigned char data[64], got[64];
  char dir[64], path[128], dict[128];
  flt_baseline base;
  fl_dataset ds;
  size_t i, k, nb;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    size_t n = cases[i].len * cases[i].sample_bytes;

    fill(data, n, (unsigned)i);
    snprintf(path, sizeof(path), "%s/c%zu.npy", dir, i);
    dict_of(dict, sizeof(dict), cases[i].descr, cases[i].shape);
    write_npy(path, 1, dict, data, n);
    assert_int_equal(fl_dataset_npy_array(&ds, path), 0);
    assert_int_equal(ds.len, cases[i].len);
    assert_int_equal(ds.sample_bytes, cases[i].sample_bytes);
    for (k = 0; k < ds.len; k++) {
      nb = ds.sample_bytes;
      assert_int_equal(ds.get(ds.ctx, k, got, &nb), 0);
      assert_memory_equal(got, data + k * nb, nb);
    }
    fl_dataset_close(&ds);
  }
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* One sample per file: a scalar, a vector, a matrix. */
static void
npy_dir_of_scalars_vectors_and_matrices(void **state)
{
  static const struct {
    const char *descr, *shape;
    size_t bytes;
  } cases[] = {
      {"<f8", "()", 8},
      {"<f4", "(3,)", 12},
      {"<i2", "(2, 3)", 12},
      {"|u1", "(2,3,)", 6},
  };
  unsigned char data[3][16], got[16];
  char dir[64], path[128], dict[128];
  flt_baseline base;
  fl_dataset ds;
  size_t i, k, nb;

  (void)state;
  flt_baseline_take(&base);
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    dir_make(dir, sizeof(dir));
    dict_of(dict, sizeof(dict), cases[i].descr, cases[i].shape);
    for (k = 0; k < 3; k++) {
      fill(data[k], cases[i].bytes, (unsigned)(i * 10 + k));
      snprintf(path, sizeof(path), "%s/%zu.npy", dir, k);
      write_npy(path, 1 + (int)(k % 2), dict, data[k], cases[i].bytes);
    }
    assert_int_equal(fl_dataset_npy_dir(&ds, dir), 0);
    assert_int_equal(ds.len, 3);
    assert_int_equal(ds.sample_bytes, cases[i].bytes);
    for (k = 0; k < 3; k++) {
      nb = ds.sample_bytes;
      assert_int_equal(ds.get(ds.ctx, k, got, &nb), 0);
      assert_int_equal(nb, cases[i].bytes);
      assert_memory_equal(got, data[k], nb);
    }
    fl_dataset_close(&ds);
    dir_remove(dir);
  }
  flt_assert_clean(&base);
}

/*
 * Five files written out of order beside files that are not samples, read
 * through two workers in order in batches of 2: sorted by name, byte for
 * byte.
 */
static void
npy_dir_of_five_files_through_two_workers_in_order(void **state)
{
  enum { N = 5, BYTES = 4 * 6 };
  static const char *names[N] = {"d.npy", "b.npy", "e.npy", "a.npy",
                                 "c.npy"};
  unsigned char data[N][BYTES];
  char dir[64], path[128], dict[128];
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  size_t i, seen = 0, k;
  int rc;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  dict_of(dict, sizeof(dict), "<f4", "(2, 3)");
  for (i = 0; i < N; i++) {
    /* Sample k is the k-th name in strcmp order: a..e. */
    k = (size_t)(names[i][0] - 'a');
    fill(data[k], BYTES, (unsigned)k + 100);
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    write_npy(path, 1, dict, data[k], BYTES);
  }
  snprintf(path, sizeof(path), "%s/notes.txt", dir);
  write_file(path, "x", 1);
  snprintf(path, sizeof(path), "%s/._a.npy", dir); /* macOS metadata */
  write_file(path, "junk", 4);
  assert_int_equal(fl_dataset_npy_dir(&ds, dir), 0);
  assert_int_equal(ds.len, N);
  assert_int_equal(ds.sample_bytes, BYTES);
  fl_options_init(&opt);
  opt.num_workers = 2;
  opt.batch_size = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_len(l), 3);
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) == 1) {
    for (i = 0; i < fl_batch_count(b); i++, seen++) {
      assert_int_equal(fl_batch_indices(b)[i], seen);
      assert_int_equal(fl_batch_sizes(b)[i], BYTES);
      assert_memory_equal((const unsigned char *)fl_batch_data(b) +
                              i * BYTES,
                          data[seen], BYTES);
    }
    fl_batch_release(b);
  }
  assert_int_equal(rc, 0);
  assert_int_equal(seen, N);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* A 2-d array shuffled through workers: every row once, each intact. */
static void
npy_array_shuffled_through_workers_gives_every_row_once(void **state)
{
  enum { N = 103, ROW = 5 * 8 };
  unsigned char *data, seen[N];
  char dir[64], path[128], dict[128];
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  size_t i, idx, total = 0;
  int rc, epoch;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  data = malloc(N * ROW);
  assert_non_null(data);
  fill(data, N * ROW, 7);
  snprintf(path, sizeof(path), "%s/big.npy", dir);
  snprintf(dict, sizeof(dict),
           "{'descr': '<i8', 'fortran_order': False, 'shape': (%d, 5), }",
           N);
  write_npy(path, 2, dict, data, N * ROW);
  assert_int_equal(fl_dataset_npy_array(&ds, path), 0);
  assert_int_equal(ds.len, N);
  assert_int_equal(ds.sample_bytes, ROW);
  assert_non_null(ds.get_batch);
  fl_options_init(&opt);
  opt.num_workers = 2;
  opt.batch_size = 8;
  opt.shuffle = 1;
  opt.seed = 42;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  for (epoch = 0; epoch < 2; epoch++) {
    memset(seen, 0, sizeof(seen));
    assert_int_equal(fl_loader_begin(l), 0);
    while ((rc = fl_loader_next(l, &b)) == 1) {
      for (i = 0; i < fl_batch_count(b); i++, total++) {
        idx = fl_batch_indices(b)[i];
        assert_true(idx < N);
        seen[idx]++;
        assert_memory_equal((const unsigned char *)fl_batch_data(b) +
                                i * ROW,
                            data + idx * ROW, ROW);
      }
      fl_batch_release(b);
    }
    assert_int_equal(rc, 0);
    for (i = 0; i < N; i++)
      assert_int_equal(seen[i], 1);
  }
  assert_int_equal(total, 2 * N);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  free(data);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/*
 * X.npy (rows of 5 float32) and y.npy (one int64 label per row) zipped:
 * field 0 is the inputs and field 1 the labels, each batched into its own
 * array, through get_fields (no get_batch) and get_batch, shuffled.
 */
static void
npy_zip_of_inputs_and_labels_gives_both_fields_of_every_row(void **state)
{
  enum { N = 97, XROW = 5 * 4 };
  unsigned char x[N * XROW];
  int64_t y[N];
  char dir[64], px[128], py[128], dict[128];
  const char *paths[2] = {px, py};
  unsigned char seen[N];
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  size_t i, idx, round;
  int rc;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  fill(x, sizeof(x), 3);
  for (i = 0; i < N; i++)
    y[i] = (int64_t)(i * 1000 + 7);
  snprintf(px, sizeof(px), "%s/X.npy", dir);
  snprintf(py, sizeof(py), "%s/y.npy", dir);
  snprintf(dict, sizeof(dict),
           "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 5), }", N);
  write_npy(px, 1, dict, x, sizeof(x));
  snprintf(dict, sizeof(dict),
           "{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }", N);
  write_npy(py, 1, dict, y, sizeof(y));
  assert_int_equal(fl_dataset_npy_zip(&ds, paths, 2), 0);
  assert_int_equal(ds.len, N);
  assert_int_equal(ds.nfields, 2);
  assert_int_equal(ds.field_bytes[0], XROW);
  assert_int_equal(ds.field_bytes[1], 8);
  assert_int_equal(ds.sample_bytes, XROW + 8);
  for (round = 0; round < 2; round++) {
    /* Without get_batch, the workers call get_fields. */
    if (round == 1)
      ds.get_batch = NULL;
    fl_options_init(&opt);
    opt.num_workers = 2;
    opt.batch_size = 8;
    opt.shuffle = 1;
    assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
    memset(seen, 0, sizeof(seen));
    assert_int_equal(fl_loader_begin(l), 0);
    while ((rc = fl_loader_next(l, &b)) == 1) {
      for (i = 0; i < fl_batch_count(b); i++) {
        idx = fl_batch_indices(b)[i];
        seen[idx]++;
        assert_memory_equal((const unsigned char *)fl_batch_field(b, 0) +
                                i * fl_batch_stride(b, 0),
                            x + idx * XROW, XROW);
        assert_memory_equal((const unsigned char *)fl_batch_field(b, 1) +
                                i * fl_batch_stride(b, 1),
                            &y[idx], 8);
      }
      fl_batch_release(b);
    }
    assert_int_equal(rc, 0);
    for (i = 0; i < N; i++)
      assert_int_equal(seen[i], 1);
    fl_loader_destroy(l);
  }
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

static void
npy_zip_refuses_arrays_of_other_lengths_naming_both(void **state)
{
  unsigned char data[64 * 4];
  char dir[64], pa[128], pb[128], dict[128];
  const char *paths[3] = {pa, pb, NULL};
  fl_dataset ds;

  (void)state;
  dir_make(dir, sizeof(dir));
  fill(data, sizeof(data), 1);
  snprintf(pa, sizeof(pa), "%s/a.npy", dir);
  snprintf(pb, sizeof(pb), "%s/b.npy", dir);
  dict_of(dict, sizeof(dict), "|u1", "(64, 4)");
  write_npy(pa, 1, dict, data, 256);
  dict_of(dict, sizeof(dict), "|u1", "(63, 4)");
  write_npy(pb, 1, dict, data, 252);
  assert_int_equal(fl_dataset_npy_zip(&ds, paths, 2), FL_EINVAL);
  assert_error(pb, "has 63 rows but");
  assert_error(pa, "has 64");
  assert_null(ds.ctx);
  assert_int_equal(fl_dataset_npy_zip(&ds, paths, 3), FL_EINVAL);
  assert_string_equal(fl_loader_error(NULL),
                      "fl_dataset_npy_zip: paths[2] is NULL");
  assert_int_equal(fl_dataset_npy_zip(&ds, paths, 0), FL_EINVAL);
  /* A 0.1 fl_dataset has no room for fields. */
  assert_int_equal(fl_dataset_npy_zip_sized(&ds, FL__DATASET_SIZE_0_1,
                                            paths, 1),
                   FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "too old to hold fields"));
  dir_remove(dir);
}

/* Runs of consecutive indices, repeats, reversals and a lone index. */
static void
get_batch_runs_match_get(void **state)
{
  enum { N = 20, SB = 6 };
  static const size_t idx[] = {3, 4, 5, 6, 9, 0, 1, 7, 7, 2, 19, 18, 10,
                               11, 12, 13, 14, 15, 16, 17, 19};
  enum { NIDX = sizeof(idx) / sizeof(idx[0]) };
  unsigned char data[N * SB], batch[NIDX * SB], one[SB];
  size_t sizes[NIDX], i, nb, bad = 20;
  char dir[64], path[128];
  flt_baseline base;
  fl_dataset ds;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  fill(data, sizeof(data), 3);
  snprintf(path, sizeof(path), "%s/records.bin", dir);
  write_file(path, data, sizeof(data));
  assert_int_equal(fl_dataset_raw(&ds, path, SB, 0), 0);
  for (i = 0; i < NIDX; i++)
    sizes[i] = SB;
  assert_int_equal(ds.get_batch(ds.ctx, idx, NIDX, batch, sizes), 0);
  for (i = 0; i < NIDX; i++) {
    nb = SB;
    assert_int_equal(ds.get(ds.ctx, idx[i], one, &nb), 0);
    assert_int_equal(sizes[i], SB);
    assert_memory_equal(batch + i * SB, one, SB);
    assert_memory_equal(one, data + idx[i] * SB, SB);
  }
  /* An index past the end is an error, in either call, not a read. */
  nb = SB;
  assert_int_not_equal(ds.get(ds.ctx, N, one, &nb), 0);
  assert_int_not_equal(ds.get_batch(ds.ctx, &bad, 1, batch, sizes), 0);
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* Records after a header, read directly and through workers. */
static void
raw_records_after_a_header(void **state)
{
  enum { HDR = 13, N = 9, RB = 10 };
  unsigned char file[HDR + N * RB], got[RB];
  char dir[64], path[128];
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  size_t i, nb, seen = 0;
  int rc;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  fill(file, sizeof(file), 9);
  snprintf(path, sizeof(path), "%s/records.bin", dir);
  write_file(path, file, sizeof(file));
  assert_int_equal(fl_dataset_raw(&ds, path, RB, HDR), 0);
  assert_int_equal(ds.len, N);
  assert_int_equal(ds.sample_bytes, RB);
  for (i = 0; i < N; i++) {
    nb = RB;
    assert_int_equal(ds.get(ds.ctx, i, got, &nb), 0);
    assert_memory_equal(got, file + HDR + i * RB, RB);
  }
  fl_options_init(&opt);
  opt.num_workers = 2;
  opt.batch_size = 4;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) == 1) {
    for (i = 0; i < fl_batch_count(b); i++, seen++)
      assert_memory_equal((const unsigned char *)fl_batch_data(b) + i * RB,
                          file + HDR + seen * RB, RB);
    fl_batch_release(b);
  }
  assert_int_equal(rc, 0);
  assert_int_equal(seen, N);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

static void
raw_rejects_bad_sizes_naming_the_file(void **state)
{
  unsigned char file[100];
  char dir[64], path[128], missing[128];
  flt_baseline base;
  fl_dataset ds;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  fill(file, sizeof(file), 1);
  snprintf(path, sizeof(path), "%s/records.bin", dir);
  write_file(path, file, sizeof(file));
  assert_int_equal(fl_dataset_raw(&ds, path, 0, 0), -EINVAL);
  assert_error(path, "record_bytes is 0");
  assert_int_equal(fl_dataset_raw(&ds, path, 10, 101), -EINVAL);
  assert_error(path, "header_bytes 101 is larger than the file (100 bytes)");
  assert_int_equal(fl_dataset_raw(&ds, path, 10, 100), -EINVAL);
  assert_error(path, "holds no records");
  assert_int_equal(fl_dataset_raw(&ds, path, 7, 4), -EINVAL);
  assert_error(path, "holds 96 bytes after the header, not a multiple of "
                     "record_bytes 7");
  assert_null(ds.ctx);
  snprintf(missing, sizeof(missing), "%s/nothing.bin", dir);
  assert_int_equal(fl_dataset_raw(&ds, missing, 4, 0), -ENOENT);
  assert_error(missing, "cannot open");
  assert_int_equal(fl_dataset_raw(&ds, dir, 4, 0), -EINVAL);
  assert_error(dir, "not a regular file");
  write_file(path, "", 0);
  assert_int_equal(fl_dataset_raw(&ds, path, 4, 0), -EINVAL);
  assert_error(path, "empty");
  assert_int_equal(fl_dataset_raw(&ds, NULL, 4, 0), -EINVAL);
  assert_int_equal(fl_dataset_raw(NULL, path, 4, 0), -EINVAL);
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* A file whose bytes are built by hand, and the reason it must be refused. */
struct bad_file {
  const char *what;
  int version;
  const char *dict; /* NULL: raw bytes below */
  size_t data_bytes;
  const char *raw;
  size_t raw_len;
  const char *why;
};

static const struct bad_file bad_files[] = {
    {"not NPY", 0, NULL, 0, "PK\3\4 a zip file", 16, "not an NPY file"},
    {"cut in the magic", 0, NULL, 0, "\x93NUM", 4, "not an NPY file"},
    {"cut in the version", 0, NULL, 0, "\x93NUMPY\1", 7,
     "ends inside its version"},
    {"cut in the length", 0, NULL, 0, "\x93NUMPY\2\0\x10\0", 10,
     "ends inside its header length"},
    {"version 4.0", 0, NULL, 0, "\x93NUMPY\4\0\x10\0", 10,
     "version 4.0 is not supported"},
    {"header length past the file", 0, NULL, 0,
     "\x93NUMPY\1\0\xff\0{'descr': '<f4'", 24, "runs past the end"},
    {"huge v2 header length", 0, NULL, 0, "\x93NUMPY\2\0\xff\xff\xff\x7f{",
     13, "implausible"},
    {"short data", 1, "{'descr': '<f4', 'fortran_order': False, "
     "'shape': (10, 3), }", 96, NULL, 0,
     "says shape (10, 3) of '<f4' but the file holds 96 bytes of data, "
     "not 120"},
    {"too much data", 1, "{'descr': '<f4', 'fortran_order': False, "
     "'shape': (2,), }", 9, NULL, 0, "holds 9 bytes of data, not 8"},
    {"shape overflows size_t", 1, "{'descr': '<f8', 'fortran_order': False, "
     "'shape': (4294967296, 4294967296), }", 8, NULL, 0,
     "the shape's product overflows"},
    {"data size overflows", 1, "{'descr': '<f8', 'fortran_order': False, "
     "'shape': (18446744073709551615,), }", 8, NULL, 0,
     "the data size overflows"},
    {"dimension past size_t", 1, "{'descr': '<f8', 'fortran_order': False, "
     "'shape': (99999999999999999999999,), }", 8, NULL, 0,
     "does not fit in size_t"},
    {"negative dimension", 1, "{'descr': '<f8', 'fortran_order': False, "
     "'shape': (-1,), }", 8, NULL, 0, "non-negative integer"},
    {"unknown dtype", 1, "{'descr': '<f3', 'fortran_order': False, "
     "'shape': (1,), }", 3, NULL, 0, "dtype '<f3' is unknown"},
    {"unknown kind", 1, "{'descr': '<q8', 'fortran_order': False, "
     "'shape': (1,), }", 8, NULL, 0, "dtype '<q8' is unknown"},
    {"object dtype", 1, "{'descr': '|O', 'fortran_order': False, "
     "'shape': (1,), }", 8, NULL, 0, "Python objects"},
    {"string dtype", 1, "{'descr': '<U10', 'fortran_order': False, "
     "'shape': (1,), }", 40, NULL, 0, "holds strings"},
    {"structured dtype", 1, "{'descr': [('x', '<f4'), ('y', '<f4')], "
     "'fortran_order': False, 'shape': (1,), }", 8, NULL, 0,
     "structured"},
    {"datetime dtype", 1, "{'descr': '<M8[ns]', 'fortran_order': False, "
     "'shape': (1,), }", 8, NULL, 0, "date or time"},
    {"Fortran order", 1, "{'descr': '<f4', 'fortran_order': True, "
     "'shape': (2, 3), }", 24, NULL, 0, "Fortran order is not supported"},
    {"no shape", 1, "{'descr': '<f4', 'fortran_order': False, }", 4, NULL,
     0, "lacks the key 'shape'"},
    {"no descr", 1, "{'fortran_order': False, 'shape': (1,), }", 4, NULL, 0,
     "lacks the key 'descr'"},
    {"no fortran_order", 1, "{'descr': '<f4', 'shape': (1,)}", 4, NULL, 0,
     "lacks the key 'fortran_order'"},
    {"unknown key", 1, "{'descr': '<f4', 'fortran_order': False, "
     "'shape': (1,), 'pickle': 1}", 4, NULL, 0, "unknown key 'pickle'"},
    {"twice a key", 1, "{'descr': '<f4', 'descr': '<f4', "
     "'fortran_order': False, 'shape': (1,)}", 4, NULL, 0, "appears twice"},
    {"garbage in the dict", 1, "{'descr': '<f4', 'fortran_order': False, "
     "'shape': (1,), garbage}", 4, NULL, 0, "not a valid dict"},
    {"garbage after the dict", 1, "{'descr': '<f4', 'fortran_order': False, "
     "'shape': (1,)} x", 4, NULL, 0, "only blanks after the dict"},
    {"not a dict", 1, "['descr', '<f4']", 4, NULL, 0, "'{' to open"},
    {"unclosed string", 1, "{'descr': '<f4", 4, NULL, 0,
     "not a valid dict"},
    {"unclosed dict", 1, "{'descr': '<f4', 'fortran_order': False, "
     "'shape': (1,), ", 4, NULL, 0, "the end of the header"},
    {"shape not a tuple", 1, "{'descr': '<f4', 'fortran_order': False, "
     "'shape': (3), }", 12, NULL, 0, "not a tuple"},
    {"shape a list", 1, "{'descr': '<f4', 'fortran_order': False, "
     "'shape': [3], }", 12, NULL, 0, "'(' to open the shape"},
    {"fortran_order not a bool", 1, "{'descr': '<f4', 'fortran_order': 0, "
     "'shape': (3,), }", 12, NULL, 0, "True or False"},
    {"NUL inside the header", 0, NULL, 0,
     "\x93NUMPY\1\0\x06\0{'des\0", 16, "not a valid dict"},
};

static size_t
bad_file_bytes(const struct bad_file *c, unsigned char **out)
{
  unsigned char *data;
  size_t n;

  if (c->dict == NULL) {
    *out = malloc(c->raw_len);
    assert_non_null(*out);
    memcpy(*out, c->raw, c->raw_len);
    return c->raw_len;
  }
  data = calloc(1, c->data_bytes + 1);
  assert_non_null(data);
  n = npy_bytes(out, c->version, c->dict, data, c->data_bytes);
  free(data);
  return n;
}

/* As one array, and as the second file of a directory whose first is good. */
static void
malformed_npy_files_are_refused_naming_the_file_and_why(void **state)
{
  unsigned char *bytes, good[12];
  char dir[64], path[128], other[128], dict[128];
  flt_baseline base;
  fl_dataset ds;
  size_t i, n;

  (void)state;
  flt_baseline_take(&base);
  fill(good, sizeof(good), 5);
  dict_of(dict, sizeof(dict), "<f4", "(3,)");
  for (i = 0; i < sizeof(bad_files) / sizeof(bad_files[0]); i++) {
    const struct bad_file *c = &bad_files[i];

    print_message("# %s\n", c->what);
    dir_make(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/b.npy", dir);
    n = bad_file_bytes(c, &bytes);
    write_file(path, bytes, n);
    free(bytes);
    assert_int_equal(fl_dataset_npy_array(&ds, path), -EINVAL);
    assert_error(path, c->why);
    assert_null(ds.ctx);
    snprintf(other, sizeof(other), "%s/a.npy", dir);
    write_npy(other, 1, dict, good, sizeof(good));
    assert_int_equal(fl_dataset_npy_dir(&ds, dir), -EINVAL);
    assert_error(path, c->why);
    assert_null(ds.ctx);
    dir_remove(dir);
  }
  flt_assert_clean(&base);
}

static void
npy_array_needs_a_sample_axis_with_samples_of_some_bytes(void **state)
{
  static const struct {
    const char *shape, *why;
  } cases[] = {
      {"()", "0-d array"},
      {"(0, 3)", "holds no samples"},
      {"(4, 0)", "each sample holds no bytes"},
  };
  unsigned char data[8] = {0};
  char dir[64], path[128], dict[128];
  flt_baseline base;
  fl_dataset ds;
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    snprintf(path, sizeof(path), "%s/%zu.npy", dir, i);
    dict_of(dict, sizeof(dict), "<f8", cases[i].shape);
    write_npy(path, 1, dict, data, i == 0 ? 8 : 0);
    assert_int_equal(fl_dataset_npy_array(&ds, path), -EINVAL);
    assert_error(path, cases[i].why);
  }
  /* A 1-d array: each sample is one item. */
  snprintf(path, sizeof(path), "%s/vec.npy", dir);
  dict_of(dict, sizeof(dict), "<i2", "(4,)");
  write_npy(path, 1, dict, data, 8);
  assert_int_equal(fl_dataset_npy_array(&ds, path), 0);
  assert_int_equal(ds.len, 4);
  assert_int_equal(ds.sample_bytes, 2);
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

static void
npy_dir_refuses_mismatches_naming_both_files(void **state)
{
  static const struct {
    const char *descr, *shape, *why;
  } cases[] = {
      {"<f4", "(3, 2)", "shape (3, 2) differ from"},
      {"<i4", "(2, 3)", "dtype '<i4' and shape (2, 3) differ from"},
      {">f4", "(2, 3)", "dtype '>f4'"},
      {"<f4", "(6,)", "shape (6,) differ"},
  };
  unsigned char data[24] = {0};
  char dir[64], a[128], c[128], dict[128];
  flt_baseline base;
  fl_dataset ds;
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    dir_make(dir, sizeof(dir));
    dict_of(dict, sizeof(dict), "<f4", "(2, 3)");
    snprintf(a, sizeof(a), "%s/a.npy", dir);
    write_npy(a, 1, dict, data, 24);
    snprintf(c, sizeof(c), "%s/b.npy", dir);
    write_npy(c, 1, dict, data, 24);
    snprintf(c, sizeof(c), "%s/c.npy", dir);
    dict_of(dict, sizeof(dict), cases[i].descr, cases[i].shape);
    write_npy(c, 2, dict, data, 24);
    assert_int_equal(fl_dataset_npy_dir(&ds, dir), -EINVAL);
    assert_error(c, cases[i].why);
    assert_error(a, "dtype '<f4' and shape (2, 3)");
    assert_null(ds.ctx);
    dir_remove(dir);
  }
  flt_assert_clean(&base);
}

static void
npy_dir_refuses_empty_missing_and_sample_free_directories(void **state)
{
  unsigned char data[4] = {0};
  char dir[64], path[128], dict[128];
  flt_baseline base;
  fl_dataset ds;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  assert_int_equal(fl_dataset_npy_dir(&ds, dir), -EINVAL);
  assert_error(dir, "holds no .npy file");
  snprintf(path, sizeof(path), "%s/readme.txt", dir);
  write_file(path, "hi", 2);
  snprintf(path, sizeof(path), "%s/.npy", dir);
  write_file(path, "hi", 2);
  assert_int_equal(fl_dataset_npy_dir(&ds, dir), -EINVAL);
  assert_error(dir, "holds no .npy file");
  /* Samples of no bytes cannot be loaded. */
  snprintf(path, sizeof(path), "%s/z.npy", dir);
  dict_of(dict, sizeof(dict), "<f4", "(0,)");
  write_npy(path, 1, dict, data, 0);
  assert_int_equal(fl_dataset_npy_dir(&ds, dir), -EINVAL);
  assert_error(path, "holds no data");
  unlink(path);
  /* A directory named like a sample. */
  assert_int_equal(mkdir(path, 0700), 0);
  assert_int_equal(fl_dataset_npy_dir(&ds, dir), -EINVAL);
  assert_error(path, "not a regular file");
  rmdir(path);
  /* A FIFO named like a sample: refused at once, not waited on. */
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(fl_dataset_npy_dir(&ds, dir), -EINVAL);
  assert_error(path, "not a regular file");
  unlink(path);
  snprintf(path, sizeof(path), "%s/absent", dir);
  assert_int_equal(fl_dataset_npy_dir(&ds, path), -ENOENT);
  assert_error(path, "cannot open the directory");
  assert_int_equal(fl_dataset_npy_dir(&ds, NULL), -EINVAL);
  assert_int_equal(fl_dataset_npy_dir(NULL, dir), -EINVAL);
  assert_int_equal(fl_dataset_npy_array(&ds, NULL), -EINVAL);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/*
 * A mapped dataset file cut short under the workers: the worker that reads
 * past its new end dies of SIGBUS, and the report names the file and says
 * it shrank, instead of blaming /dev/shm.
 */
static void
npy_array_truncated_under_its_workers_is_told_as_such(void **state)
{
  enum { N = 64, ROW = 4096 };
  unsigned char *data = malloc(N * ROW);
  char dir[64], path[128], dict[128];
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  assert_non_null(data);
  fill(data, N * ROW, 9);
  snprintf(path, sizeof(path), "%s/rows.npy", dir);
  snprintf(dict, sizeof(dict),
           "{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d), }", N,
           ROW);
  write_npy(path, 1, dict, data, N * ROW);
  assert_int_equal(fl_dataset_npy_array(&ds, path), 0);
  fl_options_init(&opt);
  opt.batch_size = 8;
  opt.num_workers = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  /* Cut to its header: every row now lies past the end. */
  assert_int_equal(truncate(path, 128), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  flt_drain(l, FL_EWORKER);
  if (strstr(fl_loader_error(l), "(SIGBUS: ") == NULL ||
      strstr(fl_loader_error(l), path) == NULL ||
      strstr(fl_loader_error(l), "shrank") == NULL ||
      strstr(fl_loader_error(l), "/dev/shm") != NULL)
    fail_msg("%s", fl_loader_error(l));
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  free(data);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/*
 * A file cut short after the dataset was opened: that sample's batch is an
 * error that names the file, and the epoch goes on.
 */
static void
npy_dir_file_changed_after_open_is_that_batch_error(void **state)
{
  enum { N = 6, BYTES = 16 };
  unsigned char data[BYTES], got[BYTES];
  char dir[64], path[N][128], dict[128];
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  size_t i, nb;
  int rc, n = 0, errors = 0;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  dict_of(dict, sizeof(dict), "<u2", "(8,)");
  for (i = 0; i < N; i++) {
    fill(data, BYTES, (unsigned)i);
    snprintf(path[i], sizeof(path[i]), "%s/%02zu.npy", dir, i);
    write_npy(path[i], 1, dict, data, BYTES);
  }
  assert_int_equal(fl_dataset_npy_dir(&ds, dir), 0);
  assert_int_equal(truncate(path[3], 64 + 5), 0);
  assert_int_equal(unlink(path[5]), 0);
  nb = BYTES;
  assert_int_not_equal(ds.get(ds.ctx, 3, got, &nb), 0);
  assert_int_not_equal(ds.get(ds.ctx, 5, got, &nb), 0);
  fl_options_init(&opt);
  opt.num_workers = 2;
  opt.batch_size = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    if (n == 1 || n == 2) { /* indices 2-3, 4-5 */
      assert_int_equal(rc, FL_EDATASET);
      assert_non_null(strstr(fl_loader_error(l), path[n == 1 ? 3 : 5]));
      errors++;
    } else {
      assert_int_equal(rc, 1);
      fl_batch_release(b);
    }
    n++;
  }
  assert_int_equal(n, 3);
  assert_int_equal(errors, 2);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/*
 * Each builder's error and the worker's, with a file 4 KiB deep: the
 * message is shortened in the middle of its paths (two of them for
 * npy_zip), and its end, the cause, arrives.
 */
static void
errors_quoting_a_4_kib_path_end_with_their_cause(void **state)
{
  char dir[64], *deep, a[4096], b[4096], dict[128], msg[FL__ERRMSG_MAX];
  const char *zip[2] = {a, b};
  unsigned char data[16] = {0};
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  deep = flt_long_dir(dir);
  assert_int_equal(fl_dataset_npy_dir(&ds, deep), FL_EINVAL);
  flt_assert_ends_with(fl_loader_error(NULL),
                       ": the directory holds no .npy file");
  snprintf(a, sizeof(a), "%s/none.bin", deep);
  assert_int_equal(fl_dataset_raw(&ds, a, 8, 0), -ENOENT);
  flt_assert_ends_with(fl_loader_error(NULL),
                       "/none.bin: cannot open: No such file or directory");
  snprintf(a, sizeof(a), "%s/text.npy", deep);
  write_file(a, "not numpy", 9);
  assert_int_equal(fl_dataset_npy_array(&ds, a), FL_EINVAL);
  flt_assert_ends_with(fl_loader_error(NULL), "/text.npy: not an NPY file "
                       "(it does not start with the magic \\x93NUMPY)");
  unlink(a);
  dict_of(dict, sizeof(dict), "<u1", "(2, 8)");
  snprintf(a, sizeof(a), "%s/two.npy", deep);
  write_npy(a, 1, dict, data, 16);
  dict_of(dict, sizeof(dict), "<u1", "(1, 8)");
  snprintf(b, sizeof(b), "%s/one.npy", deep);
  write_npy(b, 1, dict, data, 8);
  assert_int_equal(fl_dataset_npy_zip(&ds, zip, 2), FL_EINVAL);
  flt_assert_ends_with(fl_loader_error(NULL), "/two.npy has 2: every array "
                       "of a zip must have the same first dimension");
  /* Shortened: the path cannot fit whole. */
  assert_non_null(strstr(fl_loader_error(NULL), "..."));
  /* The worker's: a file gone since the dataset was made. */
  unlink(a);
  unlink(b);
  snprintf(a, sizeof(a), "%s/sample.npy", deep);
  dict_of(dict, sizeof(dict), "<u1", "(8,)");
  write_npy(a, 1, dict, data, 8);
  assert_int_equal(fl_dataset_npy_dir(&ds, deep), 0);
  unlink(a);
  fl_options_init(&opt);
  opt.num_workers = 1;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(flt_epoch_error(l, msg, sizeof(msg)), FL_EDATASET);
  flt_assert_ends_with(msg, "/sample.npy: cannot open: No such file or "
                       "directory");
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  free(deep);
  assert_int_equal(flt_rm_tree(dir), 0);
  flt_assert_clean(&base);
}

static void
close_is_safe_on_null_zeroed_and_closed_datasets(void **state)
{
  flt_baseline base;
  fl_dataset ds = {0};

  (void)state;
  flt_baseline_take(&base);
  fl_dataset_close(NULL);
  fl_dataset_close(&ds);
  fl_dataset_close(&ds);
  assert_null(ds.ctx);
  flt_assert_clean(&base);
}

/*
 * The parser on thousands of mutations of good headers (the fuzzer's job
 * in miniature, run by make check): it returns, and what it accepts adds
 * up.
 */
static void
parser_survives_mutated_headers(void **state)
{
  static const char *dicts[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      "{'descr': '|u1', 'fortran_order': False, 'shape': (), }",
      "{\"shape\": (7L,), \"fortran_order\": False, \"descr\": \">i8\"}",
  };
  unsigned char *b, *m, *cut;
  struct fl__npy h;
  char err[256];
  uint64_t x = 0x9e3779b97f4a7c15ull;
  size_t i, n, k, at, len;
  int round, rc;

  (void)state;
  for (i = 0; i < sizeof(dicts) / sizeof(dicts[0]); i++) {
    n = npy_bytes(&b, 1 + (int)i, dicts[i], NULL, 0);
    assert_int_equal(fl__npy_parse(b, n, &h, err, sizeof(err)), 0);
    for (round = 0; round < 3000; round++) {
      m = malloc(n);
      assert_non_null(m);
      memcpy(m, b, n);
      for (k = 0; k < 1 + (size_t)round % 4; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        at = (size_t)(x % n);
        m[at] = (unsigned char)(x >> 32);
      }
      /* Exactly len bytes: a read past them is AddressSanitizer's. */
      len = (size_t)(x >> 40) % (n + 1);
      cut = malloc(len + !len);
      assert_non_null(cut);
      memcpy(cut, m, len);
      rc = fl__npy_parse(cut, len, &h, err, sizeof(err));
      free(cut);
      if (rc == 0) {
        assert_true(h.data_offset <= len);
        assert_true(h.ndim <= FL__NPY_MAX_DIMS);
        assert_true(h.item_bytes >= 1 && h.item_bytes <= 32);
      } else {
        assert_true(strlen(err) > 0);
      }
      free(m);
    }
    free(b);
  }
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(v1_v2_and_v3_headers_give_the_same_array),
      cmocka_unit_test(f4_big_endian_i8_and_u1_have_their_item_sizes),
      cmocka_unit_test(npy_dir_of_scalars_vectors_and_matrices),
      cmocka_unit_test(npy_dir_of_five_files_through_two_workers_in_order),
      cmocka_unit_test(
          npy_array_shuffled_through_workers_gives_every_row_once),
      cmocka_unit_test(get_batch_runs_match_get),
      cmocka_unit_test(
          npy_zip_of_inputs_and_labels_gives_both_fields_of_every_row),
      cmocka_unit_test(npy_zip_refuses_arrays_of_other_lengths_naming_both),
      cmocka_unit_test(raw_records_after_a_header),
      cmocka_unit_test(raw_rejects_bad_sizes_naming_the_file),
      cmocka_unit_test(
          malformed_npy_files_are_refused_naming_the_file_and_why),
      cmocka_unit_test(
          npy_array_needs_a_sample_axis_with_samples_of_some_bytes),
      cmocka_unit_test(npy_dir_refuses_mismatches_naming_both_files),
      cmocka_unit_test(
          npy_dir_refuses_empty_missing_and_sample_free_directories),
      cmocka_unit_test(npy_dir_file_changed_after_open_is_that_batch_error),
      cmocka_unit_test(
          npy_array_truncated_under_its_workers_is_told_as_such),
      cmocka_unit_test(errors_quoting_a_4_kib_path_end_with_their_cause),
      cmocka_unit_test(close_is_safe_on_null_zeroed_and_closed_datasets),
      cmocka_unit_test(parser_survives_mutated_headers),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
