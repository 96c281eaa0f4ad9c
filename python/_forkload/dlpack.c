/*
 * DLPack capsules over a batch's arrays: torch.from_dlpack and
 * numpy.from_dlpack take them without a copy, and the capsule's tensor
 * keeps what holds the data (a Segment) until its deleter runs.
 */
#include "module.h"

#include <stdlib.h>

#include "dlpack.h"

/* Called by torch (or numpy) from whatever thread frees the tensor. */
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
