/*
 * fl_dataset_tokens against llm.c's DataLoader: shards written here in its
 * format (a header of 256 little-endian int32, then uint16 tokens) to a
 * fresh directory per case, windows of seq_len + 1 tokens read back
 * directly and through loaders of workers and ranks, a resumed epoch, and
 * every bad shard or argument refused with FL_EINVAL and a message naming
 * the file.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"
#include "datasets/dataset.h"

#define T 8          /* seq_len of most cases */
#define MAX_SHARDS 3

/* Token p of shard s: every bit of a uint16 used, values past 32767 too
   (an int32 made from one must not come out negative). */
static uint16_t
tok(unsigned s, size_t p)
{
  uint32_t x = (uint32_t)(s + 1) * 2654435761u ^ (uint32_t)p * 40503u;

  return (uint16_t)(x ^ x >> 16);
}

struct fixture {
  char dir[64];
  char path[MAX_SHARDS][128];
  const char *paths[MAX_SHARDS];
  size_t ntok[MAX_SHARDS];
  size_t n, windows;
  size_t first[MAX_SHARDS]; /* the dataset index of each shard's first */
};

static void
put_le32(unsigned char *p, uint32_t v)
{
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}

/* A shard of ntok tokens of shard s's content, whose header says magic,
   version and count, with extra bytes of zeros after the tokens. */
static void
write_shard(const char *path, unsigned s, size_t ntok, int32_t magic,
            int32_t version, int32_t count, size_t extra)
{
  unsigned char head[FL__TOKENS_HEADER] = {0}, t[2];
  FILE *f = fopen(path, "wb");
  size_t p;

  assert_non_null(f);
  put_le32(head, (uint32_t)magic);
  put_le32(head + 4, (uint32_t)version);
  put_le32(head + 8, (uint32_t)count);
  assert_int_equal(fwrite(head, 1, sizeof(head), f), sizeof(head));
  for (p = 0; p < ntok; p++) {
    t[0] = (unsigned char)tok(s, p);
    t[1] = (unsigned char)(tok(s, p) >> 8);
    assert_int_equal(fwrite(t, 1, 2, f), 2);
  }
  for (p = 0; p < extra; p++)
    assert_int_equal(fputc(0, f), 0);
  assert_int_equal(fclose(f), 0);
}

static void
good_shard(const char *path, unsigned s, size_t ntok)
{
  write_shard(path, s, ntok, FL_TOKENS_MAGIC, 1, (int32_t)ntok, 0);
}

/* Three shards: 3 windows exactly, 2 and a tail that makes none, 1. */
static void
fixture_make(struct fixture *fx, size_t seq_len)
{
  static const size_t windows[MAX_SHARDS] = {3, 2, 1};
  size_t s;

  memset(fx, 0, sizeof(*fx));
  snprintf(fx->dir, sizeof(fx->dir), "/tmp/fl-tokens-XXXXXX");
  assert_non_null(mkdtemp(fx->dir));
  fx->n = MAX_SHARDS;
  for (s = 0; s < fx->n; s++) {
    snprintf(fx->path[s], sizeof(fx->path[s]), "%s/shard_%02zu.bin",
             fx->dir, s);
    fx->paths[s] = fx->path[s];
    fx->ntok[s] = windows[s] * seq_len + 1 + (s == 1 ? seq_len - 1 : 0);
    fx->first[s] = fx->windows;
    fx->windows += windows[s];
    good_shard(fx->path[s], (unsigned)s, fx->ntok[s]);
  }
}

static void
fixture_remove(struct fixture *fx)
{
  char path[sizeof(fx->dir) + 258];
  struct dirent *e;
  DIR *d = opendir(fx->dir);

  assert_non_null(d);
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(path, sizeof(path), "%s/%s", fx->dir, e->d_name);
    assert_int_equal(unlink(path), 0);
  }
  closedir(d);
  assert_int_equal(rmdir(fx->dir), 0);
}

/* Dataset index i as llm.c reads it: the window at token k*seq_len of its
   shard, seq_len + 1 tokens, inputs the first seq_len, targets one on. */
static void
assert_window(const struct fixture *fx, size_t seq_len, size_t i,
              const int32_t *in, const int32_t *tg)
{
  size_t s = fx->n - 1, j, at;

  while (fx->first[s] > i)
    s--;
  at = (i - fx->first[s]) * seq_len;
  assert_true(at + seq_len < fx->ntok[s]);
  for (j = 0; j < seq_len; j++) {
    assert_int_equal(in[j], (int32_t)tok((unsigned)s, at + j));
    assert_int_equal(tg[j], (int32_t)tok((unsigned)s, at + j + 1));
  }
}

/* Every sample of batch b checked; seen[index] counted. */
static void
check_batch(const struct fixture *fx, size_t seq_len, const fl_batch *b,
            unsigned *seen)
{
  const size_t *idx = fl_batch_indices(b), *sizes = fl_batch_sizes(b);
  const unsigned char *in = fl_batch_field(b, 0), *tg = fl_batch_field(b, 1);
  size_t i, fb = seq_len * sizeof(int32_t);

  assert_int_equal(fl_batch_stride(b, 0), fb);
  assert_int_equal(fl_batch_stride(b, 1), fb);
  for (i = 0; i < fl_batch_count(b); i++) {
    assert_true(idx[i] < fx->windows);
    assert_int_equal(sizes[2 * i], fb);
    assert_int_equal(sizes[2 * i + 1], fb);
    assert_window(fx, seq_len, idx[i], (const int32_t *)(const void *)
                  (in + i * fb), (const int32_t *)(const void *)
                  (tg + i * fb));
    seen[idx[i]]++;
  }
}

/* The batches of l up to the epoch's end, or max of them. */
static size_t
consume(const struct fixture *fx, fl_loader *l, size_t max, unsigned *seen)
{
  fl_batch *b;
  size_t got = 0;
  int rc;

  while (got < max && (rc = fl_loader_next(l, &b)) != 0) {
    if (rc < 0)
      fail_msg("fl_loader_next: %s", fl_loader_error(l));
    check_batch(fx, T, b, seen);
    fl_batch_release(b);
    got++;
  }
  return got;
}

static void
windows_across_three_shards_are_llm_c_s_each_way_fetched(void **state)
{
  int32_t in[4][T], tg[4][T];
  void *dst[2] = {in, tg}, *one[2];
  size_t i, nb[8], idx[4] = {5, 0, 3, 2}, lens[] = {1, T};
  unsigned seen[16] = {0};
  struct fixture fx;
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  size_t k, seq;

  (void)state;
  flt_baseline_take(&base);
  /* seq_len 1: windows of two tokens, each token but the last starting
     one. */
  for (k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
    seq = lens[k];
    fixture_make(&fx, seq);
    assert_int_equal(fl_dataset_tokens(&ds, fx.paths, fx.n, seq), 0);
    assert_int_equal(ds.len, 6);
    assert_int_equal(ds.nfields, 2);
    assert_int_equal(ds.field_bytes[0], seq * 4);
    assert_int_equal(ds.field_bytes[1], seq * 4);
    assert_int_equal(ds.sample_bytes, seq * 8);
    for (i = 0; i < ds.len; i++) {
      one[0] = in[0];
      one[1] = tg[0];
      assert_int_equal(ds.get_fields(ds.ctx, i, one, nb), 0);
      assert_int_equal(nb[0], seq * 4);
      assert_window(&fx, seq, i, in[0], tg[0]);
    }
    /* get_batch packs sample i at i * field_bytes of each field. */
    assert_int_equal(ds.get_batch(ds.ctx, idx, 4, dst, nb), 0);
    for (i = 0; i < 4; i++)
      assert_window(&fx, seq, idx[i], (int32_t *)in + i * seq,
                    (int32_t *)tg + i * seq);
    idx[3] = ds.len;
    assert_int_equal(ds.get_batch(ds.ctx, idx, 4, dst, nb), FL_EINVAL);
    idx[3] = 2;
    fl_dataset_close(&ds);
    fixture_remove(&fx);
  }
  /* Through two workers, in order, batches crossing shard boundaries. */
  fixture_make(&fx, T);
  assert_int_equal(fl_dataset_tokens(&ds, fx.paths, fx.n, T), 0);
  fl_options_init(&opt);
  opt.batch_size = 4;
  opt.num_workers = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(consume(&fx, l, SIZE_MAX, seen), 2);
  for (i = 0; i < fx.windows; i++)
    assert_int_equal(seen[i], 1);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  fixture_remove(&fx);
  flt_assert_clean(&base);
}

/* Opening must fail with code, and a message holding both strings. */
static void
refused(const char *const *paths, size_t n, size_t seq_len, int code,
        const char *name, const char *why)
{
  fl_dataset ds;
  const char *msg;

  memset(&ds, 0xa5, sizeof(ds)); /* zeroed on failure */
  assert_int_equal(fl_dataset_tokens(&ds, paths, n, seq_len), code);
  msg = fl_loader_error(NULL);
  assert_non_null(msg);
  if (strstr(msg, name) == NULL || strstr(msg, why) == NULL)
    fail_msg("expected '%s' and '%s' in: %s", name, why, msg);
  assert_null(ds.ctx);
  assert_int_equal(ds.len, 0);
}

static void
bad_shards_and_arguments_are_refused_naming_the_file(void **state)
{
  static const struct {
    const char *why;
    int32_t magic, version, count;
    size_t ntok, extra;
  } bad[] = {
      {"magic 20240522, not llm.c's 20240520", 20240522, 1, 17, 17, 0},
      {"version 2: only version 1", FL_TOKENS_MAGIC, 2, 17, 17, 0},
      {"counts 0 tokens", FL_TOKENS_MAGIC, 1, 0, 17, 0},
      {"counts -5 tokens", FL_TOKENS_MAGIC, 1, -5, 17, 0},
      /* Truncated: the count says more than the file holds. */
      {"counts 18 tokens (36 bytes) but 34 bytes", FL_TOKENS_MAGIC, 1, 18,
       17, 0},
      /* Longer than the count: llm.c refuses it too. */
      {"counts 17 tokens (34 bytes) but 35 bytes", FL_TOKENS_MAGIC, 1, 17,
       17, 1},
      /* T tokens: a window needs T + 1. */
      {"8 tokens make no window of seq_len + 1 = 9", FL_TOKENS_MAGIC, 1, 8,
       8, 0},
  };
  struct fixture fx;
  flt_baseline base;
  const char *two[2], *with_null[2];
  char path[160];
  FILE *f;
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  fixture_make(&fx, T);
  snprintf(path, sizeof(path), "%s/bad.bin", fx.dir);
  /* The bad shard second: the message names it, not the good first. */
  two[0] = fx.paths[0];
  two[1] = path;
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    write_shard(path, 0, bad[i].ntok, bad[i].magic, bad[i].version,
                bad[i].count, bad[i].extra);
    refused(two, 2, T, FL_EINVAL, path, bad[i].why);
  }
  /* Shorter than the header. */
  f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite("\x28\x0b\x35\x01", 1, 4, f), 4);
  assert_int_equal(fclose(f), 0);
  refused(two, 2, T, FL_EINVAL, path, "4 bytes, shorter than the 1024");
  /* Empty, and missing. */
  f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fclose(f), 0);
  refused(two, 2, T, FL_EINVAL, path, "empty");
  assert_int_equal(unlink(path), 0);
  refused(two, 2, T, -ENOENT, path, "cannot open");
  /* The arguments. */
  refused(fx.paths, fx.n, 0, FL_EINVAL, fx.paths[0], "seq_len 0");
  refused(fx.paths, 0, T, FL_EINVAL, "fl_dataset_tokens", "n is 0");
  refused(NULL, 1, T, FL_EINVAL, "fl_dataset_tokens", "paths is NULL");
  with_null[0] = fx.paths[0];
  with_null[1] = NULL;
  refused(with_null, 2, T, FL_EINVAL, "fl_dataset_tokens",
          "paths[1] is NULL");
  /* A seq_len the first shard holds no window of. */
  refused(fx.paths, fx.n, 4 * T, FL_EINVAL, fx.paths[0], "no window");
  fixture_remove(&fx);
  flt_assert_clean(&base);
}

/* Every rank's share, shuffled, through two workers: each window exactly
   once over the ranks, with its content. */
static void
ranks_and_workers_see_every_window_exactly_once(void **state)
{
  static const unsigned worlds[] = {2, 3};
  unsigned seen[16], r, w;
  struct fixture fx;
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  fixture_make(&fx, T);
  assert_int_equal(fl_dataset_tokens(&ds, fx.paths, fx.n, T), 0);
  for (w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++) {
    memset(seen, 0, sizeof(seen));
    for (r = 0; r < worlds[w]; r++) {
      fl_options_init(&opt);
      opt.batch_size = 2;
      opt.num_workers = 2;
      opt.shuffle = 1;
      opt.seed = 7;
      opt.rank = r;
      opt.world_size = worlds[w];
      opt.shard_mode = FL_SHARD_UNEVEN;
      assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
      assert_int_equal(fl_loader_begin(l), 0);
      consume(&fx, l, SIZE_MAX, seen);
      fl_loader_destroy(l);
    }
    for (i = 0; i < fx.windows; i++)
      assert_int_equal(seen[i], 1);
  }
  fl_dataset_close(&ds);
  fixture_remove(&fx);
  flt_assert_clean(&base);
}

/* A state saved after two of the epoch's batches, loaded by a new loader:
   exactly the windows not handed out come, each once. */
static void
resumed_epoch_gives_exactly_the_remaining_windows(void **state)
{
  unsigned before[16] = {0}, after[16] = {0};
  unsigned char blob[4096];
  struct fixture fx;
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  size_t i;
  int n;

  (void)state;
  flt_baseline_take(&base);
  fixture_make(&fx, T);
  assert_int_equal(fl_dataset_tokens(&ds, fx.paths, fx.n, T), 0);
  fl_options_init(&opt);
  opt.batch_size = 1;
  opt.num_workers = 2;
  opt.shuffle = 1;
  opt.seed = 11;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(consume(&fx, l, 2, before), 2);
  n = fl_loader_state_save(l, blob, sizeof(blob));
  assert_true(n > 0);
  fl_loader_destroy(l);

  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_state_load(l, blob, (size_t)n), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(consume(&fx, l, SIZE_MAX, after), fx.windows - 2);
  for (i = 0; i < fx.windows; i++)
    assert_int_equal(before[i] + after[i], 1);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  fixture_remove(&fx);
  flt_assert_clean(&base);
}

/* A shard 4 KiB deep: the error ends with its cause, the path shortened
   in its middle. */
static void
a_bad_shard_4_kib_deep_is_refused_ending_with_the_cause(void **state)
{
  char dir[] = "/tmp/fl-tokens-long-XXXXXX", *deep, path[4096];
  const char *paths[1] = {path};
  unsigned char header[1024] = {0};
  flt_baseline base;
  fl_dataset ds;
  FILE *f;

  (void)state;
  flt_baseline_take(&base);
  assert_non_null(mkdtemp(dir));
  deep = flt_long_dir(dir);
  snprintf(path, sizeof(path), "%s/train_000.bin", deep);
  header[0] = 7; /* magic 7 */
  assert_non_null(f = fopen(path, "wb"));
  assert_int_equal(fwrite(header, 1, sizeof(header), f), sizeof(header));
  fclose(f);
  assert_int_equal(fl_dataset_tokens(&ds, paths, 1, T), FL_EINVAL);
  flt_assert_ends_with(fl_loader_error(NULL), "/train_000.bin: magic 7, not "
                       "llm.c's 20240520: not a token shard");
  free(deep);
  assert_int_equal(flt_rm_tree(dir), 0);
  flt_assert_clean(&base);
}

/* The header check on every single-byte change of a good header and every
   length around it: it returns, and what it accepts adds up. */
static void
header_check_survives_mutations_and_cuts(void **state)
{
  unsigned char head[FL__TOKENS_HEADER] = {0};
  char err[256];
  size_t at, bit, len, windows;
  int rc;

  (void)state;
  put_le32(head, FL_TOKENS_MAGIC);
  put_le32(head + 4, 1);
  put_le32(head + 8, 17);
  assert_int_equal(fl__tokens_check(head, sizeof(head) + 34, T, &windows,
                                    err, sizeof(err)), 0);
  assert_int_equal(windows, 2);
  for (at = 0; at < 12; at++)
    for (bit = 0; bit < 8; bit++) {
      head[at] ^= (unsigned char)(1u << bit);
      for (len = sizeof(head) - 1; len < sizeof(head) + 40; len++) {
        err[0] = '\0';
        rc = fl__tokens_check(head, len, T, &windows, err, sizeof(err));
        if (rc == 0)
          assert_true(windows >= 1 &&
                      windows * T + 1 <= (len - sizeof(head)) / 2);
        else
          assert_true(rc == FL_EINVAL && err[0] != '\0');
      }
      head[at] ^= (unsigned char)(1u << bit);
    }
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(
          windows_across_three_shards_are_llm_c_s_each_way_fetched),
      cmocka_unit_test(bad_shards_and_arguments_are_refused_naming_the_file),
      cmocka_unit_test(
          a_bad_shard_4_kib_deep_is_refused_ending_with_the_cause),
      cmocka_unit_test(ranks_and_workers_see_every_window_exactly_once),
      cmocka_unit_test(resumed_epoch_gives_exactly_the_remaining_windows),
      cmocka_unit_test(header_check_survives_mutations_and_cuts),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
