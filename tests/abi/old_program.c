/*
 * A program as it was written and built against forkload 0.1.0's header
 * (forkload-0.1.0.h), which tests/abi_compat.sh runs with the current
 * library.  Every struct it hands the library is followed by canary bytes
 * that are not zero: a library that read past a 0.1 struct would take them
 * for fields (and crash or misbehave), and one that wrote past it would
 * change them.  It exits 0 and prints "ok" when the library used the
 * structs exactly as 0.1 laid them out.
 */
#define _GNU_SOURCE

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forkload-0.1.0.h"

#define CANARY 0xa5
#define N 600
#define SB 24

struct guarded_options {
  fl_options v;
  unsigned char canary[64];
};
struct guarded_dataset {
  fl_dataset v;
  unsigned char canary[64];
};
struct guarded_stats {
  fl_stats v;
  unsigned char canary[64];
};
struct guarded_iterable {
  fl_iterable v;
  unsigned char canary[64];
};

static int failed;

static void
check(int ok, const char *what)
{
  if (!ok) {
    printf("FAIL: %s\n", what);
    failed = 1;
  }
}

static int
intact(const unsigned char *c)
{
  size_t i;

  for (i = 0; i < 64; i++)
    if (c[i] != CANARY)
      return 0;
  return 1;
}

static int
get(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  (void)ctx;
  memset(dst, (int)(index % 251), SB);
  memcpy(dst, &index, sizeof(index));
  *nbytes = SB;
  return 0;
}

/* One epoch: every index once, each sample what get wrote. */
static void
epoch(fl_loader *l, size_t len, size_t sb, const char *what)
{
  unsigned char *seen = calloc(len, 1);
  fl_batch *b;
  size_t i, n = 0, idx;
  int rc;

  check(fl_loader_begin(l) == 0, what);
  while ((rc = fl_loader_next(l, &b)) == 1) {
    for (i = 0; i < fl_batch_count(b); i++) {
      idx = fl_batch_indices(b)[i];
      check(idx < len && !seen[idx], what);
      if (idx < len)
        seen[idx] = 1;
      if (sb == SB)
        check(memcmp((const char *)fl_batch_data(b) + i * sb, &idx,
                     sizeof(idx)) == 0, what);
      n++;
    }
    fl_batch_release(b);
  }
  check(rc == 0 && n == len, what);
  free(seen);
}

static int
next_none(void *ctx, void *dst, size_t *nbytes)
{
  (void)ctx;
  (void)dst;
  (void)nbytes;
  return 0;
}

/* A .npy file of 100 rows of 8 bytes, for the built-in datasets. */
static int
write_npy(const char *path)
{
  char head[128];
  unsigned char row[8];
  FILE *f = fopen(path, "wb");
  int i, len;

  if (f == NULL)
    return -1;
  memset(head, ' ', sizeof(head));
  len = snprintf(head + 10, 118, "{'descr': '|u1', 'fortran_order': False, "
                                 "'shape': (100, 8), }");
  head[10 + len] = ' ';
  head[127] = '\n';
  memcpy(head, "\x93NUMPY\x01\x00", 8);
  head[8] = 118;
  head[9] = 0;
  fwrite(head, 1, sizeof(head), f);
  for (i = 0; i < 100; i++) {
    memset(row, i, sizeof(row));
    fwrite(row, 1, sizeof(row), f);
  }
  return fclose(f);
}

int
main(void)
{
  struct guarded_options opt;
  struct guarded_dataset ds, npy;
  struct guarded_stats st;
  struct guarded_iterable it;
  char path[] = "/tmp/forkload-abi.XXXXXX";
  fl_loader *l = NULL;
  int fd;

  memset(&opt, CANARY, sizeof(opt));
  memset(&ds, CANARY, sizeof(ds));
  memset(&st, CANARY, sizeof(st));
  memset(&it, CANARY, sizeof(it));
  memset(&npy, CANARY, sizeof(npy));

  fl_options_init(&opt.v);
  check(intact(opt.canary), "fl_options_init wrote past a 0.1 fl_options");
  check(opt.v.batch_size == 1 && opt.v.prefetch_factor == 2 &&
        opt.v.reuse_segments == 1, "fl_options_init's defaults");
  opt.v.batch_size = 7;
  opt.v.shuffle = 1;
  opt.v.seed = 3;
  opt.v.num_workers = 2;
  opt.v.persistent_workers = 1;
  ds.v.ctx = NULL;
  ds.v.len = N;
  ds.v.sample_bytes = SB;
  ds.v.get = get;
  ds.v.get_batch = NULL;
  if (fl_loader_create(&l, &ds.v, &opt.v) != 0) {
    printf("FAIL: fl_loader_create: %s\n", fl_loader_error(NULL));
    return 1;
  }
  epoch(l, N, SB, "epoch 1 of a 0.1 program");
  epoch(l, N, SB, "epoch 2 of a 0.1 program");
  check(fl_loader_stats(l, &st.v) == 0, "fl_loader_stats");
  check(intact(st.canary), "fl_loader_stats wrote past a 0.1 fl_stats");
  check(st.v.batches_delivered == 2 * ((N + 6) / 7), "stats' batches");
  fl_loader_destroy(l);
  check(intact(opt.canary) && intact(ds.canary), "a canary changed");

  /* The built-in datasets fill and clear a 0.1 fl_dataset, no more. */
  fd = mkstemp(path);
  check(fd >= 0 && write_npy(path) == 0, "writing a .npy file");
  if (fd >= 0)
    close(fd);
  check(fl_dataset_npy_array(&npy.v, path) == 0, fl_loader_error(NULL));
  check(intact(npy.canary), "fl_dataset_npy_array wrote past it");
  check(npy.v.len == 100 && npy.v.sample_bytes == 8, "npy's shape");
  opt.v.shuffle = 0;
  check(fl_loader_create(&l, &npy.v, &opt.v) == 0, fl_loader_error(NULL));
  epoch(l, 100, 8, "an epoch of a .npy file");
  fl_loader_destroy(l);
  fl_dataset_close(&npy.v);
  check(intact(npy.canary), "fl_dataset_close wrote past it");
  check(npy.v.ctx == NULL && npy.v.len == 0, "fl_dataset_close cleared it");
  unlink(path);

  /* An iterable dataset's struct is read as 0.1 laid it out. */
  it.v.ctx = NULL;
  it.v.sample_bytes = 8;
  it.v.open = NULL;
  it.v.next = next_none;
  it.v.close = NULL;
  check(fl_loader_create_iterable(&l, &it.v, &opt.v) == 0,
        fl_loader_error(NULL));
  check(fl_loader_begin(l) == 0, "begin an iterable");
  fl_loader_destroy(l);
  check(intact(it.canary), "a canary changed");
  if (!failed)
    printf("ok\n");
  return failed;
}
