/*
 * The View type: one array of a batch, over data that its owner (a
 * Segment) keeps, exporting the buffer protocol (numpy.asarray,
 * memoryview) and DLPack over the same bytes.
 */
#include "module.h"

#include "dlpack.h"

typedef struct {
  PyObject_HEAD
  PyObject *owner; /* a Segment, or what else holds data */
  const unsigned char *data;
  int dtype, ndim;
  Py_ssize_t *shape;
  Py_ssize_t *strides;
} flpy_view;

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
