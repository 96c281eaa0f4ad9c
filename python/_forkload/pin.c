/*
 * pin_memory's hooks: libforkload pins each segment once, when it is
 * mapped in the consumer, and unpins it before it is unmapped; both go
 * through forkload.dataloader's pinner (torch.cuda's host registration).
 */
#include "module.h"

/* fl_options.pin, in the process that made the loader, with the lock
   held and the GIL taken here: pinner.register(addr, len), once per
   segment.  What it raised is warned of at the batch. */
int
flpy_pin(void *addr, size_t len, void *arg)
{
  flpy_releaser *self = arg;
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
  flpy_releaser *self = arg;
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

