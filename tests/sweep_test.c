/*
 * The sweep of names left in /dev/shm by a parent killed while a segment was
 * in transit: a loader's creation and `forkload cleanup` remove the names of
 * forkload's exact form whose owner is gone, and no other.  Runs in a private
 * /dev/shm, so that no other loader on the machine sweeps the planted names
 * first; that needs root and unshare(CLONE_NEWNS), and elsewhere the whole
 * program is skipped with the reason.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define MAX_HEARD 4

/* What a sweep reported: each name and its owner. */
typedef struct heard {
  int n;
  char name[MAX_HEARD][64];
  long owner[MAX_HEARD];
} heard;

static void
note_swept(const char *name, long owner, void *arg)
{
  heard *h = arg;

  if (h->n < MAX_HEARD) {
    snprintf(h->name[h->n], sizeof(h->name[0]), "/%s", name);
    h->owner[h->n] = owner;
  }
  h->n++;
}

static pid_t
dead_pid(void)
{
  pid_t pid = fork();

  if (pid == 0)
    _exit(0);
  waitpid(pid, NULL, 0);
  return pid;
}

static void
plant(const char *name)
{
  int fd = shm_open(name, O_RDWR | O_CREAT, 0600);

  assert_true(fd >= 0);
  close(fd);
}

static int
exists(const char *name)
{
  int fd = shm_open(name, O_RDONLY, 0);

  if (fd < 0)
    return 0;
  close(fd);
  return 1;
}

/*
 * A dry run lists the stale name with its owner and removes nothing; the
 * next loader created removes it, and leaves a live owner's name and
 * another program's.
 */
static void
next_loader_sweeps_a_dead_owners_name_and_no_other(void **state)
{
  char stale[64], live[64];
  const char *foreign = "/forkload-not-ours";
  pid_t dead = dead_pid();
  flt_baseline base;
  fl_dataset ds;
  fl_loader *l;
  flt_data d;
  heard h = {0};

  (void)state;
  flt_baseline_take(&base);
  snprintf(stale, sizeof(stale), "/forkload.%ld.deadbeef.7", (long)dead);
  snprintf(live, sizeof(live), "/forkload.%ld.deadbeef.8", (long)getpid());
  plant(stale);
  plant(live);
  plant(foreign);
  assert_int_equal(fl_shm_sweep(1, note_swept, &h), 1);
  assert_int_equal(h.n, 1);
  assert_string_equal(h.name[0], stale);
  assert_int_equal(h.owner[0], dead);
  assert_true(exists(stale));
  flt_data_init(&d, &ds, 10, 8);
  assert_int_equal(fl_loader_create(&l, &ds, NULL), 0);
  assert_false(exists(stale));
  assert_true(exists(live));
  assert_true(exists(foreign));
  fl_loader_destroy(l);
  flt_data_free(&d);
  shm_unlink(live);
  shm_unlink(foreign);
  flt_assert_clean(&base);
}

/* Each stale name is removed and reported once, with its own owner. */
static void
sweep_removes_every_dead_owners_names(void **state)
{
  pid_t dead[2] = {dead_pid(), dead_pid()};
  char name[3][64];
  flt_baseline base;
  heard h = {0};
  int i;

  (void)state;
  flt_baseline_take(&base);
  snprintf(name[0], sizeof(name[0]), "/forkload.%ld.0badc0de.1",
           (long)dead[0]);
  snprintf(name[1], sizeof(name[1]), "/forkload.%ld.0badc0de.2",
           (long)dead[0]);
  snprintf(name[2], sizeof(name[2]), "/forkload.%ld.ABCDEF01.123456",
           (long)dead[1]);
  for (i = 0; i < 3; i++)
    plant(name[i]);
  assert_int_equal(fl_shm_sweep(0, note_swept, &h), 3);
  assert_int_equal(h.n, 3);
  for (i = 0; i < 3; i++) {
    assert_false(exists(name[i]));
    assert_int_equal(h.owner[i], strstr(h.name[i], "ABCDEF01") != NULL
                                     ? dead[1]
                                     : dead[0]);
  }
  assert_int_equal(fl_shm_sweep(0, NULL, NULL), 0);
  flt_assert_clean(&base);
}

/*
 * Names that only look like forkload's are never touched, even when the
 * number in them is not a live pid: a pid too large for pid_t must not be
 * read as a smaller one, nor as a process group.
 */
static void
names_not_of_the_exact_form_are_never_touched(void **state)
{
  static const char *const forms[] = {
      "/forkload.%ld.deadbee.1",    "/forkload.%ld.deadbeef0.1",
      "/forkload.%ld.deadbeeg.1",   "/forkload.%ld.deadbeef.",
      "/forkload.%ld.deadbeef",     "/forkload.%ld.deadbeef.1x",
      "/forkload.%ld..deadbeef.1",  "/forkload.x%ld.deadbeef.1",
      "/forkload-%ld.deadbeef.1",   "/Forkload.%ld.deadbeef.1",
      "/forkload.0.deadbeef.1%ld",  "/forkload.-%ld.deadbeef.1",
      "/forkload.2147483648.deadbeef.%ld",
      "/forkload.4294967297.deadbeef.%ld",
      "/forkload.99999999999999999999.deadbeef.%ld",
  };
  enum { N = sizeof(forms) / sizeof(forms[0]) };
  long dead = (long)dead_pid();
  flt_baseline base;
  char name[N][96];
  heard h = {0};
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  for (i = 0; i < N; i++) {
    snprintf(name[i], sizeof(name[i]), forms[i], dead);
    plant(name[i]);
  }
  assert_int_equal(fl_shm_sweep(0, note_swept, &h), 0);
  assert_int_equal(h.n, 0);
  for (i = 0; i < N; i++) {
    assert_true(exists(name[i]));
    shm_unlink(name[i]);
  }
  flt_assert_clean(&base);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(next_loader_sweeps_a_dead_owners_name_and_no_other),
      cmocka_unit_test(sweep_removes_every_dead_owners_names),
      cmocka_unit_test(names_not_of_the_exact_form_are_never_touched),
  };
  char why[256];

  if (flt_private_dev_shm("size=16m", why, sizeof(why)) != 0)
    flt_skip_all("needs root and a private mount namespace (unshare -m), so "
                 "that no other loader sweeps the planted names: %s",
                 why);
  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
