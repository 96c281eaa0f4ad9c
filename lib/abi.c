/*
 * The ABI rule for the structs a caller allocates (fl_options, fl_stats,
 * fl_dataset, fl_iterable, fl_budget): they only grow at their end, and
 * every call that touches one is told its size.  These helpers read the
 * fields a caller's struct has over the defaults, and write no further
 * than it reaches; and the library tells its own version at run time.
 */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

/*
 * No version of a public struct may end in padding: a field added later
 * would sit in bytes an older caller never set.  When fields are appended,
 * name the new last field here.
 */
#define FL__ENDS_AT(type, last)                                              \
  _Static_assert(sizeof(type) == FL__SIZE_TO(type, last),                    \
                 #type " must end with " #last ", without padding")
FL__ENDS_AT(fl_options, fork_arg);
FL__ENDS_AT(fl_stats, faults_injected);
FL__ENDS_AT(fl_dataset, get_fields);
FL__ENDS_AT(fl_iterable, next_fields);
FL__ENDS_AT(fl_budget_item, max_held);
FL__ENDS_AT(fl_budget, binding);

unsigned
fl_version(void)
{
  return FL_VERSION_HEX;
}

const char *
fl_version_string(void)
{
  return FL_VERSION_STRING;
}

int
fl__struct_in(void *dst, size_t full, const void *src, size_t size,
              size_t oldest, const char *name, char *err, size_t errlen)
{
  const unsigned char *tail = (const unsigned char *)src + full;
  size_t i;

  if (size < oldest) {
    snprintf(err, errlen, "%s is %zu bytes here: no forkload had one "
             "smaller than %zu", name, size, oldest);
    return FL_EINVAL;
  }
  memcpy(dst, src, size < full ? size : full);
  for (i = 0; size > full && i < size - full; i++) {
    if (tail[i] != 0) {
      snprintf(err, errlen, "%s is %zu bytes here, and this libforkload "
               "(%s) knows %zu: the program was built against a newer "
               "forkload and sets a field this one lacks", name, size,
               FL_VERSION_STRING, full);
      return FL_EINVAL;
    }
  }
  return 0;
}

void
fl__struct_out(void *dst, size_t size, const void *src, size_t full)
{
  memcpy(dst, src, size < full ? size : full);
  if (size > full)
    memset((unsigned char *)dst + full, 0, size - full);
}
