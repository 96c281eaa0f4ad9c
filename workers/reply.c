/*
 * Reply: tell the parent that a task's batch is in its segment (or why it
 * is not), attaching the segment's fd the first time it travels.
 */
#include <string.h>

#include "internal.h"

int
fl__reply_batch(int sock, unsigned worker, const struct fl__task *t,
                int status, const char *msg, int fd, int named)
{
  struct fl__reply r;

  memset(&r, 0, sizeof(r));
  r.version = FL__PROTOCOL_VERSION;
  r.type = FL__REPLY_BATCH;
  r.worker = worker;
  r.epoch = t->epoch;
  r.seq = t->seq;
  r.slot = t->slot;
  r.count = t->count;
  r.status = status;
  r.flags = (fd >= 0 ? FL__REPLY_FD : 0) | (named ? FL__REPLY_NAMED : 0);
  if (status != 0 && msg != NULL)
    strncpy(r.msg, msg, sizeof(r.msg) - 1);
  return fl__channel_send(sock, &r, fd);
}
