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

/* Sample i, which the call `what` wrote for index: each field within its
   room (fielded: the dataset has fields), and the canary after it whole. */
static int
check_sample(unsigned char *const *arr, size_t i, size_t nf,
             const size_t *fb, const size_t *sizes, int fielded,
             const char *what, size_t index, char *err, size_t errlen)
{
  size_t f;

  for (f = 0; f < nf; f++) {
    if (trampled(arr[f] + (i + 1) * fb[f]))
      return fielded ? field_overran(err, errlen, what, index, f, fb[f])
                     : overran(err, errlen, what, index, fb[f]);
    if (sizes[i * nf + f] > fb[f])
      return fielded ? field_oversized(err, errlen, what, index, f,
                                       sizes[i * nf + f], fb[f])
                     : oversized(err, errlen, what, index, sizes[i], fb[f]);
  }
  return 0;
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
    rc = check_sample(arr, i, nf, fb, sizes, 1, "get_fields", indices[i],
                      err, errlen);
    if (rc != 0)
      return rc;
  }
  return 0;
}

int
fl__fetch(const fl_dataset *ds, const size_t *indices, size_t n,
          void *const *fields, size_t *sizes, char *err, size_t errlen)
{
  unsigned char *const *arr = (unsigned char *const *)fields;
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
    plant(arr[0] + (i + 1) * sb);
    rc = ds->get(ds->ctx, indices[i], arr[0] + i * sb, &sizes[i]);
    if (rc != 0)
      return failed(err, errlen, "get", indices[i], rc);
    rc = check_sample(arr, i, 1, &sb, sizes, 0, "get", indices[i], err,
                      errlen);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* One sample of an iterable's stream, as its next returns. */
int
fl__stream_next(const fl_iterable *it, void *const *dst, size_t *nbytes)
{
  return it->nfields > 0 ? it->next_fields(it->ctx, dst, nbytes)
                         : it->next(it->ctx, dst[0], nbytes);
}

/*
 * Up to bs samples from the worker's stream, each field into its own
 * array as a dataset's.  *count: how many were written; *over: the stream
 * said it is over.  A failing next is the batch's error; what was read
 * before it is lost with it, as in PyTorch.
 */
int
fl__fetch_stream(const fl_iterable *it, size_t bs, void *const *fields,
                 size_t *sizes, size_t *count, int *over, char *err,
                 size_t errlen)
{
  unsigned char *const *arr = (unsigned char *const *)fields;
  size_t nf = it->nfields > 0 ? it->nfields : 1;
  const size_t *fb = it->nfields > 0 ? it->field_bytes : &it->sample_bytes;
  const char *what = it->nfields > 0 ? "next_fields" : "next";
  void *dst[FL__MAX_FIELDS];
  size_t i, f;
  int rc;

  fl__worker_error_clear();
  *over = 0;
  for (i = 0; i < bs; i++) {
    for (f = 0; f < nf; f++) {
      sizes[i * nf + f] = fb[f];
      dst[f] = arr[f] + i * fb[f];
      plant(arr[f] + (i + 1) * fb[f]);
    }
    rc = fl__stream_next(it, dst, &sizes[i * nf]);
    if (rc == 0) {
      *over = 1;
      break;
    }
    /* What next consumed counts, so that the stream's position holds. */
    *count = i + (rc > 0);
    if (rc < 0)
      return failed(err, errlen, what, i, rc);
    rc = check_sample(arr, i, nf, fb, sizes, it->nfields > 0, what, i, err,
                      errlen);
    if (rc != 0)
      return rc;
  }
  *count = i;
  return 0;
}
