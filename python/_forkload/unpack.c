/*
 * The consumer's side of a blob: unpickle the skeleton (or reuse the last
 * one, when the worker wrote the same bytes, as it does for every batch of
 * fixed-shape samples, and nothing of it would be shared by two batches),
 * then rebuild it with each Leaf replaced by a view
 * of the segment: a torch tensor through DLPack, or a numpy array through
 * the buffer protocol.  An error blob raises its exception instead.
 */
#include "module.h"

#include <string.h>

/* An array of dtype and shape over data, which owner keeps alive: a torch
   tensor through DLPack, or a numpy array (a View where numpy is
   missing) through the buffer protocol. */
PyObject *
flpy_array_at(const flpy_unpacker *u, PyObject *owner, const void *data,
              int dtype, PyObject *shape)
{
  flpy_state *st = flpy_state_of(u->module);
  PyObject *obj, *t;

  if (u->tensor_type == FLPY_LEAF_TENSOR && st->from_dlpack != Py_None) {
    obj = flpy_capsule_at(owner, data, dtype, shape);
    if (obj == NULL)
      return NULL;
    t = flpy_call1(st->from_dlpack, obj);
    Py_DECREF(obj);
    if (t != NULL && dtype == FLPY_BOOL)
      Py_SETREF(t, PyObject_CallMethod(t, "view", "O", st->torch_bool));
    return t;
  }
  obj = flpy_view_at(st, owner, data, dtype, shape);
  if (obj == NULL || st->np_asarray == Py_None)
    return obj;
  t = flpy_call1(st->np_asarray, obj);
  Py_DECREF(obj);
  return t;
}

/* Whether a leaf's array lies among the blob's arrays (after its header,
   before its skeleton): a skeleton is the worker's word, checked before
   a view is made of it. */
static int
leaf_fits(PyObject *segment, long long off, int dtype, PyObject *shape)
{
  const flpy_blob *h = (const flpy_blob *)flpy_segment_data(segment);
  uint64_t bytes = flpy_dtype_size(dtype), dim;
  Py_ssize_t i, n = PyTuple_Size(shape);
  int overflow = 0, empty = 0;

  /* An empty array (a dimension of 0) has no bytes, whatever the other
     dimensions are. */
  for (i = 0; i < n; i++) {
    dim = PyLong_AsUnsignedLongLong(PyTuple_GetItem(shape, i));
    if (PyErr_Occurred())
      return 0;
    empty |= dim == 0;
    overflow |= __builtin_mul_overflow(bytes, dim, &bytes);
  }
  if (empty)
    bytes = 0;
  else if (overflow)
    return 0;
  return off >= (long long)sizeof(flpy_blob) &&
         (uint64_t)off <= h->skel_off && bytes <= h->skel_off - (uint64_t)off;
}

static PyObject *
leaf_view(flpy_unpacker *u, flpy_state *st, PyObject *segment,
          PyObject *leaf)
{
  PyObject *shape, *obj, *t;
  long long off;
  int dtype, kind;

  /* A Leaf is a tuple of four; a malformed one raises here. */
  if ((obj = PyTuple_GetItem(leaf, 0)) == NULL)
    return NULL;
  off = PyLong_AsLongLong(obj);
  if ((obj = PyTuple_GetItem(leaf, 1)) == NULL)
    return NULL;
  dtype = (int)PyLong_AsLong(obj);
  if ((shape = PyTuple_GetItem(leaf, 2)) == NULL ||
      (obj = PyTuple_GetItem(leaf, 3)) == NULL)
    return NULL;
  kind = (int)PyLong_AsLong(obj);
  if (PyErr_Occurred())
    return NULL;
  if (dtype < 0 || dtype >= FLPY_NDTYPES || !PyTuple_Check(shape) ||
      !leaf_fits(segment, off, dtype, shape)) {
    PyErr_Clear();
    PyErr_SetString(PyExc_RuntimeError, "forkload: a malformed batch (an "
                    "array outside its segment's arrays)");
    return NULL;
  }
  if (kind == FLPY_LEAF_TENSOR)
    return flpy_array_at(u, segment, flpy_segment_data(segment) + off,
                         dtype, shape);
  obj = flpy_view_at(st, segment, flpy_segment_data(segment) + off, dtype,
                     shape);
  if (obj == NULL || st->np_asarray == Py_None)
    return obj;
  t = flpy_call1(st->np_asarray, obj);
  Py_DECREF(obj);
  return t;
}

static PyObject *rebuild(flpy_unpacker *u, flpy_state *st,
                         PyObject *segment, PyObject *o);

static PyObject *
rebuild_items(flpy_unpacker *u, flpy_state *st, PyObject *segment,
              PyObject *seq)
{
  PyObject *list = PySequence_List(seq), *v;
  Py_ssize_t i;

  if (list == NULL)
    return NULL;
  for (i = 0; i < PyList_Size(list); i++) {
    v = rebuild(u, st, segment, PyList_GetItem(list, i));
    if (v == NULL || PyList_SetItem(list, i, v) != 0) {
      Py_DECREF(list);
      return NULL;
    }
  }
  return list;
}

/* A container of the template's type over new contents (stolen), as the
   worker built it (collate.c's same_type_or: forkload._worker.like). */
static PyObject *
retype(flpy_state *st, PyObject *like, PyObject *contents)
{
  PyObject *r = PyObject_CallFunctionObjArgs(st->w_like, like, contents,
                                             Py_True, NULL);

  Py_DECREF(contents);
  return r;
}

/* Another Mapping or Sequence than dict, list and tuple (its items may be
   arrays, as the worker built it over them): the same type over the
   items rebuilt, or o itself where none was an array. */
static PyObject *
rebuild_other(flpy_unpacker *u, flpy_state *st, PyObject *segment,
              PyObject *o, int is_map)
{
  PyObject *items, *out, *v, *k;
  Py_ssize_t i, n;
  int changed = 0;

  items = is_map ? PyMapping_Items(o) : PySequence_List(o);
  if (items == NULL)
    return NULL;
  n = PyList_Size(items);
  out = is_map ? PyDict_New() : PyList_New(n);
  if (out == NULL)
    goto fail;
  for (i = 0; i < n; i++) {
    /* Borrowed, from a list this function owns; a mapping's item is a
       (key, value) pair. */
    PyObject *item = PyList_GetItem(items, i), *value = item;

    k = NULL;
    if (item != NULL && is_map) {
      k = PyTuple_GetItem(item, 0);
      value = PyTuple_GetItem(item, 1);
    }
    if (value == NULL || (is_map && k == NULL))
      goto fail;
    v = rebuild(u, st, segment, value);
    if (v == NULL)
      goto fail;
    changed |= v != value;
    if (is_map) {
      int rc = PyDict_SetItem(out, k, v);

      Py_DECREF(v);
      if (rc != 0)
        goto fail;
    } else if (PyList_SetItem(out, i, v) != 0) {
      goto fail;
    }
  }
  Py_DECREF(items);
  if (!changed) {
    Py_DECREF(out);
    Py_INCREF(o);
    return o;
  }
  return retype(st, o, out);
fail:
  Py_DECREF(items);
  Py_XDECREF(out);
  return NULL;
}

static PyObject *
rebuild(flpy_unpacker *u, flpy_state *st, PyObject *segment, PyObject *o)
{
  PyObject *d, *k, *v, *items, *t;
  Py_ssize_t pos = 0;

  if (Py_IS_TYPE(o, (PyTypeObject *)st->leaf_type))
    return leaf_view(u, st, segment, o);
  /* torch's collation of a column, carried as it is by a batch that was
     never pickled (FLPY_BLOB_INLINE). */
  if (Py_IS_TYPE(o, (PyTypeObject *)st->bytes_type))
    return PyObject_GetAttrString(o, "tensor");
  if (PyDict_Check(o)) {
    d = PyDict_New();
    if (d == NULL)
      return NULL;
    while (PyDict_Next(o, &pos, &k, &v)) {
      PyObject *r = rebuild(u, st, segment, v);

      if (r == NULL || PyDict_SetItem(d, k, r) != 0) {
        Py_XDECREF(r);
        Py_DECREF(d);
        return NULL;
      }
      Py_DECREF(r);
    }
    return PyDict_CheckExact(o) ? d : retype(st, o, d);
  }
  /* A tuple of another type than tuple and namedtuple (torch.Size in a
     collate_fn's result) holds no array: neither walk goes into one. */
  if (PyTuple_Check(o) && !PyTuple_CheckExact(o) &&
      !PyObject_HasAttrString(o, "_fields")) {
    Py_INCREF(o);
    return o;
  }
  if (PyList_Check(o) || PyTuple_Check(o)) {
    items = rebuild_items(u, st, segment, o);
    if (items == NULL || PyList_CheckExact(o))
      return items;
    if (PyList_Check(o))
      return retype(st, o, items);
    t = PyList_AsTuple(items);
    Py_DECREF(items);
    if (t == NULL || PyTuple_CheckExact(o))
      return t;
    /* A namedtuple. */
    Py_SETREF(t, PyObject_CallObject((PyObject *)Py_TYPE(o), t));
    return t;
  }
  if (!PyUnicode_Check(o) && !PyBytes_Check(o) && !PyByteArray_Check(o)) {
    int is_map = PyObject_IsInstance(o, st->mapping_abc), is_seq = 0;

    if (is_map == 0)
      is_seq = PyObject_IsInstance(o, st->sequence_abc);
    if (is_map < 0 || is_seq < 0)
      return NULL;
    if (is_map || is_seq)
      return rebuild_other(u, st, segment, o, is_map);
  }
  Py_INCREF(o);
  return o;
}

/* Whether a template may serve again for the next batch of the same
   skeleton: only where every part of it is rebuilt (dicts, lists, tuples)
   or immutable, for a reused leaf would be one object in two batches (a
   set, a metadata object edited through batch 0 changes batch 1). */
static int
reusable(flpy_state *st, PyObject *o)
{
  PyObject *k, *v, *fast;
  Py_ssize_t pos = 0, i, n;
  int ok;

  if (o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) ||
      PyFloat_CheckExact(o) || PyComplex_CheckExact(o) ||
      PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) ||
      Py_IS_TYPE(o, (PyTypeObject *)st->leaf_type))
    return 1;
  if (PyDict_CheckExact(o)) {
    while (PyDict_Next(o, &pos, &k, &v))
      if (!reusable(st, k) || !reusable(st, v))
        return 0;
    return 1;
  }
  /* A tuple's subclass (a namedtuple, torch.Size) without a __dict__ is
     as immutable as its items. */
  if (!PyList_CheckExact(o) &&
      !(PyTuple_Check(o) && !PyObject_HasAttrString(o, "__dict__")))
    return 0;
  fast = PySequence_Fast(o, "");
  if (fast == NULL) {
    PyErr_Clear();
    return 0;
  }
  n = flpy_fast_size(fast);
  for (i = 0, ok = 1; i < n && ok; i++)
    ok = reusable(st, flpy_fast_item(fast, i));
  Py_DECREF(fast);
  return ok;
}

/* Raise what the worker (or, with num_workers 0, the dataset) raised. */
static PyObject *
raise_record(flpy_state *st, PyObject *record)
{
  PyObject *r = flpy_call1(st->w_reraise, record);

  Py_XDECREF(r);
  if (!PyErr_Occurred())
    PyErr_SetString(PyExc_RuntimeError, "forkload: a worker's error "
                    "could not be raised");
  return NULL;
}

/* A batch written in this process: its skeleton, taken from where the
   fill kept it. */
static PyObject *
unpack_inline(flpy_unpacker *u, flpy_state *st, PyObject *segment,
              const char *skel, uint64_t len)
{
  PyObject *k, *tmpl = NULL, *out;
  uint64_t key;

  if (len == sizeof(key) && u->inline_batches != NULL) {
    memcpy(&key, skel, sizeof(key));
    k = PyLong_FromUnsignedLongLong(key);
    if (k == NULL)
      return NULL;
    tmpl = PyDict_GetItemWithError(u->inline_batches, k);
    Py_XINCREF(tmpl);
    if (tmpl != NULL && PyDict_DelItem(u->inline_batches, k) != 0)
      Py_CLEAR(tmpl);
    Py_DECREF(k);
    if (tmpl == NULL && PyErr_Occurred())
      return NULL;
  }
  if (tmpl == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "forkload: a malformed batch (no "
                    "batch of this process under its key)");
    return NULL;
  }
  out = rebuild(u, st, segment, tmpl);
  Py_DECREF(tmpl);
  return out;
}

PyObject *
flpy_unpack(flpy_unpacker *u, PyObject *segment)
{
  flpy_state *st = flpy_state_of(u->module);
  const unsigned char *data = flpy_segment_data(segment);
  const flpy_blob *h = (const flpy_blob *)data;
  PyObject *bytes, *tmpl, *out;
  const char *skel;
  char *last;
  Py_ssize_t last_len;

  /* Within the rooms of its segment, whose class the batch says. */
  if (h->magic != FLPY_MAGIC || h->skel_off + h->skel_len > h->len ||
      h->len > fl_batch_stride(flpy_segment_batch(segment), 0) * u->rooms) {
    PyErr_SetString(PyExc_RuntimeError, "forkload: a batch without its "
                    "header (did the worker write past its room?)");
    return NULL;
  }
  skel = (const char *)data + h->skel_off;
  if (h->kind == FLPY_BLOB_INLINE)
    return unpack_inline(u, st, segment, skel, h->skel_len);
  /* Fixed-shape samples give the same skeleton batch after batch: the
     last one's template serves, with nothing copied or unpickled. */
  if (h->kind == FLPY_BLOB_BATCH && u->last_skel != NULL &&
      PyBytes_AsStringAndSize(u->last_skel, &last, &last_len) == 0 &&
      last_len == (Py_ssize_t)h->skel_len &&
      memcmp(last, skel, h->skel_len) == 0)
    return rebuild(u, st, segment, u->last_template);
  bytes = PyBytes_FromStringAndSize(skel, (Py_ssize_t)h->skel_len);
  if (bytes == NULL)
    return NULL;
  tmpl = flpy_call1(st->loads, bytes);
  if (tmpl == NULL) {
    Py_DECREF(bytes);
    return NULL;
  }
  if (h->kind == FLPY_BLOB_ERROR) {
    Py_DECREF(bytes);
    raise_record(st, tmpl);
    Py_DECREF(tmpl);
    return NULL;
  }
  if (reusable(st, tmpl)) {
    Py_XSETREF(u->last_skel, bytes);
    Py_XSETREF(u->last_template, tmpl);
    return rebuild(u, st, segment, u->last_template);
  }
  /* Unpickled again for each batch: its objects are this batch's. */
  Py_DECREF(bytes);
  Py_CLEAR(u->last_skel);
  Py_CLEAR(u->last_template);
  out = rebuild(u, st, segment, tmpl);
  Py_DECREF(tmpl);
  return out;
}

int
flpy_unpacker_traverse(flpy_unpacker *u, visitproc visit, void *arg)
{
  Py_VISIT(u->inline_batches);
  Py_VISIT(u->last_skel);
  Py_VISIT(u->last_template);
  return 0;
}

void
flpy_unpacker_clear(flpy_unpacker *u)
{
  Py_CLEAR(u->inline_batches);
  Py_CLEAR(u->last_skel);
  Py_CLEAR(u->last_template);
}
