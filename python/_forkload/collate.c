/*
 * Collation in the worker, as torch's default_collate and default_convert
 * do it, but into the batch's room: every tensor or numeric array is
 * written straight to an aligned place in the segment and stands in the
 * skeleton as a Leaf (offset, dtype, shape, kind); what is not an array
 * (strings, other objects) stays in the skeleton, which is pickled after
 * the arrays.  A custom collate_fn's result goes through the same walk.
 */
#include "module.h"

#include <stdlib.h>
#include <string.h>

#include "dlpack.h"

#define FLPY_MAX_DIMS 64

static const struct {
  const char *name, *format;
  size_t size;
} dtypes[FLPY_NDTYPES] = {
    [FLPY_BOOL] = {"bool", "?", 1},
    [FLPY_UINT8] = {"uint8", "B", 1},
    [FLPY_INT8] = {"int8", "b", 1},
    [FLPY_INT16] = {"int16", "h", 2},
    [FLPY_INT32] = {"int32", "i", 4},
    [FLPY_INT64] = {"int64", "q", 8},
    [FLPY_FLOAT16] = {"float16", "e", 2},
    [FLPY_BFLOAT16] = {"bfloat16", NULL, 2},
    [FLPY_FLOAT32] = {"float32", "f", 4},
    [FLPY_FLOAT64] = {"float64", "d", 8},
    [FLPY_COMPLEX64] = {"complex64", "Zf", 8},
    [FLPY_COMPLEX128] = {"complex128", "Zd", 16},
};

size_t
flpy_dtype_size(int dtype)
{
  return dtypes[dtype].size;
}

const char *
flpy_dtype_format(int dtype)
{
  return dtypes[dtype].format;
}

const char *
flpy_dtype_name(int dtype)
{
  return dtypes[dtype].name;
}

void
flpy_writer_init(flpy_writer *w, void *base, size_t cap)
{
  w->base = base;
  w->cap = cap;
  w->len = sizeof(flpy_blob);
  w->nleaves = 0;
  w->data = 0;
  w->over = 0;
  w->room_at = NULL;
  w->samples = 0;
}

void
flpy_writer_segment(flpy_writer *w, size_t *nbytes, size_t samples)
{
  w->room_at = nbytes;
  w->samples = samples ? samples : 1;
}

/*
 * Past a segment's room: the batch moves to a segment whose room holds
 * `need` bytes (libforkload makes it, admitted first, and moves what was
 * written).  On a failure the writer counts on with nowhere to
 * write, and the batch becomes an error that says why.
 */
static void
grow_segment(flpy_writer *w, size_t need)
{
  void *dst = w->base;
  int rc;

  rc = fl_worker_grow(0, (need + w->samples - 1) / w->samples, &dst);
  if (rc != 0) {
    w->room_at = NULL; /* no second try for this batch */
    return;
  }
  w->base = dst;
  w->cap = *w->room_at * w->samples;
}

int64_t
flpy_writer_reserve(flpy_writer *w, size_t n, unsigned char **at)
{
  size_t off = (w->len + FLPY_ALIGN - 1) & ~(size_t)(FLPY_ALIGN - 1);

  if (off + n > w->cap && w->room_at != NULL && !w->over)
    grow_segment(w, off + n);
  w->len = off + n;
  w->data += n;
  if (w->len > w->cap) {
    w->over = 1;
    *at = NULL;
  } else {
    *at = w->base + off;
  }
  return (int64_t)off;
}

/* One sample's array, wherever it came from: its bytes, type and shape,
   and what keeps them alive until written. */
typedef struct {
  const unsigned char *data;
  int dtype, ndim;
  Py_ssize_t shape[FLPY_MAX_DIMS];
  Py_ssize_t strides[FLPY_MAX_DIMS]; /* in bytes */
  Py_buffer view;
  int has_view;
  PyObject *capsule;
} array_ref;

static void
array_drop(array_ref *a)
{
  if (a->has_view)
    PyBuffer_Release(&a->view);
  a->has_view = 0;
  Py_CLEAR(a->capsule);
}

static const char unsupported_np[] =
    "can't convert np.ndarray of type %U. The only supported types are: "
    "float64, float32, float16, complex64, complex128, int64, int32, int16, "
    "int8, uint8, and bool.";

static const char collate_err[] =
    "default_collate: batch must contain tensors, numpy arrays, numbers, "
    "dicts or lists; found %R";

/* The buffer protocol's format (native order) as a dtype, or -1. */
static int
format_dtype(const char *f, Py_ssize_t itemsize)
{
  if (f == NULL)
    return FLPY_UINT8;
  if (*f == '@' || *f == '=' || *f == '<')
    f++;
  if (strcmp(f, "?") == 0)
    return FLPY_BOOL;
  if (strcmp(f, "B") == 0)
    return FLPY_UINT8;
  if (strcmp(f, "b") == 0)
    return FLPY_INT8;
  if (strcmp(f, "h") == 0)
    return FLPY_INT16;
  if ((strcmp(f, "i") == 0 || strcmp(f, "l") == 0) && itemsize == 4)
    return FLPY_INT32;
  if ((strcmp(f, "l") == 0 || strcmp(f, "q") == 0) && itemsize == 8)
    return FLPY_INT64;
  if (strcmp(f, "e") == 0)
    return FLPY_FLOAT16;
  if (strcmp(f, "f") == 0)
    return FLPY_FLOAT32;
  if (strcmp(f, "d") == 0)
    return FLPY_FLOAT64;
  if (strcmp(f, "Zf") == 0)
    return FLPY_COMPLEX64;
  if (strcmp(f, "Zd") == 0)
    return FLPY_COMPLEX128;
  return -1;
}

static int
dl_dtype(flpy_dl_dtype t)
{
  if (t.lanes != 1)
    return -1;
  switch (t.code) {
  case FLPY_DL_INT:
    return t.bits == 8 ? FLPY_INT8 : t.bits == 16 ? FLPY_INT16
         : t.bits == 32 ? FLPY_INT32 : t.bits == 64 ? FLPY_INT64 : -1;
  case FLPY_DL_UINT:
    return t.bits == 8 ? FLPY_UINT8 : -1;
  case FLPY_DL_FLOAT:
    return t.bits == 16 ? FLPY_FLOAT16 : t.bits == 32 ? FLPY_FLOAT32
         : t.bits == 64 ? FLPY_FLOAT64 : -1;
  case FLPY_DL_BFLOAT:
    return t.bits == 16 ? FLPY_BFLOAT16 : -1;
  case FLPY_DL_COMPLEX:
    return t.bits == 64 ? FLPY_COMPLEX64 : t.bits == 128 ? FLPY_COMPLEX128
                                                         : -1;
  case FLPY_DL_BOOL:
    return t.bits == 8 ? FLPY_BOOL : -1;
  }
  return -1;
}

/* Whether DLPack can take tensor t: strided, and not nested (whose
   __dlpack__ raises torch's internal error).  -1 with an error. */
static int
dlpack_takes(flpy_state *st, PyObject *t)
{
  PyObject *layout, *nested;
  int ok;

  layout = PyObject_GetAttrString(t, "layout");
  if (layout == NULL)
    return -1;
  ok = layout == st->torch_strided;
  Py_DECREF(layout);
  if (!ok)
    return 0;
  nested = PyObject_GetAttrString(t, "is_nested");
  if (nested == NULL)
    return -1;
  ok = nested != Py_True;
  Py_DECREF(nested);
  return ok;
}

/* A CPU tensor through __dlpack__ (bool and tensors that need grad go
   through a uint8 view or detach() first: DLPack takes neither).  A
   nested or sparse one is a TypeError, as a dtype not written here is:
   torch's collate makes it, or it travels pickled. */
static int
tensor_ref(flpy_state *st, PyObject *t, array_ref *a)
{
  PyObject *src = t, *tmp, *dtype = NULL;
  flpy_dl_managed *m;
  int is_bool, rc = -1, i;

  Py_INCREF(src);
  if ((i = dlpack_takes(st, t)) <= 0) {
    if (i == 0)
      PyErr_SetString(PyExc_TypeError, "forkload cannot write a nested or "
                      "sparse tensor");
    goto out;
  }
  dtype = PyObject_GetAttrString(t, "dtype");
  if (dtype == NULL)
    goto out;
  is_bool = dtype == st->torch_bool;
  tmp = PyObject_GetAttrString(t, "requires_grad");
  if (tmp == NULL)
    goto out;
  if (tmp == Py_True) {
    Py_SETREF(src, PyObject_CallMethod(src, "detach", NULL));
    if (src == NULL) {
      Py_DECREF(tmp);
      goto out;
    }
  }
  Py_DECREF(tmp);
  if (is_bool) {
    Py_SETREF(src, PyObject_CallMethod(src, "view", "O", st->torch_uint8));
    if (src == NULL)
      goto out;
  }
  a->capsule = PyObject_CallMethod(src, "__dlpack__", NULL);
  if (a->capsule == NULL)
    goto out;
  m = PyCapsule_GetPointer(a->capsule, FLPY_DL_CAPSULE);
  if (m == NULL)
    goto out;
  if (m->dl_tensor.device.device_type != FLPY_DL_CPU) {
    PyErr_SetString(PyExc_RuntimeError,
                    "a dataset in forkload's workers must return CPU "
                    "tensors (this one is on another device)");
    goto out;
  }
  a->dtype = is_bool ? FLPY_BOOL : dl_dtype(m->dl_tensor.dtype);
  if (a->dtype < 0 || m->dl_tensor.ndim > FLPY_MAX_DIMS) {
    PyErr_Format(PyExc_TypeError, "forkload cannot collate a tensor of "
                 "dtype %R", dtype);
    goto out;
  }
  a->ndim = m->dl_tensor.ndim;
  a->data = (const unsigned char *)m->dl_tensor.data +
            m->dl_tensor.byte_offset;
  for (i = a->ndim - 1; i >= 0; i--) {
    a->shape[i] = (Py_ssize_t)m->dl_tensor.shape[i];
    if (m->dl_tensor.strides != NULL)
      a->strides[i] = (Py_ssize_t)m->dl_tensor.strides[i] *
                      (Py_ssize_t)dtypes[a->dtype].size;
    else
      a->strides[i] = i == a->ndim - 1
                          ? (Py_ssize_t)dtypes[a->dtype].size
                          : a->strides[i + 1] * a->shape[i + 1];
  }
  rc = 0;
out:
  Py_XDECREF(dtype);
  Py_XDECREF(src);
  return rc;
}

/* A numpy array or scalar through the buffer protocol. */
static int
buffer_ref(PyObject *obj, array_ref *a)
{
  PyObject *dt;
  int i;

  if (PyObject_GetBuffer(obj, &a->view, PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();
    dt = PyObject_GetAttrString(obj, "dtype");
    if (dt == NULL)
      return -1;
    PyErr_Format(PyExc_TypeError, collate_err, dt);
    Py_DECREF(dt);
    return -1;
  }
  a->has_view = 1;
  a->dtype = format_dtype(a->view.format, a->view.itemsize);
  if (a->dtype < 0 || (size_t)a->view.itemsize != dtypes[a->dtype].size) {
    dt = PyObject_GetAttrString(obj, "dtype");
    if (dt != NULL) {
      PyObject *s = PyObject_Str(dt);
      if (s != NULL) {
        /* Strings and objects are default_collate's error; other
           numbers are torch.as_tensor's. */
        if (strchr("SaUOV", a->view.format[strspn(a->view.format,
                                                  "@=<>!")]))
          PyErr_Format(PyExc_TypeError, collate_err, dt);
        else
          PyErr_Format(PyExc_TypeError, unsupported_np, s);
        Py_DECREF(s);
      }
      Py_DECREF(dt);
    }
    return -1;
  }
  a->ndim = a->view.ndim;
  a->data = a->view.buf;
  for (i = 0; i < a->ndim; i++) {
    a->shape[i] = a->view.shape[i];
    a->strides[i] = a->view.strides[i];
  }
  return 0;
}

static int
is_tensor(flpy_state *st, PyObject *o)
{
  return st->tensor_type != Py_None &&
         PyObject_TypeCheck(o, (PyTypeObject *)st->tensor_type);
}

static int
is_ndarray(flpy_state *st, PyObject *o)
{
  return st->ndarray_type != Py_None &&
         PyObject_TypeCheck(o, (PyTypeObject *)st->ndarray_type);
}

static int
is_np_scalar(flpy_state *st, PyObject *o)
{
  return st->np_generic != Py_None &&
         PyObject_TypeCheck(o, (PyTypeObject *)st->np_generic) &&
         !PyUnicode_Check(o) && !PyBytes_Check(o);
}

/* o's array into a; on failure nothing is left held (a DLPack capsule
   or a buffer view taken before the dtype was refused keeps the sample
   alive: the fallback to torch's collate would leak it). */
static int
array_of(flpy_state *st, PyObject *o, array_ref *a)
{
  int rc;

  memset(a, 0, sizeof(*a));
  rc = is_tensor(st, o) ? tensor_ref(st, o, a) : buffer_ref(o, a);
  if (rc != 0)
    array_drop(a);
  return rc;
}

/* Copy an array of any strides to dst, C-contiguous. */
static void
copy_strided(unsigned char *dst, const unsigned char *src, int ndim,
             const Py_ssize_t *shape, const Py_ssize_t *strides,
             size_t itemsize)
{
  Py_ssize_t i;
  size_t inner = itemsize;
  int d, contiguous = 1;

  for (d = ndim - 1; d >= 0; d--) {
    if (shape[d] != 1 && strides[d] != (Py_ssize_t)inner)
      contiguous = 0;
    inner *= (size_t)shape[d];
  }
  /* An empty array has nothing to copy, and DLPack may give it no data
     pointer at all. */
  if (inner == 0)
    return;
  if (contiguous) {
    memcpy(dst, src, inner);
    return;
  }
  if (ndim == 0) {
    memcpy(dst, src, itemsize);
    return;
  }
  inner /= (size_t)(shape[0] ? shape[0] : 1);
  for (i = 0; i < shape[0]; i++)
    copy_strided(dst + (size_t)i * inner, src + i * strides[0], ndim - 1,
                 shape + 1, strides + 1, itemsize);
}

static size_t
array_bytes(const array_ref *a)
{
  size_t n = dtypes[a->dtype].size;
  int d;

  for (d = 0; d < a->ndim; d++)
    n *= (size_t)a->shape[d];
  return n;
}

static PyObject *
shape_tuple(Py_ssize_t lead, const Py_ssize_t *shape, int ndim)
{
  PyObject *t = PyTuple_New(ndim + (lead >= 0));
  PyObject *v;
  int i, k = 0;

  if (t == NULL)
    return NULL;
  if (lead >= 0) {
    v = PyLong_FromSsize_t(lead);
    if (v == NULL || PyTuple_SetItem(t, k++, v) != 0)
      goto fail;
  }
  for (i = 0; i < ndim; i++) {
    v = PyLong_FromSsize_t(shape[i]);
    if (v == NULL || PyTuple_SetItem(t, k++, v) != 0)
      goto fail;
  }
  return t;
fail:
  Py_DECREF(t);
  return NULL;
}

static PyObject *
leaf_new(flpy_state *st, int64_t offset, int dtype, PyObject *shape,
         int kind)
{
  PyObject *args, *leaf;

  if (shape == NULL)
    return NULL;
  args = Py_BuildValue("((LiOi))", (long long)offset, dtype, shape, kind);
  Py_DECREF(shape);
  if (args == NULL)
    return NULL;
  leaf = PyObject_Call(st->leaf_type, args, NULL);
  Py_DECREF(args);
  return leaf;
}

/* torch.Size's text, for torch.stack's message. */
static PyObject *
shape_text(const array_ref *a)
{
  PyObject *t = shape_tuple(-1, a->shape, a->ndim), *list, *s;

  if (t == NULL)
    return NULL;
  list = PySequence_List(t);
  Py_DECREF(t);
  if (list == NULL)
    return NULL;
  s = PyObject_Repr(list);
  Py_DECREF(list);
  return s;
}

static void
stack_mismatch(const array_ref *first, const array_ref *a, Py_ssize_t i)
{
  PyObject *s0 = shape_text(first), *si = shape_text(a);

  if (s0 != NULL && si != NULL)
    PyErr_Format(PyExc_RuntimeError,
                 "stack expects each tensor to be equal size, but got %U at "
                 "entry 0 and %U at entry %zd", s0, si, i);
  Py_XDECREF(s0);
  Py_XDECREF(si);
}

static int
same_shape(const array_ref *x, const array_ref *y)
{
  return x->ndim == y->ndim &&
         memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof(*x->shape)) ==
             0;
}

/* Stack the samples' arrays (tensors, numpy arrays or scalars) into one
   array of the first one's dtype: torch.stack's contract. */
static PyObject *
stack_arrays(flpy_state *st, PyObject *samples, flpy_writer *w)
{
  Py_ssize_t n = PyList_Size(samples), i;
  array_ref first, a;
  unsigned char *at;
  size_t each;
  int64_t off;
  PyObject *leaf = NULL;

  if (array_of(st, PyList_GetItem(samples, 0), &first) != 0)
    return NULL;
  each = array_bytes(&first);
  off = flpy_writer_reserve(w, each * (size_t)n, &at);
  for (i = 0; i < n; i++) {
    PyObject *o = PyList_GetItem(samples, i), *name;

    if (i == 0) {
      a = first;
    } else {
      if (!is_tensor(st, o) && !is_ndarray(st, o) && !is_np_scalar(st, o)) {
        name = flpy_type_name(o);
        if (name != NULL)
          PyErr_Format(PyExc_TypeError, "expected Tensor as element %zd in "
                       "argument 0, but got %U", i, name);
        Py_XDECREF(name);
        goto out;
      }
      if (array_of(st, o, &a) != 0)
        goto out;
      if (!same_shape(&first, &a) || a.dtype != first.dtype) {
        if (!same_shape(&first, &a))
          stack_mismatch(&first, &a, i);
        else
          PyErr_Format(PyExc_RuntimeError,
                       "stack expects each tensor to have one dtype, but "
                       "got %s at entry 0 and %s at entry %zd",
                       dtypes[first.dtype].name, dtypes[a.dtype].name, i);
        array_drop(&a);
        goto out;
      }
    }
    if (at != NULL)
      copy_strided(at + (size_t)i * each, a.data, a.ndim, a.shape,
                   a.strides, dtypes[a.dtype].size);
    if (i > 0)
      array_drop(&a);
  }
  w->nleaves++;
  leaf = leaf_new(st, off, first.dtype, shape_tuple(n, first.shape,
                                                      first.ndim),
                  FLPY_LEAF_TENSOR);
out:
  array_drop(&first);
  return leaf;
}

/* One array (not stacked): default_convert's and a collate_fn's. */
static PyObject *
write_array(flpy_state *st, PyObject *o, int kind, flpy_writer *w)
{
  array_ref a;
  unsigned char *at;
  int64_t off;
  PyObject *leaf = NULL;

  if (array_of(st, o, &a) != 0)
    return NULL;
  off = flpy_writer_reserve(w, array_bytes(&a), &at);
  if (at != NULL)
    copy_strided(at, a.data, a.ndim, a.shape, a.strides,
                 dtypes[a.dtype].size);
  w->nleaves++;
  leaf = leaf_new(st, off, a.dtype, shape_tuple(-1, a.shape, a.ndim), kind);
  array_drop(&a);
  return leaf;
}

/* Python numbers, as torch.tensor(batch) makes them: float64 for floats;
   bool when all are bools, float32 (torch's default) when some int is
   followed by a float, else int64. */
static PyObject *
stack_numbers(flpy_state *st, PyObject *samples, int is_float,
              flpy_writer *w)
{
  Py_ssize_t n = PyList_Size(samples), i;
  int dtype = is_float ? FLPY_FLOAT64 : FLPY_BOOL;
  unsigned char *at;
  int64_t off;

  for (i = 0; i < n && !is_float; i++) {
    PyObject *o = PyList_GetItem(samples, i);

    if (PyFloat_Check(o))
      dtype = FLPY_FLOAT32;
    else if (!PyBool_Check(o) && dtype == FLPY_BOOL)
      dtype = FLPY_INT64;
  }
  off = flpy_writer_reserve(w, (size_t)n * dtypes[dtype].size, &at);
  for (i = 0; i < n; i++) {
    PyObject *o = PyList_GetItem(samples, i), *name;

    if (!PyFloat_Check(o) && !PyLong_Check(o)) {
      name = flpy_type_name(o);
      if (name != NULL)
        PyErr_Format(PyExc_TypeError, "must be real number, not %U", name);
      Py_XDECREF(name);
      return NULL;
    }
    if (dtype == FLPY_FLOAT64 || dtype == FLPY_FLOAT32) {
      double v = PyFloat_AsDouble(o);
      float f = (float)v;

      if (v == -1.0 && PyErr_Occurred())
        return NULL;
      if (at != NULL && dtype == FLPY_FLOAT64)
        memcpy(at + (size_t)i * 8, &v, 8);
      else if (at != NULL)
        memcpy(at + (size_t)i * 4, &f, 4);
    } else {
      long long v = PyLong_AsLongLong(o);

      if (v == -1 && PyErr_Occurred())
        return NULL;
      if (at != NULL && dtype == FLPY_INT64)
        memcpy(at + (size_t)i * 8, &v, 8);
      else if (at != NULL)
        at[i] = v != 0;
    }
  }
  w->nleaves++;
  {
    Py_ssize_t shape = n;
    return leaf_new(st, off, dtype, shape_tuple(-1, &shape, 1),
                    FLPY_LEAF_TENSOR);
  }
}

static int
is_namedtuple(PyObject *o)
{
  return PyTuple_Check(o) && !PyTuple_CheckExact(o) &&
         PyObject_HasAttrString(o, "_fields");
}

/* The container of elem's type over arg (a dict or a list, stolen), as
   the installed torch's default_collate makes it (forkload._worker.like):
   torch 1.13's type(elem)(arg), torch 2's copy of a mutable elem with
   arg's values set in it, or arg itself where that fails. */
static PyObject *
same_type_or(flpy_state *st, PyObject *elem, PyObject *arg)
{
  PyObject *r = PyObject_CallFunctionObjArgs(st->w_like, elem, arg, NULL);

  Py_DECREF(arg);
  return r;
}

/* Column i of the samples: [s[i] for s in samples], s[key] for a key. */
static PyObject *
column(PyObject *samples, PyObject *key, Py_ssize_t i)
{
  Py_ssize_t n = PyList_Size(samples), k;
  PyObject *col = PyList_New(n), *v;

  if (col == NULL)
    return NULL;
  for (k = 0; k < n; k++) {
    PyObject *s = PyList_GetItem(samples, k);

    v = key != NULL ? PyObject_GetItem(s, key) : PySequence_GetItem(s, i);
    if (v == NULL || PyList_SetItem(col, k, v) != 0) {
      Py_DECREF(col);
      return NULL;
    }
  }
  return col;
}

static PyObject *collate_list(flpy_state *st, PyObject *samples,
                              int from_tuple, flpy_writer *w);

/*
 * What the C path could not make of an array (a dtype it does not write,
 * a sparse or nested tensor, samples that do not stack), made or refused
 * by the installed torch's own default_collate or default_convert
 * (forkload._worker.torch_collate, torch_convert), with the error just
 * raised cleared: torch 2 collates uint16, uint32, uint64, float8 and
 * complex32 that torch 1.13 refuses, and each says why in its own words.
 * The result travels pickled in the skeleton.  Without torch, the error
 * stands.
 */
static PyObject *
torch_instead(flpy_state *st, PyObject *how, PyObject *arg)
{
  PyObject *exc;

  if (st->tensor_type == Py_None)
    return NULL;
  exc = flpy_take_exception();
  Py_XDECREF(exc);
  return flpy_call1(how, arg);
}

static PyObject *
collate_mapping(flpy_state *st, PyObject *samples, flpy_writer *w)
{
  PyObject *elem = PyList_GetItem(samples, 0);
  PyObject *out = PyDict_New(), *keys = NULL, *key, *col, *v;
  Py_ssize_t i;

  if (out == NULL)
    return NULL;
  keys = PySequence_List(elem);
  if (keys == NULL)
    goto fail;
  for (i = 0; i < PyList_Size(keys); i++) {
    key = PyList_GetItem(keys, i);
    col = column(samples, key, 0);
    if (col == NULL)
      goto fail;
    v = collate_list(st, col, 0, w);
    Py_DECREF(col);
    if (v == NULL || PyDict_SetItem(out, key, v) != 0) {
      Py_XDECREF(v);
      goto fail;
    }
    Py_DECREF(v);
  }
  Py_DECREF(keys);
  return PyDict_CheckExact(elem) ? out : same_type_or(st, elem, out);
fail:
  Py_XDECREF(keys);
  Py_DECREF(out);
  return NULL;
}

static PyObject *
collate_sequence(flpy_state *st, PyObject *samples, flpy_writer *w)
{
  PyObject *elem = PyList_GetItem(samples, 0), *out, *col, *v, *r;
  Py_ssize_t n = PyList_Size(samples), len, i;

  len = PySequence_Size(elem);
  if (len < 0)
    return NULL;
  for (i = 1; i < n; i++) {
    Py_ssize_t li = PySequence_Size(PyList_GetItem(samples, i));

    if (li < 0)
      return NULL;
    if (li != len) {
      PyErr_SetString(PyExc_RuntimeError,
                      "each element in list of batch should be of equal "
                      "size");
      return NULL;
    }
  }
  out = PyList_New(len);
  if (out == NULL)
    return NULL;
  for (i = 0; i < len; i++) {
    col = column(samples, NULL, i);
    if (col == NULL)
      goto fail;
    /* A column of zip(*batch): a tuple, as torch's strings keep it. */
    v = collate_list(st, col, 1, w);
    Py_DECREF(col);
    if (v == NULL || PyList_SetItem(out, i, v) != 0)
      goto fail;
  }
  if (is_namedtuple(elem)) {
    v = PyList_AsTuple(out);
    Py_DECREF(out);
    if (v == NULL)
      return NULL;
    r = PyObject_CallObject((PyObject *)Py_TYPE(elem), v);
    Py_DECREF(v);
    return r;
  }
  if (PyTuple_Check(elem) || PyList_CheckExact(elem))
    return out;
  return same_type_or(st, elem, out);
fail:
  Py_DECREF(out);
  return NULL;
}

static PyObject *
collate_list(flpy_state *st, PyObject *samples, int from_tuple,
             flpy_writer *w)
{
  PyObject *elem = PyList_GetItem(samples, 0);
  int r;

  if (is_tensor(st, elem) || is_ndarray(st, elem) ||
      is_np_scalar(st, elem)) {
    PyObject *stacked = stack_arrays(st, samples, w);

    return stacked != NULL ? stacked
                           : torch_instead(st, st->w_torch_collate, samples);
  }
  if (PyFloat_Check(elem))
    return stack_numbers(st, samples, 1, w);
  if (PyLong_Check(elem))
    return stack_numbers(st, samples, 0, w);
  if (PyUnicode_Check(elem) || PyBytes_Check(elem)) {
    if (from_tuple)
      return PyList_AsTuple(samples);
    Py_INCREF(samples);
    return samples;
  }
  if ((r = PyObject_IsInstance(elem, st->mapping_abc)) != 0)
    return r < 0 ? NULL : collate_mapping(st, samples, w);
  if ((r = PyObject_IsInstance(elem, st->sequence_abc)) != 0)
    return r < 0 ? NULL : collate_sequence(st, samples, w);
  PyErr_Format(PyExc_TypeError, collate_err, (PyObject *)Py_TYPE(elem));
  return NULL;
}

PyObject *
flpy_collate(flpy_state *st, PyObject *samples, flpy_writer *w)
{
  PyObject *list = PySequence_List(samples), *r;

  if (list == NULL)
    return NULL;
  if (PyList_Size(list) == 0) {
    PyErr_SetString(PyExc_IndexError, "list index out of range");
    Py_DECREF(list);
    return NULL;
  }
  r = collate_list(st, list, PyTuple_Check(samples), w);
  Py_DECREF(list);
  return r;
}

/* Each item of a container, converted, in a new list. */
static PyObject *
convert_items(flpy_state *st, PyObject *seq, int custom, flpy_writer *w)
{
  PyObject *list = PySequence_List(seq), *v;
  Py_ssize_t i;

  if (list == NULL)
    return NULL;
  for (i = 0; i < PyList_Size(list); i++) {
    v = flpy_convert(st, PyList_GetItem(list, i), custom, w);
    if (v == NULL || PyList_SetItem(list, i, v) != 0) {
      Py_DECREF(list);
      return NULL;
    }
  }
  return list;
}

/*
 * default_convert (custom 0): tensors and numeric numpy arrays and scalars
 * become tensors, containers are walked as torch walks them.  A
 * collate_fn's result (custom 1): tensors stay tensors and numpy arrays
 * stay arrays, dicts, lists, tuples and namedtuples are walked, anything
 * else travels pickled, as it would through PyTorch's queues.
 */
PyObject *
flpy_convert(flpy_state *st, PyObject *o, int custom, flpy_writer *w)
{
  PyObject *items, *r, *d, *item, *k, *v;
  Py_ssize_t pos = 0;
  int is_map;

  if (is_tensor(st, o) || is_ndarray(st, o) ||
      (!custom && is_np_scalar(st, o))) {
    r = write_array(st, o, custom && !is_tensor(st, o) ? FLPY_LEAF_NDARRAY
                                                       : FLPY_LEAF_TENSOR,
                    w);
    if (r != NULL)
      return r;
    /* default_convert: torch's own (arrays of strings or objects stay as
       they are, other dtypes are as_tensor's); a collate_fn's array of a
       dtype or layout not written here travels pickled, as it would
       through PyTorch's queues. */
    if (!custom && st->tensor_type != Py_None)
      return torch_instead(st, st->w_torch_convert, o);
    if (PyErr_ExceptionMatches(PyExc_TypeError) ||
        (custom && PyErr_ExceptionMatches(PyExc_BufferError))) {
      PyErr_Clear();
      if (is_tensor(st, o))
        return flpy_call1(st->w_carried, o);
      Py_INCREF(o);
      return o;
    }
    return NULL;
  }
  /* numpy.bytes_ is not a string to default_convert, which gives it to
     torch.as_tensor (and fails). */
  if (!custom && PyBytes_Check(o) && st->tensor_type != Py_None &&
      st->np_generic != Py_None &&
      PyObject_TypeCheck(o, (PyTypeObject *)st->np_generic))
    return flpy_call1(st->w_torch_convert, o);
  if (PyUnicode_Check(o) || PyBytes_Check(o) || PyLong_Check(o) ||
      PyFloat_Check(o) || o == Py_None) {
    Py_INCREF(o);
    return o;
  }
  is_map = custom ? PyDict_CheckExact(o) : PyObject_IsInstance(o, st->mapping_abc);
  if (is_map < 0)
    return NULL;
  if (is_map) {
    d = PyDict_New();
    if (d == NULL)
      return NULL;
    items = PyMapping_Items(o);
    if (items == NULL)
      goto fail_map;
    for (pos = 0; pos < PyList_Size(items); pos++) {
      /* (key, value); a mapping whose items() gives else raises. */
      item = PyList_GetItem(items, pos);
      k = PyTuple_GetItem(item, 0);
      v = k == NULL ? NULL : PyTuple_GetItem(item, 1);
      if (v != NULL)
        v = flpy_convert(st, v, custom, w);
      if (v == NULL || PyDict_SetItem(d, k, v) != 0) {
        Py_XDECREF(v);
        Py_DECREF(items);
        goto fail_map;
      }
      Py_DECREF(v);
    }
    Py_DECREF(items);
    return PyDict_CheckExact(o) ? d : same_type_or(st, o, d);
  fail_map:
    Py_DECREF(d);
    return NULL;
  }
  if (is_namedtuple(o)) {
    items = convert_items(st, o, custom, w);
    if (items == NULL)
      return NULL;
    d = PyList_AsTuple(items);
    Py_DECREF(items);
    if (d == NULL)
      return NULL;
    r = PyObject_CallObject((PyObject *)Py_TYPE(o), d);
    Py_DECREF(d);
    return r;
  }
  if (PyTuple_CheckExact(o) || PyList_CheckExact(o) ||
      (!custom && PyTuple_Check(o))) {
    items = convert_items(st, o, custom, w);
    /* default_convert makes lists of tuples (of any type but a
       namedtuple's); a collate_fn's stay. */
    if (items == NULL || PyList_CheckExact(o) || !custom)
      return items;
    r = PyList_AsTuple(items);
    Py_DECREF(items);
    return r;
  }
  if (!custom) {
    int is_seq = PyObject_IsInstance(o, st->sequence_abc);

    if (is_seq < 0)
      return NULL;
    if (is_seq) {
      items = convert_items(st, o, custom, w);
      return items == NULL ? NULL : same_type_or(st, o, items);
    }
  }
  Py_INCREF(o);
  return o;
}

int
flpy_blob_finish(flpy_state *st, flpy_writer *w, PyObject *skeleton,
                 int kind)
{
  PyObject *bytes;
  char *skel;
  Py_ssize_t len;
  unsigned char *at;
  int64_t off;
  flpy_blob *h;

  if (kind != FLPY_BLOB_BATCH) {
    bytes = skeleton;
    Py_INCREF(bytes);
  } else {
    bytes = PyObject_CallFunction(st->dumps, "Oi", skeleton, 4);
    if (bytes == NULL)
      return -1;
  }
  if (PyBytes_AsStringAndSize(bytes, &skel, &len) != 0) {
    Py_DECREF(bytes);
    return -1;
  }
  off = flpy_writer_reserve(w, (size_t)len, &at);
  if (at != NULL)
    memcpy(at, skel, (size_t)len);
  if (!w->over) {
    h = (flpy_blob *)w->base;
    memset(h, 0, sizeof(*h));
    h->magic = FLPY_MAGIC;
    h->kind = (uint32_t)kind;
    h->len = w->len;
    h->skel_off = (uint64_t)off;
    h->skel_len = (uint64_t)len;
    h->nleaves = w->nleaves;
    h->data_bytes = w->data - h->skel_len;
  }
  Py_DECREF(bytes);
  return 0;
}
