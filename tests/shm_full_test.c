/*
 * A full /dev/shm, as in a container's 64 MB one, made small: each case
 * runs in a child with a private mount namespace and a 1 MiB tmpfs over
 * /dev/shm.  The loader must fail with a clean FL_ENOSPC (never a SIGBUS in
 * a worker), keep the batch it could not make, deliver it once segments
 * come free, and leave nothing behind.  Needs root and unshare(CLONE_NEWNS):
 * elsewhere the whole program is skipped with the reason.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define SMALL_SHM "size=1m"
#define SAMPLE (64 * 1024)

/*
 * Hold batches until the loader fails; the failure must be FL_ENOSPC with
 * the promised message (want_full), or none at all while holding more than
 * /dev/shm's size (memfd, which /dev/shm does not pay for).
 */
static int
fill_until_full(fl_sharing sharing, int in_dev_shm, int want_full,
                char *why, size_t len)
{
  fl_batch *held[64];
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  fl_stats st;
  flt_data d;
  size_t n = 0, i;
  int rc;

  flt_data_init(&d, &ds, 400, SAMPLE);
  fl_options_init(&opt);
  opt.batch_size = 2;
  opt.num_workers = 2;
  opt.persistent_workers = 1;
  opt.sharing = sharing;
  opt.fd_in_dev_shm = in_dev_shm;
  if ((rc = fl_loader_create(&l, &ds, &opt)) != 0 ||
      (rc = fl_loader_begin(l)) != 0) {
    snprintf(why, len, "create/begin: %s", fl_strerror(rc));
    return 1;
  }
  while (n < 24 && (rc = fl_loader_next(l, &b)) == 1)
    held[n++] = b;
  fl_loader_stats(l, &st);
  if (!want_full) {
    if (rc != 1 || st.bytes_mapped <= 2 * 1024 * 1024) {
      snprintf(why, len, "memfd: rc %d (%s) after %zu batches, %zu bytes",
               rc, fl_loader_error(l), n, st.bytes_mapped);
      return 2;
    }
  } else if (rc != FL_ENOSPC ||
             strstr(fl_loader_error(l), "/dev/shm is full") == NULL ||
             strstr(fl_loader_error(l), "this loader holds") == NULL) {
    snprintf(why, len, "after %zu batches: %s: %s", n, fl_err_name(rc),
             fl_loader_error(l));
    return 3;
  }
  for (i = 0; i < n; i++)
    fl_batch_release(held[i]);
  /* The batch that did not fit comes now, in its place. */
  rc = fl_loader_next(l, &b);
  if (rc != 1 || fl_batch_seq(b) != n) {
    snprintf(why, len, "after release: rc %d, seq %llu, want %zu: %s", rc,
             rc == 1 ? (unsigned long long)fl_batch_seq(b) : 0ull, n,
             fl_loader_error(l));
    return 4;
  }
  fl_batch_release(b);
  fl_loader_destroy(l);
  if (flt_shm_count() != 0 || flt_child_count() != 0) {
    snprintf(why, len, "left behind: %d names, %d processes",
             flt_shm_count(), flt_child_count());
    return 5;
  }
  return 0;
}

/*
 * A prefetch window larger than /dev/shm is refused at create, with
 * FL_ENOSPC and the arithmetic, before any segment is made; memfd
 * segments are not charged to /dev/shm, so the same options pass there.
 */
static int
refuse_at_create(fl_sharing sharing, int in_dev_shm, int want_full,
                 char *why, size_t len)
{
  fl_options opt;
  fl_dataset ds;
  fl_loader *l = NULL;
  flt_data d;
  int rc;

  flt_data_init(&d, &ds, 400, SAMPLE);
  fl_options_init(&opt);
  opt.batch_size = 2;
  opt.num_workers = 8;
  opt.prefetch_factor = 4;
  opt.sharing = sharing;
  opt.fd_in_dev_shm = in_dev_shm;
  rc = fl_loader_create(&l, &ds, &opt);
  fl_loader_destroy(l);
  flt_data_free(&d);
  if (!want_full && rc != 0) {
    snprintf(why, len, "memfd refused: %s", fl_loader_error(NULL));
    return 1;
  }
  if (want_full &&
      (rc != FL_ENOSPC ||
       strstr(fl_loader_error(NULL), "the prefetch window needs in "
                                     "/dev/shm") == NULL ||
       strstr(fl_loader_error(NULL),
              sharing == FL_SHARE_FILE_SYSTEM
                  ? "(prefetch_factor 4 + 1) x num_workers 8 segments"
                  : "(prefetch_factor 4 x num_workers 8 + 1) segments") ==
           NULL ||
       strstr(fl_loader_error(NULL), "the free space of /dev/shm") == NULL)) {
    snprintf(why, len, "%s: %s", fl_err_name(rc), fl_loader_error(NULL));
    return 2;
  }
  return flt_shm_count() == 0 ? 0 : 3;
}

typedef int (*check_fn)(fl_sharing, int, int, char *, size_t);

struct small_shm {
  check_fn check;
  fl_sharing sharing;
  int in_dev_shm, want_full;
};

/* In the child: the check, under a private small /dev/shm. */
static int
under_small_shm(void *arg, char *why, size_t len)
{
  const struct small_shm *s = arg;
  int rc = flt_private_dev_shm(SMALL_SHM, why, len);

  if (rc == 0)
    rc = s->check(s->sharing, s->in_dev_shm, s->want_full, why, len);
  return rc == 0 ? 0 : 10 + rc;
}

/* Run a check in a namespaced child; fail with its reason. */
static void
in_small_shm(check_fn check, fl_sharing sharing, int in_dev_shm,
             int want_full)
{
  struct small_shm s = {check, sharing, in_dev_shm, want_full};
  char why[512];
  flt_baseline base;
  int status;

  flt_baseline_take(&base);
  status = flt_in_child(under_small_shm, &s, why, sizeof(why));
  if (status != 0)
    fail_msg("status %d: %s", status, why);
  flt_assert_clean(&base);
}

static void
file_system_strategy_into_full_dev_shm_gives_enospc_not_sigbus(void **s)
{
  (void)s;
  in_small_shm(fill_until_full, FL_SHARE_FILE_SYSTEM, 0, 1);
}

static void
fd_strategy_in_dev_shm_as_pytorch_gives_enospc_not_sigbus(void **s)
{
  (void)s;
  in_small_shm(fill_until_full, FL_SHARE_FILE_DESCRIPTOR, 1, 1);
}

static void
fd_strategy_memfd_is_not_charged_to_dev_shm(void **s)
{
  (void)s;
  in_small_shm(fill_until_full, FL_SHARE_FILE_DESCRIPTOR, 0, 0);
}

static void
window_larger_than_dev_shm_is_refused_at_create(void **s)
{
  (void)s;
  in_small_shm(refuse_at_create, FL_SHARE_FILE_SYSTEM, 0, 1);
  in_small_shm(refuse_at_create, FL_SHARE_FILE_DESCRIPTOR, 1, 1);
  in_small_shm(refuse_at_create, FL_SHARE_FILE_DESCRIPTOR, 0, 0);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(
          file_system_strategy_into_full_dev_shm_gives_enospc_not_sigbus),
      cmocka_unit_test(
          fd_strategy_in_dev_shm_as_pytorch_gives_enospc_not_sigbus),
      cmocka_unit_test(fd_strategy_memfd_is_not_charged_to_dev_shm),
      cmocka_unit_test(window_larger_than_dev_shm_is_refused_at_create),
  };
  char why[256] = "";
  pid_t pid;
  int status;

  /* Can this machine give us a namespace at all? */
  pid = fork();
  if (pid == 0)
    _exit(flt_private_dev_shm(SMALL_SHM, why, sizeof(why)) == 0 ? 0 : 1);
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0)
    flt_skip_all("needs root and a private mount namespace "
                 "(unshare -m) to mount a small tmpfs over /dev/shm");
  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
