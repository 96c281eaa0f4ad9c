/*
 * Error codes: fl_strerror and fl_err_name, both from FL_ERRNO_MAP.
 */
#include "config.h"

#include <string.h>

#include "forkload.h"

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
  /* Any other negative errno: glibc returns constant text for known ones. */
  if (code < 0 && code > -4000)
    return strerror(-code);
  return "unknown error";
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
