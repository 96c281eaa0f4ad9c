/*
 * Fetch: call the dataset's get (each sample) or get_batch (the whole
 * batch) straight into the segment, and check what it reports.
 */
#include <stdio.h>

#include "internal.h"

static int
failed(char *err, size_t errlen, const char *what, size_t index, int rc)
{
  const char *why = fl__worker_error_text();

  if (why[0] != '\0')
    snprintf(err, errlen, "%s(index %zu) failed: %s", what, index, why);
  else
    snprintf(err, errlen, "%s(index %zu) returned %d", what, index, rc);
  return FL_EDATASET;
}

static int
oversized(char *err, size_t errlen, const char *what, size_t index,
          size_t nbytes, size_t room)
{
  snprintf(err, errlen,
           "%s(index %zu) reported %zu bytes, more than sample_bytes %zu",
           what, index, nbytes, room);
  return FL_EDATASET;
}

int
fl__fetch(const fl_dataset *ds, const size_t *indices, size_t n, void *data,
          size_t *sizes, char *err, size_t errlen)
{
  unsigned char *dst = data;
  size_t i;
  int rc;

  fl__worker_error_clear();
  for (i = 0; i < n; i++)
    sizes[i] = ds->sample_bytes;
  if (ds->get_batch != NULL) {
    rc = ds->get_batch(ds->ctx, indices, n, data, sizes);
    if (rc != 0)
      return failed(err, errlen, "get_batch", n ? indices[0] : 0, rc);
    for (i = 0; i < n; i++) {
      if (sizes[i] > ds->sample_bytes)
        return oversized(err, errlen, "get_batch", indices[i], sizes[i],
                         ds->sample_bytes);
    }
    return 0;
  }
  for (i = 0; i < n; i++) {
    rc = ds->get(ds->ctx, indices[i], dst + i * ds->sample_bytes, &sizes[i]);
    if (rc != 0)
      return failed(err, errlen, "get", indices[i], rc);
    if (sizes[i] > ds->sample_bytes)
      return oversized(err, errlen, "get", indices[i], sizes[i],
                       ds->sample_bytes);
  }
  return 0;
}
