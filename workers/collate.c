/*
 * Collate: lay a batch out in its segment (header, the batch's indices,
 * room for the sizes), then fetch the samples into place.  The batch is
 * born in shared memory: nothing is copied afterwards.  For an iterable
 * dataset, this is also where its stream is opened and closed.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "internal.h"

/* The header; returns where the batch's indices go. */
static size_t *
collate(fl__fill_ctx *c, const fl_loader *l, unsigned worker, uint64_t epoch,
        uint64_t seq, size_t n)
{
  struct fl__segment_header *h = c->seg.base;
  const fl__layout *lo = &l->classes[c->shift];

  h->magic = FL__SEGMENT_MAGIC;
  h->worker = worker;
  h->epoch = epoch;
  h->seq = seq;
  h->count = n;
  h->capacity = lo->cap;
  h->sample_bytes = l->ds.sample_bytes;
  h->data_offset = lo->field_offset[0];
  h->shift = c->shift;
  c->seq = seq;
  return (size_t *)(h + 1);
}

int
fl__fill(const fl_loader *l, fl__fill_ctx *c, unsigned worker, uint64_t run,
         uint64_t epoch, uint64_t seq, size_t offset, size_t count,
         char *err, size_t errlen)
{
  size_t *idx;

  fl__fill_context(l->opt.seed, epoch, run);
  idx = collate(c, l, worker, epoch, seq, count);
  fl__sampler_indices(&l->sampler, l->order, offset, count, idx);
  return fl__fetch(&l->ds, idx, count, c, err, errlen);
}

/*
 * An iterable dataset's batch: its indices are the samples' positions in
 * this worker's stream this epoch, from first on.
 */
int
fl__fill_stream(const fl_loader *l, fl__fill_ctx *c, unsigned worker,
                uint64_t epoch, uint64_t seq, size_t first, size_t *count,
                int *over, char *err, size_t errlen)
{
  size_t bs = l->layout.cap, *idx, i;
  int rc;

  idx = collate(c, l, worker, epoch, seq, 0);
  for (i = 0; i < bs; i++)
    idx[i] = first + i;
  rc = fl__fetch_stream(&l->it, bs, c, count, over, err, errlen);
  /* The segment the batch ended in (fl_worker_grow may have moved it). */
  ((struct fl__segment_header *)c->seg.base)->count = *count;
  return rc;
}

void
fl__stream_close(const fl_loader *l, struct fl__stream *st)
{
  if (st->opened && l->it.close != NULL)
    l->it.close(l->it.ctx);
  st->opened = 0;
}

/*
 * A resumed epoch: skip what was handed out before, with the dataset's
 * skip, or with next (into the batch's room, overwritten afterwards).  A
 * next that fails was no sample before either; a stream that ends early
 * is over, and so is one that cannot skip.
 */
static int
skip_stream(const fl_loader *l, struct fl__stream *st, fl__fill_ctx *c,
            char *err, size_t errlen)
{
  void *scratch[FL__MAX_FIELDS];
  size_t nbytes[FL__MAX_FIELDS], f;
  uint64_t done = 0, failures = 0;
  int rc;

  fl__worker_error_clear();
  if (l->it.skip != NULL) {
    rc = l->it.skip(l->it.ctx, st->skip);
    if (rc < 0) {
      st->over = 1;
      fl__format(err, errlen, "skip(%llu) returned %d%s%s",
                 (unsigned long long)st->skip, rc,
                 fl__worker_error_text()[0] ? ": " : "",
                 fl__worker_error_text());
      return FL_EDATASET;
    }
    st->pos = (size_t)st->skip;
    return 0;
  }
  c->n = 1;
  while (done < st->skip) {
    /* Sample 0's room, wherever a grown sample left the segment. */
    for (f = 0; f < l->layout.nfields; f++) {
      scratch[f] = c->fields[f];
      nbytes[f] = l->classes[c->shift].field_bytes[f];
    }
    fl__fill_call_begin(c, 0, l->it.nfields > 0 ? scratch : NULL);
    rc = fl__stream_next(&l->it, scratch, nbytes);
    fl__fill_call_end(c);
    if (rc == 0) {
      st->over = 1;
      break;
    }
    if (rc > 0)
      done++;
    else if (++failures > st->skip) {
      st->over = 1;
      snprintf(err, errlen, "next failed %llu times while skipping the %llu "
               "samples a resumed epoch had handed out",
               (unsigned long long)failures, (unsigned long long)st->skip);
      return FL_EDATASET;
    }
  }
  st->pos = (size_t)done;
  return 0;
}

/*
 * Fill an iterable dataset's batch (in a worker, or in the caller with
 * num_workers 0); *count samples went in, *end says the stream had none
 * left to give, or only a short batch that drop_last drops: no batch.  The
 * stream is opened anew at the first batch of each fl_loader_begin (run),
 * so persistent workers start every epoch from the top (or from where a
 * resumed epoch left it).
 */
int
fl__stream_fill(const fl_loader *l, struct fl__stream *st, fl__fill_ctx *c,
                unsigned worker, uint64_t run, uint64_t epoch, uint64_t seq,
                size_t *count, int *end, char *err, size_t errlen)
{
  int rc, over;

  *count = 0;
  *end = 0;
  fl__fill_context(l->opt.seed, epoch, run);
  if (st->run != run) {
    fl__stream_close(l, st);
    fl__worker_error_clear();
    rc = l->it.open != NULL ? l->it.open(l->it.ctx, fl_get_worker_info())
                            : 0;
    st->run = run;
    st->opened = rc == 0;
    st->over = rc != 0;
    st->pos = 0;
    if (rc != 0) {
      fl__format(err, errlen, "open returned %d%s%s", rc,
                 fl__worker_error_text()[0] ? ": " : "",
                 fl__worker_error_text());
      return FL_EDATASET;
    }
    if (st->skip > 0 && (rc = skip_stream(l, st, c, err, errlen)) != 0)
      return rc;
  }
  if (st->over) {
    *end = 1;
    return 0;
  }
  rc = fl__fill_stream(l, c, worker, epoch, seq, st->pos, count, &over,
                       err, errlen);
  st->pos += *count;
  st->over = over;
  if (rc == 0 && (*count == 0 || (over && l->opt.drop_last)))
    *end = 1;
  return rc;
}
