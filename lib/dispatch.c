/*
 * Dispatch: turn the sampler's next batch into a task for a worker.  At
 * most prefetch_factor * num_workers batches are out (sent, not yet handed
 * to the consumer).  In order, batch i goes to worker i mod N, as PyTorch
 * does; as they arrive, the next worker in the cycle with room takes it, so
 * a slow worker does not hold the others back.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "internal.h"

static int
send_task(fl_loader *l, fl__worker *w, const struct fl__task *t)
{
  int rc;

  /* A worker owes batches from now: a hang is counted from here. */
  if (w->sent + w->backlog_len == 0)
    w->last_seen = fl__now();
  if (w->backlog_len == 0) {
    rc = fl__index_queue_send(&w->queue, t);
    if (rc == 0) {
      w->sent++;
      return 0;
    }
    if (rc != FL_EAGAIN)
      return fl__loader_fail(l, rc, "cannot send a task to worker %u: %s",
                             w->id, fl_strerror(rc));
  }
  /* The queue is full (msg_max is small): the task waits here. */
  w->backlog[(w->backlog_head + w->backlog_len) % w->backlog_cap] = *t;
  w->backlog_len++;
  return 0;
}

int
fl__dispatch_flush(fl_loader *l, unsigned wi)
{
  fl__worker *w = &l->workers[wi];
  int rc;

  while (w->backlog_len > 0) {
    rc = fl__index_queue_send(&w->queue, &w->backlog[w->backlog_head]);
    if (rc == FL_EAGAIN)
      return 0;
    if (rc != 0)
      return fl__loader_fail(l, rc, "cannot send a task to worker %u: %s",
                             wi, fl_strerror(rc));
    w->backlog_head = (w->backlog_head + 1) % w->backlog_cap;
    w->backlog_len--;
    w->sent++;
  }
  return 0;
}

/*
 * In order, the next worker in the cycle (for a map-style dataset, batch i
 * goes to worker i mod N); as they arrive, the next one with room.  Under
 * the file-system strategy as they arrive, the next that holds a free
 * segment of its own comes first, room or not: no segment can be lent
 * there, and a new one made while another sits idle would let segments
 * grow to num_workers x (prefetch_factor + held); this way they stay within
 * the window plus the batches held, as lending keeps them under the fd
 * strategy.  Workers whose stream is over (iterable datasets) take no more
 * tasks.
 */
static fl__worker *
pick(fl_loader *l)
{
  unsigned n = l->opt.num_workers, i, k, pass;
  fl__worker *w;

  if (l->opt.in_order && !l->iterable)
    return &l->workers[l->plain % n];
  for (pass = fl__own_segments_first(&l->opt) ? 0 : 1; pass < 2; pass++) {
    for (k = 0; k < n; k++) {
      i = (l->rr + k) % n;
      w = &l->workers[i];
      if (w->ended || (pass == 0 && w->free == NULL))
        continue;
      if (pass == 0 || l->opt.in_order ||
          w->assigned < l->opt.prefetch_factor) {
        l->rr = (i + 1) % n;
        return w;
      }
    }
  }
  return NULL; /* all streams over, or (as they arrive) none with room */
}

/* Whether worker id has mapped b (ids from 64 on are never assumed to). */
static int
maps(const fl_batch *b, unsigned id)
{
  return id < 64 && (b->mapped_by >> id) & 1;
}

enum take { TAKE_OWN, TAKE_MAPPED, TAKE_LENDABLE };

/*
 * Take from worker o's free list the first segment we have mapped that is:
 * o's own (TAKE_OWN), already mapped by worker w too (TAKE_MAPPED), or one
 * we hold the fd of, to lend to w (TAKE_LENDABLE).
 */
static fl_batch *
take_free(fl__worker *o, unsigned w, enum take how)
{
  fl_batch **at, *b;
  int ok;

  for (at = &o->free; (b = *at) != NULL; at = &b->next_free) {
    /* A segment of a larger class than the loader's is not lent while
       the worker that made it lives: it alone maps it, so that when it
       is made smaller again no other worker keeps its memory mapped. */
    ok = b->seg.base != NULL &&
         (how == TAKE_OWN || (how == TAKE_MAPPED
                                  ? maps(b, w)
                                  : b->seg.fd >= 0 && b->shift == 0));
    if (ok) {
      *at = b->next_free;
      return b;
    }
  }
  return NULL;
}

/*
 * A released segment for worker w to refill: its own, or one idle at
 * another worker that w has mapped before, or, under the fd strategy, one
 * lent to w now with its fd: idle at another worker, or in the loader's
 * pool, left by workers that are gone (an epoch's workers, a dead one), so
 * that new processes take no new segment.  Lending keeps the segments at
 * the prefetch window plus the batches held (with strict round-robin, each
 * worker would otherwise keep one idle), and a worker keeps what it once
 * mapped, so after the first epoch segments change hands with no grant
 * and no fault.  A segment w does not map is lent, whoever held it.
 */
static fl_batch *
reuse_for(fl_loader *l, fl__worker *w, uint32_t *flags)
{
  unsigned i, n = l->opt.num_workers;
  fl_batch *b = take_free(w, w->id, TAKE_OWN);

  for (i = 1; b == NULL && i < n; i++)
    b = take_free(&l->workers[(w->id + i) % n], w->id, TAKE_MAPPED);
  for (i = 1; b == NULL && i < n; i++)
    b = take_free(&l->workers[(w->id + i) % n], w->id, TAKE_LENDABLE);
  if (b == NULL && (b = l->pool) != NULL)
    l->pool = b->next_free;
  if (b == NULL)
    return NULL;
  b->worker = w->id;
  b->gen = w->gen;
  b->lent = !maps(b, w->id);
  *flags = b->lent ? FL__TASK_GRANTED : 0;
  return b;
}

/* Flags for a task whose segment the worker must make anew. */
static uint32_t
fresh_flags(fl_loader *l, fl_batch *b)
{
  b->mapped_by = 0;
  /* A new name, unpredictable to another user (segment.c). */
  b->serial = fl__random64();
  return FL__TASK_NEW_SEGMENT |
         (l->opt.reuse_segments ? 0 : FL__TASK_ONE_SHOT);
}

/*
 * A segment for worker w to fill: one it holds and we have mapped, else a
 * free slot whose segment never reached us, else a new one, the last two
 * made anew by the worker.
 */
static int
slot_for(fl_loader *l, fl__worker *w, fl_batch **out, uint32_t *flags)
{
  fl_batch *b = NULL;
  int rc;

  if (l->opt.reuse_segments && (b = reuse_for(l, w, flags)) != NULL) {
    *out = b;
    return 0;
  }
  if (l->opt.reuse_segments && (b = w->free) != NULL) {
    w->free = b->next_free;
    *flags = fresh_flags(l, b);
    *out = b;
    return 0;
  }
  rc = fl__slot_new(l, w->id, &b);
  if (rc != 0)
    return fl__loader_fail(l, rc, "out of memory for a new segment record");
  *flags = fresh_flags(l, b);
  *out = b;
  return 0;
}

/* Ask worker w to fill batch seq into b's segment. */
static int
send_fill(fl_loader *l, fl__worker *w, fl_batch *b, uint64_t seq,
          uint32_t flags)
{
  struct fl__task t;
  size_t offset, count;
  int rc;

  memset(&t, 0, sizeof(t));
  if (l->iterable) {
    offset = 0;
    count = l->opt.batch_size; /* at most: the stream decides */
    t.skip = w->skip;
  } else {
    fl__sampler_batch(&l->sampler, l->order, seq, &offset, &count);
  }
  t.version = FL__PROTOCOL_VERSION;
  t.type = FL__TASK_FILL;
  t.slot = b->slot;
  t.run = l->run;
  t.epoch = l->epoch;
  t.seq = seq;
  t.offset = offset;
  t.count = (uint32_t)count;
  t.flags = flags;
  if (flags & FL__TASK_GRANTED) {
    /* The fd goes first: the worker reads it when it takes the task. */
    b->serial = ++l->serial;
    rc = w->sock >= 0 ? fl__channel_grant(w->sock, b->slot, b->serial,
                                          b->seg.fd)
                      : -EPIPE; /* its end closed: it is exiting */
    /* A worker that just died: its exit notice says so, with its cause. */
    if (rc != 0 && rc != -EPIPE && rc != -ECONNRESET)
      return fl__loader_fail(l, rc, "cannot lend a segment to worker %u: %s",
                             w->id, fl_strerror(rc));
  }
  /* A segment of a larger class than the batches lately needed: made
     smaller by the worker that maps it (slot.c, fl__slot_needed). */
  if (!(flags & (FL__TASK_NEW_SEGMENT | FL__TASK_GRANTED)) &&
      b->shift > l->want_shift) {
    t.flags |= FL__TASK_RESCALE;
    t.shift = l->want_shift;
  }
  t.serial = b->serial;
  t.attempt = FL__ATTEMPT(b);
  b->state = FL__SLOT_TASKED;
  b->seq = seq;
  b->sent_order = ++l->sent_count;
  return send_task(l, w, &t);
}

int
fl__dispatch_resend(fl_loader *l, fl__worker *w, fl_batch *b)
{
  uint32_t flags;

  b->worker = w->id;
  b->gen = w->gen;
  if (b->seg.base != NULL && b->seg.fd >= 0 && l->opt.reuse_segments) {
    b->lent = 1;
    flags = FL__TASK_GRANTED;
  } else {
    /* Nothing to grant (the file-system strategy keeps no fd): the new
       process makes the segment anew, and the name the dead one may have
       made goes. */
    fl__slot_unmap(l, b);
    fl__slot_unname(l, b);
    flags = fresh_flags(l, b);
  }
  return send_fill(l, w, b, b->seq, flags);
}

/*
 * The next batch to ask for: those a resumed epoch had not handed out
 * first (as they arrive), then the rest in order.  take moves past it.
 */
uint64_t
fl__dispatch_seq(fl_loader *l, int take)
{
  const struct fl__resume *r = &l->resume;
  uint64_t seq;

  if (r->itodo < r->place.ntodo) {
    seq = r->place.todo[r->itodo];
    l->resume.itodo += take != 0;
    return seq;
  }
  seq = l->plain;
  l->plain += take != 0;
  return seq;
}

int
fl__dispatch_fill(fl_loader *l)
{
  fl__worker *w;
  fl_batch *b = NULL;
  uint32_t flags = 0;
  int rc;

  while ((l->iterable ? l->active > 0 : l->next_send < l->nbatches) &&
         l->next_send - l->delivered < l->window) {
    w = pick(l);
    if (w == NULL)
      break;
    rc = slot_for(l, w, &b, &flags);
    if (rc == 0) {
      b->tries = b->kills = 0;
      b->evicted = 0;
      rc = send_fill(l, w, b, fl__dispatch_seq(l, 1), flags);
    }
    if (rc != 0)
      return rc;
    w->assigned++;
    l->next_send++;
  }
  l->stats.in_flight = (size_t)(l->next_send - l->delivered);
  if (l->stats.in_flight > l->stats.in_flight_peak)
    l->stats.in_flight_peak = l->stats.in_flight;
  return 0;
}

/*
 * Ask again for the batches lost for want of fds or shared memory, each
 * from the worker that had it, into a segment we already hold where there
 * is one: a full /dev/shm has no room for a new segment, and at the fd
 * limit a new one could not reach us.  Unless reuse_only, where there is
 * none the worker makes one anew.  A slot whose segment the worker made
 * but we never received joins the worker's free list unmapped, to be made
 * anew when it is next used.  With only set, just that batch is asked
 * again.  Returns how many were asked again, or a negative code.
 */
int
fl__dispatch_refetch(fl_loader *l, int reuse_only, const fl_batch *only)
{
  fl__worker *w;
  fl_batch *b, *into;
  uint64_t seq;
  uint32_t flags = 0;
  size_t i;
  int rc, n = 0;

  for (i = 0; i < l->nslots && l->nrefetch > 0; i++) {
    b = l->slots[i];
    if (b == NULL || b->state != FL__SLOT_REFETCH ||
        (only != NULL && b != only))
      continue;
    w = &l->workers[b->worker];
    seq = b->seq;
    into = l->opt.reuse_segments ? reuse_for(l, w, &flags) : NULL;
    if (into == NULL && reuse_only)
      continue;
    if (into == NULL) {
      into = b;
      b->gen = w->gen;
      flags = fresh_flags(l, b);
    }
    l->nrefetch--;
    into->tries = b->tries + !b->evicted;
    b->evicted = 0;
    into->kills = b->kills;
    if (into != b && b->orphaned) {
      b->state = FL__SLOT_FREE;
      b->next_free = w->free;
      w->free = b;
    } else if (into != b) {
      b->state = FL__SLOT_FREE;
      fl__slot_drop(l, b);
    }
    rc = send_fill(l, w, into, seq, flags);
    if (rc != 0)
      return rc;
    n++;
  }
  return n;
}


/* Let go of an idle segment kept only to be lent, and of its fd: one in
   the pool, else in a worker's free list.  1, or 0 when there is none. */
static int
drop_idle(fl_loader *l)
{
  fl_batch **at, *b;
  unsigned i;

  if ((b = l->pool) != NULL) {
    l->pool = b->next_free;
    fl__slot_drop(l, b);
    return 1;
  }
  for (i = 0; i < l->opt.num_workers; i++) {
    for (at = &l->workers[i].free; (b = *at) != NULL; at = &b->next_free) {
      if (b->seg.fd >= 0) {
        *at = b->next_free;
        b->state = FL__SLOT_FREE;
        fl__slot_drop(l, b);
        return 1;
      }
    }
  }
  return 0;
}

/*
 * The consumer holds nothing, and the batch due (lost) cannot come in for
 * want of an fd: free one that the loader holds for itself.  First an idle
 * segment's, kept only to be lent; else that of a batch waiting in the
 * reorder buffer, the one due last, whose batch is then asked for again
 * like a lost one.  Returns 1 when an fd was freed, 0 when the loader holds
 * none it can let go of (the rest of the process holds the fds).
 */
int
fl__dispatch_make_room(fl_loader *l, const fl_batch *lost)
{
  fl_batch *b, *last = NULL;
  size_t s;

  if (drop_idle(l))
    return 1;
  for (s = 0; s < l->nslots; s++) {
    b = l->slots[s];
    if (b != NULL && b != lost && b->state == FL__SLOT_READY && !b->end &&
        b->seg.fd >= 0 && (last == NULL || b->seq > last->seq))
      last = b;
  }
  if (last == NULL || !fl__reorder_remove(&l->reorder, last))
    return 0;
  /* The parent's side goes; its batch is asked for again, into a segment
     made anew. */
  fl__slot_unmap(l, last);
  last->evicted = 1;
  fl__slot_keep(l, last, FL_EMFILE, 1);
  return 1;
}

/*
 * The parent is at its fd limit where it makes an fd (a new worker's
 * socket or pidfd): let go of the fds of the batches the consumer holds,
 * else of an idle segment's.  Returns 1 when one was freed, 0 when the
 * loader holds none it can let go of.
 */
int
fl__dispatch_spare_fd(fl_loader *l)
{
  return fl__slot_close_held_fds(l) > 0 || drop_idle(l);
}

