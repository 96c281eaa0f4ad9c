/*
 * The wire protocol between the parent and its workers.
 *
 * Parent to worker: fixed-size tasks on the worker's POSIX message queue
 * (or its socket pair, index_queue.c), and, on the reply socket, a grant with an fd when a task names a segment lent
 * from another worker.  Worker to parent: fixed-size replies on a
 * SOCK_SEQPACKET socketpair, with the segment's fd attached (SCM_RIGHTS)
 * the first time a segment travels under the fd strategy.  Batch contents
 * never travel: they are written in place into the segment the task names.
 *
 * Each task gets exactly one reply, so the parent always knows what is
 * outstanding.  At a new epoch it withdraws unstarted tasks from the queue
 * itself (any reader of a POSIX queue may take a message) and waits only
 * for the tasks already being filled.
 *
 * Bump FL__PROTOCOL_VERSION whenever a message below changes.
 */
#ifndef FL_PROTOCOL_H
#define FL_PROTOCOL_H

#include <stdint.h>

#define FL__PROTOCOL_VERSION 10

enum fl__task_type {
  FL__TASK_FILL = 1, /* fill batch `seq` into segment `slot` */
  FL__TASK_STOP = 2  /* exit cleanly */
};

/*
 * Parent to worker, 72 bytes whatever the batch size: the worker computes
 * the indices from the epoch's order (fl__order, a shared mapping made
 * before the workers fork), at the positions of this rank's share that
 * offset and count name.
 */
struct fl__task {
  uint16_t version;
  uint16_t type;
  uint32_t slot;   /* segment to fill, in this worker's slot table */
  uint64_t run;    /* which fl_loader_begin: a reply of an earlier one is
                      stale, whatever epoch number it had */
  uint64_t epoch;  /* the epoch's number, as the user counts them */
  uint64_t seq;    /* batch position in the epoch */
  uint64_t offset; /* first position of this rank's share in the batch */
  uint32_t count;  /* samples in this batch */
  uint32_t flags;  /* FL__TASK_* flags below */
  uint64_t serial; /* names a new segment made in /dev/shm (64 random
                      bits), or, with FL__TASK_GRANTED, the grant */
  uint64_t skip;   /* iterable: samples the stream skips when it opens
                      (a resumed epoch, or a respawned worker) */
  uint32_t attempt; /* times this batch was asked for before: fault
                       injection draws anew for each */
  uint32_t shift;   /* with FL__TASK_RESCALE: the size class (log2 of the
                       scale of the loader's layout) to make the slot's
                       segment anew at before filling it */
};

/* The worker creates the segment for `slot` (it has none yet). */
#define FL__TASK_NEW_SEGMENT 0x1u
/* The worker drops `slot` after replying (reuse_segments is off). */
#define FL__TASK_ONE_SHOT 0x2u
/* The segment for `slot` is lent to this worker: its fd waits on the
   socket in a grant with this task's serial. */
#define FL__TASK_GRANTED 0x4u
/* The slot's segment is larger than the batches lately need: the worker
   makes one of class `shift` in its place (and keeps the old one if it
   cannot), so that one long batch does not keep memory for the rest of
   the run. */
#define FL__TASK_RESCALE 0x8u

/*
 * Parent to worker, on the socket, with the segment's fd: a segment made by
 * another worker and idle there, lent so that no new one need be made.
 */
struct fl__grant {
  uint16_t version;
  uint16_t reserved;
  uint32_t slot;
  uint64_t serial; /* the task's */
};

enum fl__reply_type {
  FL__REPLY_BATCH = 1 /* `slot` holds batch `seq`, or status < 0 */
};

/* Reply flags: the worker made the segment this task asked it to. */
#define FL__REPLY_FD 0x1u    /* its fd is attached */
#define FL__REPLY_NAMED 0x2u /* it exists under its name */
/* Iterable datasets: the worker's stream is over; no batch in this reply. */
#define FL__REPLY_END 0x4u
/* The faults option made a fault happen in this task (a delay, a failed
   reservation). */
#define FL__REPLY_FAULT 0x8u
/* status is FL_ENOMEM because the worker is at vm.max_map_count (msg
   says so). */
#define FL__REPLY_MAPS 0x10u
/* The worker made a segment in place of the one the slot had (a batch
   larger than it, or FL__TASK_RESCALE): its fd is attached or it exists
   under its name, and the parent lets go of the old one. */
#define FL__REPLY_REPLACED 0x20u

#define FL__REPLY_MSG_MAX 256

/* Worker to parent. */
struct fl__reply {
  uint16_t version;
  uint16_t type;
  uint32_t worker;
  uint64_t run;     /* the task's */
  uint64_t serial;  /* the name of a segment it made in /dev/shm: the
                       task's, or one drawn anew when that was taken */
  uint64_t seq;
  uint32_t slot;
  uint32_t count;
  int32_t status;   /* 0, or a negative fl code for this batch */
  uint32_t flags;   /* FL__REPLY_* */
  char msg[FL__REPLY_MSG_MAX]; /* why status < 0, NUL-terminated */
};

/*
 * Layout of a segment: a header, the batch's indices and sizes, then the
 * samples at a 64-byte aligned offset, sample i at data + i*sample_bytes,
 * then a guard where the worker plants a canary to catch a get that
 * writes past its sample.
 */
#define FL__GUARD_BYTES 64
#define FL__SEGMENT_MAGIC 0x666c7367u /* "flsg" */

struct fl__segment_header {
  uint32_t magic;
  uint32_t worker;
  uint64_t epoch;
  uint64_t seq;
  uint64_t count;
  uint64_t capacity;      /* samples the segment has room for */
  uint64_t sample_bytes;
  uint64_t data_offset;   /* from the start of the segment */
  uint64_t shift;         /* its size class: every field's room is the
                             loader's field_bytes << shift (0: the
                             loader's own layout) */
};

/*
 * What a worker killed by SIGBUS leaves for its parent, in a mapping they
 * share (one note per worker), so that the death can be told: the address
 * that faulted and the file mapped there, as the worker's /proc/self/maps
 * named it.
 */
struct fl__bus_note {
  uint64_t addr;   /* 0: nothing noted */
  int32_t si_code; /* <= 0: sent by a process, not a fault */
  uint32_t reserved;
  char path[240];
};

#endif /* FL_PROTOCOL_H */
