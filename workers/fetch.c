/*
 * Fetch: call the dataset's get (each sample) or get_batch (the whole
 * batch), or an iterable dataset's next (each sample until the batch is
 * full or the stream is over), straight into the segment, and check what
 * it reports.
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

int
fl__fetch(const fl_dataset *ds, const size_t *indices, size_t n, void *data,
          size_t *sizes, char *err, size_t errlen)
{
  unsigned char *dst = data;
  size_t i, sb = ds->sample_bytes;
  int rc;

  fl__worker_error_clear();
  for (i = 0; i < n; i++)
    sizes[i] = sb;
  if (ds->get_batch != NULL) {
    plant(dst + n * sb);
    rc = ds->get_batch(ds->ctx, indices, n, data, sizes);
    if (rc != 0)
      return failed(err, errlen, "get_batch", n ? indices[0] : 0, rc);
    if (trampled(dst + n * sb))
      return overran(err, errlen, "get_batch", indices[n - 1], n * sb);
    for (i = 0; i < n; i++) {
      if (sizes[i] > sb)
        return oversized(err, errlen, "get_batch", indices[i], sizes[i], sb);
    }
    return 0;
  }
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
