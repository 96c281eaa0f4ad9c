/*
 * The loader's state in a file, for `run --resume` and `--save-state`:
 * read whole but bounded, so that a wrong path cannot make forkload
 * reserve unbounded memory, and written atomically (a temporary file in
 * the same directory, fsync, rename), so that FILE is always either the
 * old state or the whole new one, as a checkpoint must be.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* Far above any state: its size grows with the prefetch window only. */
#define STATE_MAX ((size_t)64 << 20)

/* The directory that holds path, in a copy the caller frees, or NULL. */
static char *
dir_of(const char *path)
{
  char *copy = strdup(path), *dir = NULL;

  if (copy != NULL)
    dir = strdup(dirname(copy));
  free(copy);
  return dir;
}

int
state_read(const char *path, void **buf, size_t *len)
{
  unsigned char *data = NULL, *more;
  size_t n = 0, cap = 0;
  ssize_t got;
  int fd, status = 2;

  *buf = NULL;
  *len = 0;
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
    cli_error("--resume %s: %s", path, strerror(errno));
    return 2;
  }
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 4096;
      if (cap > STATE_MAX + 1)
        cap = STATE_MAX + 1;
      if (n == cap) {
        cli_error("--resume %s: more than %zu bytes: not a loader state",
                  path, STATE_MAX);
        goto out;
      }
      if ((more = realloc(data, cap)) == NULL) {
        cli_error("--resume %s: %s", path, fl_strerror(FL_ENOMEM));
        status = 1;
        goto out;
      }
      data = more;
    }
    got = read(fd, data + n, cap - n);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      cli_error("--resume %s: %s", path, strerror(errno));
      goto out;
    }
    if (got == 0)
      break;
    n += (size_t)got;
  }
  *buf = data;
  *len = n;
  data = NULL;
  status = 0;
out:
  free(data);
  close(fd);
  return status;
}

int
state_dir_ok(const char *path)
{
  struct stat sb;
  char *dir = NULL;
  int ok;

  /* Said before the run, not after it has spent its time. */
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    cli_error("--save-state %s: is a directory", path);
    return -1;
  }
  dir = dir_of(path);
  ok = dir != NULL && access(dir, W_OK | X_OK) == 0;
  if (!ok)
    cli_error("--save-state %s: cannot write in %s: %s", path,
              dir != NULL ? dir : "its directory",
              dir != NULL ? strerror(errno) : fl_strerror(FL_ENOMEM));
  free(dir);
  return ok ? 0 : -1;
}

/* Writes all of buf to fd: 0, or -1 with errno set. */
static int
write_all(int fd, const unsigned char *buf, size_t len)
{
  ssize_t put;

  while (len > 0) {
    put = write(fd, buf, len);
    if (put < 0 && errno == EINTR)
      continue;
    if (put < 0)
      return -1;
    buf += put;
    len -= (size_t)put;
  }
  return 0;
}

int
state_write(const char *path, const void *buf, size_t len)
{
  char *dir = dir_of(path), *tmp = NULL;
  int fd, dfd, ok, err, rc = -1;

  if (dir == NULL || asprintf(&tmp, "%s/.forkload-state.XXXXXX", dir) < 0) {
    tmp = NULL;
    cli_error("--save-state %s: %s", path, fl_strerror(FL_ENOMEM));
    goto out;
  }
  if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
    cli_error("--save-state %s: cannot create a file in %s: %s", path, dir,
              strerror(errno));
    goto out;
  }
  ok = write_all(fd, buf, len) == 0 && fsync(fd) == 0;
  err = errno;
  if (close(fd) < 0 && ok) {
    ok = 0;
    err = errno;
  }
  if (!ok) {
    cli_error("--save-state %s: cannot write %s: %s", path, tmp,
              strerror(err));
    unlink(tmp);
    goto out;
  }
  if (rename(tmp, path) < 0) {
    cli_error("--save-state %s: cannot rename %s to it: %s", path, tmp,
              strerror(errno));
    unlink(tmp);
    goto out;
  }
  /* The rename lasts only once the directory is on disk; the file is
     whole by now either way. */
  if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
    fsync(dfd);
    close(dfd);
  }
  rc = 0;
out:
  free(tmp);
  free(dir);
  return rc;
}
