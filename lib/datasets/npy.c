/*
 * Datasets of NPY files: fl_dataset_npy_dir (a directory of same-shaped
 * .npy files, one sample each, as PyTorch users read with np.load in every
 * worker) and fl_dataset_npy_array (one array whose first axis is the
 * samples, mapped once).  Samples are handed out as the bytes stored:
 * forkload does not byte-swap big-endian data.
 */
#include "config.h"

#include <dirent.h>
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

struct npy_file {
  size_t path; /* where dir/name starts in the pool, which may move */
  off_t data_offset;
};

struct npy_dir {
  struct fl__ds_base base;
  size_t n, sample_bytes;
  struct npy_file *files;
  char *pool;
};

static const char *
file_path(const struct npy_dir *d, size_t i)
{
  return d->pool + d->files[i].path;
}

/*
 * Read and parse the header of the open file fd (size bytes), and check
 * that the data it announces is exactly what follows it.
 */
static int
read_header(int fd, const char *path, uint64_t size, struct fl__npy *h)
{
  unsigned char small[4096], *buf = small;
  char err[FL__ERRMSG_MAX - 64];
  size_t want, got, total, more;
  int rc;

  want = size < sizeof(small) ? (size_t)size : sizeof(small);
  rc = fl__pread_full(fd, buf, want, 0, &got);
  if (rc != 0) {
    rc = fl__error_set(rc, "%s: cannot read: %s", path, fl__strerror(-rc));
    goto out;
  }
  rc = fl__npy_header_bytes(buf, got, &total, err, sizeof(err));
  if (rc != 0) {
    rc = fl__error_set(rc, "%s: %s", path, err);
    goto out;
  }
  /* A header longer than the first read: at most FL__NPY_HEADER_MAX. */
  want = total < size ? total : (size_t)size;
  if (want > got) {
    buf = malloc(want);
    if (buf == NULL) {
      rc = fl__error_set(FL_ENOMEM, "%s: out of memory", path);
      goto out;
    }
    memcpy(buf, small, got);
    rc = fl__pread_full(fd, buf + got, want - got, (off_t)got, &more);
    if (rc != 0) {
      rc = fl__error_set(rc, "%s: cannot read: %s", path, fl__strerror(-rc));
      goto out;
    }
    got += more;
  }
  rc = fl__npy_parse(buf, got, h, err, sizeof(err));
  if (rc == 0)
    rc = fl__npy_check_size(h, size, err, sizeof(err));
  if (rc != 0)
    rc = fl__error_set(rc, "%s: %s", path, err);
out:
  if (buf != small)
    free(buf);
  return rc;
}

/* Open path and read its header; nothing stays open. */
static int
probe(const char *path, struct fl__npy *h)
{
  struct stat st;
  int fd, rc;

  rc = fl__open_regular(path, &fd, &st);
  if (rc != 0)
    return rc;
  rc = read_header(fd, path, (uint64_t)st.st_size, h);
  fl__close(fd);
  return rc;
}

/*
 * A sample is one file: open it, check it still has the size it had,
 * pread its data straight into the batch, close it.  Keeping every file
 * open would cost one fd per sample in the parent and in every worker, and
 * hit RLIMIT_NOFILE long before a dataset of small files runs out; an open
 * per sample is what np.load in a PyTorch worker pays too.
 */
static int
dir_get(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  const struct npy_dir *d = ctx;
  const struct npy_file *f;
  const char *path;
  struct stat st;
  size_t got = 0;
  int fd, rc = 0;

  if (index >= d->n) {
    fl_worker_error("npy_dir: index %zu is out of range (%zu files)", index,
                    d->n);
    return FL_EINVAL;
  }
  f = &d->files[index];
  path = file_path(d, index);
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    rc = -errno;
    fl_worker_error("%s: cannot open: %s", path, fl__strerror(errno));
    return rc;
  }
  if (fstat(fd, &st) != 0) {
    rc = -errno;
    fl_worker_error("%s: cannot stat: %s", path, fl__strerror(errno));
    goto out;
  }
  if ((uint64_t)st.st_size != (uint64_t)f->data_offset + d->sample_bytes) {
    rc = FL_EINVAL;
    fl_worker_error("%s: holds %lld bytes, not the %llu it held when the "
                    "dataset was opened: it changed", path,
                    (long long)st.st_size,
                    (unsigned long long)f->data_offset + d->sample_bytes);
    goto out;
  }
  rc = fl__pread_full(fd, dst, d->sample_bytes, f->data_offset, &got);
  if (rc != 0) {
    fl_worker_error("%s: cannot read: %s", path, fl__strerror(-rc));
    goto out;
  }
  if (got != d->sample_bytes) {
    rc = FL_EINVAL;
    fl_worker_error("%s: ends %zu bytes into its %zu bytes of data: it "
                    "changed since the dataset was opened", path, got,
                    d->sample_bytes);
    goto out;
  }
  *nbytes = d->sample_bytes;
out:
  fl__close(fd);
  return rc;
}

static void
dir_free(void *ctx)
{
  struct npy_dir *d = ctx;

  free(d->files);
  free(d->pool);
  free(d);
}

static int
by_path(const void *a, const void *b, void *pool)
{
  return strcmp((const char *)pool + ((const struct npy_file *)a)->path,
                (const char *)pool + ((const struct npy_file *)b)->path);
}

/* Hidden names are skipped: "._x.npy" is macOS metadata, not an array. */
static int
is_npy_name(const char *name)
{
  size_t n = strlen(name);

  return name[0] != '.' && n > 4 && strcmp(name + n - 4, ".npy") == 0;
}

/*
 * The paths of the directory's .npy files, sorted with strcmp so that an
 * index names the same file in every process and every run.
 */
static int
list_dir(struct npy_dir *d, const char *dir)
{
  DIR *dp;
  struct dirent *e;
  size_t dlen = strlen(dir), used = 0, cap = 0, fcap = 0, need;
  const char *sep = dlen > 0 && dir[dlen - 1] == '/' ? "" : "/";
  void *grown;
  int rc = 0;

  dp = opendir(dir);
  if (dp == NULL)
    return fl__error_set(-errno, "%s: cannot open the directory: %s", dir,
                         fl__strerror(errno));
  for (;;) {
    errno = 0;
    e = readdir(dp);
    if (e == NULL) {
      if (errno != 0)
        rc = fl__error_set(-errno, "%s: cannot list the directory: %s",
                           dir, fl__strerror(errno));
      break;
    }
    if (!is_npy_name(e->d_name))
      continue;
    need = dlen + 1 + strlen(e->d_name) + 1;
    if (used + need > cap) {
      cap = (used + need) * 2;
      grown = realloc(d->pool, cap);
      if (grown == NULL) {
        rc = fl__error_set(FL_ENOMEM, "%s: out of memory", dir);
        break;
      }
      d->pool = grown;
    }
    if (d->n == fcap) {
      fcap = fcap ? fcap * 2 : 64;
      grown = realloc(d->files, fcap * sizeof(*d->files));
      if (grown == NULL) {
        rc = fl__error_set(FL_ENOMEM, "%s: out of memory", dir);
        break;
      }
      d->files = grown;
    }
    d->files[d->n].path = used;
    d->files[d->n].data_offset = 0;
    d->n++;
    snprintf(d->pool + used, cap - used, "%s%s%s", dir, sep, e->d_name);
    used += need;
  }
  closedir(dp);
  if (rc != 0)
    return rc;
  if (d->n == 0)
    return fl__error_set(FL_EINVAL, "%s: the directory holds no .npy file",
                         dir);
  qsort_r(d->files, d->n, sizeof(*d->files), by_path, d->pool);
  return 0;
}

static int
mismatch(const char *path, const struct fl__npy *h, const char *first,
         const struct fl__npy *f)
{
  char s[128], fs[128];

  fl__npy_shape_str(h, s, sizeof(s));
  fl__npy_shape_str(f, fs, sizeof(fs));
  return fl__error_set(FL_EINVAL, "%s: dtype '%s' and shape %s differ from "
                       "%s's dtype '%s' and shape %s: every file must hold "
                       "one sample of the same dtype and shape", path,
                       h->descr, s, first, f->descr, fs);
}

int
fl_dataset_npy_dir_sized(fl_dataset *out, size_t size, const char *dir)
{
  struct npy_dir *d = NULL;
  struct fl__npy first, h, *cur;
  char s[128];
  size_t i;
  int rc;

  rc = fl__dataset_out_check(out, size, "fl_dataset_npy_dir");
  if (rc != 0)
    return rc;
  if (dir == NULL)
    return fl__error_set(FL_EINVAL, "fl_dataset_npy_dir: dir is NULL");
  d = calloc(1, sizeof(*d));
  if (d == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory", dir);
  d->base.magic = FL__DS_MAGIC;
  d->base.free = dir_free;
  rc = list_dir(d, dir);
  if (rc != 0)
    goto fail;
  /* Every header once, here: a worker's get then trusts the offsets. */
  for (i = 0; i < d->n; i++) {
    cur = i == 0 ? &first : &h;
    rc = probe(file_path(d, i), cur);
    if (rc != 0)
      goto fail;
    if (i > 0 && !fl__npy_same(&h, &first)) {
      rc = mismatch(file_path(d, i), &h, file_path(d, 0), &first);
      goto fail;
    }
    d->files[i].data_offset = (off_t)cur->data_offset;
  }
  if (first.data_bytes == 0) {
    fl__npy_shape_str(&first, s, sizeof(s));
    rc = fl__error_set(FL_EINVAL, "%s: holds no data (shape %s): a sample "
                       "must hold at least one byte", file_path(d, 0), s);
    goto fail;
  }
  d->sample_bytes = first.data_bytes;
  return fl__dataset_out(out, size,
                         &(fl_dataset){.ctx = d, .len = d->n,
                                       .sample_bytes = d->sample_bytes,
                                       .get = dir_get});
fail:
  dir_free(d);
  return rc;
}

/*
 * Map an .npy file whose first axis is the samples and parse its header
 * from the mapping itself, so that what is checked is what is served.
 * Returns 0 with the mapping, or a negative code, fl_loader_error(NULL)
 * naming the file, and nothing mapped.
 */
int
fl__npy_map_array(const char *path, void **map, size_t *bytes,
                  struct fl__npy *h)
{
  char err[FL__ERRMSG_MAX - 64], s[FL__NPY_MAX_DIMS * 22];
  int rc;

  rc = fl__map_file(path, map, bytes);
  if (rc != 0)
    return rc;
  rc = fl__npy_parse(*map, *bytes, h, err, sizeof(err));
  if (rc == 0)
    rc = fl__npy_check_size(h, *bytes, err, sizeof(err));
  if (rc != 0) {
    rc = fl__error_set(rc, "%s: %s", path, err);
    goto fail;
  }
  fl__npy_shape_str(h, s, sizeof(s));
  if (h->ndim == 0) {
    rc = fl__error_set(FL_EINVAL, "%s: holds a 0-d array (shape ()): its "
                       "first axis must be the samples", path);
    goto fail;
  }
  if (h->shape[0] == 0) {
    rc = fl__error_set(FL_EINVAL, "%s: shape %s holds no samples", path, s);
    goto fail;
  }
  /* data_bytes = shape[0] x the rest, and did not overflow. */
  if (h->data_bytes == 0) {
    rc = fl__error_set(FL_EINVAL, "%s: shape %s: each sample holds no "
                       "bytes", path, s);
    goto fail;
  }
  return 0;
fail:
  munmap(*map, *bytes);
  *map = NULL;
  return rc;
}

int
fl_dataset_npy_array_sized(fl_dataset *out, size_t size, const char *path)
{
  fl_dataset ds;
  struct fl__npy h;
  void *map = NULL;
  size_t bytes = 0;
  int rc;

  rc = fl__dataset_out_check(out, size, "fl_dataset_npy_array");
  if (rc != 0)
    return rc;
  if (path == NULL)
    return fl__error_set(FL_EINVAL, "fl_dataset_npy_array: path is NULL");
  rc = fl__npy_map_array(path, &map, &bytes, &h);
  if (rc != 0)
    return rc;
  rc = fl__region_dataset(&ds, path, map, bytes, h.data_offset,
                          h.data_bytes / h.shape[0], h.shape[0]);
  return rc != 0 ? rc : fl__dataset_out(out, size, &ds);
}
