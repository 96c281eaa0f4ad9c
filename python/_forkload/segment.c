/*
 * The Segment type: one received batch.  Every tensor or array made from
 * the batch holds a reference to its Segment (a DLPack capsule's manager
 * context, or a View's owner), and the batch goes back to libforkload
 * when the last of them is gone.  Its Loader, which holds the releaser,
 * stays alive as long as it does.
 */
#include "module.h"

typedef struct {
  PyObject_HEAD
  PyObject *loader;
  flpy_releaser *releaser; /* the loader's */
  fl_batch *batch;
  const unsigned char *data;
} flpy_segment;

PyObject *
flpy_segment_new(flpy_state *st, PyObject *loader, flpy_releaser *r,
                 fl_batch *b)
{
  flpy_segment *s = PyObject_New(flpy_segment, st->segment_type);

  if (s == NULL) {
    flpy_release(r, b);
    return NULL;
  }
  s->loader = Py_NewRef(loader);
  s->releaser = r;
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

  flpy_release(s->releaser, s->batch);
  Py_DECREF(s->loader);
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
