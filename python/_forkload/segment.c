/*
 * A received batch and its views.  A Segment owns one fl_batch: every
 * tensor or array made from the batch holds a reference to it (a DLPack
 * capsule's manager context, or a View exporting the buffer protocol), and
 * the batch goes back to forkload when the last of them is gone.  Its
 * Loader stays alive as long as it does.
 */
#include "module.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlpack.h"

typedef struct {
  PyObject_HEAD
  flpy_loader *owner;
  fl_batch *batch;
  const unsigned char *data;
} flpy_segment;

typedef struct {
  PyObject_HEAD
  PyObject *owner; /* a Segment, or what else holds data */
  const unsigned char *data;
  int dtype, ndim;
  Py_ssize_t *shape;
  Py_ssize_t *strides;
} flpy_view;

/* Add b to the loader's pending list, with its event (a reference taken
   over) or none.  0, or -1 when the list cannot grow. */
static int
defer(flpy_loader *self, fl_batch *b, PyObject *event)
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
void
flpy_loader_release(flpy_loader *self, fl_batch *b)
{
  if (self->owner != getpid())
    return; /* a worker's copy of a consumer's batch */
  if (pthread_mutex_trylock(&self->lock) == 0) {
    /* Without the GIL: a release may take libforkload's fork table lock
       (the lock order at the top of loader.c). */
    Py_BEGIN_ALLOW_THREADS
    fl_batch_release(b);
    Py_END_ALLOW_THREADS
    pthread_mutex_unlock(&self->lock);
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
flpy_loader_drain(flpy_loader *self)
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
event_done(flpy_loader *self, PyObject *event)
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
flpy_loader_settle(flpy_loader *self, int wait)
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
release_after_copies(flpy_loader *self, fl_batch *b)
{
  PyObject *type, *value, *tb, *event, *r;

  PyErr_Fetch(&type, &value, &tb);
  event = PyObject_CallMethod(self->pinner, "record", NULL);
  if (event == NULL) {
    /* No event: CUDA has failed, and no copy runs. */
    PyErr_WriteUnraisable(self->pinner);
    flpy_loader_release(self, b);
  } else if (defer(self, b, event) != 0) {
    /* No room in the list: wait for the copy here. */
    r = PyObject_CallMethod(event, "synchronize", NULL);
    if (r == NULL)
      PyErr_WriteUnraisable(event);
    Py_XDECREF(r);
    Py_DECREF(event);
    flpy_loader_release(self, b);
  }
  PyErr_Restore(type, value, tb);
}

/* fl_options.pin, in the process that made the loader, with the lock
   held and the GIL taken here: pinner.register(addr, len), once per
   segment.  What it raised is warned of at the batch. */
int
flpy_pin(void *addr, size_t len, void *arg)
{
  flpy_loader *self = arg;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *type, *value, *tb, *r;
  int rc = 0;

  PyErr_Fetch(&type, &value, &tb);
  r = PyObject_CallMethod(self->pinner, "register", "Nn",
                          PyLong_FromVoidPtr(addr), (Py_ssize_t)len);
  if (r == NULL) {
    Py_XSETREF(self->pin_error, flpy_take_exception());
    rc = 1;
  }
  Py_XDECREF(r);
  PyErr_Restore(type, value, tb);
  PyGILState_Release(g);
  return rc;
}

/* fl_options.unpin: before the segment is unmapped. */
void
flpy_unpin(void *addr, size_t len, void *arg)
{
  flpy_loader *self = arg;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *type, *value, *tb, *r;

  PyErr_Fetch(&type, &value, &tb);
  r = PyObject_CallMethod(self->pinner, "unregister", "Nn",
                          PyLong_FromVoidPtr(addr), (Py_ssize_t)len);
  if (r == NULL)
    PyErr_WriteUnraisable(self->pinner);
  Py_XDECREF(r);
  PyErr_Restore(type, value, tb);
  PyGILState_Release(g);
}

PyObject *
flpy_segment_new(flpy_loader *owner, fl_batch *b)
{
  flpy_state *st = flpy_state_of(owner->module);
  flpy_segment *s = PyObject_New(flpy_segment, st->segment_type);

  if (s == NULL) {
    flpy_loader_release(owner, b);
    return NULL;
  }
  Py_INCREF((PyObject *)owner);
  s->owner = owner;
  s->batch = b;
  s->data = fl_batch_data(b);
  return (PyObject *)s;
}

const unsigned char *
flpy_segment_data(PyObject *segment)
{
  return ((flpy_segment *)segment)->data;
}

fl_batch *
flpy_segment_batch(PyObject *segment)
{
  return ((flpy_segment *)segment)->batch;
}

static void
segment_dealloc(PyObject *op)
{
  flpy_segment *s = (flpy_segment *)op;
  PyTypeObject *tp = Py_TYPE(op);

  if (s->owner->pinner != NULL && s->owner->owner == getpid())
    release_after_copies(s->owner, s->batch);
  else
    flpy_loader_release(s->owner, s->batch);
  Py_DECREF(s->owner);
  PyObject_Free(op);
  Py_DECREF(tp);
}

/* The whole blob, as bytes: memoryview(segment). */
static int
segment_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
  flpy_segment *s = (flpy_segment *)op;
  const flpy_blob *h = (const flpy_blob *)s->data;

  return PyBuffer_FillInfo(view, op, (void *)s->data, (Py_ssize_t)h->len, 0,
                           flags);
}

static PyType_Slot segment_slots[] = {
    {Py_tp_dealloc, segment_dealloc},
    {Py_bf_getbuffer, segment_getbuffer},
    {Py_tp_doc, "A batch's shared segment; its views keep it alive."},
    {0, NULL},
};

PyType_Spec flpy_segment_spec = {
    .name = "forkload._forkload.Segment",
    .basicsize = sizeof(flpy_segment),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = segment_slots,
};

/* DLPack: the capsule's tensor keeps the segment until torch (or numpy)
   calls the deleter, from whatever thread frees the tensor. */
static void
dl_deleter(flpy_dl_managed *m)
{
  PyGILState_STATE g;

  if (m == NULL)
    return;
  g = PyGILState_Ensure();
  Py_XDECREF((PyObject *)m->manager_ctx);
  PyGILState_Release(g);
  free(m);
}

static void
capsule_destructor(PyObject *capsule)
{
  flpy_dl_managed *m;

  /* Never handed to a consumer: ours to free. */
  if (!PyCapsule_IsValid(capsule, FLPY_DL_CAPSULE))
    return;
  m = PyCapsule_GetPointer(capsule, FLPY_DL_CAPSULE);
  Py_XDECREF((PyObject *)m->manager_ctx);
  free(m);
}

static const flpy_dl_dtype dl_types[FLPY_NDTYPES] = {
    [FLPY_BOOL] = {FLPY_DL_UINT, 8, 1}, /* torch 1.13 takes no kDLBool */
    [FLPY_UINT8] = {FLPY_DL_UINT, 8, 1},
    [FLPY_INT8] = {FLPY_DL_INT, 8, 1},
    [FLPY_INT16] = {FLPY_DL_INT, 16, 1},
    [FLPY_INT32] = {FLPY_DL_INT, 32, 1},
    [FLPY_INT64] = {FLPY_DL_INT, 64, 1},
    [FLPY_FLOAT16] = {FLPY_DL_FLOAT, 16, 1},
    [FLPY_BFLOAT16] = {FLPY_DL_BFLOAT, 16, 1},
    [FLPY_FLOAT32] = {FLPY_DL_FLOAT, 32, 1},
    [FLPY_FLOAT64] = {FLPY_DL_FLOAT, 64, 1},
    [FLPY_COMPLEX64] = {FLPY_DL_COMPLEX, 64, 1},
    [FLPY_COMPLEX128] = {FLPY_DL_COMPLEX, 128, 1},
};

PyObject *
flpy_capsule_new(PyObject *segment, size_t offset, int dtype,
                 PyObject *shape)
{
  return flpy_capsule_at(segment, flpy_segment_data(segment) + offset, dtype,
                         shape);
}

PyObject *
flpy_capsule_at(PyObject *owner, const void *data, int dtype,
                PyObject *shape)
{
  Py_ssize_t ndim = PyTuple_Size(shape), i;
  flpy_dl_managed *m;
  PyObject *cap;
  int64_t *dims;

  m = calloc(1, sizeof(*m) + (size_t)(ndim ? ndim : 1) * sizeof(int64_t));
  if (m == NULL)
    return PyErr_NoMemory();
  dims = (int64_t *)(m + 1);
  for (i = 0; i < ndim; i++) {
    dims[i] = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
    if (dims[i] == -1 && PyErr_Occurred()) {
      free(m);
      return NULL;
    }
  }
  m->dl_tensor.data = (void *)data;
  m->dl_tensor.device.device_type = FLPY_DL_CPU;
  m->dl_tensor.ndim = (int32_t)ndim;
  m->dl_tensor.dtype = dl_types[dtype];
  m->dl_tensor.shape = dims;
  m->dl_tensor.strides = NULL;
  m->manager_ctx = owner;
  m->deleter = dl_deleter;
  Py_INCREF(owner);
  cap = PyCapsule_New(m, FLPY_DL_CAPSULE, capsule_destructor);
  if (cap == NULL) {
    Py_DECREF(owner);
    free(m);
  }
  return cap;
}

PyObject *
flpy_view_new(flpy_state *st, PyObject *segment, size_t offset, int dtype,
              PyObject *shape)
{
  return flpy_view_at(st, segment, flpy_segment_data(segment) + offset,
                      dtype, shape);
}

PyObject *
flpy_view_at(flpy_state *st, PyObject *owner, const void *data, int dtype,
             PyObject *shape)
{
  Py_ssize_t ndim = PyTuple_Size(shape), i;
  flpy_view *v = PyObject_New(flpy_view, st->view_type);

  if (v == NULL)
    return NULL;
  v->shape = PyMem_Malloc(2 * (size_t)(ndim ? ndim : 1) * sizeof(Py_ssize_t));
  if (v->shape == NULL) {
    v->owner = NULL;
    Py_DECREF(v);
    return PyErr_NoMemory();
  }
  v->strides = v->shape + ndim;
  for (i = 0; i < ndim; i++)
    v->shape[i] = PyLong_AsSsize_t(PyTuple_GetItem(shape, i));
  for (i = ndim - 1; i >= 0; i--)
    v->strides[i] = i == ndim - 1 ? (Py_ssize_t)flpy_dtype_size(dtype)
                                  : v->strides[i + 1] * v->shape[i + 1];
  Py_INCREF(owner);
  v->owner = owner;
  v->data = data;
  v->dtype = dtype;
  v->ndim = (int)ndim;
  return (PyObject *)v;
}

static void
view_dealloc(PyObject *op)
{
  flpy_view *v = (flpy_view *)op;
  PyTypeObject *tp = Py_TYPE(op);

  Py_XDECREF(v->owner);
  PyMem_Free(v->shape);
  PyObject_Free(op);
  Py_DECREF(tp);
}

static int
view_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
  flpy_view *v = (flpy_view *)op;
  const char *fmt = flpy_dtype_format(v->dtype);
  Py_ssize_t len = (Py_ssize_t)flpy_dtype_size(v->dtype);
  int i;

  if (fmt == NULL) {
    PyErr_Format(PyExc_BufferError, "the buffer protocol has no %s: use "
                 "torch.from_dlpack", flpy_dtype_name(v->dtype));
    return -1;
  }
  for (i = 0; i < v->ndim; i++)
    len *= v->shape[i];
  view->buf = (void *)v->data;
  view->obj = Py_NewRef(op);
  view->len = len;
  view->readonly = 0;
  view->itemsize = (Py_ssize_t)flpy_dtype_size(v->dtype);
  view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
  view->ndim = v->ndim;
  view->shape = (flags & PyBUF_ND) ? v->shape : NULL;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? v->strides
                                                           : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  return 0;
}

static PyObject *
view_dlpack(PyObject *op, PyObject *args, PyObject *kwds)
{
  static char *kwlist[] = {"stream", NULL};
  flpy_view *v = (flpy_view *)op;
  PyObject *stream = Py_None, *shape, *cap;
  int i;

  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$O:__dlpack__", kwlist,
                                   &stream))
    return NULL;
  if (stream != Py_None) {
    PyErr_SetString(PyExc_BufferError, "a CPU batch takes no stream");
    return NULL;
  }
  if (v->dtype == FLPY_BOOL) {
    PyErr_SetString(PyExc_BufferError, "DLPack (as torch 1.13 and numpy "
                    "read it) has no bool: use numpy.asarray");
    return NULL;
  }
  shape = PyTuple_New(v->ndim);
  if (shape == NULL)
    return NULL;
  for (i = 0; i < v->ndim; i++) {
    PyObject *d = PyLong_FromSsize_t(v->shape[i]);

    if (d == NULL || PyTuple_SetItem(shape, i, d) != 0) {
      Py_DECREF(shape);
      return NULL;
    }
  }
  cap = flpy_capsule_at(v->owner, v->data, v->dtype, shape);
  Py_DECREF(shape);
  return cap;
}

static PyObject *
view_dlpack_device(PyObject *op, PyObject *unused)
{
  (void)op;
  (void)unused;
  return Py_BuildValue("(ii)", FLPY_DL_CPU, 0);
}

static PyMethodDef view_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))view_dlpack,
     METH_VARARGS | METH_KEYWORDS,
     "A DLPack capsule of this array (torch.from_dlpack, numpy.from_dlpack)."},
    {"__dlpack_device__", view_dlpack_device, METH_NOARGS,
     "(1, 0): the CPU."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot view_slots[] = {
    {Py_tp_dealloc, view_dealloc},
    {Py_bf_getbuffer, view_getbuffer},
    {Py_tp_methods, view_methods},
    {Py_tp_doc, "An array of a batch's segment: the buffer protocol and "
                "DLPack over the same bytes."},
    {0, NULL},
};

PyType_Spec flpy_view_spec = {
    .name = "forkload._forkload.View",
    .basicsize = sizeof(flpy_view),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = view_slots,
};
