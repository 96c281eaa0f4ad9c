/*
 * Segment names and who owns them.  A name tells the sweep its owner: the
 * parent's pid, and, since the pid alone means nothing to a process of
 * another PID namespace sharing /dev/shm (a container with the host's IPC
 * but not its pids), the owner's PID namespace and boot.  The sweep judges
 * an owner only by a name from its own namespace and boot.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* This process's identity, and the process that read it (its pid and fork
   generation, stored last): the parent reads it in the sweep that
   fl_loader_create runs before it forks, and a worker, which names
   segments for its parent, inherits it and reads nothing. */
static atomic_uint_least64_t own_pidns, own_boot;
static atomic_long read_by_pid;
static atomic_ulong read_by_gen;

/* min to max hex digits, then the end or a dot: where they end, or NULL. */
static const char *
hex_run(const char *p, int min, int max)
{
  int i;

  for (i = 0; i < max && isxdigit((unsigned char)p[i]); i++)
    ;
  return i >= min && (p[i] == '\0' || p[i] == '.') ? p + i : NULL;
}

/* The first 16 hex digits of boot_id (a random UUID), or 0. */
static uint64_t
read_boot(void)
{
  struct fl__lines lr;
  char line[64], hex[17];
  int i, n = 0;

  if (fl__lines_open(&lr, "/proc/sys/kernel/random/boot_id") != 0)
    return 0;
  if (fl__lines_next(&lr, line, sizeof(line))) {
    for (i = 0; line[i] != '\0' && n < 16; i++) {
      if (line[i] != '-')
        hex[n++] = line[i];
    }
  }
  hex[n] = '\0';
  fl__close(lr.fd);
  return n == 16 && hex_run(hex, 16, 16) != NULL ? strtoull(hex, NULL, 16)
                                                 : 0;
}

/*
 * This process's identity, which the sweep judges by and its names carry.
 * Read again only in a process that did not read it, a child forked after
 * unshare(CLONE_NEWPID) being in another namespace than its parent: within
 * one process it never changes, so the names a parent opens are those its
 * workers made.  stat and read(2) alone, no stdio and no malloc.
 */
void
fl__owner_identify(fl__owner_id *me)
{
  struct stat st;

  if (atomic_load(&read_by_pid) != (long)getpid() ||
      atomic_load(&read_by_gen) != fl__fork_generation) {
    atomic_store(&own_pidns, stat("/proc/self/ns/pid", &st) == 0
                                 ? (uint64_t)st.st_ino
                                 : 0);
    atomic_store(&own_boot, read_boot());
    atomic_store(&read_by_gen, fl__fork_generation);
    atomic_store(&read_by_pid, (long)getpid());
  }
  me->pidns = atomic_load(&own_pidns);
  me->boot = atomic_load(&own_boot);
}

/*
 * forkload.<owner pid>.<the loader's token>.<serial>.<pidns>.<boot>: the
 * serial 64 random bits in hex, so that the pid and token of one name do
 * not tell another user the next, which it could otherwise create first;
 * pidns and boot as fl__owner_identify read them, 0 where it could not.
 */
void
fl__segment_name(char *buf, size_t len, pid_t owner, uint32_t token,
                 uint64_t serial)
{
  fl__owner_id me;

  /* A worker names with what its parent read, and reads nothing. */
  if (atomic_load(&read_by_pid) == 0)
    fl__owner_identify(&me);
  snprintf(buf, len, "/forkload.%ld.%08x.%016llx.%llu.%016llx", (long)owner,
           token, (unsigned long long)serial,
           (unsigned long long)atomic_load(&own_pidns),
           (unsigned long long)atomic_load(&own_boot));
}

/*
 * Reads back a name of forkload's exact form, without the slash: today's,
 * or the older forkload.<pid>.<token>.<serial> of 0.2 and 0.3 (16 hex
 * digits) and 0.1 (decimal), which says no namespace (o->has_id 0).
 * Returns 0, or -1 for any other name.
 */
int
fl__segment_name_parse(const char *name, fl__name_owner *o)
{
  const char *p, *serial;
  char *end;
  unsigned long long v;

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
  serial = p;
  p = hex_run(serial, 1, 20);
  if (p == NULL)
    return -1;
  if (*p == '\0')
    return 0;
  /* Today's form: 16 digits of serial, the namespace in decimal (an inode
     number, as `ls -iL /proc/PID/ns/pid` and lsns(8) print it), the boot. */
  if (p - serial != 16 || !isdigit((unsigned char)p[1]))
    return -1;
  errno = 0;
  v = strtoull(p + 1, &end, 10);
  if (errno != 0 || *end != '.')
    return -1;
  o->has_id = 1;
  o->id.pidns = v;
  p = hex_run(end + 1, 16, 16);
  if (p == NULL || *p != '\0')
    return -1;
  o->id.boot = strtoull(end + 1, NULL, 16);
  return 0;
}
