/*
 * libFuzzer target for fl_dataset_webdataset's tar reader, built by `make
 * fuzz` with the whole core library and libarchive: the bytes are a shard,
 * read whole through the iterable's open, next_fields and skip as a worker
 * would, with fields of small rooms.  Whatever the bytes, every sample
 * must fit its fields, every error must say why, and the stream must end.
 * The bytes may be compressed, as shards may: the seeds hold tars through
 * gzip, bzip2, xz and zstd, and bomb.tar.bz2, 144 bytes of a 32 MiB
 * member, which is passed over through the decompressor's own buffers,
 * never held: memory stays within make fuzz's -rss_limit_mb.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "forkload.h"
#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Room for each field, and a canary after it. */
#define ROOM 64
#define CANARY 0xa5

static void
read_all(fl_iterable *it, int skip_first)
{
  static unsigned char buf[3][ROOM + 8];
  void *dst[3] = {buf[0], buf[1], buf[2]};
  size_t nbytes[3], f, reads = 0;
  int rc;

  if (it->open(it->ctx, NULL) != 0)
    abort();
  if (skip_first && it->skip(it->ctx, 2) != 0)
    abort();
  for (;;) {
    memset(buf, CANARY, sizeof(buf));
    for (f = 0; f < 3; f++)
      nbytes[f] = ROOM;
    fl__worker_error_clear();
    rc = it->next_fields(it->ctx, dst, nbytes);
    if (rc == 0)
      break;
    if (rc < 0 && fl__worker_error_text()[0] == '\0')
      abort(); /* an error that does not say why */
    for (f = 0; f < 3; f++)
      if (buf[f][ROOM] != CANARY || (rc > 0 && nbytes[f] > ROOM))
        abort();
    /* Every member or failure takes bytes of the input: it ends. */
    if (++reads > 100000)
      abort();
  }
  it->close(it->ctx);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static char path[64];
  static int fd = -1;
  const char *shard = path, *exts[] = {"bin", "cls", "__key__"};
  const size_t max[] = {ROOM, ROOM, ROOM};
  fl_iterable it;

  /* A file in memory, named through /proc: nothing is left behind. */
  if (fd < 0 && (fd = memfd_create("fuzz_tar", 0)) < 0)
    abort();
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  if (ftruncate(fd, 0) != 0 ||
      (size > 0 && pwrite(fd, data, size, 0) != (ssize_t)size))
    abort();
  if (fl_dataset_webdataset(&it, &shard, 1, exts, max, 3) != 0)
    abort();
  read_all(&it, 0);
  read_all(&it, 1);
  fl_iterable_close(&it);
  return 0;
}
