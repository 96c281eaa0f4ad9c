/*
 * Names in /dev/shm: the sweep of those left by a parent killed while a
 * segment was in transit (a loader's creation and `forkload cleanup` remove
 * the names of forkload's exact form whose owner is gone, and no other; a
 * name of another PID namespace or boot, whose pid means nothing here, is
 * left alone), and names another local user cannot take first (they are
 * unpredictable, and a name taken is tried again with a new one).  Runs in
 * a private /dev/shm, so that no other loader on the machine sweeps the
 * planted names first; that needs root and unshare(CLONE_NEWNS), and
 * elsewhere the whole program is skipped with the reason.  getrandom is
 * wrapped (-Wl,--wrap) so that a case can make the loader draw a name that
 * is already taken.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"

/* The nobody user: a local user other than the loader's. */
#define OTHER_UID 65534

ssize_t __real_getrandom(void *buf, size_t len, unsigned flags);
ssize_t __wrap_getrandom(void *buf, size_t len, unsigned flags);

/* 8-byte draws the next calls take, newest last; none: the real thing. */
static uint64_t forced[4];
static int nforced;

ssize_t
__wrap_getrandom(void *buf, size_t len, unsigned flags)
{
  if (len == sizeof(uint64_t) && nforced > 0) {
    memcpy(buf, &forced[--nforced], len);
    return (ssize_t)len;
  }
  return __real_getrandom(buf, len, flags);
}

#define MAX_HEARD 4

/* What a sweep reported: each name and its owner. */
typedef struct heard {
  int n;
  char name[MAX_HEARD][FL__SEGMENT_NAME_MAX];
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

/* This process's identity as a name carries it, "<pidns>.<boot>", read
   here apart from the library: the inode of its PID namespace, and the
   first 16 hex digits of the boot's id. */
static void
own_identity(char *buf, size_t len)
{
  char line[64], boot[17];
  struct stat st;
  FILE *f;
  int i, n = 0;

  assert_int_equal(stat("/proc/self/ns/pid", &st), 0);
  f = fopen("/proc/sys/kernel/random/boot_id", "r");
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof(line), f));
  fclose(f);
  for (i = 0; line[i] != '\0' && n < 16; i++) {
    if (line[i] != '-')
      boot[n++] = line[i];
  }
  boot[n] = '\0';
  snprintf(buf, len, "%llu.%s", (unsigned long long)st.st_ino, boot);
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
 * read as a smaller one, nor as a process group.  Nor are those that
 * differ from today's form in one part (a serial or boot of another
 * length, a namespace that is no plain decimal number or too large for 64
 * bits, a part too many), though they carry this namespace and boot; nor
 * are they listed as foreign.
 */
static void
names_not_of_the_exact_form_are_never_touched(void **state)
{
  /* Each made with the dead pid, this namespace and this boot. */
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
      "/forkload.%ld.deadbeef.0123456789abcde.%s.%s",
      "/forkload.%ld.deadbeef.0123456789abcdef0.%s.%s",
      "/forkload.%ld.deadbeef.0123456789abcdef.%s.%.15s",
      "/forkload.%ld.deadbeef.0123456789abcdef.%s.%s0",
      "/forkload.%ld.deadbeef.0123456789abcdef.%s.%.15sg",
      "/forkload.%ld.deadbeef.0123456789abcdef.%s.%s.1",
      "/forkload.%ld.deadbeef.0123456789abcdef.%s.%s.",
      "/forkload.%ld.deadbeef.0123456789abcdef.+%s.%s",
      "/forkload.%ld.deadbeef.0123456789abcdef.%sx.%s",
      "/forkload.%ld.deadbeef.0123456789abcdef.%.0s.%s",
      "/forkload.%ld.deadbeef.0123456789abcdef.99999999999999999999%.0s.%s",
      "/forkload.%ld.deadbeef.0123456789abcdef..%s.%s",
  };
  enum { N = sizeof(forms) / sizeof(forms[0]) };
  long dead = (long)dead_pid();
  char id[40], ns[24], boot[17];
  flt_baseline base;
  char name[N][96];
  heard h = {0};
  size_t i;

  (void)state;
  flt_baseline_take(&base);
  own_identity(id, sizeof(id));
  snprintf(ns, sizeof(ns), "%.*s", (int)(strchr(id, '.') - id), id);
  snprintf(boot, sizeof(boot), "%s", strchr(id, '.') + 1);
  for (i = 0; i < N; i++) {
    snprintf(name[i], sizeof(name[i]), forms[i], dead, ns, boot);
    plant(name[i]);
  }
  assert_int_equal(fl_shm_foreign(NULL, NULL), 0);
  assert_int_equal(fl_shm_sweep(0, note_swept, &h), 0);
  assert_int_equal(h.n, 0);
  for (i = 0; i < N; i++) {
    assert_true(exists(name[i]));
    shm_unlink(name[i]);
  }
  flt_assert_clean(&base);
}

/*
 * Names of the older form, with 0.1's decimal serial or the 64 hex bits of
 * 0.2 and 0.3, say no namespace: their pid is judged here, as those
 * versions did, a dead owner's removed, a live one's kept, and none is
 * counted as foreign.
 */
static void
names_of_the_older_form_keep_the_pid_rule(void **state)
{
  char name[2][64], live[64];
  pid_t dead = dead_pid();
  flt_baseline base;
  int i;

  (void)state;
  flt_baseline_take(&base);
  snprintf(name[0], sizeof(name[0]), "/forkload.%ld.deadbeef.42",
           (long)dead);
  snprintf(name[1], sizeof(name[1]), "/forkload.%ld.deadbeef.0123456789abcdef",
           (long)dead);
  snprintf(live, sizeof(live), "/forkload.%ld.deadbeef.0123456789abcdef",
           (long)getpid());
  for (i = 0; i < 2; i++)
    plant(name[i]);
  plant(live);
  assert_int_equal(fl_shm_foreign(NULL, NULL), 0);
  assert_int_equal(fl_shm_sweep(0, NULL, NULL), 2);
  for (i = 0; i < 2; i++)
    assert_false(exists(name[i]));
  assert_true(exists(live));
  shm_unlink(live);
  flt_assert_clean(&base);
}

/*
 * The name a loader makes carries its PID namespace and boot after the
 * serial, and reads back as made.
 */
static void
a_name_carries_this_pid_namespace_and_boot(void **state)
{
  char name[FL__SEGMENT_NAME_MAX], want[FL__SEGMENT_NAME_MAX], id[40];
  fl__name_owner o;

  (void)state;
  own_identity(id, sizeof(id));
  fl__segment_name(name, sizeof(name), getpid(), 0xdeadbeefu,
                   0x0123456789abcdefull);
  snprintf(want, sizeof(want), "/forkload.%ld.deadbeef.0123456789abcdef.%s",
           (long)getpid(), id);
  assert_string_equal(name, want);
  assert_int_equal(fl__segment_name_parse(name + 1, &o), 0);
  assert_int_equal(o.pid, getpid());
  assert_true(o.has_id);
  assert_int_equal(strtoull(id, NULL, 10), o.id.pidns);
  assert_int_equal(strtoull(strchr(id, '.') + 1, NULL, 16), o.id.boot);
}

/* In a process forked into a new PID namespace: 0 when the identity it
   inherited names as its parent's did, and, once it has swept, its own
   namespace's; 1 if not. */
static int
names_in_a_new_namespace(const fl__name_owner *parent)
{
  char name[FL__SEGMENT_NAME_MAX];
  fl__name_owner o;
  struct stat st;

  fl__segment_name(name, sizeof(name), getpid(), 1, 1);
  if (fl__segment_name_parse(name + 1, &o) != 0 ||
      o.id.pidns != parent->id.pidns)
    return 1;
  fl_shm_sweep(1, NULL, NULL);
  fl__segment_name(name, sizeof(name), getpid(), 1, 1);
  return fl__segment_name_parse(name + 1, &o) != 0 ||
         stat("/proc/self/ns/pid", &st) != 0 ||
         o.id.pidns != (uint64_t)st.st_ino || o.id.pidns == parent->id.pidns ||
         o.id.boot != parent->id.boot;
}

/*
 * A host that forks after unshare(CLONE_NEWPID) puts the child in another
 * namespace than its own: the child inherits the parent's identity, which
 * a worker names with, and reads its own when it sweeps, as a loader it
 * creates does first.  Where the kernel refuses a new PID namespace the
 * case has nothing to show.
 */
static void
a_child_in_a_new_pid_namespace_reads_its_own(void **state)
{
  char name[FL__SEGMENT_NAME_MAX];
  fl__name_owner parent;
  pid_t helper, child;
  int status;

  (void)state;
  fl__segment_name(name, sizeof(name), getpid(), 1, 1);
  assert_int_equal(fl__segment_name_parse(name + 1, &parent), 0);
  helper = fork();
  assert_true(helper >= 0);
  if (helper == 0) {
    if (unshare(CLONE_NEWPID) != 0)
      _exit(77);
    child = fork();
    if (child == 0)
      _exit(names_in_a_new_namespace(&parent));
    _exit(child > 0 && waitpid(child, &status, 0) == child &&
                  WIFEXITED(status)
              ? WEXITSTATUS(status)
              : 2);
  }
  assert_int_equal(waitpid(helper, &status, 0), helper);
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) {
    print_message("unshare(CLONE_NEWPID) refused: nothing to show\n");
    return;
  }
  assert_int_equal(WEXITSTATUS(status), 0);
}

/*
 * In this namespace and boot, the pid rule: a dead owner's name is removed
 * and reported, a live one's kept; neither is foreign.
 */
static void
this_namespaces_dead_owners_names_are_removed(void **state)
{
  char stale[FL__SEGMENT_NAME_MAX], live[FL__SEGMENT_NAME_MAX], id[40];
  pid_t dead = dead_pid();
  flt_baseline base;
  heard h = {0};

  (void)state;
  flt_baseline_take(&base);
  own_identity(id, sizeof(id));
  snprintf(stale, sizeof(stale), "/forkload.%ld.deadbeef.0123456789abcdef.%s",
           (long)dead, id);
  snprintf(live, sizeof(live), "/forkload.%ld.deadbeef.0123456789abcdef.%s",
           (long)getpid(), id);
  plant(stale);
  plant(live);
  assert_int_equal(fl_shm_foreign(NULL, NULL), 0);
  assert_int_equal(fl_shm_sweep(0, note_swept, &h), 1);
  assert_string_equal(h.name[0], stale);
  assert_int_equal(h.owner[0], dead);
  assert_false(exists(stale));
  assert_true(exists(live));
  shm_unlink(live);
  flt_assert_clean(&base);
}

/* A loader made and destroyed: its creation sweeps /dev/shm. */
static void
create_a_loader(void)
{
  fl_dataset ds;
  fl_loader *l;
  flt_data d;

  flt_data_init(&d, &ds, 10, 8);
  assert_int_equal(fl_loader_create(&l, &ds, NULL), 0);
  fl_loader_destroy(l);
  flt_data_free(&d);
}

/*
 * A name of another PID namespace or another boot, or one whose maker
 * could not read its own (0), is never removed, though its pid is no live
 * process here: fl_shm_sweep, a new loader's sweep and a dry run all leave
 * it, and fl_shm_foreign lists it with its pid.
 */
static void
names_of_another_namespace_or_boot_are_left_alone(void **state)
{
  char id[40], boot[17], name[4][FL__SEGMENT_NAME_MAX];
  unsigned long long ns;
  pid_t dead = dead_pid();
  flt_baseline base;
  heard h = {0};
  int i;

  (void)state;
  flt_baseline_take(&base);
  own_identity(id, sizeof(id));
  ns = strtoull(id, NULL, 10);
  snprintf(boot, sizeof(boot), "%s", strchr(id, '.') + 1);
  snprintf(name[0], sizeof(name[0]), "/forkload.%ld.deadbeef.%016x.%llu.%s",
           (long)dead, 1, ns + 1, boot);
  snprintf(name[1], sizeof(name[1]), "/forkload.%ld.deadbeef.%016x.%llu.%s",
           (long)dead, 2, ns, boot[0] == 'f' ? "0fffffffffffffff"
                                             : "ffffffffffffffff");
  snprintf(name[2], sizeof(name[2]), "/forkload.%ld.deadbeef.%016x.0.%s",
           (long)dead, 3, boot);
  snprintf(name[3], sizeof(name[3]),
           "/forkload.%ld.deadbeef.%016x.%llu.0000000000000000", (long)dead,
           4, ns);
  for (i = 0; i < 4; i++)
    plant(name[i]);
  assert_int_equal(fl_shm_sweep(1, NULL, NULL), 0);
  assert_int_equal(fl_shm_sweep(0, NULL, NULL), 0);
  create_a_loader();
  assert_int_equal(fl_shm_foreign(note_swept, &h), 4);
  for (i = 0; i < 4; i++) {
    assert_true(exists(name[i]));
    assert_int_equal(h.owner[i], dead);
    shm_unlink(name[i]);
  }
  flt_assert_clean(&base);
}

/*
 * A dry run counts only what a real one removes: a directory of a stale
 * name's form is no shared-memory object, and the sweep cannot remove it.
 */
static void
a_directory_named_like_a_stale_segment_is_not_counted(void **state)
{
  char path[96];
  pid_t dead = dead_pid();

  (void)state;
  snprintf(path, sizeof(path), "/dev/shm/forkload.%ld.deadbeef.1",
           (long)dead);
  assert_int_equal(mkdir(path, 0700), 0);
  assert_int_equal(fl_shm_sweep(1, NULL, NULL), 0);
  assert_int_equal(fl_shm_sweep(0, NULL, NULL), 0);
  assert_int_equal(rmdir(path), 0);
}

/* Makes name as the other user: a file of theirs, in the sticky dir. */
static void
plant_as_other(const char *name)
{
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);

  assert_true(fd >= 0);
  assert_int_equal(fchown(fd, OTHER_UID, OTHER_UID), 0);
  close(fd);
}

static int
owned_by_other(const char *name)
{
  struct stat st;
  int fd = shm_open(name, O_RDONLY, 0), ok;

  if (fd < 0)
    return 0;
  ok = fstat(fd, &st) == 0 && st.st_uid == OTHER_UID;
  close(fd);
  return ok;
}

/* Every batch of an epoch, its content intact. */
static void
whole_epoch(fl_loader *l, size_t len, size_t sb)
{
  unsigned char *seen = calloc(len, 1);
  fl_batch *b;
  size_t i, n = 0;
  int rc;

  assert_non_null(seen);
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) == 1) {
    for (i = 0; i < fl_batch_count(b); i++, n++) {
      assert_true(flt_sample_ok((const char *)fl_batch_data(b) + i * sb, sb,
                                fl_batch_indices(b)[i]));
      assert_int_equal(seen[fl_batch_indices(b)[i]]++, 0);
    }
    fl_batch_release(b);
  }
  if (rc != 0)
    fail_msg("%s: %s", fl_err_name(rc), fl_loader_error(l));
  assert_int_equal(n, len);
  free(seen);
}

/*
 * The name a loader draws is already taken by another user: the worker
 * draws another and makes that, the batch comes whole, and the other
 * user's file is left as it was.  Both ways a name is made in /dev/shm.
 */
static void
a_name_taken_first_is_drawn_anew_and_left_alone(void **state)
{
  static const int in_dev_shm[2] = {0, 1};
  char taken[64];
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  flt_data d;
  int i;

  (void)state;
  for (i = 0; i < 2; i++) {
    flt_baseline_take(&base);
    flt_data_init(&d, &ds, 16, 64);
    fl_options_init(&opt);
    opt.batch_size = 4;
    opt.num_workers = 1;
    opt.sharing = in_dev_shm[i] ? FL_SHARE_FILE_DESCRIPTOR
                                : FL_SHARE_FILE_SYSTEM;
    opt.fd_in_dev_shm = in_dev_shm[i];
    assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
    /* The first serial the loader draws, already someone else's. */
    forced[0] = 0x5eed5eed5eed5eedull;
    nforced = 1;
    fl__segment_name(taken, sizeof(taken), getpid(), l->token, forced[0]);
    plant_as_other(taken);
    whole_epoch(l, 16, 64);
    nforced = 0;
    assert_true(owned_by_other(taken));
    fl_loader_destroy(l);
    assert_true(owned_by_other(taken));
    shm_unlink(taken);
    flt_data_free(&d);
    flt_assert_clean(&base);
  }
}

/*
 * Another local user watches /dev/shm and, for every name of the loader it
 * sees, makes the names that would come next if serials counted up, as
 * 0.1's did.  The loader, making a new segment per batch, never meets one
 * of them, and gets every batch; the squatter's names are there after.
 */
static void squat(pid_t victim) __attribute__((noreturn));

static void
squat(pid_t victim)
{
  char prefix[32], name[320];
  unsigned long long serial;
  unsigned token;
  struct dirent *e;
  DIR *dir;
  int k, round, at;

  snprintf(prefix, sizeof(prefix), "forkload.%ld.", (long)victim);
  /* However the case ends, the squatter goes with it. */
  for (round = 0; round < 60000 && getppid() == victim; round++) {
    dir = opendir("/dev/shm");
    while (dir != NULL && (e = readdir(dir)) != NULL) {
      if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 ||
          sscanf(e->d_name + strlen(prefix), "%8x.%llx%n", &token, &serial,
                 &at) != 2)
        continue;
      /* The same name but for the serial: the same namespace and boot. */
      for (k = 1; k <= 8; k++) {
        snprintf(name, sizeof(name), "/%s%08x.%016llx%s", prefix, token,
                 serial + k, e->d_name + strlen(prefix) + at);
        close(shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600));
      }
    }
    if (dir != NULL)
      closedir(dir);
    usleep(500);
  }
  _exit(0);
}

/* The squatter of the case below, killed and reaped however it ends. */
static pid_t squatter;

static int
squatter_teardown(void **state)
{
  (void)state;
  if (squatter > 0) {
    kill(squatter, SIGKILL);
    waitpid(squatter, NULL, 0);
    squatter = 0;
  }
  return 0;
}

static void
a_squatting_user_cannot_make_the_loader_fail(void **state)
{
  char prefix[32], path[320], ready;
  struct dirent *e;
  DIR *dir;
  pid_t me = getpid();
  int status, pipefd[2], squatted = 0;
  flt_case c;

  (void)state;
  flt_case_init(&c, 400, 64);
  c.opt.batch_size = 2;
  c.opt.num_workers = 2;
  c.opt.sharing = FL_SHARE_FILE_SYSTEM;
  c.opt.reuse_segments = 0;
  assert_int_equal(pipe(pipefd), 0);
  squatter = fork();
  assert_true(squatter >= 0);
  if (squatter == 0) {
    close(pipefd[0]);
    if (setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0)
      _exit(3);
    /* Set after setuid, which clears it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (write(pipefd[1], "r", 1) != 1)
      _exit(4);
    close(pipefd[1]);
    squat(me);
  }
  /* The loader starts once the squatter watches, as the other user. */
  close(pipefd[1]);
  assert_int_equal(read(pipefd[0], &ready, 1), 1);
  close(pipefd[0]);
  flt_case_create(&c);
  whole_epoch(c.l, 400, 64);
  whole_epoch(c.l, 400, 64);
  fl_loader_destroy(c.l);
  c.l = NULL;
  kill(squatter, SIGKILL);
  assert_int_equal(waitpid(squatter, &status, 0), squatter);
  squatter = 0;
  assert_true(WIFSIGNALED(status)); /* it squatted until killed */
  /* What it made is its own: the loader removed none of it. */
  snprintf(prefix, sizeof(prefix), "forkload.%ld.", (long)me);
  dir = opendir("/dev/shm");
  assert_non_null(dir);
  while ((e = readdir(dir)) != NULL) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
      continue;
    snprintf(path, sizeof(path), "/%s", e->d_name);
    assert_true(owned_by_other(path));
    shm_unlink(path);
    squatted++;
  }
  closedir(dir);
  /* Hundreds, as a rule: none, and the loader was never squatted on. */
  if (squatted == 0)
    fail_msg("the squatter made no name while the loader ran");
  flt_case_end(&c);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(next_loader_sweeps_a_dead_owners_name_and_no_other),
      cmocka_unit_test(sweep_removes_every_dead_owners_names),
      cmocka_unit_test(names_not_of_the_exact_form_are_never_touched),
      cmocka_unit_test(names_of_the_older_form_keep_the_pid_rule),
      cmocka_unit_test(a_name_carries_this_pid_namespace_and_boot),
      cmocka_unit_test(a_child_in_a_new_pid_namespace_reads_its_own),
      cmocka_unit_test(this_namespaces_dead_owners_names_are_removed),
      cmocka_unit_test(names_of_another_namespace_or_boot_are_left_alone),
      cmocka_unit_test(a_directory_named_like_a_stale_segment_is_not_counted),
      cmocka_unit_test(a_name_taken_first_is_drawn_anew_and_left_alone),
      cmocka_unit_test_teardown(a_squatting_user_cannot_make_the_loader_fail,
                                squatter_teardown),
  };
  char why[256];

  if (flt_private_dev_shm("size=16m", why, sizeof(why)) != 0)
    flt_skip_all("needs root and a private mount namespace (unshare -m), so "
                 "that no other loader sweeps the planted names: %s",
                 why);
  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
