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
 * tp_name too: its name alone here.)  __name__ rather than PyType_GetName,
 * which CPython 3.10 lacks: only error messages ask.
 */
PyObject *
flpy_type_name(PyObject *o)
{
  PyTypeObject *tp = Py_TYPE(o);
  PyObject *name = PyObject_GetAttrString((PyObject *)tp, "__name__"), *mod;

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
  exc = PyObject_CallFunction(flpy_state_of(module)->w_error, "iss", code,
                              why != NULL ? why : "", fl_err_name(code));
  if (exc != NULL) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
  return NULL;
}

/* name of module (imported, or None where it does not import), or None
   where it lacks the name. */
static PyObject *
optional_attr(PyObject *module, const char *name)
{
  PyObject *v;

  if (module == Py_None)
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

static PyObject *
required_attr(const char *module, const char *name)
{
  PyObject *m = PyImport_ImportModule(module), *v;

  if (m == NULL)
    return NULL;
  v = PyObject_GetAttrString(m, name);
  Py_DECREF(m);
  return v;
}

static int
module_exec(PyObject *m)
{
  flpy_state *st = flpy_state_of(m);
  PyObject *worker = NULL, *torch = NULL, *numpy = NULL;
  int rc = -1;

#define FLPY_MAKE_TYPE(field, spec)                                          \
  st->field = (PyTypeObject *)PyType_FromModuleAndSpec(m, &spec, NULL);      \
  if (st->field == NULL || PyModule_AddType(m, st->field) != 0)              \
    goto out;
  FLPY_TYPES(FLPY_MAKE_TYPE)
#undef FLPY_MAKE_TYPE
#define FLPY_REQUIRE(field, module, name)                                    \
  if ((st->field = required_attr(module, name)) == NULL)                     \
    goto out;
  FLPY_REQUIRED(FLPY_REQUIRE)
#undef FLPY_REQUIRE
  if ((worker = PyImport_ImportModule("forkload._worker")) == NULL)
    goto out;
#define FLPY_WORKER_NAME(field, name)                                        \
  if ((st->field = PyObject_GetAttrString(worker, name)) == NULL)            \
    goto out;
  FLPY_WORKER_NAMES(FLPY_WORKER_NAME)
#undef FLPY_WORKER_NAME
  torch = optional_import("torch");
  numpy = optional_import("numpy");
#define FLPY_OPTION(field, module, name)                                     \
  st->field = optional_attr(module, name);
  FLPY_OPTIONAL(FLPY_OPTION)
#undef FLPY_OPTION
  if (PyModule_AddStringConstant(m, "version", fl_version_string()) != 0 ||
      PyModule_AddIntConstant(m, "has_torch", torch != Py_None) != 0)
    goto out;
  rc = 0;
out:
  Py_XDECREF(worker);
  Py_XDECREF(torch);
  Py_XDECREF(numpy);
  return rc;
}

static int
module_traverse(PyObject *m, visitproc visit, void *arg)
{
  flpy_state *st = flpy_state_of(m);

#define FLPY_VISIT(field, ...) Py_VISIT(st->field);
  FLPY_TYPES(FLPY_VISIT)
  FLPY_WORKER_NAMES(FLPY_VISIT)
  FLPY_REQUIRED(FLPY_VISIT)
  FLPY_OPTIONAL(FLPY_VISIT)
#undef FLPY_VISIT
  return 0;
}

static int
module_clear(PyObject *m)
{
  flpy_state *st = flpy_state_of(m);

#define FLPY_CLEAR(field, ...) Py_CLEAR(st->field);
  FLPY_TYPES(FLPY_CLEAR)
  FLPY_WORKER_NAMES(FLPY_CLEAR)
  FLPY_REQUIRED(FLPY_CLEAR)
  FLPY_OPTIONAL(FLPY_CLEAR)
#undef FLPY_CLEAR
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
