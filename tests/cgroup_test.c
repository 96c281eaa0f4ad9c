/*
 * Admission under a real memory cgroup: a child moves itself into a new
 * cgroup with a 64 MiB limit (v2 memory.max, or v1
 * memory.limit_in_bytes), where MemAvailable alone would admit anything,
 * and a prefetch window of 160 MiB must be refused at create, naming the
 * cgroup.  Needs root and a writable memory controller: elsewhere the
 * whole program is skipped with the reason.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define LIMIT (64u << 20)

static char group[PATH_MAX];
static int v2;

static int
write_file(const char *dir, const char *name, const char *text)
{
  char path[PATH_MAX + 64];
  FILE *f;
  int rc;

  if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
    return -1;
  f = fopen(path, "w");
  if (f == NULL)
    return -1;
  rc = fputs(text, f) < 0 ? -1 : 0;
  if (fclose(f) != 0)
    rc = -1;
  return rc;
}

/* Where the v2 hierarchy is mounted: -1 when it is not. */
static int
v2_mount(char *mnt, size_t len)
{
  char line[2 * PATH_MAX], m[PATH_MAX];
  FILE *f = fopen("/proc/self/mountinfo", "r");
  int rc = -1;

  if (f == NULL)
    return -1;
  while (rc != 0 && fgets(line, sizeof(line), f) != NULL) {
    if (strstr(line, " - cgroup2 ") != NULL &&
        sscanf(line, "%*s %*s %*s %*s %4095s", m) == 1) {
      rc = snprintf(mnt, len, "%s", m) < (int)len ? 0 : -1;
    }
  }
  fclose(f);
  return rc;
}

/* This process's cgroup directory for the memory controller, or -1. */
static int
own_group(char *dir, size_t len, int want_v2)
{
  char line[PATH_MAX + 64], mnt[PATH_MAX / 2], *p;
  FILE *f;
  int rc = -1;

  if (want_v2 && v2_mount(mnt, sizeof(mnt)) != 0)
    return -1;
  f = fopen("/proc/self/cgroup", "r");
  if (f == NULL)
    return -1;
  while (rc != 0 && fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    if (want_v2 && strncmp(line, "0::", 3) == 0) {
      rc = snprintf(dir, len, "%s%s", mnt, line + 3) < (int)len ? 0 : -1;
    } else if (!want_v2 && (p = strstr(line, ":memory:")) != NULL) {
      rc = snprintf(dir, len, "/sys/fs/cgroup/memory%s", p + 8) < (int)len
               ? 0
               : -1;
    }
  }
  fclose(f);
  return rc;
}

/* Whether file dir/name holds word. */
static int
holds(const char *dir, const char *name, const char *word)
{
  char path[PATH_MAX + 64], text[512] = "";
  FILE *f;
  size_t n;

  if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
    return 0;
  f = fopen(path, "r");
  if (f == NULL)
    return 0;
  n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = '\0';
  fclose(f);
  return strstr(text, word) != NULL;
}

/*
 * Makes a limited child group of our own: 0, or -1 with why.  Under v2 a
 * group's children get the memory controller only where its
 * cgroup.subtree_control already grants it.
 */
static int
make_group(char *why, size_t len)
{
  char parent[PATH_MAX - 64], limit[32];

  snprintf(limit, sizeof(limit), "%u\n", LIMIT);
  for (v2 = 0; v2 <= 1; v2++) {
    if (own_group(parent, sizeof(parent), v2) != 0)
      continue;
    if (v2 ? !holds(parent, "cgroup.subtree_control", "memory")
           : !holds(parent, "memory.limit_in_bytes", "")) {
      snprintf(why, len, "%.300s: %s", parent,
               v2 ? "its subtree_control does not grant memory"
                  : "no memory.limit_in_bytes");
      continue;
    }
    if (snprintf(group, sizeof(group), "%s/forkload-test-%ld", parent,
                 (long)getpid()) >= (int)sizeof(group))
      continue;
    if (mkdir(group, 0755) != 0) {
      snprintf(why, len, "mkdir %.300s: %s", group, strerror(errno));
      continue;
    }
    if (write_file(group, v2 ? "memory.max" : "memory.limit_in_bytes",
                   limit) == 0)
      return 0;
    snprintf(why, len, "cannot set the limit in %.300s: %s", group,
             strerror(errno));
    rmdir(group);
  }
  group[0] = '\0';
  return -1;
}

static void
window_above_the_cgroups_room_is_refused_naming_the_cgroup(void **state)
{
  char why[512] = "", pid[32];
  ssize_t got;
  int p[2], status;
  pid_t child;

  (void)state;
  assert_int_equal(pipe(p), 0);
  child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    fl_options opt;
    fl_dataset ds;
    fl_loader *l;
    flt_data d;
    int rc = 1;

    close(p[0]);
    snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (write_file(group, "cgroup.procs", pid) != 0) {
      snprintf(why, sizeof(why), "cannot join %.300s: %s", group,
               strerror(errno));
    } else {
      /* 5 segments of 32 MiB: 160 MiB, where the group allows 64. */
      flt_data_init(&d, &ds, 1000, 1u << 20);
      fl_options_init(&opt);
      opt.batch_size = 32;
      opt.num_workers = 2;
      rc = fl_loader_create(&l, &ds, &opt);
      if (rc == FL_ENOMEM &&
          strstr(fl_loader_error(NULL), "the memory cgroup ") != NULL &&
          strstr(fl_loader_error(NULL), "forkload-test-") != NULL)
        rc = 0;
      else
        snprintf(why, sizeof(why), "%s: %s", fl_err_name(rc),
                 fl_loader_error(NULL));
      if (rc == FL_ENOMEM || rc == 1)
        rc = 2;
    }
    if (write(p[1], why, strlen(why)) < 0)
      rc = 3;
    _exit(rc);
  }
  close(p[1]);
  got = read(p[0], why, sizeof(why) - 1);
  why[got > 0 ? got : 0] = '\0';
  close(p[0]);
  assert_int_equal(waitpid(child, &status, 0), child);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("status %d: %s", status, why);
}

static int
remove_group(void)
{
  struct timespec pause = {0, 10 * 1000 * 1000};
  int i;

  /* The child has exited; its group empties as soon as it is reaped. */
  for (i = 0; i < 100 && rmdir(group) != 0 && errno == EBUSY; i++)
    nanosleep(&pause, NULL);
  return access(group, F_OK) == 0 ? -1 : 0;
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(
          window_above_the_cgroups_room_is_refused_naming_the_cgroup),
  };
  char why[512] = "no memory cgroup of this process was found";
  int rc;

  if (geteuid() != 0)
    flt_skip_all("needs root to make a memory cgroup");
  if (make_group(why, sizeof(why)) != 0)
    flt_skip_all("cannot make a limited memory cgroup: %s", why);
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  if (remove_group() != 0) {
    fprintf(stderr, "cannot remove %s\n", group);
    rc = 1;
  }
  return rc;
}
