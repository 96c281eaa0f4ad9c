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
    fl__format(err, errlen, "%s(index %zu) failed: %s", what, index, why);
  else
    snprintf(err, errlen, "%s(index %zu) returned %d", what, index, rc);
  return FL_EDATASET;
}

static int
oversized(char *err, size_t errlen, const char *what, size_t index,
          size_t nbytes, size_t room)
{
  snprintf(err, errlen,
           "%s(index %zu) reported %zu bytes, more than its room of %zu "
           "(a sample that needs more calls fl_worker_grow first)",
           what, index, nbytes, room);
  return FL_EDATASET;
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
           "its room of %zu (field_bytes[%zu], or what fl_worker_grow "
           "made it)", what, index, nbytes, f, room, f);
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
    if (fl__canary_trampled(arr[f] + (i + 1) * fb[f]))
      return fielded ? field_overran(err, errlen, what, index, f, fb[f])
                     : overran(err, errlen, what, index, fb[f]);
    if (sizes[i * nf + f] > fb[f])
      return fielded ? field_oversized(err, errlen, what, index, f,
                                       sizes[i * nf + f], fb[f])
                     : oversized(err, errlen, what, index, sizes[i], fb[f]);
  }
  return 0;
}

/* The room of each field in c's segment now (fl_worker_grow may have
   replaced it during the last call). */
static const size_t *
rooms(const fl__fill_ctx *c)
{
  return c->l->classes[c->shift].field_bytes;
}

/* The batch's indices in c's segment now. */
static const size_t *
indices_of(const fl__fill_ctx *c)
{
  return (const size_t *)((const unsigned char *)c->seg.base +
                          sizeof(struct fl__segment_header));
}

/* A call failed: fl_worker_grow's own code when it could not make room
   (the message is its), else the dataset's failure. */
static int
call_failed(const fl__fill_ctx *c, char *err, size_t errlen,
            const char *what, size_t index, int rc)
{
  int code = failed(err, errlen, what, index, rc);

  return c->code != 0 ? c->code : code;
}

/* The batched call: one array per field (one field: the samples). */
static int
fetch_batch(const fl_dataset *ds, size_t n, fl__fill_ctx *c, size_t nf,
            char *err, size_t errlen)
{
  unsigned char **arr = (unsigned char **)c->fields;
  const size_t *fb = rooms(c), *indices = indices_of(c);
  size_t i, f, *sizes;
  int rc;

  for (f = 0; f < nf; f++)
    fl__canary_plant(arr[f] + n * fb[f]);
  fl__fill_call_begin(c, SIZE_MAX, ds->nfields > 0 ? c->fields : NULL);
  rc = ds->get_batch(ds->ctx, indices, n,
                     ds->nfields > 0 ? (void *)c->fields : c->fields[0],
                     c->sizes);
  fl__fill_call_end(c);
  fb = rooms(c);
  indices = indices_of(c);
  sizes = c->sizes;
  if (rc != 0)
    return call_failed(c, err, errlen, "get_batch", n ? indices[0] : 0, rc);
  for (f = 0; f < nf; f++) {
    if (fl__canary_trampled(arr[f] + n * fb[f]))
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
fetch_fields(const fl_dataset *ds, size_t n, fl__fill_ctx *c, size_t nf,
             char *err, size_t errlen)
{
  unsigned char **arr = (unsigned char **)c->fields;
  void *dst[FL__MAX_FIELDS];
  const size_t *fb;
  size_t i, f, index;
  int rc;

  for (i = 0; i < n; i++) {
    fb = rooms(c);
    for (f = 0; f < nf; f++) {
      dst[f] = arr[f] + i * fb[f];
      fl__canary_plant(arr[f] + (i + 1) * fb[f]);
    }
    index = indices_of(c)[i];
    fl__fill_call_begin(c, i, dst);
    rc = ds->get_fields(ds->ctx, index, dst, &c->sizes[i * nf]);
    fl__fill_call_end(c);
    if (rc != 0)
      return call_failed(c, err, errlen, "get_fields", index, rc);
    rc = check_sample(arr, i, nf, rooms(c), c->sizes, 1, "get_fields",
                      index, err, errlen);
    if (rc != 0)
      return rc;
  }
  return 0;
}

int
fl__fetch(const fl_dataset *ds, const size_t *indices, size_t n,
          fl__fill_ctx *c, char *err, size_t errlen)
{
  unsigned char **arr = (unsigned char **)c->fields;
  size_t nf = ds->nfields > 0 ? ds->nfields : 1;
  const size_t *fb = rooms(c);
  size_t i, index;
  void *dst;
  int rc;

  (void)indices; /* the segment's: read where the segment is now */
  fl__worker_error_clear();
  c->n = n;
  for (i = 0; i < n * nf; i++)
    c->sizes[i] = fb[i % nf];
  if (ds->get_batch != NULL)
    return fetch_batch(ds, n, c, nf, err, errlen);
  if (ds->nfields > 0)
    return fetch_fields(ds, n, c, nf, err, errlen);
  for (i = 0; i < n; i++) {
    fb = rooms(c);
    fl__canary_plant(arr[0] + (i + 1) * fb[0]);
    index = indices_of(c)[i];
    dst = arr[0] + i * fb[0];
    fl__fill_call_begin(c, i, NULL);
    rc = ds->get(ds->ctx, index, dst, &c->sizes[i]);
    fl__fill_call_end(c);
    if (rc != 0)
      return call_failed(c, err, errlen, "get", index, rc);
    rc = check_sample(arr, i, 1, rooms(c), c->sizes, 0, "get", index, err,
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
fl__fetch_stream(const fl_iterable *it, size_t bs, fl__fill_ctx *c,
                 size_t *count, int *over, char *err, size_t errlen)
{
  unsigned char **arr = (unsigned char **)c->fields;
  size_t nf = it->nfields > 0 ? it->nfields : 1;
  const char *what = it->nfields > 0 ? "next_fields" : "next";
  void *dst[FL__MAX_FIELDS];
  const size_t *fb;
  size_t i, f;
  int rc;

  fl__worker_error_clear();
  *over = 0;
  c->n = bs;
  for (i = 0; i < bs; i++) {
    fb = rooms(c);
    for (f = 0; f < nf; f++) {
      c->sizes[i * nf + f] = fb[f];
      dst[f] = arr[f] + i * fb[f];
      fl__canary_plant(arr[f] + (i + 1) * fb[f]);
    }
    fl__fill_call_begin(c, i, it->nfields > 0 ? dst : NULL);
    rc = fl__stream_next(it, dst, &c->sizes[i * nf]);
    fl__fill_call_end(c);
    if (rc == 0) {
      *over = 1;
      break;
    }
    /* What next consumed counts, so that the stream's position holds. */
    *count = i + (rc > 0);
    if (rc < 0)
      return call_failed(c, err, errlen, what, i, rc);
    rc = check_sample(arr, i, nf, rooms(c), c->sizes, it->nfields > 0, what,
                      i, err, errlen);
    if (rc != 0)
      return rc;
  }
  *count = i;
  return 0;
}
