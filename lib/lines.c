/*
 * Lines of a file, read with read(2) alone: no stdio, no malloc and no
 * lock, so that a worker forked from a threaded host, and a signal handler
 * in it, can read /proc too.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "internal.h"

int
fl__lines_open(struct fl__lines *lr, const char *path)
{
  do
    lr->fd = open(path, O_RDONLY | O_CLOEXEC);
  while (lr->fd < 0 && errno == EINTR);
  lr->len = lr->pos = 0;
  return lr->fd < 0 ? -1 : 0;
}

int
fl__lines_next(struct fl__lines *lr, char *line, size_t len)
{
  size_t n = 0;
  ssize_t got;
  char c;

  for (;;) {
    if (lr->pos == lr->len) {
      do
        got = read(lr->fd, lr->buf, sizeof(lr->buf));
      while (got < 0 && errno == EINTR);
      if (got <= 0) {
        line[n] = '\0';
        return n > 0;
      }
      lr->len = (size_t)got;
      lr->pos = 0;
    }
    c = lr->buf[lr->pos++];
    if (c == '\n')
      break;
    if (n + 1 < len)
      line[n++] = c;
  }
  line[n] = '\0';
  return 1;
}
