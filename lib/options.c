/*
 * Option defaults and the checks fl_loader_create makes before it does
 * anything: each failure names the field at fault.
 */
#include "config.h"

#include <stdio.h>

#include "internal.h"

void
fl__options_defaults(fl_options *opt)
{
  *opt = (fl_options){0};
  opt->batch_size = 1;
  opt->prefetch_factor = 2;
  opt->in_order = 1;
  opt->sharing = FL_SHARE_FILE_DESCRIPTOR;
  opt->reuse_segments = 1;
  opt->world_size = 1;
  opt->shard_mode = FL_SHARD_PAD;
}

void
fl_options_init_sized(fl_options *opt, size_t size)
{
  fl_options d;

  if (opt == NULL)
    return;
  fl__options_defaults(&d);
  fl__struct_out(opt, size, &d, sizeof(d));
}

/* Workers beyond this are a mistake, not a configuration (PyTorch warns). */
#define FL__MAX_WORKERS 1024

/* A dataset's fields: their sizes, and a call that fills them. */
static int
check_fields(const fl_dataset *ds, int iterable, char *err, size_t errlen)
{
  size_t f, sum = 0;

  if (ds->nfields == 0) {
    if (ds->get_fields != NULL || ds->field_bytes != NULL) {
      snprintf(err, errlen, "dataset: get_fields or field_bytes is set but "
                            "nfields is 0");
      return FL_EINVAL;
    }
    return 0;
  }
  if (ds->nfields > FL__MAX_FIELDS) {
    snprintf(err, errlen, "dataset: nfields is %zu: at most %d are allowed",
             ds->nfields, FL__MAX_FIELDS);
    return FL_EINVAL;
  }
  if (ds->field_bytes == NULL) {
    snprintf(err, errlen, "dataset: field_bytes is NULL but nfields is %zu",
             ds->nfields);
    return FL_EINVAL;
  }
  for (f = 0; f < ds->nfields; f++) {
    if (ds->field_bytes[f] == 0) {
      snprintf(err, errlen, "dataset: field_bytes[%zu] is 0: a field holds "
               "at least one byte", f);
      return FL_EINVAL;
    }
    if (__builtin_add_overflow(sum, ds->field_bytes[f], &sum)) {
      snprintf(err, errlen, "dataset: the field sizes add up to more than "
                            "this machine can address");
      return FL_EINVAL;
    }
  }
  if (ds->sample_bytes != 0 && ds->sample_bytes != sum) {
    snprintf(err, errlen, "dataset: sample_bytes is %zu but the %zu fields "
             "add up to %zu", ds->sample_bytes, ds->nfields, sum);
    return FL_EINVAL;
  }
  /* An iterable's next_fields: fl__iterable_check. */
  if (!iterable && ds->get_fields == NULL && ds->get_batch == NULL) {
    snprintf(err, errlen, "dataset: with nfields, get_fields or get_batch "
                          "must fill the fields (get writes one whole "
                          "sample)");
    return FL_EINVAL;
  }
  return 0;
}

/* An iterable's fields come with next_fields, and only with it. */
int
fl__iterable_check(const fl_iterable *it, char *err, size_t errlen)
{
  if (it->nfields == 0 && it->next == NULL) {
    snprintf(err, errlen, "iterable: next is NULL");
    return FL_EINVAL;
  }
  if (it->nfields > 0 && it->next_fields == NULL) {
    snprintf(err, errlen, "iterable: next_fields is NULL but nfields is %zu",
             it->nfields);
    return FL_EINVAL;
  }
  if (it->nfields == 0 && it->next_fields != NULL) {
    snprintf(err, errlen, "iterable: next_fields is set but nfields is 0");
    return FL_EINVAL;
  }
  return 0;
}

/* A sampler of the caller's gives the whole order: nothing else may. */
static int
check_sampler(const fl_options *opt, int iterable, char *err, size_t errlen)
{
  const char *other = opt->shuffle ? "shuffle"
                      : opt->indices != NULL || opt->indices_len != 0
                          ? "indices"
                          : NULL;

  if (opt->sampler == NULL) {
    if (opt->sampler_len == 0)
      return 0;
    snprintf(err, errlen, "sampler_len is %zu but sampler is NULL",
             opt->sampler_len);
    return FL_EINVAL;
  }
  if (iterable) {
    snprintf(err, errlen, "sampler does not apply to an iterable dataset: "
                          "each worker reads its own stream");
    return FL_EINVAL;
  }
  if (other != NULL) {
    snprintf(err, errlen, "sampler and %s are both set: the sampler gives "
             "the whole order", other);
    return FL_EINVAL;
  }
  if (opt->sampler_len == 0) {
    snprintf(err, errlen, "sampler_len is 0: it must be the most indices "
                          "the sampler writes for an epoch");
    return FL_EINVAL;
  }
  return 0;
}

/* This process among world_size ranks, and the hook that pins. */
static int
check_world(const fl_options *opt, char *err, size_t errlen)
{
  if (opt->world_size == 0) {
    snprintf(err, errlen, "world_size is 0: it must be at least 1");
    return FL_EINVAL;
  }
  if (opt->rank >= opt->world_size) {
    snprintf(err, errlen, "rank is %u but world_size is %u: ranks go from "
             "0 to world_size - 1", opt->rank, opt->world_size);
    return FL_EINVAL;
  }
  if (opt->shard_mode != FL_SHARD_PAD && opt->shard_mode != FL_SHARD_TRIM &&
      opt->shard_mode != FL_SHARD_UNEVEN) {
    snprintf(err, errlen, "shard_mode is %d: not a fl_shard_mode value",
             (int)opt->shard_mode);
    return FL_EINVAL;
  }
  if ((opt->pin != NULL || opt->unpin != NULL) && !opt->pin_memory) {
    snprintf(err, errlen, "%s is set but pin_memory is 0: the hooks pin "
             "what pin_memory asks for", opt->pin != NULL ? "pin" : "unpin");
    return FL_EINVAL;
  }
  if (opt->unpin != NULL && opt->pin == NULL) {
    snprintf(err, errlen, "unpin is set but pin is NULL: mlock'ed "
                          "segments are unlocked by munmap");
    return FL_EINVAL;
  }
  return 0;
}

/* A dataset's sample_bytes: its fields' sum when it has fields. */
size_t
fl__sample_bytes(const fl_dataset *ds)
{
  size_t f, sum = 0;

  if (ds->nfields == 0)
    return ds->sample_bytes;
  for (f = 0; f < ds->nfields; f++)
    sum += ds->field_bytes[f];
  return sum;
}

int
fl__options_check(const fl_dataset *ds, const fl_options *opt, int iterable,
                  char *err, size_t errlen)
{
  size_t i;
  int rc;

  if (iterable && opt->shuffle) {
    snprintf(err, errlen, "shuffle does not apply to an iterable dataset: "
                          "each worker reads its own stream");
    return FL_EINVAL;
  }
  if (iterable && (opt->indices != NULL || opt->indices_len != 0)) {
    snprintf(err, errlen, "indices do not apply to an iterable dataset");
    return FL_EINVAL;
  }
  if ((rc = check_sampler(opt, iterable, err, errlen)) != 0 ||
      (rc = check_world(opt, err, errlen)) != 0)
    return rc;
  if (!iterable && ds->get == NULL && ds->get_batch == NULL &&
      ds->get_fields == NULL) {
    snprintf(err, errlen, "dataset: get, get_batch and get_fields are all "
                          "NULL");
    return FL_EINVAL;
  }
  if ((rc = check_fields(ds, iterable, err, errlen)) != 0)
    return rc;
  if (ds->sample_bytes == 0 && ds->nfields == 0) {
    snprintf(err, errlen, "dataset: sample_bytes is 0");
    return FL_EINVAL;
  }
  if (opt->batch_size == 0) {
    snprintf(err, errlen, "batch_size is 0: it must be at least 1");
    return FL_EINVAL;
  }
  if (opt->num_workers > FL__MAX_WORKERS) {
    snprintf(err, errlen, "num_workers is %u: at most %u are allowed",
             opt->num_workers, FL__MAX_WORKERS);
    return FL_EINVAL;
  }
  if (opt->num_workers > 0 && opt->prefetch_factor == 0) {
    snprintf(err, errlen,
             "prefetch_factor is 0: with workers it must be at least 1");
    return FL_EINVAL;
  }
  if (opt->num_workers > 0 &&
      opt->prefetch_factor > UINT32_MAX / opt->num_workers) {
    snprintf(err, errlen, "prefetch_factor %u x num_workers %u is too large",
             opt->prefetch_factor, opt->num_workers);
    return FL_EINVAL;
  }
  if (opt->sharing != FL_SHARE_FILE_DESCRIPTOR &&
      opt->sharing != FL_SHARE_FILE_SYSTEM) {
    snprintf(err, errlen, "sharing is %d: not a fl_sharing value",
             (int)opt->sharing);
    return FL_EINVAL;
  }
  if (opt->shuffle_algorithm != FL_SHUFFLE_TORCH &&
      opt->shuffle_algorithm != FL_SHUFFLE_BIJECTION) {
    snprintf(err, errlen, "shuffle_algorithm is %d: not a "
             "fl_shuffle_algorithm value", (int)opt->shuffle_algorithm);
    return FL_EINVAL;
  }
  if (opt->reserved != 0) {
    snprintf(err, errlen, "reserved is %u: it must be 0 (a program built "
             "for a later forkload may set it)", opt->reserved);
    return FL_EINVAL;
  }
  /* Before the list is read: a length whose bytes wrap is no list. */
  if (opt->indices_len > SIZE_MAX / 4 / sizeof(size_t)) {
    snprintf(err, errlen, "indices_len is %zu: an order that long is more "
             "bytes than this machine can address", opt->indices_len);
    return FL_ENOMEM;
  }
  if (opt->indices == NULL && opt->indices_len != 0) {
    snprintf(err, errlen, "indices is NULL but indices_len is %zu",
             opt->indices_len);
    return FL_EINVAL;
  }
  for (i = 0; opt->indices != NULL && i < opt->indices_len; i++) {
    if (opt->indices[i] >= ds->len) {
      snprintf(err, errlen,
               "indices[%zu] is %zu: out of range for a dataset of %zu",
               i, opt->indices[i], ds->len);
      return FL_EINVAL;
    }
  }
  return 0;
}
