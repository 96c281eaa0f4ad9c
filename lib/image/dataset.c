/*
 * fl_dataset_decode_images and fl_iterable_decode_images: the image stage
 * over any dataset, map-style or a stream, one of whose fields holds
 * encoded images (JPEG, PNG, WebP, TIFF, BMP or PNM bytes: LMDB values,
 * WebDataset's .jpg members, files read by a dataset of the caller's).
 * Each sample's encoded field is fetched into a buffer the process keeps,
 * and the stage writes the decoded, transformed image in its place; the
 * other fields pass through.  A stream's samples have no index: the k-th sample a
 * stream gives in an epoch draws its crop from fl_sample_seed(k).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/dataset.h"
#include "image.h"
#include "internal.h"

struct decoded {
  struct fl__ds_base base; /* first, for fl_dataset_close */
  fl_dataset in;
  fl_iterable it; /* a stream's, in place of in */
  uint64_t k;     /* its samples given since open */
  size_t field, nfields;
  size_t *in_bytes;    /* the fields of in (one: sample_bytes) */
  size_t *field_bytes; /* and of this dataset: field's is the image's */
  struct fl__image_stage *stage;
  unsigned char *buf;  /* field's encoded bytes */
  void **dst;          /* in's destinations, per call */
  size_t *nbytes;
};

static void
decoded_free(void *ctx)
{
  struct decoded *d = ctx;

  fl__image_stage_free(d->stage);
  free(d->in_bytes);
  free(d->field_bytes);
  free(d->buf);
  free(d->dst);
  free(d->nbytes);
  free(d);
}

/* The fields of one sample: 0, or what in's fetch or the stage said. */
static int
decode_fields(struct decoded *d, int stream, size_t index, void *const *dst,
              size_t *nbytes)
{
  char name[64];
  size_t f;
  int rc;

  for (f = 0; f < d->nfields; f++) {
    d->dst[f] = f == d->field ? d->buf : dst[f];
    d->nbytes[f] = d->in_bytes[f];
  }
  if (stream)
    rc = d->it.nfields > 0 ? d->it.next_fields(d->it.ctx, d->dst, d->nbytes)
                           : d->it.next(d->it.ctx, d->buf, d->nbytes);
  else
    rc = d->in.nfields > 0
             ? d->in.get_fields(d->in.ctx, index, d->dst, d->nbytes)
             : d->in.get(d->in.ctx, index, d->buf, d->nbytes);
  if (rc != (stream ? 1 : 0))
    return rc;
  snprintf(name, sizeof(name), "%s %zu, field %zu",
           stream ? "stream sample" : "sample", index, d->field);
  if (fl__image_stage_run(d->stage, d->buf, d->nbytes[d->field],
                          fl_sample_seed(index), dst[d->field], name) != 0)
    return FL_EDATASET;
  for (f = 0; f < d->nfields; f++)
    nbytes[f] = f == d->field ? d->field_bytes[f] : d->nbytes[f];
  return rc;
}

/* The field tables and the buffer, once in's fields are known. */
static int
decoded_tables(struct decoded *d, const size_t *in_bytes, size_t one,
               size_t field, const fl_image_options *io, size_t io_size,
               size_t *sum, const char *fn)
{
  size_t f;
  int rc;

  if (field >= d->nfields)
    return fl__error_set(FL_EINVAL, "%s: field %zu, and in has %zu", fn,
                         field, d->nfields);
  if ((rc = fl__image_stage_new(&d->stage, io, io_size, fn)) != 0)
    return rc;
  d->field = field;
  d->in_bytes = calloc(d->nfields, sizeof(*d->in_bytes));
  d->field_bytes = calloc(d->nfields, sizeof(*d->field_bytes));
  d->dst = calloc(d->nfields, sizeof(*d->dst));
  d->nbytes = calloc(d->nfields, sizeof(*d->nbytes));
  if (d->in_bytes == NULL || d->field_bytes == NULL || d->dst == NULL ||
      d->nbytes == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory", fn);
  *sum = 0;
  for (f = 0; f < d->nfields; f++) {
    d->in_bytes[f] = in_bytes != NULL ? in_bytes[f] : one;
    d->field_bytes[f] =
        f == field ? fl__image_stage_bytes(d->stage) : d->in_bytes[f];
    *sum += d->field_bytes[f];
  }
  if (d->in_bytes[field] == 0)
    return fl__error_set(FL_EINVAL, "%s: field %zu of in is 0 bytes", fn,
                         field);
  if ((d->buf = malloc(d->in_bytes[field])) == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory for a buffer of "
                         "field %zu's %zu bytes", fn, field,
                         d->in_bytes[field]);
  return 0;
}

/* A wrapper of in (a dataset, or a stream's iterable), copied by the ABI
   rule before out, which may be the same struct, is touched. */
static int
decoded_new(struct decoded **dp, int stream, const void *in, size_t in_size,
            const char *fn)
{
  struct decoded *d;
  char err[160];
  int rc;

  if (in == NULL)
    return fl__error_set(FL_EINVAL, "%s: in is NULL", fn);
  if ((d = calloc(1, sizeof(*d))) == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory", fn);
  d->base.magic = FL__DS_MAGIC;
  d->base.free = decoded_free;
  rc = stream ? fl__struct_in(&d->it, sizeof(d->it), in, in_size,
                              FL__ITERABLE_SIZE_0_1, "fl_iterable", err,
                              sizeof(err))
              : fl__struct_in(&d->in, sizeof(d->in), in, in_size,
                              FL__DATASET_SIZE_0_1, "fl_dataset", err,
                              sizeof(err));
  if (rc != 0) {
    decoded_free(d);
    return fl__error_set(FL_EINVAL, "%s: %s", fn, err);
  }
  *dp = d;
  return 0;
}

static int
decoded_get_fields(void *ctx, size_t index, void *const *dst, size_t *nbytes)
{
  return decode_fields(ctx, 0, index, dst, nbytes);
}

int
fl_dataset_decode_images_sized(fl_dataset *out, size_t size,
                               const fl_dataset *in, size_t in_size,
                               size_t field, const fl_image_options *io,
                               size_t io_size)
{
  static const char fn[] = "fl_dataset_decode_images";
  struct decoded *d;
  size_t sum = 0;
  int rc;

  if ((rc = decoded_new(&d, 0, in, in_size, fn)) != 0)
    return rc;
  if ((rc = fl__dataset_out_check(out, size, fn)) != 0)
    goto fail;
  if (size < FL__SIZE_TO(fl_dataset, get_fields)) {
    rc = fl__error_set(FL_EINVAL, "%s: fl_dataset is %zu bytes here: too "
                       "old to hold fields", fn, size);
    goto fail;
  }
  d->nfields = d->in.nfields > 0 ? d->in.nfields : 1;
  if (d->in.nfields > 0 ? d->in.get_fields == NULL : d->in.get == NULL) {
    rc = fl__error_set(FL_EINVAL, "%s: in has no %s: the images are fetched "
                       "a sample at a time", fn,
                       d->in.nfields > 0 ? "get_fields" : "get");
    goto fail;
  }
  rc = decoded_tables(d, d->in.nfields > 0 ? d->in.field_bytes : NULL,
                      d->in.sample_bytes, field, io, io_size, &sum, fn);
  if (rc != 0)
    goto fail;
  return fl__dataset_out(out, size,
                         &(fl_dataset){.ctx = d, .len = d->in.len,
                                       .sample_bytes = sum,
                                       .nfields = d->nfields,
                                       .field_bytes = d->field_bytes,
                                       .get_fields = decoded_get_fields});
fail:
  decoded_free(d);
  return rc;
}

static int
decoded_open(void *ctx, const fl_worker_info *w)
{
  struct decoded *d = ctx;

  d->k = 0;
  return d->it.open != NULL ? d->it.open(d->it.ctx, w) : 0;
}

static int
decoded_next_fields(void *ctx, void *const *dst, size_t *nbytes)
{
  struct decoded *d = ctx;

  return decode_fields(d, 1, (size_t)d->k++, dst, nbytes);
}

static void
decoded_close(void *ctx)
{
  struct decoded *d = ctx;

  if (d->it.close != NULL)
    d->it.close(d->it.ctx);
}

static int
decoded_skip(void *ctx, uint64_t n)
{
  struct decoded *d = ctx;

  d->k += n; /* the samples after them draw as they would have */
  return d->it.skip(d->it.ctx, n);
}

int
fl_iterable_decode_images_sized(fl_iterable *out, size_t size,
                                const fl_iterable *in, size_t in_size,
                                size_t field, const fl_image_options *io,
                                size_t io_size)
{
  static const char fn[] = "fl_iterable_decode_images";
  struct decoded *d;
  size_t sum = 0;
  int rc;

  if ((rc = decoded_new(&d, 1, in, in_size, fn)) != 0)
    return rc;
  if (out == NULL || size < FL__SIZE_TO(fl_iterable, next_fields)) {
    rc = fl__error_set(FL_EINVAL, "%s: %s", fn, out == NULL
                       ? "out is NULL" : "fl_iterable is too old to hold "
                       "fields");
    goto fail;
  }
  d->nfields = d->it.nfields > 0 ? d->it.nfields : 1;
  if (d->it.nfields > 0 ? d->it.next_fields == NULL : d->it.next == NULL) {
    rc = fl__error_set(FL_EINVAL, "%s: in has no %s", fn,
                       d->it.nfields > 0 ? "next_fields" : "next");
    goto fail;
  }
  rc = decoded_tables(d, d->it.nfields > 0 ? d->it.field_bytes : NULL,
                      d->it.sample_bytes, field, io, io_size, &sum, fn);
  if (rc != 0)
    goto fail;
  memset(out, 0, size);
  fl__struct_out(out, size,
                 &(fl_iterable){.ctx = d, .sample_bytes = sum,
                                .open = decoded_open, .close = decoded_close,
                                .skip = d->it.skip ? decoded_skip : NULL,
                                .nfields = d->nfields,
                                .field_bytes = d->field_bytes,
                                .next_fields = decoded_next_fields},
                 sizeof(fl_iterable));
  return 0;
fail:
  decoded_free(d);
  return rc;
}
