/*
 * The sweep: remove forkload's named segments whose owner process is gone.
 * A name lives only while its segment is in transit, so one is left only
 * when a parent was killed at that instant; the next loader created on the
 * machine, or `forkload cleanup`, removes it.  Only names of forkload's own
 * exact form are ever touched, and never one whose owner is alive.
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* forkload.<pid>.<8 hex digits>.<serial>: the owner's pid, or 0.  The
   serial is 16 hex digits, or the decimal count of forkload 0.1. */
static long
owner_of(const char *name)
{
  const char *p;
  char *end;
  long pid;
  int i;

  if (strncmp(name, "forkload.", 9) != 0)
    return 0;
  p = name + 9;
  if (!isdigit((unsigned char)*p))
    return 0;
  pid = strtol(p, &end, 10);
  /* A number pid_t cannot hold would reach kill() as another pid, or as a
     process group. */
  if (*end != '.' || pid <= 0 || pid > INT_MAX)
    return 0;
  p = end + 1;
  for (i = 0; i < 8; i++, p++) {
    if (!isxdigit((unsigned char)*p))
      return 0;
  }
  if (*p++ != '.')
    return 0;
  for (i = 0; i < 20 && isxdigit((unsigned char)*p); i++, p++)
    ;
  return i > 0 && *p == '\0' ? pid : 0;
}

/* What a real sweep would remove: a shared-memory object, which this user
   may remove from the sticky /dev/shm. */
static int
removable(int dir, const char *name)
{
  struct stat st;

  return fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISREG(st.st_mode) && (geteuid() == 0 || st.st_uid == geteuid());
}

int
fl_shm_sweep(int dry_run, fl_sweep_cb cb, void *arg)
{
  char path[300];
  struct dirent *e;
  DIR *d;
  long owner;
  int n = 0;

  d = opendir("/dev/shm");
  if (d == NULL)
    return errno == ENOENT ? 0 : -errno;
  while ((e = readdir(d)) != NULL) {
    owner = owner_of(e->d_name);
    if (owner == 0 || kill((pid_t)owner, 0) == 0 || errno != ESRCH ||
        !removable(dirfd(d), e->d_name))
      continue;
    snprintf(path, sizeof(path), "/%s", e->d_name);
    if (!dry_run && shm_unlink(path) != 0)
      continue; /* gone already, or not ours to remove */
    n++;
    if (cb != NULL)
      cb(e->d_name, owner, arg);
  }
  closedir(d);
  return n;
}
