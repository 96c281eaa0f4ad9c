/*
 * forkload._forkload: the module object (multi-phase init), its types, the
 * functions that make built-in datasets (datasets.c), and
 * the objects the per-batch path calls, looked up once at import: pickle,
 * forkload._worker, and torch and numpy where they import.
 */
#include "module.h"

flpy_state *
flpy_state_of(PyObject *module)
{
  return (flpy_state *)PyModule_GetState(module);
}

PyObject *
flpy_take_exception(void)
{
  /* PyErr_GetRaisedException is of the limited API of 3.12, not of the
     3.11 the module keeps to, whatever the version of the headers. */
#if Py_LIMITED_API + 0 >= 0x030C0000
  return PyErr_GetRaisedException();
#else
  PyObject *type, *value, *tb;

  PyErr_Fetch(&type, &value, &tb);
  if (type == NULL)
    return NULL;
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != NULL && value != NULL)
    PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  return value;
#endif
}

/*
 * tp_name, which the limited API does not show: a static type's (int,
 * numpy.ndarray) is its module and name, but for builtins'; a class's,
 * its name.  (A heap type of an extension module's may have its module in
 * tp_name too: its name alone here.)
 */
PyObject *
flpy_type_name(PyObject *o)
{
  PyTypeObject *tp = Py_TYPE(o);
  PyObject *name = PyType_GetName(tp), *mod;

  if (name == NULL || (PyType_GetFlags(tp) & Py_TPFLAGS_HEAPTYPE))
    return name;
  mod = PyObject_GetAttrString((PyObject *)tp, "__module__");
  if (mod == NULL) {
    Py_DECREF(name);
    return NULL;
  }
  if (PyUnicode_Check(mod) &&
      PyUnicode_CompareWithASCIIString(mod, "builtins") != 0)
    Py_SETREF(name, PyUnicode_FromFormat("%U.%U", mod, name));
  Py_DECREF(mod);
  return name;
}

PyObject *
flpy_raise(PyObject *module, int code, const char *why)
{
  PyObject *exc;

  if (code == FL_ENOMEM)
    return PyErr_Format(PyExc_MemoryError, "forkload: %s", why);
  exc = PyObject_CallMethod(flpy_state_of(module)->worker_module, "error",
                            "iss", code, why != NULL ? why : "",
                            fl_err_name(code));
  if (exc != NULL) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return NULL;
}

/* name of module, or None where the module does not import. */
static PyObject *
optional_attr(PyObject *module, const char *name)
{
  PyObject *v;

  if (module == NULL || module == Py_None)
    return Py_NewRef(Py_None);
  v = PyObject_GetAttrString(module, name);
  if (v == NULL) {
    PyErr_Clear();
    return Py_NewRef(Py_None);
  }
  return v;
}

static PyObject *
optional_import(const char *name)
{
  PyObject *m = PyImport_ImportModule(name);

  if (m == NULL) {
    /* Without torch (or numpy) the module still works, in numpy (or
       without either, with memoryviews). */
    PyErr_Clear();
    return Py_NewRef(Py_None);
  }
  return m;
}

static int
required_attr(PyObject **out, const char *module, const char *name)
{
  PyObject *m = PyImport_ImportModule(module);

  if (m == NULL)
    return -1;
  *out = PyObject_GetAttrString(m, name);
  Py_DECREF(m);
  return *out == NULL ? -1 : 0;
}

static int
module_exec(PyObject *m)
{
  flpy_state *st = flpy_state_of(m);
  PyObject *torch = NULL, *numpy = NULL;
  int rc = -1;

  st->loader_type =
      (PyTypeObject *)PyType_FromModuleAndSpec(m, &flpy_loader_spec, NULL);
  st->segment_type =
      (PyTypeObject *)PyType_FromModuleAndSpec(m, &flpy_segment_spec, NULL);
  st->view_type =
      (PyTypeObject *)PyType_FromModuleAndSpec(m, &flpy_view_spec, NULL);
  st->native_type =
      (PyTypeObject *)PyType_FromModuleAndSpec(m, &flpy_native_spec, NULL);
  if (st->loader_type == NULL || st->segment_type == NULL ||
      st->view_type == NULL || st->native_type == NULL)
    goto out;
  if (PyModule_AddType(m, st->loader_type) != 0 ||
      PyModule_AddType(m, st->segment_type) != 0 ||
      PyModule_AddType(m, st->view_type) != 0 ||
      PyModule_AddType(m, st->native_type) != 0)
    goto out;
  if (required_attr(&st->dumps, "pickle", "dumps") != 0 ||
      required_attr(&st->loads, "pickle", "loads") != 0 ||
      required_attr(&st->mapping_abc, "collections.abc", "Mapping") != 0 ||
      required_attr(&st->sequence_abc, "collections.abc", "Sequence") != 0)
    goto out;
  st->worker_module = PyImport_ImportModule("forkload._worker");
  if (st->worker_module == NULL)
    goto out;
  st->leaf_type = PyObject_GetAttrString(st->worker_module, "Leaf");
  if (st->leaf_type == NULL)
    goto out;
  st->bytes_type = PyObject_GetAttrString(st->worker_module, "_TensorBytes");
  if (st->bytes_type == NULL)
    goto out;
  torch = optional_import("torch");
  numpy = optional_import("numpy");
  st->from_dlpack = optional_attr(torch, "from_dlpack");
  st->tensor_type = optional_attr(torch, "Tensor");
  st->torch_bool = optional_attr(torch, "bool");
  st->torch_uint8 = optional_attr(torch, "uint8");
  st->torch_strided = optional_attr(torch, "strided");
  st->ndarray_type = optional_attr(numpy, "ndarray");
  st->np_generic = optional_attr(numpy, "generic");
  st->np_asarray = optional_attr(numpy, "asarray");
  if (PyModule_AddStringConstant(m, "version", fl_version_string()) != 0 ||
      PyModule_AddIntConstant(m, "has_torch", torch != Py_None) != 0)
    goto out;
  rc = 0;
out:
  Py_XDECREF(torch);
  Py_XDECREF(numpy);
  return rc;
}

static int
module_traverse(PyObject *m, visitproc visit, void *arg)
{
  flpy_state *st = flpy_state_of(m);

  Py_VISIT(st->loader_type);
  Py_VISIT(st->segment_type);
  Py_VISIT(st->view_type);
  Py_VISIT(st->native_type);
  Py_VISIT(st->leaf_type);
  Py_VISIT(st->bytes_type);
  Py_VISIT(st->worker_module);
  Py_VISIT(st->dumps);
  Py_VISIT(st->loads);
  Py_VISIT(st->from_dlpack);
  Py_VISIT(st->tensor_type);
  Py_VISIT(st->torch_bool);
  Py_VISIT(st->torch_uint8);
  Py_VISIT(st->torch_strided);
  Py_VISIT(st->ndarray_type);
  Py_VISIT(st->np_generic);
  Py_VISIT(st->np_asarray);
  Py_VISIT(st->mapping_abc);
  Py_VISIT(st->sequence_abc);
  return 0;
}

static int
module_clear(PyObject *m)
{
  flpy_state *st = flpy_state_of(m);

  Py_CLEAR(st->loader_type);
  Py_CLEAR(st->segment_type);
  Py_CLEAR(st->view_type);
  Py_CLEAR(st->native_type);
  Py_CLEAR(st->leaf_type);
  Py_CLEAR(st->bytes_type);
  Py_CLEAR(st->worker_module);
  Py_CLEAR(st->dumps);
  Py_CLEAR(st->loads);
  Py_CLEAR(st->from_dlpack);
  Py_CLEAR(st->tensor_type);
  Py_CLEAR(st->torch_bool);
  Py_CLEAR(st->torch_uint8);
  Py_CLEAR(st->torch_strided);
  Py_CLEAR(st->ndarray_type);
  Py_CLEAR(st->np_generic);
  Py_CLEAR(st->np_asarray);
  Py_CLEAR(st->mapping_abc);
  Py_CLEAR(st->sequence_abc);
  return 0;
}

static void
module_free(void *m)
{
  module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "forkload._forkload",
    .m_doc = "libforkload's loader for forkload.DataLoader (internal).",
    .m_size = sizeof(flpy_state),
    .m_methods = flpy_native_functions,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__forkload(void)
{
  return PyModuleDef_Init(&module_def);
}
