/*
 * fl_dataset_lmdb: a database python3-lmdb wrote (tests/golden/lmdb.mdb,
 * by tools/golden_lmdb.py, with the order its cursor walks in
 * tests/golden/lmdb.txt) read in that order with every byte; databases
 * written here with liblmdb for the rest: sizes, a value too large for
 * its room, bad paths, a 0.1-sized fl_dataset, worker counts, ranks, a
 * resumed epoch, the sparse index (its size, binary keys of every length
 * about its interval) and a database changed after create.  Each
 * case's database goes to a fresh folder under /tmp, removed at its end.
 * Without liblmdb the program checks that the dataset says FL_ENOTSUP,
 * naming the package, and skips the rest.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef HAVE_LMDB
#include <lmdb.h>
#endif

#include "common.h"
#include "datasets/dataset.h"
#include "internal.h"

#ifdef HAVE_LMDB
/* Byte j of the value put with `seed`, here as in tools/golden_lmdb.py. */
static unsigned char
byte_of(size_t seed, size_t j)
{
  return (unsigned char)((seed * 131 + j * 7) & 0xff);
}

/* The value of `seed`, its size, then zeros to the end of its room. */
static int
value_ok(const unsigned char *p, size_t size, size_t room, size_t seed)
{
  size_t j;

  for (j = 0; j < room; j++)
    if (p[j] != (j < size ? byte_of(seed, j) : 0))
      return 0;
  return 1;
}

static char case_dir[64];

/* After every case: what it left in /tmp goes. */
static int
teardown(void **state)
{
  (void)state;
  if (case_dir[0] != '\0')
    flt_rm_tree(case_dir);
  case_dir[0] = '\0';
  return 0;
}

static const char *
dir_make(void)
{
  snprintf(case_dir, sizeof(case_dir), "/tmp/fl-lmdb-test-XXXXXX");
  assert_non_null(mkdtemp(case_dir));
  return case_dir;
}

/*
 * A database at case_dir/name of n keys "%08zu", value i of size(i) bytes
 * from seed i, put in reverse order so that key order is not put order.
 */
static const char *
db_write(const char *name, size_t n, size_t (*size)(size_t))
{
  static char path[PATH_MAX];
  unsigned char *buf = malloc(1 << 16);
  char key[32];
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  MDB_val k, v;
  size_t i, j;

  assert_non_null(buf);
  snprintf(path, sizeof(path), "%s/%s", case_dir, name);
  assert_int_equal(mkdir(path, 0755), 0);
  assert_int_equal(mdb_env_create(&env), 0);
  assert_int_equal(mdb_env_set_mapsize(env, 64 << 20), 0);
  assert_int_equal(mdb_env_open(env, path, 0, 0644), 0);
  assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
  assert_int_equal(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
  for (i = n; i-- > 0;) {
    k.mv_size = (size_t)snprintf(key, sizeof(key), "%08zu", i);
    k.mv_data = key;
    v.mv_size = size(i);
    assert_true(v.mv_size <= (1 << 16));
    for (j = 0; j < v.mv_size; j++)
      buf[j] = byte_of(i, j);
    v.mv_data = buf;
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
  }
  assert_int_equal(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
  free(buf);
  return path;
}

static size_t
size_varied(size_t i)
{
  return i == 7 ? 9000 : (i * 97) % 3000; /* 9000: overflow pages */
}

static size_t
size_8(size_t i)
{
  (void)i;
  return 8;
}

static size_t
size_100(size_t i)
{
  return i == 13 ? 300 : 100;
}

/* What a loader handed out: every sample's index, size and bytes. */
struct run {
  size_t n, room;
  size_t idx[256], size[256];
  unsigned char *bytes;
};

static void
take(struct run *r, fl_batch *b)
{
  const unsigned char *p = fl_batch_data(b);
  size_t i, count = fl_batch_count(b);

  assert_true(r->n + count <= 256);
  for (i = 0; i < count; i++, r->n++) {
    r->idx[r->n] = fl_batch_indices(b)[i];
    r->size[r->n] = fl_batch_sizes(b)[i];
    memcpy(r->bytes + r->n * r->room, p + i * r->room, r->room);
  }
}

static void
run_init(struct run *r, size_t room)
{
  r->n = 0;
  r->room = room;
  r->bytes = malloc(256 * room);
  assert_non_null(r->bytes);
}

/* Each sample is the value of its index's key, sized as db_write put it. */
static void
run_check(const struct run *r, size_t (*size)(size_t))
{
  size_t i;

  for (i = 0; i < r->n; i++) {
    assert_int_equal(r->size[i], size(r->idx[i]));
    if (!value_ok(r->bytes + i * r->room, r->size[i], r->room, r->idx[i]))
      fail_msg("sample %zu (index %zu) is not its key's value", i,
               r->idx[i]);
  }
}

static void
drain(fl_loader *l, struct run *r)
{
  fl_batch *b;
  int rc;

  while ((rc = fl_loader_next(l, &b)) == 1) {
    take(r, b);
    fl_batch_release(b);
  }
  if (rc != 0)
    fail_msg("fl_loader_next returned %d: %s", rc, fl_loader_error(l));
}

static void
options(fl_options *opt, unsigned workers, size_t batch)
{
  fl_options_init(opt);
  opt->num_workers = workers;
  opt->batch_size = batch;
  opt->timeout_ms = 20000;
}

static void
golden_database_comes_in_python_lmdbs_key_order_values_exact(void **state)
{
  char path[PATH_MAX], line[256], hex[64];
  const char *dir = getenv("srcdir");
  size_t size[16], seed[16], n = 0, i;
  flt_baseline base;
  fl_dataset ds;
  fl_options opt;
  fl_loader *l;
  struct run r;
  FILE *f;

  (void)state;
  flt_baseline_take(&base);
  snprintf(path, sizeof(path), "%s/tests/golden/lmdb.txt", dir ? dir : ".");
  assert_non_null(f = fopen(path, "r"));
  while (fgets(line, sizeof(line), f) != NULL)
    if (line[0] != '#') {
      assert_true(n < 16);
      assert_int_equal(sscanf(line, "%63s %zu %zu", hex, &size[n], &seed[n]),
                       3);
      n++;
    }
  fclose(f);
  snprintf(path, sizeof(path), "%s/tests/golden/lmdb.mdb", dir ? dir : ".");
  assert_int_equal(fl_dataset_lmdb(&ds, path, 5000), 0);
  assert_int_equal(ds.len, n);
  assert_int_equal(ds.sample_bytes, 5000);
  options(&opt, 2, 5);
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  run_init(&r, 5000);
  drain(l, &r);
  assert_int_equal(r.n, n);
  for (i = 0; i < n; i++) {
    assert_int_equal(r.idx[i], i);
    assert_int_equal(r.size[i], size[i]);
    if (!value_ok(r.bytes + i * 5000, size[i], 5000, seed[i]))
      fail_msg("sample %zu is not python3-lmdb's value", i);
  }
  free(r.bytes);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  flt_assert_clean(&base);
}

static void
values_come_in_key_order_not_put_order_sized_in_batch_sizes(void **state)
{
  flt_baseline base;
  fl_dataset ds;
  fl_options opt;
  fl_loader *l;
  struct run r;
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  dir_make();
  assert_int_equal(fl_dataset_lmdb(&ds, db_write("db", 50, size_varied),
                                   9000),
                   0);
  assert_int_equal(ds.len, 50);
  options(&opt, 0, 7);
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  run_init(&r, 9000);
  drain(l, &r);
  assert_int_equal(r.n, 50);
  for (i = 0; i < 50; i++)
    assert_int_equal(r.idx[i], i);
  run_check(&r, size_varied);
  free(r.bytes);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  flt_assert_clean(&base);
}

static void
value_over_max_bytes_is_its_batchs_error_naming_key_and_sizes(void **state)
{
  flt_baseline base;
  fl_dataset ds;
  fl_options opt;
  fl_loader *l;
  fl_batch *b;
  size_t n = 0, errors = 0;
  const char *e;
  int rc;

  (void)state;
  flt_baseline_take(&base);
  dir_make();
  assert_int_equal(fl_dataset_lmdb(&ds, db_write("db", 20, size_100), 200),
                   0);
  options(&opt, 2, 4);
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    if (n == 3) { /* indices 12-15 */
      assert_int_equal(rc, FL_EDATASET);
      e = fl_loader_error(l);
      if (strstr(e, "'00000013'") == NULL || strstr(e, "300 bytes") == NULL ||
          strstr(e, "max_bytes 200") == NULL)
        fail_msg("the error does not name the key and sizes: %s", e);
      errors++;
    } else {
      assert_int_equal(rc, 1);
      fl_batch_release(b);
    }
    n++;
  }
  assert_int_equal(n, 5);
  assert_int_equal(errors, 1);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  flt_assert_clean(&base);
}

/* The ABI rule: a program built against 0.1's smaller fl_dataset gets
   one filled, and cleared at close, no further than its size. */
static void
a_0_1_sized_dataset_is_filled_and_cleared_no_further(void **state)
{
  const size_t size = FL__DATASET_SIZE_0_1;
  unsigned char buf[sizeof(fl_dataset) + 16];
  fl_dataset *ds = (fl_dataset *)buf;
  char path[PATH_MAX];
  const char *dir = getenv("srcdir");
  flt_baseline base;
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  snprintf(path, sizeof(path), "%s/tests/golden/lmdb.mdb", dir ? dir : ".");
  memset(buf, 0xa5, sizeof(buf));
  assert_int_equal(fl_dataset_lmdb_sized(ds, size, path, 64), 0);
  assert_int_equal(ds->len, 12);
  fl_dataset_close_sized(ds, size);
  assert_null(ds->ctx);
  for (i = size; i < sizeof(buf); i++)
    assert_int_equal(buf[i], 0xa5);
  flt_assert_clean(&base);
}

/* The create fails with FL_EINVAL, ds zeroed, the error naming `what`. */
static void
refused(const char *path, size_t max_bytes, const char *what)
{
  fl_dataset ds;
  const char *e;

  memset(&ds, 0xff, sizeof(ds));
  assert_int_equal(fl_dataset_lmdb(&ds, path, max_bytes), FL_EINVAL);
  assert_null(ds.ctx);
  e = fl_loader_error(NULL);
  if (e == NULL || strstr(e, what) == NULL)
    fail_msg("the error does not say '%s': %s", what, e ? e : "(none)");
}

static size_t
size_none(size_t i)
{
  (void)i;
  return 0;
}

static void
missing_path_other_files_and_empty_database_are_refused(void **state)
{
  char path[PATH_MAX], junk[8192];
  flt_baseline base;
  FILE *f;

  (void)state;
  flt_baseline_take(&base);
  dir_make();
  snprintf(path, sizeof(path), "%s/missing", case_dir);
  refused(path, 64, "missing: cannot open: No such file");
  snprintf(path, sizeof(path), "%s/junk.mdb", case_dir);
  memset(junk, 'x', sizeof(junk));
  assert_non_null(f = fopen(path, "w"));
  assert_int_equal(fwrite(junk, 1, sizeof(junk), f), sizeof(junk));
  fclose(f);
  refused(path, 64, "junk.mdb: not an LMDB environment");
  refused(case_dir, 64, "not an LMDB environment"); /* no data.mdb */
  refused(db_write("empty", 0, size_none), 64, "empty: the LMDB database "
          "holds no key");
  refused(case_dir, 0, "max_bytes is 0");
  refused(NULL, 64, "path is NULL");
  flt_assert_clean(&base);
}

/* A database 4 KiB deep: the builder's error and the worker's end with
   their cause, the path shortened in its middle. */
static void
errors_quoting_a_4_kib_path_end_with_their_cause(void **state)
{
  char *deep, path[PATH_MAX], junk[4096], msg[FL__ERRMSG_MAX];
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  FILE *f;

  (void)state;
  flt_baseline_take(&base);
  deep = flt_long_dir(dir_make());
  snprintf(path, sizeof(path), "%s/junk.mdb", deep);
  memset(junk, 'x', sizeof(junk));
  assert_non_null(f = fopen(path, "w"));
  assert_int_equal(fwrite(junk, 1, sizeof(junk), f), sizeof(junk));
  fclose(f);
  assert_int_equal(fl_dataset_lmdb(&ds, path, 64), FL_EINVAL);
  flt_assert_ends_with(fl_loader_error(NULL), "/junk.mdb: not an LMDB "
                       "environment: MDB_INVALID: File is not an LMDB file");
  snprintf(path, sizeof(path), "%s/db", deep + strlen(case_dir) + 1);
  assert_int_equal(fl_dataset_lmdb(&ds, db_write(path, 4, size_100), 64),
                   0);
  options(&opt, 1, 2);
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(flt_epoch_error(l, msg, sizeof(msg)), FL_EDATASET);
  flt_assert_ends_with(msg, " holds 100 bytes, more than max_bytes 64");
  assert_non_null(strstr(msg, "/db: key '0000000"));
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  free(deep);
  flt_assert_clean(&base);
}

/* One epoch of ds, shuffled, with `workers`. */
static void
epoch_with(const fl_dataset *ds, unsigned workers, struct run *r)
{
  fl_options opt;
  fl_loader *l;

  options(&opt, workers, 8);
  opt.shuffle = 1;
  opt.seed = 5;
  assert_int_equal(fl_loader_create(&l, ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  run_init(r, ds->sample_bytes);
  drain(l, r);
  fl_loader_destroy(l);
}

/* The caller reads first (its own environment), then workers fork and
   open theirs. */
static void
workers_0_2_and_3_give_the_same_batches(void **state)
{
  static const unsigned workers[] = {2, 3};
  flt_baseline base;
  fl_dataset ds;
  struct run first, r;
  size_t w;

  (void)state;
  flt_baseline_take(&base);
  dir_make();
  assert_int_equal(fl_dataset_lmdb(&ds, db_write("db", 103, size_varied),
                                   9000),
                   0);
  epoch_with(&ds, 0, &first);
  assert_int_equal(first.n, 103);
  run_check(&first, size_varied);
  for (w = 0; w < 2; w++) {
    epoch_with(&ds, workers[w], &r);
    assert_int_equal(r.n, 103);
    assert_memory_equal(r.idx, first.idx, 103 * sizeof(size_t));
    assert_memory_equal(r.size, first.size, 103 * sizeof(size_t));
    assert_memory_equal(r.bytes, first.bytes, 103 * 9000);
    free(r.bytes);
  }
  free(first.bytes);
  fl_dataset_close(&ds);
  flt_assert_clean(&base);
}

static void
ranks_of_worlds_of_2_and_3_see_every_sample_once(void **state)
{
  static const unsigned worlds[] = {2, 3};
  unsigned char seen[61];
  flt_baseline base;
  fl_dataset ds;
  fl_options opt;
  fl_loader *l;
  struct run r;
  size_t w, rank, i;

  (void)state;
  flt_baseline_take(&base);
  dir_make();
  assert_int_equal(fl_dataset_lmdb(&ds, db_write("db", 61, size_varied),
                                   9000),
                   0);
  for (w = 0; w < 2; w++) {
    memset(seen, 0, sizeof(seen));
    for (rank = 0; rank < worlds[w]; rank++) {
      options(&opt, 2, 4);
      opt.shuffle = 1;
      opt.seed = 11;
      opt.world_size = worlds[w];
      opt.rank = (unsigned)rank;
      opt.shard_mode = FL_SHARD_UNEVEN;
      assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
      assert_int_equal(fl_loader_begin(l), 0);
      run_init(&r, 9000);
      drain(l, &r);
      run_check(&r, size_varied);
      for (i = 0; i < r.n; i++)
        seen[r.idx[i]]++;
      free(r.bytes);
      fl_loader_destroy(l);
    }
    for (i = 0; i < 61; i++)
      if (seen[i] != 1)
        fail_msg("world %u: sample %zu seen %u times", worlds[w], i,
                 seen[i]);
  }
  fl_dataset_close(&ds);
  flt_assert_clean(&base);
}

static unsigned char *
save(fl_loader *l, size_t *len)
{
  int need = fl_loader_state_save(l, NULL, 0);
  unsigned char *buf;

  assert_true(need > 0);
  assert_non_null(buf = malloc((size_t)need));
  assert_int_equal(fl_loader_state_save(l, buf, (size_t)need), need);
  *len = (size_t)need;
  return buf;
}

/* Epoch 1 stopped after 5 batches and resumed by another loader (another
   worker count) is the same samples, in the same order, as epoch 1 whole. */
static void
resumed_epoch_gives_the_rest_in_the_same_order(void **state)
{
  flt_baseline base;
  fl_dataset ds;
  fl_options opt;
  fl_loader *l;
  fl_batch *b;
  struct run whole, part;
  unsigned char *buf;
  size_t len, k;

  (void)state;
  flt_baseline_take(&base);
  dir_make();
  assert_int_equal(fl_dataset_lmdb(&ds, db_write("db", 100, size_varied),
                                   9000),
                   0);
  options(&opt, 2, 8);
  opt.shuffle = 1;
  opt.seed = 3;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_set_epoch(l, 1), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  run_init(&whole, 9000);
  drain(l, &whole);
  fl_loader_destroy(l);

  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_set_epoch(l, 1), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  run_init(&part, 9000);
  for (k = 0; k < 5; k++) {
    assert_int_equal(fl_loader_next(l, &b), 1);
    take(&part, b);
    fl_batch_release(b);
  }
  buf = save(l, &len);
  fl_loader_destroy(l);
  opt.num_workers = 3;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_state_load(l, buf, len), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(fl_loader_epoch(l), 1);
  drain(l, &part);
  fl_loader_destroy(l);

  assert_int_equal(part.n, 100);
  assert_memory_equal(part.idx, whole.idx, 100 * sizeof(size_t));
  assert_memory_equal(part.bytes, whole.bytes, 100 * 9000);
  run_check(&part, size_varied);
  free(buf);
  free(part.bytes);
  free(whole.bytes);
  fl_dataset_close(&ds);
  flt_assert_clean(&base);
}
/* The sparse index (issue 28): at 10^5 keys of 8 bytes, a quarter of a
   byte a key (a 64th of them and their offsets), where keeping every key
   and its offset took 16. */
static void
index_of_100000_keys_takes_under_half_a_byte_a_key(void **state)
{
  static const size_t probe[] = {0, 1, 31, 32, 33, 63, 64, 65, 50000,
                                 99935, 99936, 99999, 7, 99998, 64};
  unsigned char buf[8];
  flt_baseline base;
  fl_dataset ds;
  size_t i, nb, bytes;

  (void)state;
  flt_baseline_take(&base);
  dir_make();
  assert_int_equal(fl_dataset_lmdb(&ds, db_write("db", 100000, size_8), 8),
                   0);
  assert_int_equal(ds.len, 100000);
  bytes = fl__lmdb_index_bytes(&ds);
  if (bytes > 100000 / 2)
    fail_msg("the index takes %zu bytes for 100000 keys", bytes);
  /* Read in no order: the index finds each. */
  for (i = 0; i < sizeof(probe) / sizeof(*probe); i++) {
    nb = sizeof(buf);
    assert_int_equal(ds.get(ds.ctx, probe[i], buf, &nb), 0);
    assert_int_equal(nb, 8);
    if (!value_ok(buf, 8, 8, probe[i]))
      fail_msg("sample %zu is not its key's value", probe[i]);
  }
  fl_dataset_close(&ds);
  flt_assert_clean(&base);
}

#define KEY_MAX 511 /* liblmdb's default mdb_env_get_maxkeysize */

struct bkey {
  unsigned char b[KEY_MAX];
  size_t len;
};

/* LMDB's default order: memcmp, the shorter first where one is a prefix
   of the other. */
static int
bkey_cmp(const void *pa, const void *pb)
{
  const struct bkey *a = pa, *b = pb;
  int c = memcmp(a->b, b->b, a->len < b->len ? a->len : b->len);

  return c != 0 ? c : (a->len > b->len) - (a->len < b->len);
}

/*
 * n distinct keys of 1 to 511 bytes from {0x00, 0x01, 0xff}, many of them
 * prefixes of others, each put with itself as its value, into
 * case_dir/name; keys comes back in key order.
 */
static const char *
db_write_binary(const char *name, struct bkey *keys, size_t n)
{
  static char path[PATH_MAX];
  static const unsigned char alphabet[] = {0x00, 0x01, 0xff};
  uint64_t x = 0x9e3779b97f4a7c15ull + n;
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  MDB_val k, v;
  size_t i = 0, j;
  int rc;

  snprintf(path, sizeof(path), "%s/%s", case_dir, name);
  assert_int_equal(mkdir(path, 0755), 0);
  assert_int_equal(mdb_env_create(&env), 0);
  assert_int_equal(mdb_env_set_mapsize(env, 64 << 20), 0);
  assert_int_equal(mdb_env_open(env, path, 0, 0644), 0);
  assert_int_equal(mdb_env_get_maxkeysize(env), KEY_MAX);
  assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
  assert_int_equal(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
  while (i < n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    /* A third of them 1 to 4 bytes, the rest up to the most. */
    keys[i].len = x % 3 == 0 ? 1 + (x >> 8) % 4 : 1 + (x >> 8) % KEY_MAX;
    for (j = 0; j < keys[i].len; j++)
      keys[i].b[j] = alphabet[(x >> (j % 40)) % 3];
    k.mv_data = v.mv_data = keys[i].b;
    k.mv_size = v.mv_size = keys[i].len;
    rc = mdb_put(txn, dbi, &k, &v, MDB_NOOVERWRITE);
    if (rc != MDB_KEYEXIST) {
      assert_int_equal(rc, 0);
      i++;
    }
  }
  assert_int_equal(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
  qsort(keys, n, sizeof(*keys), bkey_cmp);
  return path;
}

/* Sample index of ds is keys[index] (its value is its key). */
static void
get_is(const fl_dataset *ds, const struct bkey *keys, size_t index)
{
  unsigned char buf[KEY_MAX];
  size_t nb = sizeof(buf);

  assert_int_equal(ds->get(ds->ctx, index, buf, &nb), 0);
  if (nb != keys[index].len || memcmp(buf, keys[index].b, nb) != 0)
    fail_msg("sample %zu of %zu is not the %zuth key (%zu bytes): %zu "
             "bytes", index, ds->len, index, keys[index].len, nb);
}

/* Counts about the index's interval, K = FL__LMDB_EVERY: 1, K - 1, K,
   K + 1 and 3K + 5 binary keys, each read in key order (the cursor steps
   on), backwards (a seek each) and by a stride (seeks both ways), then
   one shuffled epoch by 2 workers. */
static void
binary_keys_of_1_to_511_bytes_at_1_k_1_k_k1_3k5_keys_read_right(void **state)
{
  const size_t K = FL__LMDB_EVERY;
  const size_t count[] = {1, K - 1, K, K + 1, 3 * K + 5};
  struct bkey *keys = malloc((3 * K + 5) * sizeof(*keys));
  flt_baseline base;
  fl_dataset ds;
  struct run r;
  char name[16];
  size_t c, i, n;

  (void)state;
  assert_non_null(keys);
  flt_baseline_take(&base);
  dir_make();
  for (c = 0; c < sizeof(count) / sizeof(*count); c++) {
    n = count[c];
    snprintf(name, sizeof(name), "db%zu", n);
    assert_int_equal(fl_dataset_lmdb(&ds, db_write_binary(name, keys, n),
                                     KEY_MAX),
                     0);
    assert_int_equal(ds.len, n);
    for (i = 0; i < n; i++)
      get_is(&ds, keys, i);
    for (i = n; i-- > 0;)
      get_is(&ds, keys, i);
    for (i = 0; i < n; i++)
      get_is(&ds, keys, i * 37 % n);
    epoch_with(&ds, 2, &r);
    assert_int_equal(r.n, n);
    for (i = 0; i < n; i++)
      if (r.size[i] != keys[r.idx[i]].len ||
          memcmp(r.bytes + i * KEY_MAX, keys[r.idx[i]].b, r.size[i]) != 0)
        fail_msg("%zu keys: a worker's sample %zu is not its key", n,
                 r.idx[i]);
    free(r.bytes);
    fl_dataset_close(&ds);
  }
  free(keys);
  flt_assert_clean(&base);
}

/* Change db (written by db_write) after a dataset was made of it: delete
   the key of `del`, then put `put` (NULL: none). */
static void
db_change(const char *path, size_t del, const char *put)
{
  char key[32];
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  MDB_val k, v = {1, "v"};

  assert_int_equal(mdb_env_create(&env), 0);
  assert_int_equal(mdb_env_set_mapsize(env, 64 << 20), 0);
  assert_int_equal(mdb_env_open(env, path, 0, 0644), 0);
  assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
  assert_int_equal(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
  k.mv_size = (size_t)snprintf(key, sizeof(key), "%08zu", del);
  k.mv_data = key;
  assert_int_equal(mdb_del(txn, dbi, &k, NULL), 0);
  if (put != NULL) {
    k.mv_size = strlen(put);
    k.mv_data = (void *)put;
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
  }
  assert_int_equal(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

/* One epoch of ds in batches of 10 (shuffled or not): the batches that
   fail must be FL_EDATASET saying `what`; returns how many failed. */
static size_t
epoch_errors(const fl_dataset *ds, unsigned workers, int shuffle,
             const char *what)
{
  fl_options opt;
  fl_loader *l;
  fl_batch *b;
  size_t errors = 0, batches = 0;
  const char *e;
  int rc;

  options(&opt, workers, 10);
  opt.shuffle = shuffle;
  opt.seed = 9;
  assert_int_equal(fl_loader_create(&l, ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    batches++;
    if (rc == 1) {
      fl_batch_release(b);
      continue;
    }
    assert_int_equal(rc, FL_EDATASET);
    e = fl_loader_error(l);
    if (strstr(e, what) == NULL ||
        strstr(e, "the database changed") == NULL)
      fail_msg("the error does not say '%s': %s", what, e);
    errors++;
  }
  assert_int_equal(batches, (ds->len + 9) / 10);
  fl_loader_destroy(l);
  return errors;
}

/* 130 keys, changed after create: what a get sees of it is its batch's
   FL_EDATASET, the loader going on, in the caller and in workers. */
static void
database_changed_after_create_is_its_batchs_error_never_a_crash(
    void **state)
{
  flt_baseline base;
  fl_dataset ds;
  const char *path;
  char name[16];
  unsigned w;

  (void)state;
  flt_baseline_take(&base);
  dir_make();
  for (w = 0; w <= 2; w += 2) {
    /* A key gone: another count, every batch. */
    snprintf(name, sizeof(name), "gone%u", w);
    path = db_write(name, 130, size_100);
    assert_int_equal(fl_dataset_lmdb(&ds, path, 300), 0);
    db_change(path, 100, NULL);
    assert_int_equal(epoch_errors(&ds, w, 0, "holds 129 keys, not the 130"),
                     13);
    fl_dataset_close(&ds);
    /* The last key gone and one put after the first, the count the same:
       a walk finds another key where an indexed one was, or the keys
       running out before sample 129. */
    snprintf(name, sizeof(name), "shifted%u", w);
    path = db_write(name, 130, size_100);
    assert_int_equal(fl_dataset_lmdb(&ds, path, 300), 0);
    db_change(path, 129, "00000000a");
    assert_true(epoch_errors(&ds, w, 0, "the database changed") >= 1);
    fl_dataset_close(&ds);
    /* An indexed key (sample 64's) renamed: a seek to it fails. */
    snprintf(name, sizeof(name), "renamed%u", w);
    path = db_write(name, 130, size_100);
    assert_int_equal(fl_dataset_lmdb(&ds, path, 300), 0);
    db_change(path, 64, "00000064x");
    assert_true(epoch_errors(&ds, w, 1, "key '00000064' (sample 64)") >= 1);
    fl_dataset_close(&ds);
  }
  flt_assert_clean(&base);
}
#else
/* Without liblmdb: FL_ENOTSUP naming the package, then a skip. */
static void
without_lmdb(void)
{
  fl_dataset ds;
  const char *e;
  int rc;

  rc = fl_dataset_lmdb(&ds, "/tmp", 64);
  e = fl_loader_error(NULL);
  if (rc != FL_ENOTSUP || e == NULL || strstr(e, "liblmdb-dev") == NULL) {
    printf("1..1\nnot ok 1 - without liblmdb: %s, \"%s\"\n",
           fl_err_name(rc), e ? e : "");
    exit(1);
  }
  flt_skip_all("this forkload was built without liblmdb (%s)", e);
}
#endif /* HAVE_LMDB */

int
main(void)
{
#ifdef HAVE_LMDB
#define CASE(f) cmocka_unit_test_teardown(f, teardown)
  const struct CMUnitTest tests[] = {
      CASE(golden_database_comes_in_python_lmdbs_key_order_values_exact),
      CASE(values_come_in_key_order_not_put_order_sized_in_batch_sizes),
      CASE(value_over_max_bytes_is_its_batchs_error_naming_key_and_sizes),
      CASE(missing_path_other_files_and_empty_database_are_refused),
      CASE(a_0_1_sized_dataset_is_filled_and_cleared_no_further),
      CASE(workers_0_2_and_3_give_the_same_batches),
      CASE(ranks_of_worlds_of_2_and_3_see_every_sample_once),
      CASE(resumed_epoch_gives_the_rest_in_the_same_order),
      CASE(index_of_100000_keys_takes_under_half_a_byte_a_key),
      CASE(binary_keys_of_1_to_511_bytes_at_1_k_1_k_k1_3k5_keys_read_right),
      CASE(database_changed_after_create_is_its_batchs_error_never_a_crash),
      CASE(errors_quoting_a_4_kib_path_end_with_their_cause),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
#else
  without_lmdb();
#endif
}
