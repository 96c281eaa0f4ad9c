/*
 * The reply channel: fixed-size messages on a SOCK_SEQPACKET socketpair,
 * with at most one fd attached (SCM_RIGHTS).  Message boundaries are kept
 * by the socket, so a reply is read whole or not at all.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"

int
fl__channel_send(int sock, const struct fl__reply *r, int fd)
{
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct iovec iov = {(void *)r, sizeof(*r)};
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
  return n == (ssize_t)sizeof(*r) ? 0 : FL_EPROTO;
}

/*
 * Returns 1 with a reply (and *fd, or -1), 0 at end of stream, -EAGAIN when
 * nothing is waiting, FL_EMFILE when the kernel dropped the attached fd
 * because this process is at its fd limit (the reply is still filled in),
 * FL_EPROTO for a malformed message, or another negative errno.
 */
int
fl__channel_recv(int sock, struct fl__reply *r, int *fd)
{
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct iovec iov = {r, sizeof(*r)};
  struct msghdr msg = {0};
  struct cmsghdr *c;
  ssize_t n;

  *fd = -1;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl.buf;
  msg.msg_controllen = sizeof(ctl.buf);
  do
    n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
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
  if (n != (ssize_t)sizeof(*r) || r->version != FL__PROTOCOL_VERSION) {
    if (*fd >= 0)
      fl__close(*fd);
    *fd = -1;
    return FL_EPROTO;
  }
  r->msg[sizeof(r->msg) - 1] = '\0';
  if (msg.msg_flags & MSG_CTRUNC)
    return FL_EMFILE;
  return 1;
}
