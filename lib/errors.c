/*
 * Error codes: fl_strerror and fl_err_name, both from FL_ERRNO_MAP, and
 * which of them leave a loader able to go on.
 */
#include "config.h"


#include "internal.h"

const char *
fl_strerror(int code)
{
  switch (code) {
#define FL__ERR_TEXT(name, value, text) case (value): return (text);
    FL_ERRNO_MAP(FL__ERR_TEXT)
#undef FL__ERR_TEXT
  case 0:
    return "success";
  default:
    break;
  }
  if (code < 0 && code > -4000)
    return fl__strerror(-code);
  return "unknown error";
}

int
fl_error_is_final(int code)
{
  switch (code) {
  case 0:
  case FL_EDATASET:  /* that batch only */
  case FL_ETIMEDOUT: /* the batch is still awaited */
  case FL_EMFILE:    /* the batch is kept and fetched again */
  case FL_ENFILE:
  case FL_ENOSPC:
  case FL_ENOMEM:    /* the batch is kept (past vm.max_map_count, say),
                        or (pin_memory) comes next, unpinned */
  case FL_EPERM:
  case FL_EAGAIN:    /* fl_loader_begin may be tried again; no batch yet
                        in fl_loader_poll's wait */
    return 0;
  default:
    return code < 0;
  }
}

const char *
fl_err_name(int code)
{
  switch (code) {
#define FL__ERR_NAME(name, value, text) case (value): return ("FL_" #name);
    FL_ERRNO_MAP(FL__ERR_NAME)
#undef FL__ERR_NAME
  default:
    return "FL_EUNKNOWN";
  }
}
