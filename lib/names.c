/*
 * Segment names: the form forkload gives the named segments it makes in
 * /dev/shm, and reading one back, which the sweep does to find its owner.
 */
#include "config.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/*
 * forkload.<owner pid>.<the loader's token>.<serial>, the serial 64 random
 * bits in hex: the pid and token of one name do not tell another user the
 * next, which it could otherwise create first.
 */
void
fl__segment_name(char *buf, size_t len, pid_t owner, uint32_t token,
                 uint64_t serial)
{
  snprintf(buf, len, "/forkload.%ld.%08x.%016llx", (long)owner, token,
           (unsigned long long)serial);
}

/* min to max hex digits, then the end or a dot: where they end, or NULL. */
static const char *
hex_run(const char *p, int min, int max)
{
  int i;

  for (i = 0; i < max && isxdigit((unsigned char)p[i]); i++)
    ;
  return i >= min && (p[i] == '\0' || p[i] == '.') ? p + i : NULL;
}

/*
 * Reads back a name of forkload's exact form, without the slash:
 * forkload.<pid>.<8 hex digits>.<serial>, the serial 16 hex digits, or the
 * decimal count of forkload 0.1.  Returns 0, or -1 for any other name.
 */
int
fl__segment_name_parse(const char *name, fl__name_owner *o)
{
  const char *p;
  char *end;

  memset(o, 0, sizeof(*o));
  if (strncmp(name, "forkload.", 9) != 0 || !isdigit((unsigned char)name[9]))
    return -1;
  o->pid = strtol(name + 9, &end, 10);
  /* A number pid_t cannot hold would reach kill() as another pid, or as a
     process group. */
  if (*end != '.' || o->pid <= 0 || o->pid > INT_MAX)
    return -1;
  p = hex_run(end + 1, 8, 8);
  if (p == NULL || *p++ != '.')
    return -1;
  p = hex_run(p, 1, 20);
  return p != NULL && *p == '\0' ? 0 : -1;
}
