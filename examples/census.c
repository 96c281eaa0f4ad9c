/*
 * The census `forkload exhaust` and `forkload soak` take before they
 * create loaders and after they destroy them: the process's open fds, the
 * names in /dev/shm it owns, and its child processes.  What differs is
 * what the loaders left behind.
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static void append(char *list, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Adds an item to a comma-separated list, cut short when it is full. */
static void
append(char *list, size_t len, const char *fmt, ...)
{
  size_t used = strnlen(list, len);
  va_list ap;

  if (used > 0 && used + 2 < len) {
    memcpy(list + used, ", ", 3);
    used += 2;
  }
  va_start(ap, fmt);
  vsnprintf(list + used, len - used, fmt, ap);
  va_end(ap);
}

static int
compare_fds(const void *a, const void *b)
{
  int x = *(const int *)a, y = *(const int *)b;

  return (x > y) - (x < y);
}

/* The fd that reads /proc/self/fd is not counted: it is the census's. */
static int
read_fds(struct census *c)
{
  struct dirent *e;
  DIR *d = opendir("/proc/self/fd");
  int rc = 0;

  if (d == NULL)
    return -errno;
  while ((e = readdir(d)) != NULL) {
    if (!isdigit((unsigned char)e->d_name[0]) ||
        atoi(e->d_name) == dirfd(d))
      continue;
    if (cli_grow((void **)&c->fds, c->nfds, sizeof *c->fds) < 0) {
      rc = -ENOMEM;
      break;
    }
    c->fds[c->nfds++] = atoi(e->d_name);
  }
  closedir(d);
  qsort(c->fds, c->nfds, sizeof *c->fds, compare_fds);
  return rc;
}

/*
 * The names this process's loader owns: forkload.<our pid>.*.  Other
 * programs' loaders on the machine make and sweep their own meanwhile.
 */
static int
read_names(struct census *c)
{
  char prefix[32];
  struct dirent *e;
  DIR *d = opendir("/dev/shm");
  char *name;
  size_t n;
  int rc = 0;

  if (d == NULL)
    return errno == ENOENT ? 0 : -errno;
  n = (size_t)snprintf(prefix, sizeof(prefix), "forkload.%ld.",
                       (long)getpid());
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, prefix, n) != 0)
      continue;
    name = strdup(e->d_name);
    if (name == NULL ||
        cli_grow((void **)&c->names, c->nnames, sizeof *c->names) < 0) {
      free(name);
      rc = -ENOMEM;
      break;
    }
    c->names[c->nnames++] = name;
  }
  closedir(d);
  return rc;
}

int
census_take(struct census *c)
{
  int rc;

  *c = (struct census){0};
  rc = read_fds(c);
  if (rc == 0)
    rc = read_names(c);
  if (rc != 0)
    census_free(c);
  return rc;
}

void
census_free(struct census *c)
{
  size_t i;

  for (i = 0; i < c->nnames; i++)
    free(c->names[i]);
  free(c->names);
  free(c->fds);
  *c = (struct census){0};
}

static int
has_name(const struct census *c, const char *name)
{
  size_t i;

  for (i = 0; i < c->nnames; i++)
    if (strcmp(c->names[i], name) == 0)
      return 1;
  return 0;
}

size_t
census_new_names(const struct census *before, const struct census *after,
                 char *list, size_t len)
{
  size_t i, n = 0;

  list[0] = '\0';
  for (i = 0; i < after->nnames; i++) {
    if (has_name(before, after->names[i]))
      continue;
    append(list, len, "/dev/shm/%s", after->names[i]);
    n++;
  }
  return n;
}

static int
has_fd(const struct census *c, int fd)
{
  return bsearch(&fd, c->fds, c->nfds, sizeof *c->fds, compare_fds) != NULL;
}

size_t
census_new_fds(const struct census *before, const struct census *after,
               char *list, size_t len)
{
  char path[64], target[PATH_MAX];
  ssize_t n;
  size_t i, changed = 0;

  list[0] = '\0';
  for (i = 0; i < after->nfds; i++) {
    if (has_fd(before, after->fds[i]))
      continue;
    /* What the fd is open on says who forgot it. */
    snprintf(path, sizeof path, "/proc/self/fd/%d", after->fds[i]);
    n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    append(list, len, "fd %d (%s)", after->fds[i], target);
    changed++;
  }
  for (i = 0; i < before->nfds; i++) {
    if (has_fd(after, before->fds[i]))
      continue;
    append(list, len, "fd %d closed", before->fds[i]);
    changed++;
  }
  return changed;
}

/* Lists this process's children, from the fourth field of
   /proc/PID/stat, which follows the command name's last ')'. */
static size_t
scan_children(char *list, size_t len)
{
  char path[64], buf[512], *p, state;
  struct dirent *e;
  size_t got, n = 0;
  long pid, ppid;
  FILE *f;
  DIR *d = opendir("/proc");

  list[0] = '\0';
  if (d == NULL)
    return 0;
  while ((e = readdir(d)) != NULL) {
    if (!isdigit((unsigned char)e->d_name[0]))
      continue;
    pid = atol(e->d_name);
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    if ((f = fopen(path, "r")) == NULL)
      continue; /* it ended while we looked */
    got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 1, " %c %ld", &state, &ppid) != 2 ||
        ppid != (long)getpid())
      continue;
    append(list, len, "pid %ld (state %c)", pid, state);
    n++;
  }
  closedir(d);
  return n;
}

/*
 * libuv opens a pipe with its first loop and keeps it for the life of the
 * process (its signal lock: 2 fds).  A throwaway loader made before the
 * census puts it there, so that the check counts what the loaders under
 * study left, not libuv's once-only state.
 */
int
census_warm_up(const char *who)
{
  struct synth one = {.samples = 1, .sample_bytes = 1};
  fl_dataset ds;
  fl_options opt;
  fl_loader *l;
  int rc;

  synth_dataset(&one, 0, &ds);
  fl_options_init(&opt);
  opt.num_workers = 0; /* a loop, and nothing else */
  if ((rc = fl_loader_create(&l, &ds, &opt)) < 0) {
    cli_error("%s: %s", who, cli_loader_error(NULL, rc));
    return -1;
  }
  fl_loader_destroy(l);
  return 0;
}

size_t
census_children(double wait_seconds, char *list, size_t len)
{
  const struct timespec tick = {0, 10 * 1000 * 1000};
  double deadline = cli_now() + wait_seconds;
  size_t n;

  /* A worker told to stop may take a moment to go. */
  while ((n = scan_children(list, len)) > 0 && cli_now() < deadline)
    nanosleep(&tick, NULL);
  return n;
}
