/*
 * fl_dataset_npy_zip: several .npy arrays with the same first dimension,
 * side by side, as a dataset of fields: sample i is row i of each array,
 * field f row i of array f (X.npy and y.npy make inputs and labels).
 * Every array is mapped once, before any loader forks, and each field is
 * copied from its own mapping into its own array of the batch.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dataset.h"
#include "internal.h"

struct zip_array {
  void *map;
  size_t map_bytes;
  const unsigned char *data;
  char *path;
};

struct npy_zip {
  struct fl__ds_base base;
  size_t n, len;
  size_t field_bytes[FL__MAX_FIELDS];
  struct zip_array arr[FL__MAX_FIELDS];
};

static int
zip_get_fields(void *ctx, size_t index, void *const *dst, size_t *nbytes)
{
  const struct npy_zip *z = ctx;
  size_t f;

  if (index >= z->len) {
    fl_worker_error("%s: index %zu is out of range (%zu samples)",
                    z->arr[0].path, index, z->len);
    return FL_EINVAL;
  }
  for (f = 0; f < z->n; f++) {
    memcpy(dst[f], z->arr[f].data + index * z->field_bytes[f],
           z->field_bytes[f]);
    nbytes[f] = z->field_bytes[f];
  }
  return 0;
}

static int
zip_get_batch(void *ctx, const size_t *indices, size_t n, void *dst,
              size_t *nbytes)
{
  const struct npy_zip *z = ctx;
  unsigned char *const *fields = dst;
  size_t f, i;
  int rc;

  for (f = 0; f < z->n; f++) {
    rc = fl__copy_runs(z->arr[f].data, z->len, z->field_bytes[f], indices, n,
                       fields[f], z->arr[f].path);
    if (rc != 0)
      return rc;
    for (i = 0; i < n; i++)
      nbytes[i * z->n + f] = z->field_bytes[f];
  }
  return 0;
}

static void
zip_free(void *ctx)
{
  struct npy_zip *z = ctx;
  size_t f;

  for (f = 0; f < z->n; f++) {
    munmap(z->arr[f].map, z->arr[f].map_bytes);
    free(z->arr[f].path);
  }
  free(z);
}

/* Map array f; its rows must match the first array's. */
static int
zip_open(struct npy_zip *z, size_t f, const char *path)
{
  struct zip_array *a = &z->arr[f];
  struct fl__npy h;
  int rc;

  rc = fl__npy_map_array(path, &a->map, &a->map_bytes, &h);
  if (rc != 0)
    return rc;
  a->path = strdup(path);
  z->n = f + 1; /* from here on zip_free unmaps it */
  if (a->path == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory", path);
  if (f > 0 && h.shape[0] != z->len)
    return fl__error_set(FL_EINVAL, "%s has %zu rows but %s has %zu: every "
                         "array of a zip must have the same first "
                         "dimension", path, h.shape[0], z->arr[0].path,
                         z->len);
  z->len = h.shape[0];
  z->field_bytes[f] = h.data_bytes / h.shape[0];
  a->data = (const unsigned char *)a->map + h.data_offset;
  return 0;
}

int
fl_dataset_npy_zip_sized(fl_dataset *out, size_t size,
                         const char *const *paths, size_t n)
{
  struct npy_zip *z;
  size_t f, sum = 0;
  int rc;

  rc = fl__dataset_out_check(out, size, "fl_dataset_npy_zip");
  if (rc != 0)
    return rc;
  if (size < FL__SIZE_TO(fl_dataset, get_fields))
    return fl__error_set(FL_EINVAL, "fl_dataset_npy_zip: fl_dataset is %zu "
                         "bytes here: too old to hold fields", size);
  if (paths == NULL || n == 0 || n > FL__MAX_FIELDS)
    return fl__error_set(FL_EINVAL, "fl_dataset_npy_zip: %s", paths == NULL
                         ? "paths is NULL" : "n must be 1 to 32");
  for (f = 0; f < n; f++)
    if (paths[f] == NULL)
      return fl__error_set(FL_EINVAL, "fl_dataset_npy_zip: paths[%zu] is "
                           "NULL", f);
  z = calloc(1, sizeof(*z));
  if (z == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory", paths[0]);
  z->base.magic = FL__DS_MAGIC;
  z->base.free = zip_free;
  for (f = 0; f < n; f++) {
    rc = zip_open(z, f, paths[f]);
    if (rc != 0) {
      zip_free(z);
      return rc;
    }
    sum += z->field_bytes[f];
  }
  return fl__dataset_out(out, size,
                         &(fl_dataset){.ctx = z, .len = z->len,
                                       .sample_bytes = sum, .nfields = n,
                                       .field_bytes = z->field_bytes,
                                       .get_fields = zip_get_fields,
                                       .get_batch = zip_get_batch});
}
