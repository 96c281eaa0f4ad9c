/*
 * The NativeDataset type: one of libforkload's built-in datasets (an
 * fl_dataset or an fl_iterable) for forkload.datasets, with what a batch
 * of it holds: each field's dtype and the shape of one sample's field.  A
 * Loader over it gives libforkload the dataset itself, so that the workers
 * run no Python, and the consumer makes each field of a batch an array
 * that is a view of the batch's segment (flpy_native_unpack).  The
 * dataset is closed when the last reference goes, which the Loaders over
 * it hold: after every loader that uses it is destroyed.
 */
#include "module.h"

#include <stdlib.h>
#include <string.h>

/* libforkload's code and sentence, for a dataset that could not be made:
   ValueError for a bad argument, OSError for a file, else forkload.Error
   (FL_ENOTSUP, naming the package this build lacks). */
static PyObject *
raise_made(PyObject *module, int code)
{
  const char *why = fl_loader_error(NULL);

  if (code == FL_EINVAL)
    return PyErr_Format(PyExc_ValueError, "forkload: %s", why);
  if (code < 0 && code > -4000 && code != FL_ENOTSUP && code != FL_ENOMEM) {
    PyObject *args = Py_BuildValue("(is)", -code, why);

    if (args != NULL)
      PyErr_SetObject(PyExc_OSError, args);
    Py_XDECREF(args);
    return NULL;
  }
  return flpy_raise(module, code, why);
}

static flpy_native *
native_alloc(PyObject *module, int iterable)
{
  PyTypeObject *tp = flpy_state_of(module)->native_type;
  allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
  flpy_native *nd;

  nd = (flpy_native *)alloc(tp, 0);
  if (nd != NULL)
    nd->iterable = iterable;
  return nd;
}

static int
dtype_of(PyObject *name)
{
  const char *s = PyUnicode_AsUTF8AndSize(name, NULL);
  int d;

  if (s == NULL)
    return -1;
  for (d = 0; d < FLPY_NDTYPES; d++)
    if (strcmp(s, flpy_dtype_name(d)) == 0)
      return d;
  PyErr_Format(PyExc_TypeError, "forkload: no dtype %R in a batch", name);
  return -1;
}

/*
 * The layout the caller says the fields have, [(dtype name, shape of one
 * sample's field), ...], checked against the bytes libforkload gives each
 * field, and kept.
 */
static int
native_layout(flpy_native *nd, PyObject *fields)
{
  const size_t *fb = nd->iterable ? nd->it.field_bytes : nd->ds.field_bytes;
  size_t nf = nd->iterable ? nd->it.nfields : nd->ds.nfields;
  size_t one = nd->iterable ? nd->it.sample_bytes : nd->ds.sample_bytes;
  PyObject *seq = NULL, *shapes = NULL;
  Py_ssize_t f, k, n;
  int rc = -1;

  if (nf == 0) { /* one field of sample_bytes */
    nf = 1;
    fb = &one;
  }
  seq = PySequence_Fast(fields, "forkload: fields must be a sequence");
  if (seq == NULL)
    goto out;
  n = flpy_fast_size(seq);
  if ((size_t)n != nf) {
    PyErr_Format(PyExc_ValueError, "forkload: the dataset has %zu fields, "
                 "the layout given %zd", nf, n);
    goto out;
  }
  nd->field_bytes = calloc(nf, sizeof(size_t));
  nd->dtype = calloc(nf, sizeof(int));
  shapes = PyTuple_New(n);
  if (nd->field_bytes == NULL || nd->dtype == NULL) {
    PyErr_NoMemory();
    goto out;
  }
  if (shapes == NULL)
    goto out;
  for (f = 0; f < n; f++) {
    PyObject *name, *shape;
    size_t bytes;

    if (!PyArg_ParseTuple(flpy_fast_item(seq, f), "UO!:fields",
                          &name, &PyTuple_Type, &shape))
      goto out;
    if ((nd->dtype[f] = dtype_of(name)) < 0)
      goto out;
    bytes = flpy_dtype_size(nd->dtype[f]);
    for (k = 0; k < PyTuple_Size(shape); k++) {
      Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GetItem(shape, k));

      if (d < 0) {
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_ValueError, "forkload: a negative size");
        goto out;
      }
      bytes *= (size_t)d;
    }
    if (bytes != fb[f]) {
      PyErr_Format(PyExc_ValueError, "forkload: field %zd, %U of shape %R, "
                   "is %zu bytes a sample, and the dataset's %zu", f, name,
                   shape, bytes, fb[f]);
      goto out;
    }
    nd->field_bytes[f] = bytes;
    Py_INCREF(shape);
    if (PyTuple_SetItem(shapes, f, shape) != 0)
      goto out;
  }
  nd->nfields = nf;
  nd->shapes = shapes;
  shapes = NULL;
  rc = 0;
out:
  Py_XDECREF(seq);
  Py_XDECREF(shapes);
  return rc;
}

/* A made dataset, its layout checked: the NativeDataset, or NULL (the
   dataset closed with it). */
static PyObject *
native_done(flpy_native *nd, PyObject *fields)
{
  nd->open = 1;
  if (native_layout(nd, fields) != 0) {
    Py_DECREF(nd);
    return NULL;
  }
  return (PyObject *)nd;
}

/* A sequence of paths (str, bytes or os.PathLike) as C strings; keep
   holds them. */
static const char **
paths_of(PyObject *seq, PyObject **keep, size_t *n)
{
  PyObject *fast = PySequence_Fast(seq, "forkload: a sequence of paths");
  const char **v = NULL;
  Py_ssize_t i, len;

  *keep = NULL;
  if (fast == NULL)
    return NULL;
  len = flpy_fast_size(fast);
  *keep = PyList_New(len);
  v = calloc(len ? (size_t)len : 1, sizeof(*v));
  if (*keep == NULL || v == NULL) {
    if (v == NULL)
      PyErr_NoMemory();
    goto fail;
  }
  for (i = 0; i < len; i++) {
    PyObject *b = NULL;

    if (!PyUnicode_FSConverter(flpy_fast_item(fast, i), &b) ||
        PyList_SetItem(*keep, i, b) != 0)
      goto fail;
    v[i] = PyBytes_AsString(b);
  }
  Py_DECREF(fast);
  *n = (size_t)len;
  return v;
fail:
  Py_DECREF(fast);
  Py_CLEAR(*keep);
  free(v);
  return NULL;
}

/* The image stage's options, keyword-only: fl_image_options' fields. */
static int
image_options(PyObject *kwds, fl_image_options *io)
{
  static char *kwlist[] = {"height", "width", "crop", "resize", "hflip",
                           "scale", "ratio", "chw_float", "mean", "std",
                           "max_pixels", NULL};
  PyObject *empty = PyTuple_New(0);
  int crop = 0, chw = 0, ok;

  if (empty == NULL)
    return -1;
  fl_image_options_init(io);
  ok = PyArg_ParseTupleAndKeywords(
      empty, kwds, "|$IIiId(dd)(dd)p(fff)(fff)K:image options", kwlist,
      &io->height, &io->width, &crop, &io->resize, &io->hflip,
      &io->scale_min, &io->scale_max, &io->ratio_min, &io->ratio_max, &chw,
      &io->mean[0], &io->mean[1], &io->mean[2], &io->std[0], &io->std[1],
      &io->std[2], &io->max_pixels);
  Py_DECREF(empty);
  if (!ok)
    return -1;
  io->crop = crop ? FL_CROP_RANDOM_RESIZED : FL_CROP_CENTER;
  io->chw_float = chw;
  return 0;
}

/* image_folder(root, fields, **image options) */
static PyObject *
native_image_folder(PyObject *module, PyObject *args, PyObject *kwds)
{
  PyObject *root, *fields;
  fl_image_options io;
  flpy_native *nd;
  int rc;

  if (!PyArg_ParseTuple(args, "O&O:image_folder", PyUnicode_FSConverter,
                        &root, &fields))
    return NULL;
  if (image_options(kwds, &io) != 0 ||
      (nd = native_alloc(module, 0)) == NULL) {
    Py_DECREF(root);
    return NULL;
  }
  rc = fl_dataset_image_folder(&nd->ds, PyBytes_AsString(root), &io);
  Py_DECREF(root);
  if (rc != 0) {
    Py_DECREF(nd);
    return raise_made(module, rc);
  }
  return native_done(nd, fields);
}

/* decode_images(inner, field, fields, **image options) */
static PyObject *
native_decode_images(PyObject *module, PyObject *args, PyObject *kwds)
{
  flpy_state *st = flpy_state_of(module);
  PyObject *fields;
  flpy_native *in, *nd;
  Py_ssize_t field;
  fl_image_options io;
  int rc;

  if (!PyArg_ParseTuple(args, "O!nO:decode_images", st->native_type, &in,
                        &field, &fields))
    return NULL;
  if (field < 0 || (size_t)field >= in->nfields) {
    PyErr_Format(PyExc_ValueError, "forkload: field %zd of a dataset of "
                 "%zu fields", field, in->nfields);
    return NULL;
  }
  if (image_options(kwds, &io) != 0 ||
      (nd = native_alloc(module, in->iterable)) == NULL)
    return NULL;
  if (in->iterable)
    rc = fl_iterable_decode_images(&nd->it, &in->it, (size_t)field, &io);
  else
    rc = fl_dataset_decode_images(&nd->ds, &in->ds, (size_t)field, &io);
  if (rc != 0) {
    Py_DECREF(nd);
    return raise_made(module, rc);
  }
  Py_INCREF((PyObject *)in);
  nd->inner = (PyObject *)in; /* open while nd is */
  nd->has_sizes = in->has_sizes;
  return native_done(nd, fields);
}

/* tokens(paths, seq_len, fields) */
static PyObject *
native_tokens(PyObject *module, PyObject *args)
{
  PyObject *paths, *fields, *keep;
  Py_ssize_t seq_len;
  const char **v;
  flpy_native *nd;
  size_t n;
  int rc;

  if (!PyArg_ParseTuple(args, "OnO:tokens", &paths, &seq_len, &fields))
    return NULL;
  if (seq_len <= 0) {
    PyErr_Format(PyExc_ValueError, "forkload: seq_len must be positive, "
                 "not %zd", seq_len);
    return NULL;
  }
  if ((v = paths_of(paths, &keep, &n)) == NULL)
    return NULL;
  if ((nd = native_alloc(module, 0)) == NULL) {
    rc = 0;
  } else if ((rc = fl_dataset_tokens(&nd->ds, v, n, (size_t)seq_len)) != 0) {
    Py_CLEAR(nd);
    raise_made(module, rc);
  }
  free(v);
  Py_DECREF(keep);
  return nd == NULL ? NULL : native_done(nd, fields);
}

/* lmdb(path, max_bytes, fields) */
static PyObject *
native_lmdb(PyObject *module, PyObject *args)
{
  PyObject *path, *fields;
  Py_ssize_t max_bytes;
  flpy_native *nd;
  int rc;

  if (!PyArg_ParseTuple(args, "O&nO:lmdb", PyUnicode_FSConverter, &path,
                        &max_bytes, &fields))
    return NULL;
  if (max_bytes <= 0) {
    Py_DECREF(path);
    return PyErr_Format(PyExc_ValueError, "forkload: max_bytes must be "
                        "positive, not %zd", max_bytes);
  }
  if ((nd = native_alloc(module, 0)) == NULL) {
    Py_DECREF(path);
    return NULL;
  }
  rc = fl_dataset_lmdb(&nd->ds, PyBytes_AsString(path), (size_t)max_bytes);
  Py_DECREF(path);
  if (rc != 0) {
    Py_DECREF(nd);
    return raise_made(module, rc);
  }
  nd->has_sizes = 1;
  return native_done(nd, fields);
}

/* webdataset(shards, exts, max_bytes, fields) */
static PyObject *
native_webdataset(PyObject *module, PyObject *args)
{
  PyObject *shards, *exts, *maxes, *fields, *keep_s = NULL, *keep_e = NULL,
           *fast = NULL, *result = NULL;
  const char **s = NULL, **e = NULL;
  size_t ns, ne, *max = NULL, i;
  flpy_native *nd = NULL;
  int rc;

  if (!PyArg_ParseTuple(args, "OOOO:webdataset", &shards, &exts, &maxes,
                        &fields))
    return NULL;
  if ((s = paths_of(shards, &keep_s, &ns)) == NULL ||
      (e = paths_of(exts, &keep_e, &ne)) == NULL)
    goto out;
  fast = PySequence_Fast(maxes, "forkload: max_bytes must be a sequence");
  if (fast == NULL)
    goto out;
  if ((size_t)flpy_fast_size(fast) != ne) {
    PyErr_SetString(PyExc_ValueError, "forkload: one max_bytes per field");
    goto out;
  }
  if ((max = calloc(ne ? ne : 1, sizeof(*max))) == NULL) {
    PyErr_NoMemory();
    goto out;
  }
  for (i = 0; i < ne; i++) {
    max[i] = PyLong_AsSize_t(flpy_fast_item(fast, (Py_ssize_t)i));
    if (max[i] == (size_t)-1 && PyErr_Occurred())
      goto out;
  }
  if ((nd = native_alloc(module, 1)) == NULL)
    goto out;
  rc = fl_dataset_webdataset(&nd->it, s, ns, e, max, ne);
  if (rc != 0) {
    Py_CLEAR(nd);
    raise_made(module, rc);
    goto out;
  }
  nd->has_sizes = 1;
  result = native_done(nd, fields);
  nd = NULL;
out:
  Py_XDECREF((PyObject *)nd);
  Py_XDECREF(fast);
  Py_XDECREF(keep_s);
  Py_XDECREF(keep_e);
  free(s);
  free(e);
  free(max);
  return result;
}

/* npy_dir(dir, fields), npy_array(path, fields): one path. */
static PyObject *
native_one_path(PyObject *module, PyObject *args, const char *fmt,
                int (*make)(fl_dataset *, size_t, const char *))
{
  PyObject *path, *fields;
  flpy_native *nd;
  int rc;

  if (!PyArg_ParseTuple(args, fmt, PyUnicode_FSConverter, &path, &fields))
    return NULL;
  if ((nd = native_alloc(module, 0)) == NULL) {
    Py_DECREF(path);
    return NULL;
  }
  rc = make(&nd->ds, sizeof(fl_dataset), PyBytes_AsString(path));
  Py_DECREF(path);
  if (rc != 0) {
    Py_DECREF(nd);
    return raise_made(module, rc);
  }
  return native_done(nd, fields);
}

static PyObject *
native_npy_dir(PyObject *module, PyObject *args)
{
  return native_one_path(module, args, "O&O:npy_dir",
                         fl_dataset_npy_dir_sized);
}

static PyObject *
native_npy_array(PyObject *module, PyObject *args)
{
  return native_one_path(module, args, "O&O:npy_array",
                         fl_dataset_npy_array_sized);
}

/* npy_zip(paths, fields) */
static PyObject *
native_npy_zip(PyObject *module, PyObject *args)
{
  PyObject *paths, *fields, *keep;
  const char **v;
  flpy_native *nd;
  size_t n;
  int rc;

  if (!PyArg_ParseTuple(args, "OO:npy_zip", &paths, &fields))
    return NULL;
  if ((v = paths_of(paths, &keep, &n)) == NULL)
    return NULL;
  if ((nd = native_alloc(module, 0)) != NULL &&
      (rc = fl_dataset_npy_zip(&nd->ds, v, n)) != 0) {
    Py_CLEAR(nd);
    raise_made(module, rc);
  }
  free(v);
  Py_DECREF(keep);
  return nd == NULL ? NULL : native_done(nd, fields);
}

/* raw(path, record_bytes, header_bytes, fields) */
static PyObject *
native_raw(PyObject *module, PyObject *args)
{
  PyObject *path, *fields;
  Py_ssize_t record, header;
  flpy_native *nd;
  int rc;

  if (!PyArg_ParseTuple(args, "O&nnO:raw", PyUnicode_FSConverter, &path,
                        &record, &header, &fields))
    return NULL;
  if (record <= 0 || header < 0) {
    Py_DECREF(path);
    return PyErr_Format(PyExc_ValueError, "forkload: record_bytes must be "
                        "positive and header_bytes not negative, not %zd "
                        "and %zd", record, header);
  }
  if ((nd = native_alloc(module, 0)) == NULL) {
    Py_DECREF(path);
    return NULL;
  }
  rc = fl_dataset_raw(&nd->ds, PyBytes_AsString(path), (size_t)record,
                      (size_t)header);
  Py_DECREF(path);
  if (rc != 0) {
    Py_DECREF(nd);
    return raise_made(module, rc);
  }
  return native_done(nd, fields);
}

/*
 * A batch of a native dataset, as default_collate would give it: a list of
 * each field's array, (count, *shape) or, unbatched, shape alone, each a
 * view of the segment; where the dataset says how many bytes each field of
 * each sample took (LMDB, WebDataset), those sizes last, int64 (count,
 * nfields), or (count) for one field, copied.  A dataset of one field and
 * no sizes gives its array alone.
 */
PyObject *
flpy_native_unpack(const flpy_unpacker *u, PyObject *dataset, int unbatched,
                   PyObject *segment)
{
  flpy_native *nd = (flpy_native *)dataset;
  fl_batch *b = flpy_segment_batch(segment);
  size_t count = fl_batch_count(b), f, i;
  PyObject *out, *shape = NULL, *a, *sizes, *dims;
  int64_t *to;

  out = PyList_New((Py_ssize_t)(nd->nfields + (nd->has_sizes != 0)));
  if (out == NULL)
    return NULL;
  for (f = 0; f < nd->nfields; f++) {
    PyObject *one = PyTuple_GetItem(nd->shapes, (Py_ssize_t)f);

    if (unbatched) {
      Py_INCREF(one);
      shape = one;
    } else {
      dims = Py_BuildValue("(n)", (Py_ssize_t)count);
      shape = dims == NULL ? NULL : PySequence_Concat(dims, one);
      Py_XDECREF(dims);
    }
    if (shape == NULL)
      goto fail;
    a = flpy_array_at(u, segment, fl_batch_field(b, f), nd->dtype[f],
                      shape);
    Py_CLEAR(shape);
    if (a == NULL || PyList_SetItem(out, (Py_ssize_t)f, a) != 0)
      goto fail;
  }
  if (!nd->has_sizes) {
    if (nd->nfields != 1)
      return out;
    a = Py_NewRef(PyList_GetItem(out, 0));
    Py_DECREF(out);
    return a;
  }
  sizes = PyByteArray_FromStringAndSize(
      NULL, (Py_ssize_t)(count * nd->nfields * sizeof(int64_t)));
  if (sizes == NULL)
    goto fail;
  to = (int64_t *)PyByteArray_AsString(sizes);
  for (i = 0; i < count * nd->nfields; i++)
    to[i] = (int64_t)fl_batch_sizes(b)[i];
  if (unbatched)
    shape = nd->nfields == 1 ? PyTuple_New(0)
                             : Py_BuildValue("(n)", (Py_ssize_t)nd->nfields);
  else if (nd->nfields == 1)
    shape = Py_BuildValue("(n)", (Py_ssize_t)count);
  else
    shape = Py_BuildValue("(nn)", (Py_ssize_t)count,
                          (Py_ssize_t)nd->nfields);
  a = shape == NULL ? NULL
                    : flpy_array_at(u, sizes, to, FLPY_INT64, shape);
  Py_XDECREF(shape);
  Py_DECREF(sizes);
  if (a == NULL || PyList_SetItem(out, (Py_ssize_t)nd->nfields, a) != 0)
    goto fail;
  return out;
fail:
  Py_DECREF(out);
  return NULL;
}

/* ImageFolder's samples: [(path, label), ...], as torchvision lists them. */
static PyObject *
native_samples(PyObject *op, PyObject *unused)
{
  flpy_native *nd = (flpy_native *)op;
  PyObject *list, *item;
  const char *path;
  int64_t label;
  size_t i;

  (void)unused;
  list = PyList_New(0);
  for (i = 0; list != NULL &&
              (path = fl_image_folder_sample(&nd->ds, i, &label)) != NULL;
       i++) {
    item = Py_BuildValue("(O&L)", PyUnicode_DecodeFSDefault, path,
                         (long long)label);
    if (item == NULL || PyList_Append(list, item) != 0)
      Py_CLEAR(list);
    Py_XDECREF(item);
  }
  return list;
}

/* ImageFolder's classes, in label order. */
static PyObject *
native_classes(PyObject *op, PyObject *unused)
{
  flpy_native *nd = (flpy_native *)op;
  PyObject *list, *name;
  const char *s;
  size_t i;

  (void)unused;
  list = PyList_New(0);
  for (i = 0; list != NULL && (s = fl_image_folder_class(&nd->ds, i)) != NULL;
       i++) {
    name = PyUnicode_DecodeFSDefault(s);
    if (name == NULL || PyList_Append(list, name) != 0)
      Py_CLEAR(list);
    Py_XDECREF(name);
  }
  return list;
}

static PyObject *
native_get_len(PyObject *op, void *closure)
{
  flpy_native *nd = (flpy_native *)op;

  (void)closure;
  if (nd->iterable)
    Py_RETURN_NONE;
  return PyLong_FromSize_t(nd->ds.len);
}

static PyObject *
native_get_iterable(PyObject *op, void *closure)
{
  (void)closure;
  return PyBool_FromLong(((flpy_native *)op)->iterable);
}

static PyObject *
native_get_field_bytes(PyObject *op, void *closure)
{
  flpy_native *nd = (flpy_native *)op;
  PyObject *t = PyTuple_New((Py_ssize_t)nd->nfields);
  size_t f;

  (void)closure;
  for (f = 0; t != NULL && f < nd->nfields; f++) {
    PyObject *v = PyLong_FromSize_t(nd->field_bytes[f]);

    if (v == NULL || PyTuple_SetItem(t, (Py_ssize_t)f, v) != 0)
      Py_CLEAR(t);
  }
  return t;
}

static PyObject *
native_get_layout(PyObject *op, void *closure)
{
  flpy_native *nd = (flpy_native *)op;
  PyObject *list = PyList_New((Py_ssize_t)nd->nfields), *item;
  size_t f;

  (void)closure;
  for (f = 0; list != NULL && f < nd->nfields; f++) {
    item = Py_BuildValue("(sO)", flpy_dtype_name(nd->dtype[f]),
                         PyTuple_GetItem(nd->shapes, (Py_ssize_t)f));
    if (item == NULL || PyList_SetItem(list, (Py_ssize_t)f, item) != 0)
      Py_CLEAR(list);
  }
  return list;
}

static PyObject *
native_get_has_sizes(PyObject *op, void *closure)
{
  (void)closure;
  return PyBool_FromLong(((flpy_native *)op)->has_sizes);
}

static void
native_dealloc(PyObject *op)
{
  flpy_native *nd = (flpy_native *)op;
  PyTypeObject *tp = Py_TYPE(op);

  if (nd->open) {
    if (nd->iterable)
      fl_iterable_close(&nd->it);
    else
      fl_dataset_close(&nd->ds);
  }
  Py_XDECREF(nd->inner); /* after: decode_images' out is closed first */
  Py_XDECREF(nd->shapes);
  free(nd->field_bytes);
  free(nd->dtype);
  ((freefunc)PyType_GetSlot(tp, Py_tp_free))(op);
  Py_DECREF(tp);
}

static PyMethodDef native_methods[] = {
    {"samples", native_samples, METH_NOARGS,
     "An image folder's [(path, label), ...] (fl_image_folder_sample)."},
    {"classes", native_classes, METH_NOARGS,
     "An image folder's class names (fl_image_folder_class)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef native_getset[] = {
    {"len", native_get_len, NULL, "Samples (None for a stream).", NULL},
    {"iterable", native_get_iterable, NULL, "An fl_iterable.", NULL},
    {"field_bytes", native_get_field_bytes, NULL,
     "Bytes of each field of a sample.", NULL},
    {"layout", native_get_layout, NULL,
     "[(dtype, shape of one sample's field), ...].", NULL},
    {"has_sizes", native_get_has_sizes, NULL,
     "Batches end with each field's sizes (fl_batch_sizes).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot native_slots[] = {
    {Py_tp_dealloc, native_dealloc},
    {Py_tp_methods, native_methods},
    {Py_tp_getset, native_getset},
    {Py_tp_doc, "One of libforkload's built-in datasets, and the layout of "
                "its batches (forkload.datasets' engine)."},
    {0, NULL},
};

PyType_Spec flpy_native_spec = {
    .name = "forkload._forkload.NativeDataset",
    .basicsize = sizeof(flpy_native),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = native_slots,
};

PyMethodDef flpy_native_functions[] = {
    {"image_folder", (PyCFunction)(void (*)(void))native_image_folder,
     METH_VARARGS | METH_KEYWORDS,
     "image_folder(root, fields, **image_options): fl_dataset_image_folder."},
    {"decode_images", (PyCFunction)(void (*)(void))native_decode_images,
     METH_VARARGS | METH_KEYWORDS,
     "decode_images(dataset, field, fields, **image_options): "
     "fl_dataset_decode_images or fl_iterable_decode_images."},
    {"tokens", native_tokens, METH_VARARGS,
     "tokens(paths, seq_len, fields): fl_dataset_tokens."},
    {"lmdb", native_lmdb, METH_VARARGS,
     "lmdb(path, max_bytes, fields): fl_dataset_lmdb."},
    {"webdataset", native_webdataset, METH_VARARGS,
     "webdataset(shards, exts, max_bytes, fields): fl_dataset_webdataset."},
    {"npy_dir", native_npy_dir, METH_VARARGS,
     "npy_dir(dir, fields): fl_dataset_npy_dir."},
    {"npy_array", native_npy_array, METH_VARARGS,
     "npy_array(path, fields): fl_dataset_npy_array."},
    {"npy_zip", native_npy_zip, METH_VARARGS,
     "npy_zip(paths, fields): fl_dataset_npy_zip."},
    {"raw", native_raw, METH_VARARGS,
     "raw(path, record_bytes, header_bytes, fields): fl_dataset_raw."},
    {NULL, NULL, 0, NULL},
};
