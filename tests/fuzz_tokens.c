/*
 * libFuzzer target for llm.c token shards, built by `make fuzz` with the
 * whole core library.  The first byte picks seq_len (1 to 64), the rest is
 * a shard: its header check on exactly those bytes, then the same bytes as
 * a file (a memfd) opened by fl_dataset_tokens.  Both must agree; a shard
 * accepted must give every window in bounds, the targets the inputs one
 * token on, and a shard refused FL_EINVAL with a reason naming the file.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "forkload.h"
#include "datasets/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every window of ds, four at a time through get_batch. */
static void
check_windows(const fl_dataset *ds, size_t seq_len)
{
  int32_t in[4 * 64], tg[4 * 64];
  void *dst[2] = {in, tg};
  size_t idx[4], nb[8], i, k, n, j;

  for (i = 0; i < ds->len; i += n) {
    n = ds->len - i < 4 ? ds->len - i : 4;
    for (k = 0; k < n; k++)
      idx[k] = i + k;
    if (ds->get_batch(ds->ctx, idx, n, dst, nb) != 0)
      abort();
    for (k = 0; k < n; k++)
      for (j = 0; j + 1 < seq_len; j++)
        if (tg[k * seq_len + j] != in[k * seq_len + j + 1] ||
            in[k * seq_len + j] < 0 || in[k * seq_len + j] > 65535)
          abort();
  }
  idx[0] = ds->len;
  if (ds->get_batch(ds->ctx, idx, 1, dst, nb) != FL_EINVAL)
    abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const char *paths[1];
  char err[256], path[64];
  size_t seq_len, windows = 0;
  fl_dataset ds;
  int fd, want, rc;

  if (size == 0)
    return 0;
  seq_len = 1 + data[0] % 64;
  data++, size--;
  err[0] = '\0';
  want = fl__tokens_check(data, size, seq_len, &windows, err, sizeof(err));
  if (want != 0 && (want != FL_EINVAL || err[0] == '\0'))
    abort();
  if (want == 0 &&
      (windows == 0 || windows * seq_len + 1 > (size - 1024) / 2))
    abort();

  fd = memfd_create("fuzz_tokens", MFD_CLOEXEC);
  if (fd < 0 || (size > 0 && write(fd, data, size) != (ssize_t)size))
    abort();
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  paths[0] = path;
  rc = fl_dataset_tokens(&ds, paths, 1, seq_len);
  /* An empty file is the mapping's to refuse, before the header. */
  if (rc != want && !(size == 0 && rc == FL_EINVAL))
    abort();
  if (rc != 0 && strstr(fl_loader_error(NULL), path) == NULL)
    abort();
  if (rc == 0) {
    if (ds.len != windows || ds.nfields != 2)
      abort();
    check_windows(&ds, seq_len);
    fl_dataset_close(&ds);
  }
  close(fd);
  return 0;
}
