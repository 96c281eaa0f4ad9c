/*
 * The reorder buffer between the workers' replies and the consumer.  In
 * order, a batch waits in the slot of its seq until every earlier one has
 * been handed out; as they arrive, batches leave in arrival order.  Both are
 * rings of the prefetch window, O(1) per batch and allocated once.
 */
#include "config.h"

#include <stdlib.h>

#include "internal.h"

int
fl__reorder_init(fl__reorder *r, size_t window, int in_order)
{
  size_t cap = 1;

  while (cap < window)
    cap <<= 1;
  *r = (fl__reorder){0};
  r->ring = calloc(cap, sizeof(*r->ring));
  if (r->ring == NULL)
    return FL_ENOMEM;
  r->cap = cap;
  r->in_order = in_order;
  return 0;
}

/* A new epoch: its batches count from seq 0 again. */
void
fl__reorder_reset(fl__reorder *r)
{
  size_t i;

  for (i = 0; i < r->cap; i++)
    r->ring[i] = NULL;
  r->next_seq = 0;
  r->head = r->tail = 0;
  r->depth = 0;
}

void
fl__reorder_put(fl__reorder *r, fl_batch *b)
{
  if (r->in_order)
    r->ring[b->seq & (r->cap - 1)] = b;
  else
    r->ring[r->tail++ & (r->cap - 1)] = b;
  if (++r->depth > r->peak)
    r->peak = r->depth;
}

fl_batch *
fl__reorder_pop(fl__reorder *r)
{
  fl_batch **at;
  fl_batch *b;

  if (r->in_order) {
    at = &r->ring[r->next_seq & (r->cap - 1)];
    if (*at == NULL || (*at)->seq != r->next_seq)
      return NULL;
    r->next_seq++;
  } else {
    if (r->head == r->tail)
      return NULL;
    at = &r->ring[r->head++ & (r->cap - 1)];
  }
  b = *at;
  *at = NULL;
  r->depth--;
  return b;
}

/*
 * Take b back out, wherever it waits (a batch whose segment the loader lets
 * go of to make room).  As they arrive, the batches before it move up one,
 * so the ring keeps no hole and their order holds.  Returns 1, or 0 when b
 * is not there.
 */
int
fl__reorder_remove(fl__reorder *r, const fl_batch *b)
{
  uint64_t at;

  if (r->in_order) {
    if (r->ring[b->seq & (r->cap - 1)] != b)
      return 0;
    r->ring[b->seq & (r->cap - 1)] = NULL;
    r->depth--;
    return 1;
  }
  for (at = r->head; at != r->tail && r->ring[at & (r->cap - 1)] != b; at++)
    ;
  if (at == r->tail)
    return 0;
  for (; at != r->head; at--)
    r->ring[at & (r->cap - 1)] = r->ring[(at - 1) & (r->cap - 1)];
  r->ring[r->head++ & (r->cap - 1)] = NULL;
  r->depth--;
  return 1;
}

void
fl__reorder_free(fl__reorder *r)
{
  free(r->ring);
  r->ring = NULL;
}
