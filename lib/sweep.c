/*
 * The sweep: remove forkload's named segments whose owner process is gone.
 * A name lives only while its segment is in transit, so one is left only
 * when a parent was killed at that instant; the next loader created on the
 * machine, or `forkload cleanup`, removes it.  Only names of forkload's own
 * exact form are ever touched, and never one whose owner is alive.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

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
  fl__name_owner o;
  struct dirent *e;
  DIR *d;
  int n = 0;

  d = opendir("/dev/shm");
  if (d == NULL)
    return errno == ENOENT ? 0 : -errno;
  while ((e = readdir(d)) != NULL) {
    if (fl__segment_name_parse(e->d_name, &o) != 0 ||
        kill((pid_t)o.pid, 0) == 0 || errno != ESRCH ||
        !removable(dirfd(d), e->d_name))
      continue;
    snprintf(path, sizeof(path), "/%s", e->d_name);
    if (!dry_run && shm_unlink(path) != 0)
      continue; /* gone already, or not ours to remove */
    n++;
    if (cb != NULL)
      cb(e->d_name, o.pid, arg);
  }
  closedir(d);
  return n;
}
