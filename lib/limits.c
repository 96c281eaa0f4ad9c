/*
 * What the machine can give a loader now, read before it reserves
 * anything: memory (MemAvailable, and the room left under every memory
 * cgroup above this process, v1 or v2), the largest file it may make
 * (RLIMIT_FSIZE: memfd and shm segments are files), the free space of
 * /dev/shm, fds, locked memory, message queues and processes.  Each room
 * says where it was read, for the messages.  Workers read memory too,
 * before each segment they make anew, so files are read with read(2)
 * alone.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "internal.h"

const char *fl__limits_root = "";

/* cgroup v1 says "no limit" with a page-rounded LONG_MAX. */
#define FL__CGROUP_UNLIMITED (UINT64_C(1) << 62)

static void
room_set(fl__room *r, uint64_t bytes, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
room_set(fl__room *r, uint64_t bytes, const char *fmt, ...)
{
  va_list ap;

  r->amount = bytes;
  va_start(ap, fmt);
  vsnprintf(r->source, sizeof(r->source), fmt, ap);
  va_end(ap);
}

/* A soft limit, UINT64_MAX when there is none. */
static uint64_t
soft_limit(int resource)
{
  struct rlimit rl;

  if (getrlimit(resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return UINT64_MAX;
  return (uint64_t)rl.rlim_cur;
}

/* The first line of file dir/name, or -1. */
static int
first_line(const char *dir, const char *name, char *line, size_t len)
{
  char full[PATH_MAX];
  struct fl__lines lr;
  int got;

  if (snprintf(full, sizeof(full), "%s/%s", dir, name) >= (int)sizeof(full) ||
      fl__lines_open(&lr, full) != 0)
    return -1;
  got = fl__lines_next(&lr, line, len);
  fl__close(lr.fd);
  return got ? 0 : -1;
}

/* The number file dir/name holds, or -1 (absent, "max", unreadable). */
static int
read_number(const char *dir, const char *name, uint64_t *out)
{
  char line[64];

  if (first_line(dir, name, line, sizeof(line)) != 0 || line[0] < '0' ||
      line[0] > '9')
    return -1;
  *out = strtoull(line, NULL, 10);
  return 0;
}

uint64_t
fl__sysctl(const char *name, uint64_t fallback)
{
  char dir[PATH_MAX];
  uint64_t v;

  snprintf(dir, sizeof(dir), "%s/proc/sys", fl__limits_root);
  return read_number(dir, name, &v) == 0 ? v : fallback;
}

/* The value of `key` in a file of "key value" or "key: value" lines. */
int
fl__proc_value(const char *path, const char *key, uint64_t *out)
{
  char line[256];
  size_t n = strlen(key);
  struct fl__lines lr;
  int rc = -1;

  if (fl__lines_open(&lr, path) != 0)
    return -1;
  while (rc != 0 && fl__lines_next(&lr, line, sizeof(line))) {
    if (strncmp(line, key, n) == 0 && (line[n] == ' ' || line[n] == ':')) {
      *out = strtoull(line + n + 1 + strspn(line + n + 1, " \t"), NULL, 10);
      rc = 0;
    }
  }
  fl__close(lr.fd);
  return rc;
}

/* The value of `key` in dir/memory.stat. */
static int
read_stat(const char *dir, const char *key, uint64_t *out)
{
  char full[PATH_MAX];

  if (snprintf(full, sizeof(full), "%s/memory.stat", dir) >=
      (int)sizeof(full))
    return -1;
  return fl__proc_value(full, key, out);
}

/* MemAvailable, in bytes, from /proc/meminfo. */
static int
mem_available(const char *root, uint64_t *out)
{
  char full[PATH_MAX];
  uint64_t kb;

  snprintf(full, sizeof(full), "%s/proc/meminfo", root);
  if (fl__proc_value(full, "MemAvailable", &kb) != 0)
    return -1;
  *out = kb * 1024;
  return 0;
}

/* Whether comma-separated list holds word. */
static int
has_word(const char *list, const char *word)
{
  size_t n = strlen(word);
  const char *p = list;

  while ((p = strstr(p, word)) != NULL) {
    if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
      return 1;
    p += n;
  }
  return 0;
}

/*
 * This process's cgroup path in the hierarchy of the memory controller:
 * v2 (the "0::" line) or v1 (a line whose controllers include memory).
 */
static int
cgroup_path(const char *root, int v2, char *path, size_t len)
{
  char full[PATH_MAX], line[PATH_MAX + 64], *ctl, *p;
  struct fl__lines lr;
  int rc = -1;

  snprintf(full, sizeof(full), "%s/proc/self/cgroup", root);
  if (fl__lines_open(&lr, full) != 0)
    return -1;
  while (rc != 0 && fl__lines_next(&lr, line, sizeof(line))) {
    ctl = strchr(line, ':');
    if (ctl == NULL)
      continue;
    *ctl++ = '\0';
    p = strchr(ctl, ':');
    if (p == NULL)
      continue;
    *p++ = '\0';
    if (v2 ? strcmp(line, "0") == 0 && *ctl == '\0'
           : has_word(ctl, "memory")) {
      snprintf(path, len, "%s", p);
      rc = 0;
    }
  }
  fl__close(lr.fd);
  return rc;
}

/*
 * Where the hierarchy is mounted, and which of its paths the mount shows
 * at its top, from /proc/self/mountinfo: "... ROOT MOUNTPOINT ... - TYPE
 * SOURCE OPTIONS".
 */
static int
cgroup_mount(const char *root, int v2, char *top, char *mnt, size_t len)
{
  char full[PATH_MAX], line[2 * PATH_MAX], r[PATH_MAX], m[PATH_MAX],
      type[64], opts[512], *dash;
  struct fl__lines lr;
  int rc = -1;

  snprintf(full, sizeof(full), "%s/proc/self/mountinfo", root);
  if (fl__lines_open(&lr, full) != 0)
    return -1;
  while (rc != 0 && fl__lines_next(&lr, line, sizeof(line))) {
    dash = strstr(line, " - ");
    if (dash == NULL ||
        sscanf(line, "%*s %*s %*s %4095s %4095s", r, m) != 2 ||
        sscanf(dash + 3, "%63s %*s %511s", type, opts) != 2)
      continue;
    if (v2 ? strcmp(type, "cgroup2") == 0
           : strcmp(type, "cgroup") == 0 && has_word(opts, "memory")) {
      snprintf(top, len, "%s", r);
      snprintf(mnt, len, "%s", m);
      rc = 0;
    }
  }
  fl__close(lr.fd);
  return rc;
}

/*
 * The least room under the memory cgroups of one hierarchy, from this
 * process's group up to the top of the mount: a limit set higher up binds
 * too.  Usage leaves out inactive file pages, which the kernel reclaims
 * before it fails a charge.  Returns 0 with *r set, or -1 when no level
 * sets a limit.
 */
static int
cgroup_room(const char *root, int v2, fl__room *r)
{
  const char *limit_file = v2 ? "memory.max" : "memory.limit_in_bytes";
  const char *usage_file = v2 ? "memory.current" : "memory.usage_in_bytes";
  const char *inactive = v2 ? "inactive_file" : "total_inactive_file";
  char path[PATH_MAX], top[PATH_MAX], mnt[PATH_MAX], dir[PATH_MAX], *rel,
      *cut;
  uint64_t limit, usage, idle, room;
  size_t ntop, floor;
  int found = -1;

  if (cgroup_path(root, v2, path, sizeof(path)) != 0 ||
      cgroup_mount(root, v2, top, mnt, sizeof(mnt)) != 0)
    return -1;
  ntop = strcmp(top, "/") == 0 ? 0 : strlen(top);
  rel = strncmp(path, top, ntop) == 0 ? path + ntop : path;
  if (strcmp(rel, "/") == 0)
    rel = "";
  floor = strlen(root) + strlen(mnt);
  if (snprintf(dir, sizeof(dir), "%s%s%s", root, mnt, rel) >=
      (int)sizeof(dir))
    return -1;
  for (;;) {
    if (read_number(dir, limit_file, &limit) == 0 &&
        limit < FL__CGROUP_UNLIMITED) {
      if (read_number(dir, usage_file, &usage) != 0)
        usage = 0;
      if (read_stat(dir, inactive, &idle) == 0 && idle < usage)
        usage -= idle;
      room = usage < limit ? limit - usage : 0;
      if (found != 0 || room < r->amount)
        room_set(r, room,
                 "the memory cgroup %s (%s %" PRIu64 " bytes, %" PRIu64
                 " in use)", dir + strlen(root), limit_file, limit, usage);
      found = 0;
    }
    /* Up one level, but not above the mount. */
    cut = strrchr(dir, '/');
    if (cut == NULL || (size_t)(cut - dir) < floor)
      break;
    *cut = '\0';
  }
  return found;
}

void
fl__room_memory(fl__room *r)
{
  const char *root = fl__limits_root;
  fl__room c;
  uint64_t avail;
  int v2;

  room_set(r, UINT64_MAX, "no memory limit could be read");
  if (mem_available(root, &avail) == 0)
    room_set(r, avail, "MemAvailable in /proc/meminfo");
  for (v2 = 0; v2 <= 1; v2++) {
    c.amount = UINT64_MAX;
    if (cgroup_room(root, v2, &c) == 0 && c.amount < r->amount)
      *r = c;
  }
}

void
fl__room_file_size(fl__room *r)
{
  uint64_t limit = soft_limit(RLIMIT_FSIZE);

  if (limit == UINT64_MAX)
    room_set(r, UINT64_MAX, "RLIMIT_FSIZE");
  else
    room_set(r, limit, "RLIMIT_FSIZE (ulimit -f)");
}

void
fl__room_dev_shm(fl__room *r)
{
  uint64_t size, used;

  fl__dev_shm_now(&size, &used);
  if (size == UINT64_MAX)
    room_set(r, UINT64_MAX, "/dev/shm");
  else
    room_set(r, size - used, "the free space of /dev/shm (%.1f MB in all)",
             (double)size / 1e6);
}

int
fl__room_for_segment(size_t size, char *err, size_t errlen)
{
  fl__room r;

  fl__room_memory(&r);
  if (size <= r.amount)
    return 0;
  snprintf(err, errlen, "a new %zu-byte segment does not fit in memory now: "
           "%s is %llu bytes", size, r.source, (unsigned long long)r.amount);
  return FL_ENOMEM;
}

/* Mappings (lines of /proc/self/maps) within this many of vm.max_map_count
   are at it: the kernel's count leaves out [vsyscall], and a mapping may
   have been split or merged since the failure. */
#define FL__MAPS_SLACK 8

int
fl__maps_full(char *why, size_t len)
{
  char path[PATH_MAX], line[8];
  struct fl__lines lr;
  uint64_t limit = fl__sysctl("vm/max_map_count", 0), n = 0;

  snprintf(path, sizeof(path), "%s/proc/self/maps", fl__limits_root);
  if (limit == 0 || fl__lines_open(&lr, path) != 0)
    return 0;
  while (fl__lines_next(&lr, line, sizeof(line)))
    n++;
  fl__close(lr.fd);
  if (n + FL__MAPS_SLACK < limit)
    return 0;
  snprintf(why, len, "it has %" PRIu64 " memory mappings, at "
           "vm.max_map_count (/proc/sys/vm/max_map_count: %" PRIu64 ")", n,
           limit);
  return 1;
}

/*
 * An fd takes a number below the soft limit: fds above it, inherited from
 * before the limit was lowered, take none, and at the limit itself
 * opendir fails with EMFILE, which means every number is taken.
 */
void
fl__fds_now(uint64_t *limit, uint64_t *in_use)
{
  struct dirent *e;
  uint64_t fd;
  DIR *d;

  *limit = soft_limit(RLIMIT_NOFILE);
  *in_use = 0;
  d = opendir("/proc/self/fd");
  if (d == NULL) {
    if (errno == EMFILE)
      *in_use = *limit;
    return;
  }
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9')
      continue;
    fd = strtoull(e->d_name, NULL, 10);
    *in_use += fd < *limit && fd != (uint64_t)dirfd(d);
  }
  closedir(d);
}

void
fl__room_fds(fl__room *r)
{
  uint64_t limit, open_fds;

  fl__fds_now(&limit, &open_fds);
  if (limit == UINT64_MAX)
    room_set(r, UINT64_MAX, "RLIMIT_NOFILE");
  else
    room_set(r, open_fds < limit ? limit - open_fds : 0,
             "RLIMIT_NOFILE (ulimit -n) %" PRIu64 " less the %" PRIu64
             " fds open", limit, open_fds);
}

/* Whether this process has capability cap in effect (CapEff, in hex, in
   /proc/self/status), which lifts some of the limits below. */
int
fl__capable(int cap)
{
  char path[PATH_MAX], line[256];
  struct fl__lines lr;
  uint64_t mask = 0;
  int found = 0;

  snprintf(path, sizeof(path), "%s/proc/self/status", fl__limits_root);
  if (fl__lines_open(&lr, path) != 0)
    return 0;
  while (!found && fl__lines_next(&lr, line, sizeof(line)))
    if (strncmp(line, "CapEff:", 7) == 0) {
      mask = strtoull(line + 7, NULL, 16);
      found = 1;
    }
  fl__close(lr.fd);
  return cap < 64 && (mask >> cap) & 1;
}

void
fl__dev_shm_now(uint64_t *size, uint64_t *used)
{
  struct statvfs vfs;

  *size = UINT64_MAX;
  *used = 0;
  if (statvfs("/dev/shm", &vfs) != 0)
    return;
  *size = (uint64_t)vfs.f_blocks * vfs.f_frsize;
  *used = (uint64_t)(vfs.f_blocks - vfs.f_bavail) * vfs.f_frsize;
}

/* mlock is not limited with CAP_IPC_LOCK (14). */
void
fl__memlock_now(uint64_t *limit, uint64_t *locked)
{
  char path[PATH_MAX];
  uint64_t kb;

  *limit = fl__capable(14) ? UINT64_MAX : soft_limit(RLIMIT_MEMLOCK);
  snprintf(path, sizeof(path), "%s/proc/self/status", fl__limits_root);
  *locked = fl__proc_value(path, "VmLck", &kb) == 0 ? kb * 1024 : 0;
}

/* RLIMIT_MSGQUEUE binds everyone; fs.mqueue.queues_max not a process
   with CAP_SYS_RESOURCE (24). */
void
fl__msgqueue_now(uint64_t *bytes, uint64_t *queues)
{
  *bytes = soft_limit(RLIMIT_MSGQUEUE);
  *queues = fl__capable(24) ? UINT64_MAX
                            : fl__sysctl("fs/mqueue/queues_max", 256);
}

/* The threads (each counts) of processes whose real uid is uid. */
static uint64_t
tasks_of(uid_t uid)
{
  char path[PATH_MAX], line[256];
  struct fl__lines lr;
  struct dirent *e;
  uint64_t n = 0, owner, threads;
  int seen;
  DIR *d;

  snprintf(path, sizeof(path), "%s/proc", fl__limits_root);
  d = opendir(path);
  while (d != NULL && (e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' ||
        snprintf(path, sizeof(path), "%s/proc/%s/status", fl__limits_root,
                 e->d_name) >= (int)sizeof(path) ||
        fl__lines_open(&lr, path) != 0)
      continue;
    owner = UINT64_MAX;
    threads = 1;
    seen = 0;
    while (seen < 2 && fl__lines_next(&lr, line, sizeof(line))) {
      if (strncmp(line, "Uid:", 4) == 0 && ++seen)
        owner = strtoull(line + 4, NULL, 10);
      else if (strncmp(line, "Threads:", 8) == 0 && ++seen)
        threads = strtoull(line + 8, NULL, 10);
    }
    fl__close(lr.fd);
    n += owner == (uint64_t)uid ? threads : 0;
  }
  if (d != NULL)
    closedir(d);
  return n;
}

/* The kernel counts every thread of a real uid against RLIMIT_NPROC, but
   not for a process with CAP_SYS_RESOURCE (24) or CAP_SYS_ADMIN (21). */
static uint64_t
nproc_limit(void)
{
  return fl__capable(24) || fl__capable(21) ? UINT64_MAX
                                              : soft_limit(RLIMIT_NPROC);
}

void
fl__processes_now(uint64_t *limit, uint64_t *tasks)
{
  *limit = nproc_limit();
  *tasks = tasks_of(getuid());
}

/*
 * The threads of the whole system, from /proc/loadavg, bound the uid's
 * from above at the cost of one read: the uid's are counted, a read per
 * process, only when that bound leaves no room for `need`.
 */
void
fl__room_processes(fl__room *r, uint64_t need)
{
  char path[PATH_MAX], line[128], *slash = NULL;
  uint64_t limit, tasks;
  struct fl__lines lr;

  limit = nproc_limit();
  if (limit == UINT64_MAX) {
    room_set(r, UINT64_MAX, "RLIMIT_NPROC");
    return;
  }
  snprintf(path, sizeof(path), "%s/proc/loadavg", fl__limits_root);
  if (fl__lines_open(&lr, path) == 0) {
    if (fl__lines_next(&lr, line, sizeof(line)))
      slash = strchr(line, '/');
    fl__close(lr.fd);
  }
  tasks = slash != NULL ? strtoull(slash + 1, NULL, 10) : UINT64_MAX;
  if (tasks < limit && need <= limit - tasks) {
    room_set(r, limit - tasks, "RLIMIT_NPROC (ulimit -u) %" PRIu64
             " less the %" PRIu64 " threads of the whole system", limit,
             tasks);
    return;
  }
  tasks = tasks_of(getuid());
  room_set(r, tasks < limit ? limit - tasks : 0,
           "RLIMIT_NPROC (ulimit -u) %" PRIu64 " less the %" PRIu64
           " threads of uid %u", limit, tasks, (unsigned)getuid());
}
