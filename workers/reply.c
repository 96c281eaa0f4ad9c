/*
 * Reply: tell the parent that a task's batch is in its segment (or why it
 * is not), attaching the segment's fd the first time it travels.
 */
#include "config.h"

#include <string.h>

#include "internal.h"

int
fl__reply_batch(int sock, unsigned worker, const struct fl__task *t,
                size_t count, int status, const char *msg, int fd,
                uint32_t flags, uint64_t serial)
{
  struct fl__reply r;

  memset(&r, 0, sizeof(r));
  r.version = FL__PROTOCOL_VERSION;
  r.type = FL__REPLY_BATCH;
  r.worker = worker;
  r.run = t->run;
  r.serial = serial;
  r.seq = t->seq;
  r.slot = t->slot;
  r.count = (uint32_t)count;
  r.status = status;
  r.flags = flags | (fd >= 0 ? FL__REPLY_FD : 0);
  if (status != 0 && msg != NULL)
    strncpy(r.msg, msg, sizeof(r.msg) - 1);
  return fl__channel_send(sock, &r, fd);
}
