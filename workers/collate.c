/*
 * Collate: lay a batch out in its segment (header, the batch's indices,
 * room for the sizes), then fetch the samples into place.  The batch is
 * born in shared memory: nothing is copied afterwards.
 */
#include <string.h>

#include "internal.h"

static void
collate(void *base, const fl_loader *l, unsigned worker, uint64_t epoch,
            uint64_t seq, const size_t *indices, size_t n, size_t **sizes,
            void **data)
{
  struct fl__segment_header *h = base;
  size_t *idx = (size_t *)(h + 1);

  h->magic = FL__SEGMENT_MAGIC;
  h->worker = worker;
  h->epoch = epoch;
  h->seq = seq;
  h->count = n;
  h->capacity = l->opt.batch_size;
  h->sample_bytes = l->ds.sample_bytes;
  h->data_offset = l->data_offset;
  memcpy(idx, indices, n * sizeof(*idx));
  *sizes = idx + l->opt.batch_size;
  *data = (unsigned char *)base + l->data_offset;
}

int
fl__fill(const fl_loader *l, void *base, unsigned worker, uint64_t epoch,
         uint64_t seq, size_t offset, size_t count, char *err, size_t errlen)
{
  size_t *sizes;
  void *data;

  collate(base, l, worker, epoch, seq, l->order + offset, count, &sizes,
              &data);
  return fl__fetch(&l->ds, l->order + offset, count, data, sizes, err,
                   errlen);
}
