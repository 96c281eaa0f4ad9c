/*
 * Fetch: call the dataset's get (each sample), get_fields (each sample,
 * each field into its own array) or get_batch (the whole batch), or an
 * iterable dataset's next (each sample until the batch is full or the
 * stream is over), straight into the segment, and check what it reports.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

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

/*
 * A canary right after the room a call may write: a contiguous overrun
 * starts there, so it cannot go unnoticed (the segment's guard holds the
 * last one).
 */
static const uint64_t canary = 0x5a17c0ffee0dd5a1ull;

static void
plant(unsigned char *at)
{
  memcpy(at, &canary, sizeof(canary));
}

static int
trampled(const unsigned char *at)
{
  return memcmp(at, &canary, sizeof(canary)) != 0;
}

static int
overran(char *err, size_t errlen, const char *what, size_t index,
        size_t room)
{
  snprintf(err, errlen,
           "%s(index %zu) wrote past its room of %zu bytes (sample_bytes)",
           what, index, room);
  return FL_EDATASET;
}

/* Field f of a get_fields or get_batch call ran past its room. */
static int
field_overran(char *err, size_t errlen, const char *what, size_t index,
              size_t f, size_t room)
{
  snprintf(err, errlen,
           "%s(index %zu) wrote past field %zu's room of %zu bytes "
           "(field_bytes[%zu])", what, index, f, room, f);
  return FL_EDATASET;
}

static int
field_oversized(char *err, size_t errlen, const char *what, size_t index,
                size_t f, size_t nbytes, size_t room)
{
  snprintf(err, errlen,
           "%s(index %zu) reported %zu bytes for field %zu, more than "
           "field_bytes[%zu] %zu", what, index, nbytes, f, f, room);
  return FL_EDATASET;
}

/* The batched call: one array per field (one field: the samples). */
static int
fetch_batch(const fl_dataset *ds, const size_t *indices, size_t n,
            void *const *fields, size_t nf, const size_t *fb, size_t *sizes,
            char *err, size_t errlen)
{
  unsigned char *const *arr = (unsigned char *const *)fields;
  size_t i, f;
  int rc;

  for (f = 0; f < nf; f++)
    plant(arr[f] + n * fb[f]);
  rc = ds->get_batch(ds->ctx, indices, n,
                     ds->nfields > 0 ? (void *)fields : fields[0], sizes);
  if (rc != 0)
    return failed(err, errlen, "get_batch", n ? indices[0] : 0, rc);
  for (f = 0; f < nf; f++) {
    if (trampled(arr[f] + n * fb[f]))
      return ds->nfields > 0 ? field_overran(err, errlen, "get_batch",
                                             indices[n - 1], f, n * fb[f])
                             : overran(err, errlen, "get_batch",
                                       indices[n - 1], n * fb[f]);
  }
  for (i = 0; i < n * nf; i++) {
    if (sizes[i] > fb[i % nf])
      return ds->nfields > 0
                 ? field_oversized(err, errlen, "get_batch", indices[i / nf],
                                   i % nf, sizes[i], fb[i % nf])
                 : oversized(err, errlen, "get_batch", indices[i], sizes[i],
                             fb[0]);
  }
  return 0;
}

/* get_fields, sample by sample, straight into each field's array. */
static int
fetch_fields(const fl_dataset *ds, const size_t *indices, size_t n,
             void *const *fields, size_t nf, const size_t *fb, size_t *sizes,
             char *err, size_t errlen)
{
  unsigned char *const *arr = (unsigned char *const *)fields;
  void *dst[FL__MAX_FIELDS];
  size_t i, f;
  int rc;

  for (i = 0; i < n; i++) {
    for (f = 0; f < nf; f++) {
      dst[f] = arr[f] + i * fb[f];
      plant(arr[f] + (i + 1) * fb[f]);
    }
    rc = ds->get_fields(ds->ctx, indices[i], dst, &sizes[i * nf]);
    if (rc != 0)
      return failed(err, errlen, "get_fields", indices[i], rc);
    for (f = 0; f < nf; f++) {
      if (trampled(arr[f] + (i + 1) * fb[f]))
        return field_overran(err, errlen, "get_fields", indices[i], f,
                             fb[f]);
      if (sizes[i * nf + f] > fb[f])
        return field_oversized(err, errlen, "get_fields", indices[i], f,
                               sizes[i * nf + f], fb[f]);
    }
  }
  return 0;
}

int
fl__fetch(const fl_dataset *ds, const size_t *indices, size_t n,
          void *const *fields, size_t *sizes, char *err, size_t errlen)
{
  unsigned char *dst = fields[0];
  size_t nf = ds->nfields > 0 ? ds->nfields : 1;
  const size_t *fb = ds->nfields > 0 ? ds->field_bytes : &ds->sample_bytes;
  size_t i, sb = ds->sample_bytes;
  int rc;

  fl__worker_error_clear();
  for (i = 0; i < n * nf; i++)
    sizes[i] = fb[i % nf];
  if (ds->get_batch != NULL)
    return fetch_batch(ds, indices, n, fields, nf, fb, sizes, err, errlen);
  if (ds->nfields > 0)
    return fetch_fields(ds, indices, n, fields, nf, fb, sizes, err, errlen);
  for (i = 0; i < n; i++) {
    plant(dst + (i + 1) * sb);
    rc = ds->get(ds->ctx, indices[i], dst + i * sb, &sizes[i]);
    if (rc != 0)
      return failed(err, errlen, "get", indices[i], rc);
    if (trampled(dst + (i + 1) * sb))
      return overran(err, errlen, "get", indices[i], sb);
    if (sizes[i] > sb)
      return oversized(err, errlen, "get", indices[i], sizes[i], sb);
  }
  return 0;
}

/*
 * Up to bs samples from the worker's stream.  *count: how many were
 * written; *over: the stream said it is over.  A failing next is the
 * batch's error; what was read before it is lost with it, as in PyTorch.
 */
int
fl__fetch_stream(const fl_iterable *it, size_t bs, void *data,
                 size_t *sizes, size_t *count, int *over, char *err,
                 size_t errlen)
{
  unsigned char *dst = data;
  size_t i, sb = it->sample_bytes;
  int rc;

  fl__worker_error_clear();
  *over = 0;
  for (i = 0; i < bs; i++) {
    sizes[i] = sb;
    plant(dst + (i + 1) * sb);
    rc = it->next(it->ctx, dst + i * sb, &sizes[i]);
    if (rc == 0) {
      *over = 1;
      break;
    }
    /* What next consumed counts, so that the stream's position holds. */
    *count = i + (rc > 0);
    if (rc < 0)
      return failed(err, errlen, "next", i, rc);
    if (trampled(dst + (i + 1) * sb))
      return overran(err, errlen, "next", i, sb);
    if (sizes[i] > sb)
      return oversized(err, errlen, "next", i, sizes[i], sb);
  }
  *count = i;
  return 0;
}
