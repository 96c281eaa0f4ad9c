/*
 * How `forkload gen` puts what it wrote in place: every kind is written
 * into a sibling of its target, TARGET.gen-XXXXXX (so on the same
 * filesystem, where rename(2) is atomic), as TARGET.gen-XXXXXX/new, and
 * renamed onto the target only once whole and synced.  Without --force an
 * existing file or non-empty directory is refused by the rename itself,
 * not by a check before it; with --force the old one is swapped out into
 * the sibling and removed with it.  A failure anywhere removes the
 * sibling, leaving the target as it was and nothing new beside it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* How the target was put in place, which says how to put it back. */
enum {
  NOT_PLACED,
  PLACED_NEW,     /* nothing was there (or an empty directory) */
  PLACED_SWAPPED, /* RENAME_EXCHANGE: the old one is at o->path */
  PLACED_ASIDE    /* renamed to o->old first, where it cannot swap */
};

static int
oom(void)
{
  cli_error("gen: %s", fl_strerror(FL_ENOMEM));
  return -1;
}

int
gen_out_open(struct gen_out *o, const char *target, int dir)
{
  size_t len = strlen(target);

  memset(o, 0, sizeof *o);
  o->dir = dir;
  /* "d/" has its sibling beside d, not in it. */
  while (len > 1 && target[len - 1] == '/')
    len--;
  if ((o->target = strndup(target, len)) == NULL ||
      asprintf(&o->tmp, "%s.gen-XXXXXX", o->target) < 0) {
    o->tmp = NULL;
    return oom();
  }
  if (mkdtemp(o->tmp) == NULL) {
    cli_error("gen: %s: cannot create %s beside it: %s", o->target, o->tmp,
              strerror(errno));
    free(o->tmp);
    o->tmp = NULL;
    return -1;
  }
  if (asprintf(&o->path, "%s/new", o->tmp) < 0 ||
      asprintf(&o->old, "%s/old", o->tmp) < 0) {
    o->path = o->old = NULL;
    return oom();
  }
  if (dir && mkdir(o->path, 0777) != 0) {
    cli_error("gen: %s: %s", o->path, strerror(errno));
    return -1;
  }
  return 0;
}

/* Whole on disk before it is renamed into place: a file by fsync, a
   directory of many files by one syncfs.  Write errors a filesystem
   reports late (NFS, quotas) come here too. */
static int
sync_out(const struct gen_out *o)
{
  int fd = open(o->path, O_RDONLY | O_CLOEXEC), rc;

  if (fd < 0 || (rc = o->dir ? syncfs(fd) : fsync(fd)) != 0) {
    cli_error("gen: %s: cannot write: %s", o->target, strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  close(fd);
  return 0;
}

/* rename(2) that refuses an existing to: RENAME_NOREPLACE, or where the
   filesystem lacks it, link(2) (a file only), which refuses as well. */
static int
rename_noreplace(const char *from, const char *to)
{
  if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
    return 0;
  if (errno != EINVAL && errno != ENOSYS)
    return -1;
  if (link(from, to) != 0)
    return -1;
  unlink(from);
  return 0;
}

/* The old target could not be put back: says so and keeps the sibling
   that holds it.  Returns -1. */
static int
kept(struct gen_out *o)
{
  cli_error("gen: cannot put %s back as it was: %s; what was there is in "
            "%s", o->target, strerror(errno), o->tmp);
  o->keep = 1;
  return -1;
}

/* Puts the target back as it was before place(): 0, or -1 (kept). */
static int
undo(struct gen_out *o)
{
  int rc = 0;

  if (o->placed == PLACED_SWAPPED)
    rc = renameat2(AT_FDCWD, o->path, AT_FDCWD, o->target, RENAME_EXCHANGE);
  else if (o->placed == PLACED_NEW)
    rc = rename(o->target, o->path);
  else if (o->placed == PLACED_ASIDE)
    rc = rename(o->target, o->path) != 0 || rename(o->old, o->target) != 0
             ? -1 : 0;
  if (rc != 0)
    return kept(o);
  o->placed = NOT_PLACED;
  return 0;
}

/* --force replaces a file by a file and a directory by a directory, not
   one by the other: old is where the one that was there went. */
static int
same_type(struct gen_out *o, const char *old)
{
  struct stat st;

  if (lstat(old, &st) != 0 || !S_ISDIR(st.st_mode) == !o->dir)
    return 0;
  undo(o);
  cli_error("gen: %s is %s: --force replaces only a %s with one",
            o->target, o->dir ? "no directory" : "a directory",
            o->dir ? "directory" : "file");
  return -1;
}

/* Says why rename(2) of o->path onto the target failed: -1. */
static int
refused(const struct gen_out *o, int err)
{
  if (err == EEXIST || err == ENOTEMPTY)
    cli_error(o->dir ? "gen: %s is not empty (--force replaces it)"
                     : "gen: %s exists (--force replaces it)", o->target);
  else if (err == ENOTDIR || err == EISDIR)
    cli_error("gen: %s exists and is %s (--force replaces it)", o->target,
              o->dir ? "no directory" : "a directory");
  else
    cli_error("gen: cannot rename %s to %s: %s", o->path, o->target,
              strerror(err));
  return -1;
}

/* Puts o->path at the target, keeping what was there in o->tmp: 0, or -1
   having said why, the target as it was. */
static int
place(struct gen_out *o, int force)
{
  if (force) {
    if (renameat2(AT_FDCWD, o->path, AT_FDCWD, o->target,
                  RENAME_EXCHANGE) == 0) {
      o->placed = PLACED_SWAPPED;
      return same_type(o, o->path);
    }
    /* No exchange on this filesystem: aside, then in, a moment apart. */
    if ((errno == EINVAL || errno == ENOSYS) &&
        rename(o->target, o->old) == 0) {
      if (rename(o->path, o->target) != 0) {
        int err = errno;

        if (rename(o->old, o->target) != 0)
          kept(o);
        return refused(o, err);
      }
      o->placed = PLACED_ASIDE;
      return same_type(o, o->old);
    }
    if (errno != ENOENT)
      return refused(o, errno);
  }
  /* A directory's rename refuses a non-empty one and takes an empty one,
     as gen always has. */
  if ((o->dir ? rename(o->path, o->target)
              : rename_noreplace(o->path, o->target)) != 0)
    return refused(o, errno);
  o->placed = PLACED_NEW;
  return 0;
}

int
gen_out_place(struct gen_out *o, size_t n, int force)
{
  sigset_t stop, was;
  size_t i;
  int fd, rc = 0;

  for (i = 0; i < n; i++)
    if (sync_out(&o[i]) < 0)
      return -1;
  /* Once a ^C has asked gen to stop, nothing is put in place; and none
     comes between the renames of a target, or of several. */
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop, &was);
  if (cli_interrupted) {
    cli_error("gen: stopped by %s: nothing was put in place of %s%s",
              cli_signal_name(cli_interrupted), o[0].target,
              n > 1 ? " and the rest" : "");
    rc = -1;
  }
  for (i = 0; rc == 0 && i < n; i++)
    rc = place(&o[i], force);
  /* All or none: those placed before a failure go back. */
  while (rc != 0 && i-- > 0)
    undo(&o[i]);
  sigprocmask(SIG_SETMASK, &was, NULL);
  /* The renames last once the directory is on disk. */
  for (i = 0; rc == 0 && i < n; i++) {
    char up[PATH_MAX];

    snprintf(up, sizeof up, "%s/..", o[i].tmp);
    if ((fd = open(up, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
      fsync(fd);
      close(fd);
    }
  }
  return rc;
}

static int
remove_one(const char *path, const struct stat *st, int flag,
           struct FTW *ftw)
{
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

int
gen_out_close(struct gen_out *o, size_t n)
{
  size_t i;
  int rc = 0;

  for (i = 0; i < n; i++) {
    /* FTW_MOUNT: a filesystem mounted in an old tree is not emptied. */
    if (o[i].tmp != NULL && !o[i].keep &&
        nftw(o[i].tmp, remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) !=
            0) {
      cli_error("gen: cannot remove %s: %s", o[i].tmp, strerror(errno));
      rc = -1;
    }
    free(o[i].target);
    free(o[i].tmp);
    free(o[i].path);
    free(o[i].old);
  }
  return rc;
}
