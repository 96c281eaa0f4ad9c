/*
 * A mapped region of fixed-size samples and fl_dataset_raw, built on it (a
 * flat file of records after a header); fl_dataset_npy_array (npy.c) is
 * the same region with an NPY header in front; the reads of whole files
 * that npy.c and image_folder.c share.  And what every builder of a
 * dataset does first and last (fl__dataset_out_check, fl__dataset_out),
 * and fl_dataset_close and fl_iterable_close, which free any built-in
 * dataset or stream.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "internal.h"

struct region {
  struct fl__ds_base base;
  unsigned char *map;
  size_t map_bytes;
  const unsigned char *data;
  size_t sample_bytes, len;
  char path[]; /* for messages */
};

/* Open a regular file for reading, or say why not: *fd, with its stat. */
int
fl__open_regular(const char *path, int *fd, struct stat *st)
{
  /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
  *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (*fd < 0)
    return fl__error_set(-errno, "%s: cannot open: %s", path,
                         fl__strerror(errno));
  if (fstat(*fd, st) != 0) {
    fl__error_set(-errno, "%s: cannot stat: %s", path, fl__strerror(errno));
    fl__close(*fd);
    return -errno;
  }
  if (!S_ISREG(st->st_mode)) {
    fl__close(*fd);
    return fl__error_set(FL_EINVAL, "%s: not a regular file", path);
  }
  return 0;
}

int
fl__pread_full(int fd, void *buf, size_t n, off_t off, size_t *got)
{
  unsigned char *p = buf;
  ssize_t r;
  size_t done = 0;

  while (done < n) {
    r = pread(fd, p + done, n - done, off + (off_t)done);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -errno;
    if (r == 0)
      break;
    done += (size_t)r;
  }
  *got = done;
  return 0;
}

int
fl__map_file(const char *path, void **map, size_t *size)
{
  struct stat st;
  void *m = MAP_FAILED;
  int fd, rc;

  rc = fl__open_regular(path, &fd, &st);
  if (rc != 0)
    return rc;
  if (st.st_size == 0) {
    rc = fl__error_set(FL_EINVAL, "%s: the file is empty", path);
    goto out;
  }
  if ((uint64_t)st.st_size > SIZE_MAX) {
    rc = fl__error_set(FL_EINVAL, "%s: %lld bytes are too many to map",
                       path, (long long)st.st_size);
    goto out;
  }
  /* Read-only and shared: workers forked later see the same page cache. */
  m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    rc = fl__error_set(-errno, "%s: cannot map %lld bytes: %s", path,
                       (long long)st.st_size, fl__strerror(errno));
    goto out;
  }
  *map = m;
  *size = (size_t)st.st_size;
out:
  /* The mapping keeps the file; an fd would only be one more to inherit. */
  fl__close(fd);
  return rc;
}

static int
region_get(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  const struct region *r = ctx;

  if (index >= r->len) {
    fl_worker_error("%s: index %zu is out of range (%zu samples)", r->path,
                    index, r->len);
    return FL_EINVAL;
  }
  memcpy(dst, r->data + index * r->sample_bytes, r->sample_bytes);
  *nbytes = r->sample_bytes;
  return 0;
}

/* One memcpy per run of consecutive indices: a sequential batch is one. */
int
fl__copy_runs(const unsigned char *data, size_t len, size_t sb,
              const size_t *indices, size_t n, unsigned char *out,
              const char *path)
{
  size_t i, j;

  for (i = 0; i < n; i = j) {
    if (indices[i] >= len) {
      fl_worker_error("%s: index %zu is out of range (%zu samples)", path,
                      indices[i], len);
      return FL_EINVAL;
    }
    /* indices[j - 1] < len, so the + 1 cannot wrap. */
    for (j = i + 1; j < n && indices[j] == indices[j - 1] + 1 &&
                    indices[j] < len; j++)
      ;
    memcpy(out + i * sb, data + indices[i] * sb, (j - i) * sb);
  }
  return 0;
}

static int
region_get_batch(void *ctx, const size_t *indices, size_t n, void *dst,
                 size_t *nbytes)
{
  const struct region *r = ctx;
  size_t i;

  for (i = 0; i < n; i++)
    nbytes[i] = r->sample_bytes;
  return fl__copy_runs(r->data, r->len, r->sample_bytes, indices, n, dst,
                       r->path);
}

static void
region_free(void *ctx)
{
  struct region *r = ctx;

  munmap(r->map, r->map_bytes);
  free(r);
}

int
fl__region_dataset(fl_dataset *out, const char *path, void *map,
                   size_t map_bytes, size_t offset, size_t sample_bytes,
                   size_t len)
{
  struct region *r;
  size_t plen = strlen(path);

  r = malloc(sizeof(*r) + plen + 1);
  if (r == NULL) {
    munmap(map, map_bytes);
    return fl__error_set(FL_ENOMEM, "%s: out of memory", path);
  }
  r->base.magic = FL__DS_MAGIC;
  r->base.free = region_free;
  r->map = map;
  r->map_bytes = map_bytes;
  r->data = (const unsigned char *)map + offset;
  r->sample_bytes = sample_bytes;
  r->len = len;
  memcpy(r->path, path, plen + 1);
  *out = (fl_dataset){.ctx = r, .len = len, .sample_bytes = sample_bytes,
                      .get = region_get, .get_batch = region_get_batch};
  return 0;
}

int
fl_dataset_raw_sized(fl_dataset *out, size_t out_size, const char *path,
                     size_t record_bytes, size_t header_bytes)
{
  fl_dataset ds;
  void *map = NULL;
  size_t size = 0, body;
  int rc;

  rc = fl__dataset_out_check(out, out_size, "fl_dataset_raw");
  if (rc != 0)
    return rc;
  if (path == NULL)
    return fl__error_set(FL_EINVAL, "fl_dataset_raw: path is NULL");
  if (record_bytes == 0)
    return fl__error_set(FL_EINVAL, "%s: record_bytes is 0: a record must "
                         "hold at least one byte", path);
  rc = fl__map_file(path, &map, &size);
  if (rc != 0)
    return rc;
  if (header_bytes > size) {
    rc = fl__error_set(FL_EINVAL, "%s: header_bytes %zu is larger than the "
                       "file (%zu bytes)", path, header_bytes, size);
    goto fail;
  }
  body = size - header_bytes;
  if (body % record_bytes != 0) {
    rc = fl__error_set(FL_EINVAL, "%s: holds %zu bytes after the header, "
                       "not a multiple of record_bytes %zu", path, body,
                       record_bytes);
    goto fail;
  }
  if (body == 0) {
    rc = fl__error_set(FL_EINVAL, "%s: holds no records after its "
                       "%zu-byte header", path, header_bytes);
    goto fail;
  }
  rc = fl__region_dataset(&ds, path, map, size, header_bytes, record_bytes,
                          body / record_bytes);
  return rc != 0 ? rc : fl__dataset_out(out, out_size, &ds);
fail:
  munmap(map, size);
  return rc;
}

int
fl__dataset_out_check(fl_dataset *out, size_t size, const char *fn)
{
  if (out == NULL)
    return fl__error_set(FL_EINVAL, "%s: out is NULL", fn);
  if (size < FL__DATASET_SIZE_0_1)
    return fl__error_set(FL_EINVAL, "%s: fl_dataset is %zu bytes here: no "
                         "forkload had one smaller than %zu", fn, size,
                         FL__DATASET_SIZE_0_1);
  memset(out, 0, size);
  return 0;
}

int
fl__dataset_out(fl_dataset *out, size_t size, const fl_dataset *ds)
{
  fl__struct_out(out, size, ds, sizeof(*ds));
  return 0;
}

/* A built-in dataset's or stream's context, freed; only a context this
   library made carries the magic. */
static void
close_ctx(void *ctx)
{
  struct fl__ds_base *b = ctx;

  if (b != NULL && b->magic == FL__DS_MAGIC) {
    b->magic = 0;
    b->free(b);
  }
}

void
fl_dataset_close_sized(fl_dataset *ds, size_t size)
{
  if (ds == NULL || size < FL__DATASET_SIZE_0_1)
    return;
  close_ctx(ds->ctx);
  memset(ds, 0, size);
}

void
fl_iterable_close_sized(fl_iterable *it, size_t size)
{
  if (it == NULL || size < FL__ITERABLE_SIZE_0_1)
    return;
  close_ctx(it->ctx);
  memset(it, 0, size);
}
