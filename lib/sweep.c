/*
 * The sweep: remove forkload's named segments whose owner process is gone.
 * A name lives only while its segment is in transit, so one is left only
 * when a parent was killed at that instant; the next loader created on the
 * machine, or `forkload cleanup`, removes it.  Only names of forkload's own
 * exact form are ever touched, and never one whose owner may be alive: a
 * pid says whether its owner lives only in the owner's PID namespace, so a
 * name made in another namespace (a container sharing /dev/shm but not the
 * host's pids), under another boot, or by a process that could not read
 * its own is left alone.  Names of the older form, which forkload 0.3 and
 * earlier made, say no namespace: their pid is taken as this namespace's,
 * as those versions did.
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

/* What the sweep makes of a name. */
enum verdict {
  KEEP,    /* not forkload's, not removable, or its owner lives */
  GONE,    /* its owner is gone: to be removed */
  FOREIGN  /* its owner's liveness cannot be judged from here */
};

static enum verdict
judge(int dir, const char *name, const fl__owner_id *me, long *owner)
{
  fl__name_owner o;

  if (fl__segment_name_parse(name, &o) != 0 || !removable(dir, name))
    return KEEP;
  *owner = o.pid;
  /* An identity this process could not read matches nothing. */
  if (o.has_id && (me->pidns == 0 || me->boot == 0 ||
                   o.id.pidns != me->pidns || o.id.boot != me->boot))
    return FOREIGN;
  return kill((pid_t)o.pid, 0) != 0 && errno == ESRCH ? GONE : KEEP;
}

/* Every name of the verdict wanted, removed unless dry_run (FOREIGN
   names never are), each told to cb. */
static int
scan(enum verdict want, int dry_run, fl_sweep_cb cb, void *arg)
{
  char path[300];
  fl__owner_id me;
  struct dirent *e;
  DIR *d;
  long owner;
  int n = 0;

  fl__owner_identify(&me);
  d = opendir("/dev/shm");
  if (d == NULL)
    return errno == ENOENT ? 0 : -errno;
  while ((e = readdir(d)) != NULL) {
    if (judge(dirfd(d), e->d_name, &me, &owner) != want)
      continue;
    snprintf(path, sizeof(path), "/%s", e->d_name);
    if (want == GONE && !dry_run && shm_unlink(path) != 0)
      continue; /* gone already, or not ours to remove */
    n++;
    if (cb != NULL)
      cb(e->d_name, owner, arg);
  }
  closedir(d);
  return n;
}

int
fl_shm_sweep(int dry_run, fl_sweep_cb cb, void *arg)
{
  return scan(GONE, dry_run, cb, arg);
}

int
fl_shm_foreign(fl_sweep_cb cb, void *arg)
{
  return scan(FOREIGN, 1, cb, arg);
}
