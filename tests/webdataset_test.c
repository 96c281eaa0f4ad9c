/*
 * fl_dataset_webdataset: tar shards written here with libarchive, read
 * through real loaders.  Keys group members as webdataset's tar grouping
 * does (folders, names of several dots, a name that starts with a dot,
 * members it passes over); each requested extension is a field with its
 * real size; a missing member, one over its max, a truncated or corrupt
 * tar are errors naming the shard and the key, and the stream goes on;
 * shards split across ranks and workers give every sample exactly once;
 * a resumed epoch gives exactly the rest.  Compressed shards read as
 * plain ones, a corrupt one failing where it breaks; pipe:COMMAND shards
 * read the command's output, a failing command is named with its status,
 * it gets no fd of ours, and it ends with the loader or the worker that
 * ran it.  Every case ends clean.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"

#ifdef HAVE_LIBARCHIVE
#include <archive.h>
#include <archive_entry.h>

struct member {
  const char *name;
  const char *data; /* NULL: a folder */
  size_t len;       /* 0: strlen(data) */
};

static char dir[64];

/* A tar of the members, through libarchive's filter (ARCHIVE_FILTER_*). */
static void
tar_write_filtered(const char *path, const struct member *m, size_t n,
                   int filter)
{
  struct archive *a = archive_write_new();
  struct archive_entry *e = archive_entry_new();
  size_t i, len;

  assert_non_null(a);
  assert_non_null(e);
  assert_int_equal(archive_write_set_format_ustar(a), ARCHIVE_OK);
  assert_int_equal(archive_write_add_filter(a, filter), ARCHIVE_OK);
  assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
  for (i = 0; i < n; i++) {
    len = m[i].data == NULL ? 0 : m[i].len ? m[i].len : strlen(m[i].data);
    archive_entry_clear(e);
    archive_entry_set_pathname(e, m[i].name);
    archive_entry_set_filetype(e, m[i].data == NULL ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)len);
    assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
    if (len > 0)
      assert_int_equal(archive_write_data(a, m[i].data, len), (ssize_t)len);
  }
  archive_entry_free(e);
  assert_int_equal(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
}

static void
tar_write(const char *path, const struct member *m, size_t n)
{
  tar_write_filtered(path, m, n, ARCHIVE_FILTER_NONE);
}

static char *
shard_path(unsigned s)
{
  char *p = malloc(128);

  assert_non_null(p);
  snprintf(p, 128, "%s/shard-%u.tar", dir, s);
  return p;
}

static int
dir_setup(void **state)
{
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/fl-wds-XXXXXX");
  return mkdtemp(dir) == NULL ? -1 : 0;
}

static int
dir_teardown(void **state)
{
  char cmd[128];

  (void)state;
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  return system(cmd);
}

/* What an epoch gave: each sample's fields as strings, and the errors. */
struct got {
  char field[64][3][40];
  size_t n, errors;
  char error[4][512];
};

static void
epoch(fl_loader *l, size_t nfields, struct got *g)
{
  const size_t *sizes;
  fl_batch *b;
  size_t i, f;
  int rc;

  memset(g, 0, sizeof(*g));
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    if (rc < 0) {
      assert_int_equal(rc, FL_EDATASET);
      if (g->errors < 4)
        snprintf(g->error[g->errors], sizeof(g->error[0]), "%s",
                 fl_loader_error(l));
      g->errors++;
      continue;
    }
    sizes = fl_batch_sizes(b);
    for (i = 0; i < fl_batch_count(b); i++, g->n++) {
      assert_true(g->n < 64);
      for (f = 0; f < nfields; f++) {
        assert_true(sizes[i * nfields + f] < 40);
        memcpy(g->field[g->n][f],
               (const char *)fl_batch_field(b, f) +
                   i * fl_batch_stride(b, f),
               sizes[i * nfields + f]);
      }
    }
    fl_batch_release(b);
  }
}

static fl_loader *
loader(const fl_iterable *it, unsigned nw, size_t bs)
{
  fl_options opt;
  fl_loader *l = NULL;

  fl_options_init(&opt);
  opt.num_workers = nw;
  opt.batch_size = bs;
  assert_int_equal(fl_loader_create_iterable(&l, it, &opt), 0);
  return l;
}

/*
 * webdataset's base_plus_ext: the key is the path up to the first dot of
 * the file name, folders included; the extension is the rest, lowercased;
 * a file name that starts with a dot belongs to its folder's key.
 * Folders, names without a dot and __meta__ files are passed over, and
 * unrequested extensions are left out.
 */
static void
keys_group_members_as_webdataset(void **state)
{
  const struct member m[] = {
      {"__meta__", "ignored", 0},    {"s1/", NULL, 0},
      {"s1/a.B.JPG", "img-a", 0},    {"s1/a.cls", "1", 0},
      {"s1/a.txt", "unrequested", 0}, {"s1/README", "no key", 0},
      {"s1/b.b.jpg", "image-b", 0},  {"s1/b.cls", "22", 0},
      {"x.y/c.b.jpg", "c", 0},       {"x.y/c.cls", "333", 0},
      {"d/.b.jpg", "dotted", 0},     {"d/.cls", "4", 0},
  };
  const char *exts[] = {"b.jpg", "cls", "__key__"};
  const char *want[][3] = {{"img-a", "1", "s1/a"},
                           {"image-b", "22", "s1/b"},
                           {"c", "333", "x.y/c"},
                           {"dotted", "4", "d/"}};
  const size_t max[] = {16, 4, 8};
  char *shard = shard_path(0);
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  struct got g;
  size_t i, f;

  (void)state;
  flt_baseline_take(&base);
  tar_write(shard, m, sizeof(m) / sizeof(m[0]));
  assert_int_equal(fl_dataset_webdataset(&it, (const char *const *)&shard,
                                         1, exts, max, 3), 0);
  assert_int_equal(it.nfields, 3);
  l = loader(&it, 0, 3);
  epoch(l, 3, &g);
  assert_int_equal(g.errors, 0);
  assert_int_equal(g.n, 4);
  for (i = 0; i < 4; i++)
    for (f = 0; f < 3; f++)
      assert_string_equal(g.field[i][f], want[i][f]);
  fl_loader_destroy(l);
  fl_iterable_close(&it);
  assert_null(it.ctx);
  fl_iterable_close(&it); /* closed twice: nothing */
  free(shard);
  flt_assert_clean(&base);
}

/* Each field's array holds each sample's member at its real size, in
   workers as in the caller. */
static void
fields_hold_each_member_at_its_size(void **state)
{
  static char big[300];
  struct member m[] = {{"k0.bin", big, 300}, {"k0.cls", "7", 0},
                       {"k1.bin", big, 1},   {"k1.cls", "77", 0}};
  const char *exts[] = {"bin", "cls"};
  const size_t max[] = {300, 2};
  char *shard = shard_path(1);
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  fl_batch *b;
  unsigned nw;

  (void)state;
  flt_baseline_take(&base);
  memset(big, 'x', sizeof(big));
  tar_write(shard, m, 4);
  assert_int_equal(fl_dataset_webdataset(&it, (const char *const *)&shard,
                                         1, exts, max, 2), 0);
  for (nw = 0; nw < 2; nw++) {
    l = loader(&it, nw, 2);
    assert_int_equal(fl_loader_begin(l), 0);
    assert_int_equal(fl_loader_next(l, &b), 1);
    assert_int_equal(fl_batch_count(b), 2);
    assert_int_equal(fl_batch_stride(b, 0), 300);
    assert_int_equal(fl_batch_stride(b, 1), 2);
    assert_int_equal(fl_batch_sizes(b)[0], 300);
    assert_int_equal(fl_batch_sizes(b)[1], 1);
    assert_int_equal(fl_batch_sizes(b)[2], 1);
    assert_int_equal(fl_batch_sizes(b)[3], 2);
    assert_memory_equal(fl_batch_field(b, 0), big, 300);
    assert_memory_equal((const char *)fl_batch_field(b, 1) + 2, "77", 2);
    fl_batch_release(b);
    assert_int_equal(fl_loader_next(l, &b), 0);
    fl_loader_destroy(l);
  }
  fl_iterable_close(&it);
  free(shard);
  flt_assert_clean(&base);
}

/* Samples a, b (c); the shard is cut at truncate_at, or a byte poked at
   poke_at: one error that says each of `says` and names the shard, and
   want_good samples (a first). */
static void
one_bad_sample(const struct member *m, size_t n, size_t truncate_at,
               long poke_at, const char *const *says, size_t nsays,
               size_t want_good)
{
  const char *exts[] = {"bin", "cls"};
  const size_t max[] = {8, 8};
  char *shard = shard_path(2);
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  struct got g;
  size_t i;
  FILE *fp;

  flt_baseline_take(&base);
  tar_write(shard, m, n);
  if (truncate_at > 0)
    assert_int_equal(truncate(shard, (off_t)truncate_at), 0);
  if (poke_at >= 0) {
    fp = fopen(shard, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, poke_at, SEEK_SET), 0);
    assert_int_equal(fputc('#', fp), '#');
    assert_int_equal(fclose(fp), 0);
  }
  assert_int_equal(fl_dataset_webdataset(&it, (const char *const *)&shard,
                                         1, exts, max, 2), 0);
  l = loader(&it, 1, 1);
  epoch(l, 2, &g);
  assert_int_equal(g.errors, 1);
  assert_int_equal(g.n, want_good);
  if (want_good > 0)
    assert_string_equal(g.field[0][0], "A");
  for (i = 0; i < nsays; i++) {
    if (strstr(g.error[0], says[i]) == NULL)
      fail_msg("\"%s\" does not say \"%s\"", g.error[0], says[i]);
  }
  assert_non_null(strstr(g.error[0], shard));
  fl_loader_destroy(l);
  fl_iterable_close(&it);
  free(shard);
  flt_assert_clean(&base);
}

static void
a_missing_member_is_an_error_naming_shard_and_key(void **state)
{
  const struct member m[] = {{"a.bin", "A", 0}, {"a.cls", "0", 0},
                             {"b.bin", "B", 0}, {"c.bin", "C", 0},
                             {"c.cls", "2", 0}};
  const char *says[] = {": b: no member b.cls"};

  (void)state;
  one_bad_sample(m, 5, 0, -1, says, 1, 2);
}

static void
a_member_over_its_max_is_an_error_naming_shard_and_key(void **state)
{
  const struct member m[] = {{"a.bin", "A", 0},         {"a.cls", "0", 0},
                             {"b.bin", "123456789", 0}, {"b.cls", "1", 0},
                             {"c.bin", "C", 0},         {"c.cls", "2", 0}};
  const char *says[] = {": b: member b.bin is 9 bytes, more than its max "
                        "of 8"};

  (void)state;
  one_bad_sample(m, 6, 0, -1, says, 1, 2);
}

/* A ustar member is a 512-byte header and its data padded to 512: b.bin's
   header is at 2048, its data at 2560. */
static void
a_truncated_tar_is_an_error_naming_shard_and_key(void **state)
{
  const struct member m[] = {{"a.bin", "A", 0}, {"a.cls", "0", 0},
                             {"b.bin", "B", 0}, {"b.cls", "1", 0}};
  const char *says[] = {": in b: ", "runcated"};

  (void)state;
  one_bad_sample(m, 4, 2560, -1, says, 2, 1);
}

static void
a_corrupt_header_is_an_error_naming_shard_and_key(void **state)
{
  const struct member m[] = {{"a.bin", "A", 0}, {"a.cls", "0", 0},
                             {"b.bin", "B", 0}, {"b.cls", "1", 0}};
  const char *says[] = {"after a: ", "amaged"};

  (void)state;
  /* As with webdataset, the sample being read when the tar breaks is
     lost: whether it had more members cannot be known. */
  one_bad_sample(m, 4, 0, 2048 + 100, says, 2, 0);
}

/*
 * Five shards of three samples: shard s goes to rank s % world_size, and
 * that rank's k-th shard to worker k % num_workers (split_by_node, then
 * split_by_worker).  Across the ranks, every sample exactly once; without
 * workers, the rank comes from RANK and WORLD_SIZE.
 */
static void
shards_split_across_ranks_and_workers_once_each(void **state)
{
  const char *exts[] = {"__key__", "cls"};
  const size_t max[] = {16, 4};
  char *shards[5], name[16], rankv[4], names[3][16], cls[4];
  struct member m[3];
  unsigned char seen[5][3];
  flt_baseline base;
  fl_iterable it;
  fl_options opt;
  fl_loader *l;
  struct got g;
  unsigned s, k, rank, nw, want;
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  for (s = 0; s < 5; s++) {
    shards[s] = shard_path(10 + s);
    snprintf(cls, sizeof(cls), "%u", s);
    for (k = 0; k < 3; k++) {
      snprintf(names[k], sizeof(names[k]), "s%uk%u.cls", s, k);
      m[k] = (struct member){names[k], cls, 0};
    }
    tar_write(shards[s], m, 3);
  }
  assert_int_equal(fl_dataset_webdataset(&it, (const char *const *)shards,
                                         5, exts, max, 2), 0);
  for (nw = 0; nw <= 3; nw++) {
    memset(seen, 0, sizeof(seen));
    for (rank = 0; rank < 2; rank++) {
      fl_options_init(&opt);
      opt.num_workers = nw;
      opt.batch_size = 2;
      opt.rank = rank;
      opt.world_size = 2;
      snprintf(rankv, sizeof(rankv), "%u", rank);
      setenv("RANK", rankv, 1);
      setenv("WORLD_SIZE", "2", 1);
      assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), 0);
      epoch(l, 2, &g);
      assert_int_equal(g.errors, 0);
      want = rank == 0 ? 9 : 6; /* shards 0 2 4, or 1 3 */
      assert_int_equal(g.n, want);
      for (i = 0; i < g.n; i++) {
        assert_int_equal(sscanf(g.field[i][0], "s%uk%u", &s, &k), 2);
        snprintf(name, sizeof(name), "s%uk%u", s, k);
        assert_string_equal(g.field[i][0], name);
        assert_int_equal(s % 2, rank);
        assert_int_equal(atoi(g.field[i][1]), s);
        seen[s][k]++;
      }
      fl_loader_destroy(l);
    }
    for (s = 0; s < 5; s++)
      for (k = 0; k < 3; k++)
        assert_int_equal(seen[s][k], 1);
  }
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  fl_iterable_close(&it);
  for (s = 0; s < 5; s++)
    free(shards[s]);
  flt_assert_clean(&base);
}

/* A state saved mid-epoch resumes with exactly the samples not yet handed
   out, the streams skipping what was (without copying it); shards read
   from files, or through cat (piped), whose commands run again. */
static void
resumed(int piped)
{
  const char *exts[] = {"__key__", "bin"};
  const size_t max[] = {16, 8};
  char *shards[4], key[4][8][16], cmds[4][300];
  const char *names[4];
  unsigned char buf[4096];
  struct member m[8];
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  fl_batch *b;
  struct got whole, rest;
  unsigned s, k, taken = 0;
  size_t i;
  int len;

  flt_baseline_take(&base);
  for (s = 0; s < 4; s++) {
    shards[s] = shard_path(20 + s);
    snprintf(cmds[s], sizeof(cmds[s]), "pipe:cat '%s'", shards[s]);
    names[s] = piped ? cmds[s] : shards[s];
    for (k = 0; k < 8; k++) {
      snprintf(key[s][k], 16, "r%uk%u.bin", s, k);
      m[k] = (struct member){key[s][k], "payload", 0};
    }
    tar_write(shards[s], m, 8);
  }
  assert_int_equal(fl_dataset_webdataset(&it, names, 4, exts, max, 2), 0);
  l = loader(&it, 2, 3);
  epoch(l, 2, &whole);
  assert_int_equal(whole.n, 32);
  fl_loader_destroy(l);
  l = loader(&it, 2, 3);
  assert_int_equal(fl_loader_begin(l), 0);
  for (i = 0; i < 5; i++) {
    assert_int_equal(fl_loader_next(l, &b), 1);
    taken += (unsigned)fl_batch_count(b);
    fl_batch_release(b);
  }
  len = fl_loader_state_save(l, buf, sizeof(buf));
  assert_true(len > 0);
  fl_loader_destroy(l);
  l = loader(&it, 2, 3);
  assert_int_equal(fl_loader_state_load(l, buf, (size_t)len), 0);
  epoch(l, 2, &rest);
  assert_int_equal(rest.errors, 0);
  assert_int_equal(rest.n, 32 - taken);
  for (i = 0; i < rest.n; i++)
    assert_string_equal(rest.field[i][0], whole.field[taken + i][0]);
  fl_loader_destroy(l);
  fl_iterable_close(&it);
  for (s = 0; s < 4; s++)
    free(shards[s]);
  flt_assert_clean(&base);
}

static void
a_resumed_epoch_gives_exactly_the_rest(void **state)
{
  (void)state;
  resumed(0);
}

static void
a_resumed_epoch_of_pipe_shards_gives_exactly_the_rest(void **state)
{
  (void)state;
  resumed(1);
}

/* An epoch of nshards shards of two samples each, keyed "<c>SkK" (shard
   S, sample K): no error, and each sample once. */
static void
assert_two_each_once(const struct got *g, char c, unsigned nshards)
{
  unsigned s, k, seen[8][2] = {{0}};
  char fmt[8];
  size_t i;

  snprintf(fmt, sizeof(fmt), "%c%%uk%%u", c);
  assert_int_equal(g->errors, 0);
  assert_int_equal(g->n, 2 * nshards);
  for (i = 0; i < g->n; i++) {
    assert_int_equal(sscanf(g->field[i][0], fmt, &s, &k), 2);
    assert_true(s < nshards && k < 2);
    seen[s][k]++;
  }
  for (s = 0; s < nshards; s++)
    assert_true(seen[s][0] == 1 && seen[s][1] == 1);
}

/* Shards 40 to 43, each two samples zNkK.cls, as gzip, bzip2, xz and
   zstd (webdataset's tarfile reads the first three). */
static void
compressed_shards_read_as_plain_ones(void **state)
{
  static const struct {
    int filter;
    const char *suffix;
  } kinds[] = {{ARCHIVE_FILTER_GZIP, "gz"},
               {ARCHIVE_FILTER_BZIP2, "bz2"},
               {ARCHIVE_FILTER_XZ, "xz"},
               {ARCHIVE_FILTER_ZSTD, "zst"}};
  const char *exts[] = {"__key__", "cls"};
  const size_t max[] = {16, 4};
  char *shards[4], names[4][2][16];
  struct member m[2];
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  struct got g;
  unsigned s, k, nw;

  (void)state;
  flt_baseline_take(&base);
  for (s = 0; s < 4; s++) {
    shards[s] = malloc(128);
    assert_non_null(shards[s]);
    snprintf(shards[s], 128, "%s/shard-%u.tar.%s", dir, 40 + s,
             kinds[s].suffix);
    for (k = 0; k < 2; k++) {
      snprintf(names[s][k], 16, "z%uk%u.cls", s, k);
      m[k] = (struct member){names[s][k], "c", 0};
    }
    tar_write_filtered(shards[s], m, 2, kinds[s].filter);
  }
  assert_int_equal(fl_dataset_webdataset(&it, (const char *const *)shards,
                                         4, exts, max, 2), 0);
  for (nw = 0; nw <= 2; nw += 2) {
    l = loader(&it, nw, 3);
    epoch(l, 2, &g);
    assert_two_each_once(&g, 'z', 4);
    fl_loader_destroy(l);
  }
  fl_iterable_close(&it);
  for (s = 0; s < 4; s++)
    free(shards[s]);
  flt_assert_clean(&base);
}

/* An epoch of samples too large for struct got: how many, the errors,
   and the first error's text. */
static size_t
count_epoch(fl_loader *l, size_t *n, char *err, size_t errlen)
{
  size_t errors = 0;
  fl_batch *b;
  int rc;

  *n = 0;
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    if (rc < 0) {
      assert_int_equal(rc, FL_EDATASET);
      if (errors++ == 0)
        snprintf(err, errlen, "%s", fl_loader_error(l));
      continue;
    }
    *n += fl_batch_count(b);
    fl_batch_release(b);
  }
  return errors;
}

/*
 * 40 samples of 3000 bytes that do not compress, gzipped: gzip decodes
 * 64 KiB at a time, so a stream cut, or overwritten, three quarters in
 * fails after some samples went through.  The error names the shard and
 * how far it got (gzip's words when cut; overwritten, the garbage it
 * inflates to may be the tar's error first); nothing after it is read.
 */
static void
a_corrupt_gzip_shard_is_an_error_saying_how_far_it_got(void **state)
{
  static char bins[40][3000];
  const char *exts[] = {"bin", "cls"};
  const size_t max[] = {3000, 4};
  char *shard = malloc(128), names[40][2][16], err[512];
  uint64_t x = 88172645463325252u;
  struct member m[80];
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  long size;
  size_t i, j, n;
  int cut;
  FILE *fp;

  (void)state;
  flt_baseline_take(&base);
  assert_non_null(shard);
  snprintf(shard, 128, "%s/shard-50.tar.gz", dir);
  for (i = 0; i < 40; i++) {
    for (j = 0; j < sizeof(bins[i]); j++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      bins[i][j] = (char)x;
    }
    snprintf(names[i][0], 16, "%02zu.bin", i);
    snprintf(names[i][1], 16, "%02zu.cls", i);
    m[2 * i] = (struct member){names[i][0], bins[i], sizeof(bins[i])};
    m[2 * i + 1] = (struct member){names[i][1], "c", 0};
  }
  for (cut = 0; cut <= 1; cut++) {
    tar_write_filtered(shard, m, 80, ARCHIVE_FILTER_GZIP);
    fp = fopen(shard, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    size = ftell(fp);
    assert_true(size > 100000);
    if (cut) {
      assert_int_equal(ftruncate(fileno(fp), size * 3 / 4), 0);
    } else {
      assert_int_equal(fseek(fp, size * 3 / 4, SEEK_SET), 0);
      for (i = 0; i < 256; i++)
        assert_int_equal(fputc(0xff, fp), 0xff);
    }
    assert_int_equal(fclose(fp), 0);
    assert_int_equal(fl_dataset_webdataset(&it, (const char *const *)&shard,
                                           1, exts, max, 2), 0);
    l = loader(&it, 1, 4);
    assert_int_equal(count_epoch(l, &n, err, sizeof(err)), 1);
    assert_true(n > 0 && n < 40);
    if (strstr(err, shard) == NULL ||
        (cut && strstr(err, "truncated gzip input") == NULL) ||
        strstr(err, "(sample ") == NULL || strstr(err, " bytes in)") == NULL)
      fail_msg("\"%s\" does not name the shard and how far", err);
    fl_loader_destroy(l);
    fl_iterable_close(&it);
  }
  free(shard);
  flt_assert_clean(&base);
}

/* A shard in lzop's format, which libarchive reads only by running the
   lzop program: refused as no archive, the program never run. */
static void
a_shard_libarchive_would_run_a_program_for_is_refused(void **state)
{
  static const unsigned char lzop[] = {0x89, 'L', 'Z', 'O', 0, '\r', '\n',
                                       0x1a, '\n'};
  const char *exts[] = {"bin"};
  const size_t max[] = {8};
  char *shard = malloc(128), err[512];
  unsigned char body[512] = {0};
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  size_t n;
  FILE *fp;

  (void)state;
  flt_baseline_take(&base);
  assert_non_null(shard);
  snprintf(shard, 128, "%s/shard-55.tar.lzo", dir);
  memcpy(body, lzop, sizeof(lzop));
  fp = fopen(shard, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(body, 1, sizeof(body), fp), sizeof(body));
  assert_int_equal(fclose(fp), 0);
  assert_int_equal(fl_dataset_webdataset(&it, (const char *const *)&shard, 1,
                                         exts, max, 1), 0);
  l = loader(&it, 0, 4);
  assert_int_equal(count_epoch(l, &n, err, sizeof(err)), 1);
  assert_int_equal(n, 0);
  if (strstr(err, shard) == NULL ||
      strstr(err, "Unrecognized archive format") == NULL)
    fail_msg("\"%s\" does not refuse the shard as no archive", err);
  fl_loader_destroy(l);
  fl_iterable_close(&it);
  free(shard);
  flt_assert_clean(&base);
}

/* Shard 60 as a tar, 61 as a tar.gz, 62 a tar file: read through cat and
   gzip -dc, in workers and in this process, two epochs each (the
   commands run again). */
static void
pipe_shards_read_their_commands_output(void **state)
{
  const char *exts[] = {"__key__", "cls"};
  const size_t max[] = {16, 4};
  char files[3][128], cmds[3][300], names[3][2][16];
  const char *shards[3] = {cmds[0], cmds[1], files[2]};
  struct member m[2];
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  struct got g;
  unsigned s, k, nw, e;

  (void)state;
  flt_baseline_take(&base);
  for (s = 0; s < 3; s++) {
    snprintf(files[s], sizeof(files[s]), "%s/shard-%u.tar%s", dir, 60 + s,
             s == 1 ? ".gz" : "");
    for (k = 0; k < 2; k++) {
      snprintf(names[s][k], 16, "p%uk%u.cls", s, k);
      m[k] = (struct member){names[s][k], "c", 0};
    }
    tar_write_filtered(files[s], m, 2,
                       s == 1 ? ARCHIVE_FILTER_GZIP : ARCHIVE_FILTER_NONE);
  }
  snprintf(cmds[0], sizeof(cmds[0]), "pipe:cat '%s'", files[0]);
  snprintf(cmds[1], sizeof(cmds[1]), "pipe:gzip -dc '%s'", files[1]);
  assert_int_equal(fl_dataset_webdataset(&it, shards, 3, exts, max, 2), 0);
  for (nw = 0; nw <= 2; nw += 2) {
    l = loader(&it, nw, 4);
    for (e = 0; e < 2; e++) {
      epoch(l, 2, &g);
      assert_two_each_once(&g, 'p', 3);
    }
    fl_loader_destroy(l);
  }
  fl_iterable_close(&it);
  flt_assert_clean(&base);
}

/*
 * A command that writes past its tar's end, after the reader has seen the
 * end marker, and that fails on a closed pipe rather than die of SIGPIPE
 * (as curl does, exit 23): what it writes is read to its end, and the
 * shard ends well.
 */
static void
a_command_writing_past_its_tar_is_read_to_its_end(void **state)
{
  const struct member m[] = {{"a.cls", "0", 0}, {"b.cls", "1", 0}};
  const char *exts[] = {"cls"};
  const size_t max[] = {4};
  char file[128], cmd[400];
  const char *shard = cmd;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  struct got g;
  unsigned nw;

  (void)state;
  flt_baseline_take(&base);
  snprintf(file, sizeof(file), "%s/shard-65.tar", dir);
  tar_write_filtered(file, m, 2, ARCHIVE_FILTER_NONE);
  snprintf(cmd, sizeof(cmd), "pipe:trap '' PIPE; cat '%s' && sleep 0.2 && "
           "head -c 30000 /dev/zero", file);
  assert_int_equal(fl_dataset_webdataset(&it, &shard, 1, exts, max, 1), 0);
  for (nw = 0; nw <= 1; nw++) {
    l = loader(&it, nw, 4);
    epoch(l, 1, &g);
    if (g.errors != 0)
      fail_msg("%u worker(s): %s", nw, g.error[0]);
    assert_int_equal(g.n, 2);
    fl_loader_destroy(l);
  }
  fl_iterable_close(&it);
  flt_assert_clean(&base);
}

/*
 * Samples a and b (ustar: b.bin's header at 2048, its data at 2560) through
 * commands that fail: cut short, then exit 3; the whole tar, then exit 3;
 * the whole tar, then the shell killed.  Each is its batch's error naming
 * the command and its status, after the samples before it.
 */
static void
a_failing_command_is_an_error_naming_it_and_its_status(void **state)
{
  const struct member m[] = {{"a.bin", "A", 0}, {"a.cls", "0", 0},
                             {"b.bin", "B", 0}, {"b.cls", "1", 0}};
  const char *exts[] = {"bin", "cls"};
  const size_t max[] = {8, 8};
  const char *says[3] = {"; the command: exit 3",
                         ": after b: the tar ends, but the command failed: "
                         "exit 3",
                         ": after b: the tar ends, but the command failed: "
                         "killed by signal 9"};
  char *file = shard_path(70), cmds[3][300];
  const char *shards[3] = {cmds[0], cmds[1], cmds[2]};
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  struct got g;
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  tar_write(file, m, 4);
  snprintf(cmds[0], sizeof(cmds[0]), "pipe:head -c 2560 '%s'; exit 3",
           file);
  snprintf(cmds[1], sizeof(cmds[1]), "pipe:cat '%s'; exit 3", file);
  snprintf(cmds[2], sizeof(cmds[2]), "pipe:cat '%s'; kill -9 $$", file);
  assert_int_equal(fl_dataset_webdataset(&it, shards, 3, exts, max, 2), 0);
  l = loader(&it, 1, 1);
  epoch(l, 2, &g);
  assert_int_equal(g.errors, 3);
  /* a of each; b is lost with the shard, as when a tar breaks. */
  assert_int_equal(g.n, 3);
  for (i = 0; i < 3; i++) {
    assert_string_equal(g.field[i][0], "A");
    if (strstr(g.error[i], shards[i]) == NULL ||
        strstr(g.error[i], says[i]) == NULL)
      fail_msg("\"%s\" does not name \"%s\" and say \"%s\"", g.error[i],
               shards[i], says[i]);
  }
  fl_loader_destroy(l);
  fl_iterable_close(&it);
  free(file);
  flt_assert_clean(&base);
}

/* The first error of an epoch of one shard, through a worker. */
static void
shard_error(const char *shard, const char *key_ext, char *msg, size_t len)
{
  const char *exts[] = {key_ext, "cls"};
  const size_t max[] = {8, 8};
  fl_iterable it;
  fl_loader *l;

  assert_int_equal(fl_dataset_webdataset(&it, &shard, 1, exts, max, 2), 0);
  l = loader(&it, 1, 1);
  assert_int_equal(flt_epoch_error(l, msg, len), FL_EDATASET);
  fl_loader_destroy(l);
  fl_iterable_close(&it);
}

/*
 * Shards 4 KiB deep, whose members' names are long too, read as files and
 * through long pipe: commands: each error ends with its cause, its paths
 * shortened in their middle.
 */
static void
errors_quoting_a_4_kib_path_or_command_end_with_their_cause(void **state)
{
  char *deep = flt_long_dir(dir), key[200], names[4][220], tar[4096],
       cmd[4200], msg[1024];
  struct member m[4] = {{names[0], "A", 0}, {names[1], "0", 0},
                        {names[2], "B", 0}, {names[3], "1", 0}};
  flt_baseline base;
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  for (i = 0; i + 30 < sizeof(key); i += 29)
    snprintf(key + i, sizeof(key) - i, "a-rather-long-folder-name-%02zu/",
             i / 29);
  snprintf(names[0], sizeof(names[0]), "%sa.bin", key);
  snprintf(names[1], sizeof(names[1]), "%sa.cls", key);
  snprintf(names[2], sizeof(names[2]), "%sb.bin", key);
  snprintf(names[3], sizeof(names[3]), "%sb.cls", key);
  snprintf(tar, sizeof(tar), "%s/gnu.tar", deep);
  tar_write(tar, m, 4);
  /* Cut short in b's data, as a download is: libarchive's words, then
     how far it got. */
  snprintf(cmd, sizeof(cmd), "pipe:head -c 3584 %s", tar);
  shard_error(cmd, "bin", msg, sizeof(msg));
  assert_memory_equal(msg, "batch 1 (worker 0): ", 20);
  flt_assert_ends_with(msg, "-05/b: Truncated tar archive (sample 2, "
                       "3584 bytes in)");
  snprintf(cmd, sizeof(cmd), "pipe:head -c 3584 '%s'; exit 3", tar);
  shard_error(cmd, "bin", msg, sizeof(msg));
  flt_assert_ends_with(msg, "bytes in); the command: exit 3");
  snprintf(cmd, sizeof(cmd), "pipe:cat '%s'; exit 3", tar);
  shard_error(cmd, "bin", msg, sizeof(msg));
  flt_assert_ends_with(msg, "b: the tar ends, but the command failed: "
                       "exit 3 (sample 2, 5120 bytes in)");
  shard_error(tar, "txt", msg, sizeof(msg));
  flt_assert_ends_with(msg, "a.txt");
  if (strstr(msg, ": no member a-rather-") == NULL)
    fail_msg("%s", msg);
  snprintf(cmd, sizeof(cmd), "%s/none.tar", deep);
  shard_error(cmd, "bin", msg, sizeof(msg));
  /* libarchive's words quote the path again: both are shortened. */
  if (strstr(msg, "/none.tar: cannot open it: Failed to open '") == NULL)
    fail_msg("%s", msg);
  flt_assert_ends_with(msg, "/none.tar' (sample 0)");
  free(deep);
  flt_assert_clean(&base);
}

/* The command's fds, as it lists them, are 0, 1 and 2 alone: not the
   loader's sockets and segments, nor an fd this program left inheritable
   (workers keep it, as any fd their loader does not know). */
static void
a_command_gets_no_fd_but_its_stdio(void **state)
{
  const struct member m[] = {{"a.cls", "0", 0}};
  const char *exts[] = {"cls"};
  const size_t max[] = {8};
  char *file = shard_path(71), list[128], cmd[400], got[64];
  const char *shard = cmd;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  struct got g;
  unsigned nw;
  size_t len;
  FILE *fp;
  int stray;

  (void)state;
  flt_baseline_take(&base);
  stray = open("/dev/null", O_RDONLY); /* no O_CLOEXEC */
  assert_true(stray > 2);
  tar_write(file, m, 1);
  snprintf(list, sizeof(list), "%s/fds", dir);
  snprintf(cmd, sizeof(cmd), "pipe:ls /proc/$$/fd >'%s'; cat '%s'", list,
           file);
  assert_int_equal(fl_dataset_webdataset(&it, &shard, 1, exts, max, 1), 0);
  for (nw = 0; nw <= 1; nw++) {
    l = loader(&it, nw, 1);
    epoch(l, 1, &g);
    assert_int_equal(g.errors, 0);
    assert_int_equal(g.n, 1);
    fl_loader_destroy(l);
    fp = fopen(list, "r");
    assert_non_null(fp);
    len = fread(got, 1, sizeof(got) - 1, fp);
    got[len] = '\0';
    fclose(fp);
    assert_string_equal(got, "0\n1\n2\n");
  }
  fl_iterable_close(&it);
  free(file);
  close(stray);
  flt_assert_clean(&base);
}

/* Returns once pid has exited (a zombie is gone as a process), failing
   after 10 s: the bound of a hang, not a timing. */
static void
assert_exits(pid_t pid)
{
  struct pollfd p;
  int fd = (int)syscall(SYS_pidfd_open, pid, 0);

  if (fd < 0 && errno == ESRCH)
    return;
  assert_true(fd >= 0);
  p.fd = fd;
  p.events = POLLIN;
  if (poll(&p, 1, 10000) != 1)
    fail_msg("process %d is still running", (int)pid);
  close(fd);
}

/*
 * A command mid-shard, a pipeline whose stages outlive their shell unless
 * killed: `sleep` in the background, the shard's first sample and a half,
 * then a wait.  Its pids are written before its output, so they are known
 * when the first batch is.  Ended so: the loader destroyed (workers 1 or
 * 0), or the worker SIGKILLed.  Nothing of the command is left.
 */
static void
midshard(int nw, int kill_worker)
{
  const struct member m[] = {{"a.bin", "A", 0}, {"a.cls", "0", 0},
                             {"b.bin", "B", 0}, {"b.cls", "1", 0}};
  const char *exts[] = {"bin", "cls"};
  const size_t max[] = {8, 8};
  char *file = shard_path(72), pids[128], cmd[400];
  const char *shard = cmd;
  int parent, shell, sleeper;
  flt_baseline base;
  fl_iterable it;
  fl_loader *l;
  fl_batch *b;
  FILE *fp;

  flt_baseline_take(&base);
  tar_write(file, m, 4);
  snprintf(pids, sizeof(pids), "%s/pids", dir);
  unlink(pids);
  snprintf(cmd, sizeof(cmd),
           "pipe:sleep 1000 & echo $PPID $$ $! >'%s'; head -c 3072 '%s'; "
           "wait", pids, file);
  assert_int_equal(fl_dataset_webdataset(&it, &shard, 1, exts, max, 2), 0);
  l = loader(&it, (unsigned)nw, 1);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(fl_loader_next(l, &b), 1);
  assert_memory_equal(fl_batch_field(b, 0), "A", 1);
  fl_batch_release(b);
  fp = fopen(pids, "r");
  assert_non_null(fp);
  assert_int_equal(fscanf(fp, "%d %d %d", &parent, &shell, &sleeper), 3);
  fclose(fp);
  assert_int_equal(parent == getpid(), nw == 0);
  if (kill_worker) {
    assert_int_equal(kill(parent, SIGKILL), 0);
    assert_exits(shell);
    assert_exits(sleeper);
    assert_true(fl_loader_next(l, &b) < 0);
  }
  fl_loader_destroy(l);
  assert_exits(shell);
  assert_exits(sleeper);
  fl_iterable_close(&it);
  free(file);
  flt_assert_clean(&base);
}

static void
a_loader_destroyed_mid_shard_ends_its_command(void **state)
{
  (void)state;
  midshard(1, 0);
  midshard(0, 0);
}

static void
a_worker_killed_mid_shard_leaves_no_command(void **state)
{
  (void)state;
  midshard(1, 1);
}

static void
bad_arguments_are_refused(void **state)
{
  const char *shard = "x.tar", *exts[] = {"bin"}, *none[] = {""};
  const char *caps[] = {"JPG"}, *twice[] = {"bin", "cls", "bin"};
  const size_t max[] = {8}, zero[] = {0}, three[] = {8, 8, 8};
  fl_iterable it;

  (void)state;
  assert_int_equal(fl_dataset_webdataset(NULL, &shard, 1, exts, max, 1),
                   FL_EINVAL);
  assert_int_equal(fl_dataset_webdataset(&it, &shard, 0, exts, max, 1),
                   FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "no shards"));
  assert_int_equal(fl_dataset_webdataset(&it, &shard, 1, none, max, 1),
                   FL_EINVAL);
  assert_int_equal(fl_dataset_webdataset(&it, &shard, 1, exts, zero, 1),
                   FL_EINVAL);
  assert_int_equal(fl_dataset_webdataset_sized(&it, offsetof(fl_iterable,
                                                             nfields),
                                               &shard, 1, exts, max, 1),
                   FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "too old"));
  /* Neither would ever match a member: every sample would fail. */
  assert_int_equal(fl_dataset_webdataset(&it, &shard, 1, caps, max, 1),
                   FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "\"JPG\" has capitals"));
  assert_int_equal(fl_dataset_webdataset(&it, &shard, 1, twice, three, 3),
                   FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "\"bin\" is given twice"));
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(keys_group_members_as_webdataset),
      cmocka_unit_test(fields_hold_each_member_at_its_size),
      cmocka_unit_test(a_missing_member_is_an_error_naming_shard_and_key),
      cmocka_unit_test(
          a_member_over_its_max_is_an_error_naming_shard_and_key),
      cmocka_unit_test(a_truncated_tar_is_an_error_naming_shard_and_key),
      cmocka_unit_test(a_corrupt_header_is_an_error_naming_shard_and_key),
      cmocka_unit_test(shards_split_across_ranks_and_workers_once_each),
      cmocka_unit_test(a_resumed_epoch_gives_exactly_the_rest),
      cmocka_unit_test(
          a_resumed_epoch_of_pipe_shards_gives_exactly_the_rest),
      cmocka_unit_test(compressed_shards_read_as_plain_ones),
      cmocka_unit_test(
          a_corrupt_gzip_shard_is_an_error_saying_how_far_it_got),
      cmocka_unit_test(
          a_shard_libarchive_would_run_a_program_for_is_refused),
      cmocka_unit_test(pipe_shards_read_their_commands_output),
      cmocka_unit_test(
          a_failing_command_is_an_error_naming_it_and_its_status),
      cmocka_unit_test(
          errors_quoting_a_4_kib_path_or_command_end_with_their_cause),
      cmocka_unit_test(a_command_writing_past_its_tar_is_read_to_its_end),
      cmocka_unit_test(a_command_gets_no_fd_but_its_stdio),
      cmocka_unit_test(a_loader_destroyed_mid_shard_ends_its_command),
      cmocka_unit_test(a_worker_killed_mid_shard_leaves_no_command),
      cmocka_unit_test(bad_arguments_are_refused),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, dir_setup, dir_teardown);
}
#else
int
main(void)
{
  flt_skip_all("forkload was built without libarchive "
               "(apt-get install libarchive-dev)");
}
#endif
