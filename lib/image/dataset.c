/*
 * fl_dataset_decode_images: the image stage over any map-style dataset one
 * of whose fields holds encoded images (JPEG or PNG bytes: LMDB values,
 * files read by a dataset of the caller's).  Each sample's encoded field is
 * fetched into a buffer the process keeps, and the stage writes the
 * decoded, transformed image in its place; the other fields pass through.
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

static int
decoded_get_fields(void *ctx, size_t index, void *const *dst, size_t *nbytes)
{
  struct decoded *d = ctx;
  char name[64];
  size_t f;
  int rc;

  for (f = 0; f < d->nfields; f++) {
    d->dst[f] = f == d->field ? d->buf : dst[f];
    d->nbytes[f] = d->in_bytes[f];
  }
  rc = d->in.nfields > 0
           ? d->in.get_fields(d->in.ctx, index, d->dst, d->nbytes)
           : d->in.get(d->in.ctx, index, d->buf, d->nbytes);
  if (rc != 0)
    return rc;
  snprintf(name, sizeof(name), "sample %zu, field %zu", index, d->field);
  rc = fl__image_stage_run(d->stage, d->buf, d->nbytes[d->field],
                           fl_sample_seed(index), dst[d->field], name);
  if (rc != 0)
    return rc;
  for (f = 0; f < d->nfields; f++)
    nbytes[f] = f == d->field ? d->field_bytes[f] : d->nbytes[f];
  return 0;
}

int
fl_dataset_decode_images_sized(fl_dataset *out, size_t size,
                               const fl_dataset *in, size_t in_size,
                               size_t field, const fl_image_options *io,
                               size_t io_size)
{
  static const char fn[] = "fl_dataset_decode_images";
  struct decoded *d;
  char err[160];
  size_t f, sum = 0;
  int rc;

  if (in == NULL)
    return fl__error_set(FL_EINVAL, "%s: in is NULL", fn);
  if ((d = calloc(1, sizeof(*d))) == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory", fn);
  d->base.magic = FL__DS_MAGIC;
  d->base.free = decoded_free;
  /* in first: out may be the same struct, which the check zeroes. */
  rc = fl__struct_in(&d->in, sizeof(d->in), in, in_size,
                     FL__DATASET_SIZE_0_1, "fl_dataset", err, sizeof(err));
  if (rc != 0) {
    rc = fl__error_set(FL_EINVAL, "%s: %s", fn, err);
    goto fail;
  }
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
  if (field >= d->nfields) {
    rc = fl__error_set(FL_EINVAL, "%s: field %zu, and in has %zu", fn, field,
                       d->nfields);
    goto fail;
  }
  if ((rc = fl__image_stage_new(&d->stage, io, io_size, fn)) != 0)
    goto fail;
  d->field = field;
  d->in_bytes = calloc(d->nfields, sizeof(*d->in_bytes));
  d->field_bytes = calloc(d->nfields, sizeof(*d->field_bytes));
  d->dst = calloc(d->nfields, sizeof(*d->dst));
  d->nbytes = calloc(d->nfields, sizeof(*d->nbytes));
  if (d->in_bytes == NULL || d->field_bytes == NULL || d->dst == NULL ||
      d->nbytes == NULL) {
    rc = fl__error_set(FL_ENOMEM, "%s: out of memory", fn);
    goto fail;
  }
  for (f = 0; f < d->nfields; f++) {
    d->in_bytes[f] =
        d->in.nfields > 0 ? d->in.field_bytes[f] : d->in.sample_bytes;
    d->field_bytes[f] =
        f == field ? fl__image_stage_bytes(d->stage) : d->in_bytes[f];
    sum += d->field_bytes[f];
  }
  if (d->in_bytes[field] == 0 ||
      (d->buf = malloc(d->in_bytes[field])) == NULL) {
    rc = fl__error_set(d->in_bytes[field] ? FL_ENOMEM : FL_EINVAL,
                       "%s: field %zu of in is %zu bytes", fn, field,
                       d->in_bytes[field]);
    goto fail;
  }
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
