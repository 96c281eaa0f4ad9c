/*
 * The index queues: one POSIX message queue per worker carries its tasks.
 * A queue is unlinked as soon as it is made (the worker inherits the open
 * descriptor across fork), so no name is ever left in /dev/mqueue.  Its
 * depth respects fs.mqueue.msg_max (10 on a stock system); tasks that do not
 * fit wait in the parent's backlog (dispatch.c).  A worker whose queue
 * cannot be had (past fs.mqueue.queues_max or RLIMIT_MSGQUEUE, or from a
 * kernel without them or that denies them) gets a SOCK_SEQPACKET socket
 * pair instead, as torch's workers have pipes: it keeps each task whole,
 * polls, and says EAGAIN when full, as a queue does.  The parent keeps
 * both its ends, so that it takes back what the worker has not read
 * exactly as it does from a queue; the worker reads one.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

unsigned
fl__index_queue_depth(unsigned want)
{
  uint64_t max = fl__sysctl("fs/mqueue/msg_max", 10);

  return want < max ? want : (unsigned)max;
}

/* The kernel charges a queue's messages and, per message, a msg_msg and a
   node of its priority tree, 48 bytes each on 64-bit (mqueue_get_inode). */
uint64_t
fl__index_queue_bytes(unsigned depth)
{
  return (uint64_t)depth * (sizeof(struct fl__task) + 12 * sizeof(void *));
}

uint64_t
fl__index_queue_mq_limit(unsigned want)
{
  uint64_t bytes, queues,
      per = fl__index_queue_bytes(fl__index_queue_depth(want));

  fl__msgqueue_now(&bytes, &queues);
  return bytes == UINT64_MAX || bytes / per > queues ? queues : bytes / per;
}

/* Where the message queue could not be had: a socket pair.  ENOSPC is the
   system's count of queues, EMFILE this user's bytes of them (or the fd
   limit, which the pair then meets too), ENFILE and ENOMEM the kernel's,
   ENOSYS a kernel without POSIX message queues, and EACCES one that
   denies this process them (a security module, a filter). */
static int
socket_pair(struct fl__index_queue *q, unsigned worker, int mq_errno,
            char *err, size_t errlen)
{
  int sv[2], e;

  if (mq_errno != ENOSPC && mq_errno != EMFILE && mq_errno != ENFILE &&
      mq_errno != ENOMEM && mq_errno != ENOSYS && mq_errno != EACCES) {
    snprintf(err, errlen, "cannot create the index queue of worker %u: %s",
             worker, fl__strerror(mq_errno));
    return -mq_errno;
  }
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    e = errno;
    snprintf(err, errlen, "cannot create the index queue of worker %u: "
             "neither a message queue (%s) nor a socket pair (%s)%s", worker,
             fl__strerror(mq_errno), fl__strerror(e),
             e == EMFILE ? ": raise `ulimit -n`" : "");
    return -e;
  }
  q->send = sv[0];
  q->recv = sv[1];
  return 0;
}

int
fl__index_queue_create(struct fl__index_queue *q, uint32_t token,
                       unsigned worker, unsigned depth, char *err,
                       size_t errlen)
{
  struct mq_attr attr = {0};
  char name[64];
  mqd_t mq;

  attr.mq_maxmsg = fl__index_queue_depth(depth);
  attr.mq_msgsize = sizeof(struct fl__task);
  snprintf(name, sizeof(name), "/forkload.%ld.%08x.q%u", (long)getpid(),
           token, worker);
  mq = mq_open(name, O_RDWR | O_CREAT | O_EXCL | O_NONBLOCK | O_CLOEXEC,
               0600, &attr);
  if (mq == (mqd_t)-1)
    return socket_pair(q, worker, errno, err, errlen);
  mq_unlink(name);
  q->send = q->recv = (int)mq;
  return 0;
}

void
fl__index_queue_close(struct fl__index_queue *q)
{
  if (FL__INDEX_QUEUE_SOCKET(q))
    fl__fdtrack_close(q->send);
  if (q->recv >= 0)
    fl__fdtrack_close(q->recv);
  q->send = q->recv = -1;
}

/* Non-blocking: FL_EAGAIN when the queue is full. */
int
fl__index_queue_send(const struct fl__index_queue *q,
                     const struct fl__task *t)
{
  ssize_t n;

  do
    n = FL__INDEX_QUEUE_SOCKET(q)
            ? send(q->send, t, sizeof(*t), MSG_DONTWAIT | MSG_NOSIGNAL)
            : mq_send((mqd_t)q->send, (const char *)t, sizeof(*t), 0);
  while (n < 0 && errno == EINTR);
  return n < 0 ? -errno : 0;
}

/* One task's bytes without waiting, or -1 with errno; 0 from a socket is
   its sending end closed. */
static ssize_t
take(const struct fl__index_queue *q, struct fl__task *t)
{
  ssize_t n;

  do
    n = FL__INDEX_QUEUE_SOCKET(q)
            ? recv(q->recv, t, sizeof(*t), MSG_DONTWAIT)
            : mq_receive((mqd_t)q->recv, (char *)t, sizeof(*t), NULL);
  while (n < 0 && errno == EINTR);
  return n;
}

/* Take back a task no worker has started: 1, or 0 when none is left. */
int
fl__index_queue_withdraw(const struct fl__index_queue *q, struct fl__task *t)
{
  ssize_t n = take(q, t);

  if (n < 0)
    return errno == EAGAIN ? 0 : -errno;
  return n == (ssize_t)sizeof(*t) ? 1 : FL_EPROTO;
}

/* How often an idle worker checks that its parent is still the same. */
#define FL__PARENT_CHECK_MS 200

/*
 * In the worker: wait for the next task.  Returns 1 with a task, 0 when the
 * parent is gone (its end of the socket hung up, or we were re-parented),
 * or a negative errno.
 */
int
fl__index_queue_recv(const struct fl__index_queue *q, int parent_sock,
                     pid_t parent, struct fl__task *t)
{
  struct pollfd p[2];
  ssize_t n;
  int rc;

  for (;;) {
    n = take(q, t);
    if (n == (ssize_t)sizeof(*t))
      return t->version == FL__PROTOCOL_VERSION ? 1 : FL_EPROTO;
    if (n == 0 && FL__INDEX_QUEUE_SOCKET(q))
      return 0; /* the parent's ends closed: it is gone */
    if (n >= 0)
      return FL_EPROTO;
    if (errno != EAGAIN)
      return -errno;
    p[0].fd = q->recv;
    p[0].events = POLLIN;
    /* Only a hang-up: grants may wait there, read with their tasks. */
    p[1].fd = parent_sock;
    p[1].events = POLLRDHUP;
    rc = poll(p, 2, FL__PARENT_CHECK_MS);
    if (rc < 0 && errno != EINTR)
      return -errno;
    if (rc > 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
      return 0; /* the parent closed its end: it is gone */
    if (getppid() != parent)
      return 0;
  }
}
