/*
 * The index queues: one POSIX message queue per worker carries its tasks.
 * A queue is unlinked as soon as it is made (the worker inherits the open
 * descriptor across fork), so no name is ever left in /dev/mqueue.  Its
 * depth respects fs.mqueue.msg_max (10 on a stock system); tasks that do not
 * fit wait in the parent's backlog (dispatch.c).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
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

int
fl__index_queue_create(int *mq, uint32_t token, unsigned worker,
                       unsigned depth, char *err, size_t errlen)
{
  struct mq_attr attr = {0};
  char name[64];
  mqd_t q;
  int rc;

  attr.mq_maxmsg = fl__index_queue_depth(depth);
  attr.mq_msgsize = sizeof(struct fl__task);
  snprintf(name, sizeof(name), "/forkload.%ld.%08x.q%u", (long)getpid(),
           token, worker);
  q = mq_open(name, O_RDWR | O_CREAT | O_EXCL | O_NONBLOCK | O_CLOEXEC, 0600,
              &attr);
  if (q == (mqd_t)-1) {
    rc = -errno;
    if (errno == ENOSPC)
      snprintf(err, errlen,
               "cannot create the index queue of worker %u: the system's "
               "limit of %llu message queues (fs.mqueue.queues_max) is "
               "reached", worker,
               (unsigned long long)fl__sysctl("fs/mqueue/queues_max", 256));
    else if (errno == EMFILE)
      snprintf(err, errlen,
               "cannot create the index queue of worker %u: too many open "
               "files or message-queue bytes (ulimit -n, ulimit -q)", worker);
    else
      snprintf(err, errlen, "cannot create the index queue of worker %u: %s",
               worker, fl__strerror(errno));
    return rc;
  }
  mq_unlink(name);
  *mq = (int)q;
  return 0;
}

/* Non-blocking: FL_EAGAIN when the queue is full. */
int
fl__index_queue_send(int mq, const struct fl__task *t)
{
  int rc;

  do
    rc = mq_send((mqd_t)mq, (const char *)t, sizeof(*t), 0);
  while (rc != 0 && errno == EINTR);
  return rc == 0 ? 0 : -errno;
}

/* Take back a task no worker has started: 1, or 0 when none is left. */
int
fl__index_queue_withdraw(int mq, struct fl__task *t)
{
  ssize_t n;

  do
    n = mq_receive((mqd_t)mq, (char *)t, sizeof(*t), NULL);
  while (n < 0 && errno == EINTR);
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
fl__index_queue_recv(int mq, int parent_sock, pid_t parent,
                     struct fl__task *t)
{
  struct pollfd p[2];
  ssize_t n;
  int rc;

  for (;;) {
    n = mq_receive((mqd_t)mq, (char *)t, sizeof(*t), NULL);
    if (n == (ssize_t)sizeof(*t))
      return t->version == FL__PROTOCOL_VERSION ? 1 : FL_EPROTO;
    if (n >= 0)
      return FL_EPROTO;
    if (errno != EAGAIN && errno != EINTR)
      return -errno;
    p[0].fd = mq;
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
