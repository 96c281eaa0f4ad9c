/*
 * A batch the consumer is done with, back to libforkload: at once where
 * the loader's lock is free, or through the pending list, which the
 * thread holding the lock drains (module.h's flpy_releaser; the lock
 * order is loader.c's).  With pin_memory, a batch waits there until the
 * copies made from it are done.
 */
#include "module.h"

#include <stdlib.h>
#include <unistd.h>

void
flpy_releaser_init(flpy_releaser *r, pthread_mutex_t *lock)
{
  r->owner = getpid();
  r->lock = lock;
  pthread_mutex_init(&r->pending_lock, NULL);
}

/* With the loader's batches freed (fl_loader_destroy frees the ones left
   on the list). */
void
flpy_releaser_fini(flpy_releaser *r)
{
  free(r->pending);
  r->pending = NULL;
  r->npending = r->cap_pending = 0;
  pthread_mutex_destroy(&r->pending_lock);
}

/* Add b to the releaser's pending list, with its event (a reference taken
   over) or none.  0, or -1 when the list cannot grow. */
static int
defer(flpy_releaser *self, fl_batch *b, PyObject *event)
{
  flpy_deferred *grown;
  size_t cap;

  pthread_mutex_lock(&self->pending_lock);
  if (self->npending == self->cap_pending) {
    cap = self->cap_pending ? 2 * self->cap_pending : 16;
    grown = realloc(self->pending, cap * sizeof(*grown));
    if (grown == NULL) {
      pthread_mutex_unlock(&self->pending_lock);
      return -1;
    }
    self->pending = grown;
    self->cap_pending = cap;
  }
  self->pending[self->npending].b = b;
  self->pending[self->npending].event = event;
  self->npending++;
  if (event != NULL)
    self->inflight++;
  pthread_mutex_unlock(&self->pending_lock);
  return 0;
}

/* The loader's lock is held by a thread waiting for a batch with the GIL
   released; a batch dropped meanwhile waits in a list, which the waiter
   releases when it next holds the lock.  Out of memory, the batch stays
   with the loader: fl_loader_destroy frees it with the rest. */
static void
release_now(flpy_releaser *self, fl_batch *b)
{
  if (pthread_mutex_trylock(self->lock) == 0) {
    /* Without the GIL: a release may take libforkload's fork table lock
       (the lock order at the top of loader.c). */
    Py_BEGIN_ALLOW_THREADS
    fl_batch_release(b);
    Py_END_ALLOW_THREADS
    pthread_mutex_unlock(self->lock);
    return;
  }
  defer(self, b, NULL);
}

/* With the lock held: every batch with nothing left to wait for goes
   back; those whose copies may be in flight stay, in their order.  The
   batches are taken off the list under pending_lock and released after
   it: a release may unpin (flpy_unpin takes the GIL), and a thread that
   holds the GIL may be waiting for pending_lock (defer). */
#define FLPY_DRAIN_LOCAL 64
void
flpy_release_drain(flpy_releaser *self)
{
  fl_batch *out[FLPY_DRAIN_LOCAL];
  size_t i, kept, n;

  do {
    n = kept = 0;
    pthread_mutex_lock(&self->pending_lock);
    for (i = 0; i < self->npending; i++) {
      if (self->pending[i].event != NULL || n == FLPY_DRAIN_LOCAL)
        self->pending[kept++] = self->pending[i];
      else
        out[n++] = self->pending[i].b;
    }
    self->npending = kept;
    pthread_mutex_unlock(&self->pending_lock);
    for (i = 0; i < n; i++)
      fl_batch_release(out[i]);
  } while (n == FLPY_DRAIN_LOCAL);
}

/* The event's batch has nothing left to wait for: the next drain
   releases it.  With the GIL. */
static void
event_done(flpy_releaser *self, PyObject *event)
{
  size_t i;
  int found = 0;

  pthread_mutex_lock(&self->pending_lock);
  for (i = 0; i < self->npending && !found; i++)
    if (self->pending[i].event == event) {
      self->pending[i].event = NULL;
      self->inflight--;
      found = 1;
    }
  pthread_mutex_unlock(&self->pending_lock);
  if (found)
    Py_DECREF(event); /* the list's reference */
}

/*
 * Each event is queried (or, with wait, synchronized) with no lock held:
 * the call runs Python, which may drop other batches.  inflight and the
 * events change only with the GIL, which this thread holds; another
 * thread's drain may move the entries meanwhile, never remove one with
 * an event.  The events are taken on the stack, where they fit (this runs
 * at every next() while one is in flight, and another thread may run it
 * meanwhile: no buffer of the loader's).
 */
#define FLPY_SETTLE_LOCAL 32
Py_ssize_t
flpy_release_settle(flpy_releaser *self, int wait)
{
  PyObject *local[FLPY_SETTLE_LOCAL], **events = local, *r;
  size_t n = self->inflight, got = 0, i;
  int done, failed = 0;

  if (n == 0)
    return 0;
  if (n > FLPY_SETTLE_LOCAL)
    events = malloc(n * sizeof(*events));
  if (events == NULL) {
    if (wait)
      return (Py_ssize_t)n; /* fl_loader_destroy frees them */
    PyErr_NoMemory();
    return -1;
  }
  pthread_mutex_lock(&self->pending_lock);
  for (i = 0; i < self->npending && got < n; i++)
    if (self->pending[i].event != NULL)
      events[got++] = Py_NewRef(self->pending[i].event);
  pthread_mutex_unlock(&self->pending_lock);
  for (i = 0; i < got; i++) {
    if (failed) {
      Py_DECREF(events[i]);
      continue;
    }
    r = PyObject_CallMethod(events[i], wait ? "synchronize" : "query",
                            NULL);
    done = wait || (r != NULL && PyObject_IsTrue(r) == 1);
    if (wait && r == NULL)
      PyErr_WriteUnraisable(events[i]); /* CUDA failed: nothing runs */
    else if (PyErr_Occurred())
      failed = 1;
    Py_XDECREF(r);
    if (done)
      event_done(self, events[i]);
    Py_DECREF(events[i]);
  }
  if (events != local)
    free(events);
  return failed ? -1 : (Py_ssize_t)self->inflight;
}

/*
 * pin_memory: the batch's last view is gone, but a copy to the GPU made
 * from it with non_blocking=True may still be reading its segment.  An
 * event recorded now on the current stream completes after it (as
 * PyTorch's host allocator does for its own blocks), and the batch goes
 * back to libforkload once it has: a refill never races a copy.
 */
static void
release_after_copies(flpy_releaser *self, fl_batch *b)
{
  PyObject *type, *value, *tb, *event, *r;

  PyErr_Fetch(&type, &value, &tb);
  event = PyObject_CallMethod(self->pinner, "record", NULL);
  if (event == NULL) {
    /* No event: CUDA has failed, and no copy runs. */
    PyErr_WriteUnraisable(self->pinner);
    release_now(self, b);
  } else if (defer(self, b, event) != 0) {
    /* No room in the list: wait for the copy here. */
    r = PyObject_CallMethod(event, "synchronize", NULL);
    if (r == NULL)
      PyErr_WriteUnraisable(event);
    Py_XDECREF(r);
    Py_DECREF(event);
    release_now(self, b);
  }
  PyErr_Restore(type, value, tb);
}

void
flpy_release(flpy_releaser *self, fl_batch *b)
{
  if (self->owner != getpid())
    return; /* a worker's copy of a consumer's batch */
  if (self->pinner != NULL)
    release_after_copies(self, b);
  else
    release_now(self, b);
}
