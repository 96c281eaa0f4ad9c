/*
 * The channel between a worker and its parent: fixed-size messages on a
 * SOCK_SEQPACKET socketpair, with at most one fd attached (SCM_RIGHTS).
 * Message boundaries are kept by the socket, so a message is read whole or
 * not at all.  Replies go up; grants (a segment lent to this worker) come
 * down, each just before the task that names it.
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"

static int
send_fd(int sock, const void *buf, size_t len, int fd)
{
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct iovec iov = {(void *)buf, len};
  struct msghdr msg = {0};
  struct cmsghdr *c;
  ssize_t n;

  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    memset(&ctl, 0, sizeof(ctl));
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  do
    n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return -errno;
  return n == (ssize_t)len ? 0 : FL_EPROTO;
}

/*
 * Read one message of exactly len bytes whose first field is the protocol
 * version.  Returns 1 (with *fd or -1), 0 at end of stream, -EAGAIN when
 * flags has MSG_DONTWAIT and nothing waits, FL_EMFILE when the kernel
 * dropped the attached fd (the message is still filled in), FL_EPROTO for
 * a malformed message, or another negative errno.
 */
static int
recv_fd(int sock, void *buf, size_t len, int *fd, int flags)
{
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct iovec iov = {buf, len};
  struct msghdr msg = {0};
  struct cmsghdr *c;
  uint16_t version;
  ssize_t n;

  *fd = -1;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl.buf;
  msg.msg_controllen = sizeof(ctl.buf);
  do
    n = recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return errno == EWOULDBLOCK ? FL_EAGAIN : -errno;
  if (n == 0)
    return 0;
  for (c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int)))
      memcpy(fd, CMSG_DATA(c), sizeof(int));
  }
  memcpy(&version, buf, sizeof(version));
  if (n != (ssize_t)len || version != FL__PROTOCOL_VERSION) {
    if (*fd >= 0)
      fl__close(*fd);
    *fd = -1;
    return FL_EPROTO;
  }
  if (msg.msg_flags & MSG_CTRUNC)
    return FL_EMFILE;
  return 1;
}

int
fl__channel_send(int sock, const struct fl__reply *r, int fd)
{
  return send_fd(sock, r, sizeof(*r), fd);
}

/* Non-blocking, in the parent; see recv_fd for the results. */
int
fl__channel_recv(int sock, struct fl__reply *r, int *fd)
{
  int rc = recv_fd(sock, r, sizeof(*r), fd, MSG_DONTWAIT);

  if (rc == 1 || rc == FL_EMFILE)
    r->msg[sizeof(r->msg) - 1] = '\0';
  return rc;
}

int
fl__channel_grant(int sock, uint32_t slot, uint64_t serial, int fd)
{
  struct fl__grant g;

  memset(&g, 0, sizeof(g));
  g.version = FL__PROTOCOL_VERSION;
  g.slot = slot;
  g.serial = serial;
  return send_fd(sock, &g, sizeof(g), fd);
}

/*
 * In the worker: the fd lent for the task with this serial.  Grants of
 * tasks the parent withdrew come first and are dropped.  Returns the fd,
 * or a negative code.
 */
int
fl__channel_take_grant(int sock, uint64_t serial)
{
  struct fl__grant g;
  int fd, rc;

  for (;;) {
    rc = recv_fd(sock, &g, sizeof(g), &fd, 0);
    if (rc == 0)
      return FL_EPROTO; /* the parent is gone */
    if (rc < 0)
      return rc;
    if (g.serial == serial && fd >= 0)
      return fd;
    if (fd >= 0)
      fl__close(fd);
  }
}
