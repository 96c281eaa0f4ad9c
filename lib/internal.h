/*
 * Internal declarations shared by the library and the worker code, grouped
 * by the file that defines them.  The data path reads, file by file:
 * sampler.c -> index_queue.c -> workers/loop.c, fetch.c, collate.c ->
 * segment.c -> workers/reply.c, channel.c -> receive.c -> reorder.c ->
 * loader.c (fl_loader_next) -> batch.c (fl_batch_release).
 */
#ifndef FL_INTERNAL_H
#define FL_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "forkload.h"
#include "protocol.h"

#define FL__ERRMSG_MAX 1024

typedef struct fl__worker fl__worker; /* loader.c's, below */

/* randperm.c: torch's generator (MT19937, init_genrand) and randperm. */
typedef struct fl__mt {
  uint32_t s[624];
  unsigned i;
} fl__mt;

/* torch draws 32-bit swaps (the narrow path) below this length and 64-bit
   ones (the wide path) from it on. */
#define FL__RANDPERM_NARROW_MAX (UINT32_MAX / 20)

void fl__mt_seed(fl__mt *mt, uint64_t seed);
uint32_t fl__mt_next(fl__mt *mt);
/* Permute a[0..n) as torch.randperm(n) from seed permutes 0..n-1 (a[i]
   becomes a[perm[i]]): the narrow or the wide path by n, as torch. */
void fl__randperm(uint64_t seed, size_t *a, size_t n);
void fl__randperm_narrow(fl__mt *mt, size_t *a, size_t n);
void fl__randperm_wide(fl__mt *mt, size_t *a, size_t n);

/* mix.c: splitmix64's finaliser. */
uint64_t fl__mix64(uint64_t x);

/* bijection.c: FL_SHUFFLE_BIJECTION's order of [0, m) under a key. */
#define FL__BIJECTION_ROUNDS_MAX 24
typedef struct fl__bijection {
  uint64_t m;
  unsigned bits, rounds;
  uint64_t keys[FL__BIJECTION_ROUNDS_MAX];
} fl__bijection;

void fl__bijection_init(fl__bijection *b, uint64_t key, uint64_t m);
/* The value at position p < m. */
uint64_t fl__bijection_at(const fl__bijection *b, uint64_t p);

/* moved.c: positions ahead of the lazy order's frontier and their values,
   by open addressing, at most half the slots full. */
typedef struct fl__moved {
  size_t *key; /* position + 1; 0: empty */
  size_t *val;
  size_t slots; /* a power of two, or 0: none */
  size_t n;
} fl__moved;

int fl__moved_init(fl__moved *m, size_t slots);
void fl__moved_free(fl__moved *m);
void fl__moved_clear(fl__moved *m);
/* 1 and *v when p is held, else 0; take also drops it. */
int fl__moved_get(const fl__moved *m, size_t p, size_t *v);
int fl__moved_take(fl__moved *m, size_t p, size_t *v);
/* 0, or -1 when p is not held and the table is full. */
int fl__moved_put(fl__moved *m, size_t p, size_t v);

/* sampler.c */
enum fl__order_kind {
  FL__ORDER_IDENTITY,  /* position p holds p */
  FL__ORDER_TABLE,     /* table[p] (a sampler's, or torch's wide path) */
  FL__ORDER_LAZY,      /* torch's narrow path, drawn as batches are sent:
                          table[p] is tag << 32 | value once drawn this
                          epoch, and p before */
  FL__ORDER_BIJECTION  /* fl__bijection_at(&bijection, p) */
};

/*
 * The epoch's order as the workers read it, in a mapping they share with
 * the parent, which writes the header at each begin (no worker reads it
 * then) and the lazy table as batches are sent (at positions no sent
 * batch reads).
 */
typedef struct fl__order {
  uint64_t m;       /* the order's length this epoch */
  uint64_t start;   /* where this epoch's list starts in it */
  uint32_t kind;    /* enum fl__order_kind */
  uint32_t tag;     /* FL__ORDER_LAZY: this epoch's entries carry it */
  fl__bijection bijection; /* FL__ORDER_BIJECTION's, keyed by (seed,
                              epoch) once, by the parent */
  size_t table[];   /* FL__ORDER_TABLE and _LAZY: base entries */
} fl__order;

typedef struct fl__sampler {
  size_t base;           /* the order's most: len, indices_len or
                            sampler_len */
  size_t m;              /* the order's length this epoch */
  size_t start;          /* where this epoch's list starts in the order
                            (0, or where a resumed world left it) */
  size_t n;              /* this rank's share of the list: batched */
  size_t len;            /* the dataset's: a sampler's indices are below */
  const size_t *custom;  /* owned copy of fl_options.indices, or NULL */
  size_t (*fn)(void *ctx, uint64_t epoch, size_t *order, size_t cap);
  void *fn_ctx;
  int shuffle;
  fl_shuffle_algorithm algorithm;
  uint64_t seed;
  size_t batch_size;
  int drop_last;
  unsigned rank, world;
  fl_shard_mode mode;
  fl__mt mt;             /* FL__ORDER_LAZY: the epoch's generator, */
  size_t drawn;          /* the swaps drawn so far (positions fixed), */
  fl__moved moved;       /* values moved ahead (the parent's), and */
  int spilled;           /* whether one went to the shared table */
} fl__sampler;

uint64_t fl__epoch_seed(uint64_t seed, uint64_t epoch, uint64_t stream);
size_t fl__shard_len(fl_shard_mode mode, size_t m, unsigned w, unsigned r);
/* Whether the shared order keeps a table (8 bytes a position) after its
   header. */
int fl__order_table(const fl_options *opt);
/* The slots of the lazy order's moved values (fl__moved, 16 bytes each)
   for n positions and a window of that many batches; 0: none. */
size_t fl__order_moved_slots(const fl_options *opt, size_t n, size_t window);
void fl__sampler_free(fl__sampler *s);
/* The batches of n positions. */
size_t fl__batches(size_t n, size_t batch_size, int drop_last);
size_t fl__sampler_batches(const fl__sampler *s);
void fl__sampler_span(const fl__sampler *s, uint64_t seq, size_t *offset,
                      size_t *count);
/* The epoch's order into o (room for base entries); s->m says how long it
   is. */
int fl__sampler_fill(fl__sampler *s, fl__order *o, uint64_t epoch,
                     char *err, size_t errlen);
/* Then this rank's share of the order from `start` on; s->n says how long
   it is. */
void fl__sampler_shard(fl__sampler *s, fl__order *o, size_t start);
/* Both. */
int fl__sampler_order(fl__sampler *s, fl__order *o, uint64_t epoch,
                      size_t start, char *err, size_t errlen);
/* Batch seq's span of the share, as fl__sampler_span, with the order
   drawn as far as the batch reads it: the parent calls it before the
   batch is filled. */
void fl__sampler_batch(fl__sampler *s, fl__order *o, uint64_t seq,
                       size_t *offset, size_t *count);
/* The dataset indices at share positions [offset, offset + count). */
void fl__sampler_indices(const fl__sampler *s, const fl__order *o,
                         size_t offset, size_t count, size_t *out);

/* faults.c: fault injection (fl_options.faults). */
enum {
  FL__FAULT_KILL,   /* the worker SIGKILLs itself before filling */
  FL__FAULT_EXIT,   /* it _exits(1) before filling */
  FL__FAULT_ENOSPC, /* a new segment's reservation fails */
  FL__FAULT_EMFILE, /* the parent drops a received fd */
  FL__FAULT_DELAY,  /* the reply is late by delay_ms */
  FL__FAULT_KINDS
};

/* The batches one fault kind may be aimed at (NAME@N). */
#define FL__FAULT_AT_MAX 16

struct fl__faults {
  double p[FL__FAULT_KINDS]; /* probability per batch (per new segment,
                                per received fd) */
  /* Batches struck for sure, on their first try, in every epoch. */
  uint64_t at[FL__FAULT_KINDS][FL__FAULT_AT_MAX];
  unsigned n_at[FL__FAULT_KINDS];
  unsigned delay_ms;
  uint64_t seed;
  int on;
};

/* 0, or FL_EINVAL with err naming the token at fault. */
int fl__faults_parse(struct fl__faults *f, const char *spec, char *err,
                     size_t errlen);
/* Whether fault `kind` strikes this try of batch seq of that epoch. */
int fl__fault(const struct fl__faults *f, int kind, uint64_t epoch,
              uint64_t seq, uint32_t attempt);
/* The try of a batch the faults option is keyed by: a batch resent only
   because its worker died filling another is the same try, so the same
   seed strikes the same batches whatever a death took with it. */
#define FL__ATTEMPT(b) ((b)->tries + (b)->kills)

/* index_queue.c */
/* A worker's index queue, for the loader's life: a POSIX message queue
   (send and recv the same fd), or where none can be had a socket pair,
   both of whose ends the parent keeps.  recv is -1 before it is made. */
struct fl__index_queue {
  int recv; /* read by the worker, and by the parent taking tasks back */
  int send; /* written by the parent */
};
#define FL__INDEX_QUEUE_SOCKET(q) ((q)->send != (q)->recv)
/* A queue's depth when `want` messages are asked for: fs.mqueue.msg_max at
   most.  And what such a queue counts against RLIMIT_MSGQUEUE. */
unsigned fl__index_queue_depth(unsigned want);
uint64_t fl__index_queue_bytes(unsigned depth);
/* How many such message queues the limits in force allow this process
   (fs.mqueue.queues_max, RLIMIT_MSGQUEUE): workers past them, or past
   what others took of them, get a socket pair, an fd more each. */
uint64_t fl__index_queue_mq_limit(unsigned want);
int fl__index_queue_create(struct fl__index_queue *q, uint32_t token,
                           unsigned worker, unsigned depth, char *err,
                           size_t errlen);
void fl__index_queue_close(struct fl__index_queue *q);
int fl__index_queue_send(const struct fl__index_queue *q,
                         const struct fl__task *t);
int fl__index_queue_withdraw(const struct fl__index_queue *q,
                             struct fl__task *t);
int fl__index_queue_recv(const struct fl__index_queue *q, int parent_sock,
                         pid_t parent, struct fl__task *t);

/* channel.c */
int fl__channel_send(int sock, const struct fl__reply *r, int fd);
int fl__channel_recv(int sock, struct fl__reply *r, int *fd);
int fl__channel_grant(int sock, uint32_t slot, uint64_t serial, int fd);
int fl__channel_take_grant(int sock, uint64_t serial);

/* names.c: segment names and their owner's identity. */
/* Room for the slash, the longest name and its NUL. */
#define FL__SEGMENT_NAME_MAX 96
/* A process's PID namespace (the inode of /proc/self/ns/pid) and boot (the
   first 16 hex digits of /proc/sys/kernel/random/boot_id); 0 for either
   where it could not be read. */
typedef struct fl__owner_id {
  uint64_t pidns;
  uint64_t boot;
} fl__owner_id;
/* What a name says of its owner: pid, and, in today's form, identity. */
typedef struct fl__name_owner {
  long pid;
  int has_id; /* 0 in the form of 0.3 and earlier */
  fl__owner_id id;
} fl__name_owner;
void fl__owner_identify(fl__owner_id *me);
void fl__segment_name(char *buf, size_t len, pid_t owner, uint32_t token,
                      uint64_t serial);
int fl__segment_name_parse(const char *name, fl__name_owner *o);

/* segment.c */
typedef struct fl__segment {
  void *base;
  size_t size;
  int fd; /* kept open under the fd strategy, -1 otherwise */
} fl__segment;

/* The most fields a sample may have (fl_dataset.nfields). */
#define FL__MAX_FIELDS 32

/* Where things lie in every segment of a loader. */
typedef struct fl__layout {
  size_t cap;         /* samples a segment holds */
  size_t nfields;     /* arrays per batch: 1 without fields */
  size_t size;        /* the whole segment, in pages */
  size_t sizes_offset; /* cap x nfields sizes, after the indices */
  size_t field_offset[FL__MAX_FIELDS];
  size_t field_bytes[FL__MAX_FIELDS];
} fl__layout;

int fl__segment_layout(fl__layout *lo, size_t cap, size_t nfields,
                       const size_t *field_bytes);
/* Size classes: a segment of class s has every field's room scaled by
   2^s (0: the loader's layout).  The largest class there is. */
#define FL__SHIFT_MAX 40
/* The name's serial of a segment of class `shift` made in place of the
   one a task named by `serial`: a function of the two, so that the parent
   can remove what a worker that died making it left in /dev/shm. */
uint64_t fl__grown_serial(uint64_t serial, unsigned shift);
/* The layout of class `shift` over base: 0, or FL_ENOMEM past what this
   machine can address. */
int fl__segment_layout_scaled(fl__layout *lo, const fl__layout *base,
                              unsigned shift);
int fl__segment_create(fl__segment *seg, const char *name, size_t size,
                       char *err, size_t errlen);
int fl__segment_create_named(fl__segment *seg, pid_t owner, uint32_t token,
                             uint64_t *serial, size_t size, char *err,
                             size_t errlen);
uint64_t fl__random64(void);
void fl__segment_unlink_own(const char *name);
/* size 0: as large as the file is (a segment of any class). */
int fl__segment_attach_fd(fl__segment *seg, int fd, size_t size);
int fl__segment_attach_lent(fl__segment *seg, int fd, size_t size);
int fl__segment_attach_name(fl__segment *seg, const char *name, size_t size);
int fl__segment_private(fl__segment *seg, size_t size);
void fl__segment_close(fl__segment *seg);
/* The next segment made in this process fails to reserve its memory with
   this code (the faults option). */
void fl__segment_fail_next(int code);

/* fdtrack.c: what a forked worker must not keep of its parent's, and
   which process a loader is in. */
extern volatile unsigned long fl__fork_generation;
/* A loader used in a child of the process that made it. */
#define FL__FOREIGN(l) ((l)->fork_gen != fl__fork_generation)
void fl__fdtrack_init(void);
void fl__fdtrack_lock(void);
void fl__fdtrack_unlock(void);
int fl__fdtrack_add(int fd);
void fl__fdtrack_del(int fd);
void fl__fdtrack_close(int fd);
int fl__fdtrack_map_add(void *addr, size_t len);
void fl__fdtrack_map_del(void *addr);
void fl__fdtrack_child_drop(const int *keep, size_t nkeep,
                            const void *const *keep_maps, size_t nmaps);
int fl__close(int fd);

/* reorder.c */
typedef struct fl__reorder {
  fl_batch **ring;
  size_t cap;  /* a power of two */
  int in_order;
  uint64_t next_seq;      /* in order: the next seq to hand out */
  uint64_t head, tail;    /* as they arrive: FIFO cursors */
  size_t depth, peak;
} fl__reorder;

int fl__reorder_init(fl__reorder *r, size_t window, int in_order);
void fl__reorder_reset(fl__reorder *r);
void fl__reorder_put(fl__reorder *r, fl_batch *b);
fl_batch *fl__reorder_pop(fl__reorder *r);
int fl__reorder_remove(fl__reorder *r, const fl_batch *b);
void fl__reorder_free(fl__reorder *r);

/* batch.c: the parent's record of one segment, handed out as fl_batch. */
enum fl__slot_state {
  FL__SLOT_FREE,   /* mapped on both sides, ready to refill */
  FL__SLOT_TASKED, /* named in a task not yet answered */
  FL__SLOT_READY,  /* answered, waiting in the reorder buffer */
  FL__SLOT_HELD,   /* handed to the consumer */
  FL__SLOT_REFETCH /* lost for want of fds or shm: to be asked again */
};

struct fl_batch {
  fl_loader *loader;
  fl__segment seg;   /* seg.base is NULL until the worker has made it */
  uint32_t slot;     /* index in loader->slots */
  unsigned worker;
  uint64_t gen;      /* the worker process generation that holds it */
  uint64_t serial;   /* names the segment under the file-system strategy */
  int state;
  int orphaned;      /* the worker made a segment we never received */
  int evicted;       /* let go, though good, to make room at the fd limit:
                        asked for again as the same try */
  int end;           /* iterable: no batch, the worker's stream is over */
  int lent;          /* lent to `worker`, which may not have mapped it */
  int at_maps;       /* status is FL_ENOMEM because this process or the
                        worker is at vm.max_map_count (msg says which) */
  uint64_t mapped_by; /* workers (ids below 64) known to map it */
  int status;        /* 0, or this batch's error */
  int pin_error;     /* pin_memory could not lock its segment: not yet said */
  int pin_hook_rc;   /* what fl_options.pin returned, when it failed */
  int pinned;        /* fl_options.pin succeeded: unpin before unmapping */
  uint64_t sent_order; /* when its task was sent, among all the loader's */
  uint32_t tries;    /* times its batch was asked for again after its
                        fd or segment was lost (EMFILE, ENOSPC) */
  uint32_t kills;    /* workers that died filling this batch */
  int pending;       /* while its dead worker is let go: its task was
                        still queued, not started */
  unsigned shift;     /* its segment's size class (segment.c) */
  uint64_t seq;
  size_t count;
  const size_t *indices;
  const size_t *sizes;
  const void *data;
  fl_batch *next_free;
  char msg[FL__REPLY_MSG_MAX];
};

int fl__slot_new(fl_loader *l, unsigned worker, fl_batch **out);
void fl__slot_drop(fl_loader *l, fl_batch *b);
void fl__slot_recycle(fl_loader *l, fl_batch *b);
int fl__slot_map(fl_loader *l, fl_batch *b, int fd);
void fl__slot_unmap(fl_loader *l, fl_batch *b);
void fl__slot_unname(fl_loader *l, fl_batch *b);
/* b's task was in flight when its worker went: the names of the larger
   segments it may have made in its place go (fl__grown_serial). */
void fl__slot_unname_grown(fl_loader *l, fl_batch *b);
void fl__slot_keep(fl_loader *l, fl_batch *b, int code, int orphaned);
/* Short of fds: close those of the segments whose batches the consumer
   holds, keeping their mappings; how many were closed. */
size_t fl__slot_close_held_fds(fl_loader *l);
void fl__slot_hold(fl_loader *l, fl_batch *b);
/* b's worker is gone: into the pool (fd strategy), or let go. */
void fl__slot_park(fl_loader *l, fl_batch *b);
void fl__slot_pin(fl_loader *l, fl_batch *b);
/* After hooks_held: the hooks held back, run. */
void fl__slot_run_due_hooks(fl_loader *l);
void fl__slot_unpin(const fl_loader *l, fl_batch *b);
void fl__slot_view(fl_loader *l, fl_batch *b);
/* The layout of b's segment. */
const fl__layout *fl__slot_layout(const fl_batch *b);
/* Read the class of the segment just mapped for b from its header: 0, or
   FL_EPROTO when the header names a class the mapping cannot hold. */
int fl__slot_class(fl_loader *l, fl_batch *b);
/* A batch handed out needed class `shift`: the classes lately needed
   decide when a larger segment is made smaller again (FL__TASK_RESCALE). */
void fl__slot_needed(fl_loader *l, const fl_batch *b);

/* workers/info.c */
void fl__worker_info_set(const fl_worker_info *info);
/* Before a batch is filled, in a worker or the caller. */
void fl__fill_context(uint64_t seed, uint64_t epoch, uint64_t run);
void fl__worker_error_clear(void);
const char *fl__worker_error_text(void);

/*
 * workers/grow.c: the batch being filled and its segment, which
 * fl_worker_grow replaces with a larger one while the dataset writes.
 */
enum fl__make {
  FL__MAKE_PRIVATE, /* num_workers 0: private memory */
  FL__MAKE_MEMFD,   /* the fd strategy: memfd_create */
  FL__MAKE_NAMED,   /* the file-system strategy: a name in /dev/shm */
  FL__MAKE_UNNAMED  /* fd_in_dev_shm: a name in /dev/shm, unlinked at once */
};

typedef struct fl__fill_ctx {
  const fl_loader *l;
  enum fl__make make;
  fl__segment seg;     /* the batch's segment now */
  unsigned shift;      /* its class */
  int fresh;           /* seg was made by this task: the parent has it not */
  int replaced;        /* seg is not the one the task named */
  uint64_t serial;     /* FL__MAKE_NAMED: seg's name */
  uint64_t task_serial; /* the task's, which the names of the segments
                           made in the place of its own derive from */
  uint64_t seq;        /* the batch's, for messages */
  size_t n;            /* samples the batch has room for in this call */
  size_t sample;       /* the sample a per-sample call writes; SIZE_MAX: a
                          batched call (get_batch) */
  int in_call;         /* a dataset call is under way */
  void **call_dst;     /* the fields array that call was given, or NULL */
  fl__segment retired; /* the segment that call began in: its nbytes point
                          there, so it is let go of once the call returns */
  int code;            /* fl_worker_grow's last failure, or 0 */
  fl_batch *own;       /* num_workers 0: the parent's batch whose mapping
                          seg is, unpinned before a replacement unmaps it
                          (NULL in a worker) */
  /* Where things lie in seg: refreshed by each replacement. */
  void *fields[FL__MAX_FIELDS];
  size_t *sizes;
} fl__fill_ctx;

/* Set c up for a batch in seg (of class shift), made by this task (fresh)
   or not. */
void fl__fill_ctx_init(fl__fill_ctx *c, const fl_loader *l, enum fl__make m,
                       const fl__segment *seg, unsigned shift, int fresh,
                       uint64_t serial);
/* Around each call of the dataset: what a replacement during it moved is
   settled after it (its sizes, the old mapping). */
void fl__fill_call_begin(fl__fill_ctx *c, size_t sample, void **dst);
void fl__fill_call_end(fl__fill_ctx *c);
/* Replace c's segment with one of class shift; copy: the batch so far
   goes with it.  0, or a negative code with err saying why. */
int fl__fill_replace(fl__fill_ctx *c, unsigned shift, int copy, char *err,
                     size_t errlen);
/* The kind of segment a loader's workers (or its caller) make. */
enum fl__make fl__make_of(const fl_loader *l);
/* Make a segment of size bytes of kind m: *serial names it (drawn anew if
   taken), *fd its fd for the parent (-1 when it has none to send). */
int fl__make_segment(const fl_loader *l, enum fl__make m, fl__segment *seg,
                     uint64_t *serial, size_t size, char *err,
                     size_t errlen);

/* workers/canary.c: a word after a call's room, and whether it is gone */
void fl__canary_plant(unsigned char *at);
int fl__canary_trampled(const unsigned char *at);

/* workers/fetch.c, workers/collate.c */
int fl__fetch(const fl_dataset *ds, const size_t *indices, size_t n,
              fl__fill_ctx *c, char *err, size_t errlen);
int fl__fill(const fl_loader *l, fl__fill_ctx *c, unsigned worker,
             uint64_t run, uint64_t epoch, uint64_t seq, size_t offset,
             size_t count, char *err, size_t errlen);
int fl__stream_next(const fl_iterable *it, void *const *dst,
                    size_t *nbytes);
int fl__fetch_stream(const fl_iterable *it, size_t bs, fl__fill_ctx *c,
                     size_t *count, int *over, char *err, size_t errlen);
int fl__fill_stream(const fl_loader *l, fl__fill_ctx *c, unsigned worker,
                    uint64_t epoch, uint64_t seq, size_t first,
                    size_t *count, int *over, char *err, size_t errlen);

/* An iterable dataset's stream, in a worker or in the caller. */
struct fl__stream {
  uint64_t run;   /* the fl_loader_begin it was opened for */
  int opened;     /* open() succeeded: close() is owed */
  int over;       /* next() said so, or open() failed */
  size_t pos;     /* samples read this epoch */
  uint64_t skip;  /* samples to skip when it next opens (a resume) */
};
#define FL__STREAM_INIT {UINT64_MAX, 0, 0, 0, 0}
int fl__stream_fill(const fl_loader *l, struct fl__stream *st,
                    fl__fill_ctx *c, unsigned worker, uint64_t run, uint64_t epoch,
                    uint64_t seq, size_t *count, int *end, char *err,
                    size_t errlen);
void fl__stream_close(const fl_loader *l, struct fl__stream *st);

/* workers/reply.c */
int fl__reply_batch(int sock, unsigned worker, const struct fl__task *t,
                    size_t count, int status, const char *msg, int fd,
                    uint32_t flags, uint64_t serial);

/* workers/bus.c: note a SIGBUS's address and file for the parent. */
void fl__bus_watch(struct fl__bus_note *n);

/* workers/loop.c */
void fl__worker_main(fl_loader *l, unsigned w, int sock)
    __attribute__((noreturn));

/* worker.c: a worker's life, from the parent (above receive.c). */
int fl__worker_spawn(fl_loader *l, unsigned w);
/* One reply of worker w: 1, 0 when none waits, or a negative code; its
   end is handled (respawned, or the loader's failure). */
int fl__worker_read(fl_loader *l, unsigned w);
void fl__worker_close_sock(fl_loader *l, unsigned w);
void fl__worker_forget(fl_loader *l, unsigned w);
void fl__workers_stop(fl_loader *l);
int fl__workers_kill_hung(fl_loader *l);

/* receive.c: replies, taken into batches. */
#define FL__RECEIVE_CLOSED 2 /* fl__receive_one: the worker's end closed */
int fl__receive_one(fl_loader *l, unsigned w);
int fl__receive_lost_error(fl_loader *l, const fl_batch *b);

/* dispatch.c */
uint64_t fl__dispatch_seq(fl_loader *l, int take);
/* Ask worker w (a new process in a dead one's place) for b's batch again. */
int fl__dispatch_resend(fl_loader *l, fl__worker *w, fl_batch *b);
int fl__dispatch_fill(fl_loader *l);
int fl__dispatch_refetch(fl_loader *l, int reuse_only, const fl_batch *only);
int fl__dispatch_make_room(fl_loader *l, const fl_batch *lost);
int fl__dispatch_spare_fd(fl_loader *l);
int fl__dispatch_flush(fl_loader *l, unsigned w);

/* state.c: a loader's place in its epochs, as a state holds it. */
struct fl__place {
  uint64_t epoch;
  size_t start;       /* where the epoch's list starts in its order */
  uint64_t first;     /* the first batch not handed out */
  uint64_t next;      /* the first batch not asked for (as they arrive) */
  uint64_t *todo;     /* batches between them not handed out, ascending */
  size_t ntodo;
  uint64_t *pos;      /* iterable: each worker's stream position */
  unsigned w_next;    /* iterable: the worker whose batch comes next */
  unsigned world, rank, nworkers; /* of the loader that saved it */
  unsigned flags;     /* state.c's: in order, iterable, shuffle */
};

struct fl__resume {
  int armed;          /* loaded: the next begin of its epoch resumes it */
  struct fl__place place;
  size_t itodo;       /* of place.todo, asked for again so far */
};

/* loader.c: the loader itself, whose fields every file of the data path
   reads. */
struct fl__worker {
  unsigned id;
  pid_t pid;          /* 0 when no process */
  int pidfd;
  int sock;           /* parent's end of the reply socket, -1 when closed */
  struct fl__index_queue queue; /* its tasks, for the loader's life */
  uint64_t gen;       /* incremented at each fork */
  int stopping;       /* a stop was asked: its exit is expected */
  int ended;          /* iterable: its stream is over this epoch */
  unsigned sent;      /* tasks in the queue or being filled */
  unsigned assigned;  /* tasks sent whose batches are not handed out */
  uint64_t skip;      /* iterable: samples its stream skips this epoch */
  uint64_t consumed;  /* iterable: of its stream, samples handed out */
  fl_batch *free;     /* refillable segments this process holds */
  struct fl__task *backlog; /* tasks the full queue did not take */
  unsigned backlog_head, backlog_len, backlog_cap;
  uv_poll_t *sock_poll;  /* NULL when not watched; freed once closed */
  uv_poll_t *pid_poll;
  double last_seen;   /* when it last replied, or was forked */
  uint64_t answered;  /* iterable: samples of its stream it answered */
  fl_loader *loader;
};

struct fl_loader {
  fl_dataset ds;
  fl_iterable it;       /* an iterable dataset's, when iterable */
  int iterable;
  unsigned active;      /* iterable: workers whose stream is not over */
  struct fl__stream stream; /* iterable, num_workers 0: read here */
  fl_options opt;
  fl__sampler sampler;
  pid_t owner;
  unsigned long fork_gen; /* fl__fork_generation in the maker */
  int foreign;          /* being freed in a child: touch nothing shared */
  uint32_t token;       /* tells this loader's names from any other's */
  size_t nbatches;
  fl__layout layout;    /* of a segment of class 0 */
  fl__layout *classes;  /* of each class, 0 to max_shift */
  unsigned max_shift;   /* the largest class this machine can address */
  unsigned want_shift;  /* the class the batches lately needed */
  unsigned need_now, need_before; /* the largest class needed by the
                                     batches of this round and the last */
  uint64_t need_round;  /* batches handed out this round */
  fl__order *order;     /* the epoch's order, shared with workers */
  struct fl__bus_note *notes; /* per worker, shared: why one died of
                                 SIGBUS */
  size_t order_bytes;
  size_t window;        /* prefetch_factor * num_workers */

  uint64_t run;         /* fl_loader_begin calls so far */
  uint64_t epoch;       /* the epoch begun last */
  uint64_t next_epoch;  /* the epoch the next begin starts */
  uint64_t base_seed;
  int forked_alone;     /* the last fork came from a one-thread process:
                           no lock of libc's can be held in the child */
  int in_epoch;
  int epoch_over;
  uint64_t next_send;   /* batches dispatched this epoch (or handed out
                           before a resume) */
  uint64_t plain;       /* the next seq to dispatch, after resume's */
  uint64_t delivered;   /* batches handed out this epoch */
  unsigned last_worker; /* iterable: whose batch was handed out last */
  struct fl__resume resume;
  unsigned rr;          /* round-robin cursor (as they arrive) */

  fl__reorder reorder;
  fl__worker *workers;
  fl_batch **slots;
  size_t nslots, slots_cap;
  uint32_t *spare;      /* free indices in slots */
  size_t nspare;
  uint64_t serial;
  fl_batch *inline_free; /* num_workers == 0: refillable segments */
  size_t nrefetch;      /* slots in FL__SLOT_REFETCH */
  int fd_short;         /* the consumer holds nothing and the batch due
                           lacks an fd: only it is asked for again */
  fl_batch *unpinned;   /* whole but unpinned: the next call hands it out */
  /* While a reply is taken under the fork table's lock (receive.c), the
     pin and unpin hooks wait until it is let go: a hook may wait for a
     lock of the caller's (Python's GIL) that a thread holds while it
     forks a worker, which takes the fork table's lock. */
  int hooks_held;
  fl_batch *pin_due;    /* mapped then: pinned after the lock */
  fl__segment unpin_due[4]; /* unmapped then: unpinned, then closed */
  size_t nunpin_due;
  fl_batch *pool;       /* idle segments of no live worker, with their fds:
                           granted to the next workers */
  uint64_t sent_count;  /* tasks sent over the loader's life */
  struct fl__faults faults;

  uv_loop_t loop;
  uv_timer_t timer;
  int loop_ready;
  int timed_out;

  int fatal;            /* sticky error, reported until destroy */
  fl_stats stats;
  char err[FL__ERRMSG_MAX];
};

/* sysnames.c: an errno's description ("unknown error" for none); a
   signal's abbreviation without "SIG", or NULL. */
const char *fl__strerror(int errnum);
const char *fl__sigabbrev(int sig);

/* format.c: vsnprintf into dst, but a message longer than size - 1 bytes
   loses the middle of its longest words (its paths), then its own middle,
   never its end. */
void fl__format(char *dst, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void fl__vformat(char *dst, size_t size, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));


/* state.c */
uint64_t fl__state_indices_hash(const fl_loader *l);
void fl__resume_clear(fl_loader *l);
void fl__resume_start(const fl_loader *l, size_t m, size_t *start,
                      uint64_t *first);

/* report.c */
int fl__error_set(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void fl__error_clear(void);
int fl__loader_foreign(const fl_loader *l, const char *fn);
int fl__loader_fail(fl_loader *l, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int fl__loader_set_error(fl_loader *l, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void fl__stats_segments(fl_loader *l, int delta_segments, long delta_bytes,
                        int delta_fds);
/* Monotonic seconds. */
double fl__now(void);
/* A warning for fl_options.log, if set. */
void fl__log(const fl_loader *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void fl__stats_fds(fl_loader *l, int delta);

/* lines.c: a file's lines, read(2) alone (a worker, a signal handler). */
struct fl__lines {
  int fd;
  size_t len, pos;
  char buf[4096];
};

int fl__lines_open(struct fl__lines *lr, const char *path);
/* The next line, without its newline, cut to len - 1 bytes: 1, or 0 at
   the end of the file.  Close lr->fd when done. */
int fl__lines_next(struct fl__lines *lr, char *line, size_t len);

/* limits.c: what the machine can give now, and where that was read. */
typedef struct fl__room {
  uint64_t amount; /* bytes, or fds; UINT64_MAX: no limit found */
  char source[320];
} fl__room;

/* Prefixes the /proc and /sys paths read: "" (tests point it at a made-up
   tree). */
extern const char *fl__limits_root;
void fl__room_memory(fl__room *r);
void fl__room_file_size(fl__room *r);
void fl__room_dev_shm(fl__room *r);
/* Fds: the soft RLIMIT_NOFILE less the fds open now. */
void fl__room_fds(fl__room *r);
/* Processes: RLIMIT_NPROC less the threads of this real uid, with room for
   `need` more known at the least cost. */
void fl__room_processes(fl__room *r, uint64_t need);
/* The number after `key` in a /proc file of "key: value" lines: 0, or -1.
   Read with read(2) alone: safe in a freshly forked worker. */
int fl__proc_value(const char *path, const char *key, uint64_t *out);
/* /proc/sys/NAME ("fs/mqueue/msg_max"), or fallback when unreadable. */
uint64_t fl__sysctl(const char *name, uint64_t fallback);
/* Whether this process has capability `cap` in effect. */
int fl__capable(int cap);
/* Limits and what is taken of them now, UINT64_MAX for no limit (for the
   budget, budget.c): the soft RLIMIT_NOFILE and the fds open below it;
   the size of /dev/shm and its bytes used by anyone; RLIMIT_MEMLOCK and
   VmLck; RLIMIT_MSGQUEUE (bytes) and fs.mqueue.queues_max; RLIMIT_NPROC
   and the threads of this real uid. */
void fl__fds_now(uint64_t *limit, uint64_t *in_use);
void fl__dev_shm_now(uint64_t *size, uint64_t *used);
void fl__memlock_now(uint64_t *limit, uint64_t *locked);
void fl__msgqueue_now(uint64_t *bytes, uint64_t *queues);
void fl__processes_now(uint64_t *limit, uint64_t *tasks);
/* After mmap failed with ENOMEM: 1 when this process is at
   vm.max_map_count (its mappings, the lines of /proc/self/maps, within a
   few of it), with why saying so ("it has N memory mappings, at
   vm.max_map_count (...: M)"); else 0.  read(2) alone: a worker calls it
   too. */
int fl__maps_full(char *why, size_t len);
/* Before a segment is made anew, in a worker or in the caller: 0, or
   FL_ENOMEM with err saying why, when memory has no room for it now. */
int fl__room_for_segment(size_t size, char *err, size_t errlen);

/* admit.c: what a loader will reserve, made and checked before it does. */
typedef struct fl__plan {
  size_t n;            /* samples in an epoch's order; 0 when iterable */
  size_t batches;      /* this rank's batches in an epoch (the most, with
                          a sampler); 0 when iterable */
  unsigned prefetch;   /* the prefetch factor in force: prefetch_factor,
                          capped at the epoch's batches per worker */
  size_t window;       /* batches out at once */
  size_t nsegs;        /* segments the window needs: window + 1 */
  size_t backlog;      /* tasks a worker's backlog holds */
  fl__layout layout;
  size_t order_bytes;
  size_t moved_slots;  /* the lazy order's moved values, in the parent */
  uint64_t segs_bytes; /* nsegs segments */
  uint64_t need;       /* everything, in bytes */
  uint64_t fds;        /* the fds the parent keeps for the window */
} fl__plan;

/* As they arrive under the file-system strategy, a worker with a free
   segment of its own takes the next task, room or not (dispatch.c). */
int fl__own_segments_first(const fl_options *opt);
int fl__plan_make(fl__plan *p, const fl_dataset *ds, const fl_options *opt,
                  int iterable, char *err, size_t errlen);
int fl__plan_admit(const fl__plan *p, const fl_dataset *ds,
                   const fl_options *opt, int iterable, char *err,
                   size_t errlen);

/* abi.c: the public structs grow at their end; each call knows its size.
   The sizes of the 0.1 structs, the oldest there are: */
#define FL__SIZE_TO(type, field)                                             \
  (offsetof(type, field) + sizeof(((type *)0)->field))
#define FL__OPTIONS_SIZE_0_1 FL__SIZE_TO(fl_options, fd_in_dev_shm)
#define FL__STATS_SIZE_0_1 FL__SIZE_TO(fl_stats, in_flight_peak)
#define FL__DATASET_SIZE_0_1 FL__SIZE_TO(fl_dataset, get_batch)
#define FL__ITERABLE_SIZE_0_1 FL__SIZE_TO(fl_iterable, close)
/* fl_budget came in 0.5. */
#define FL__BUDGET_SIZE_0_5 FL__SIZE_TO(fl_budget, binding)

/* Reads the caller's struct src of `size` bytes over the defaults in dst
   (`full` bytes): 0, or FL_EINVAL with err saying why. */
int fl__struct_in(void *dst, size_t full, const void *src, size_t size,
                  size_t oldest, const char *name, char *err, size_t errlen);
/* Writes src into the caller's struct of `size` bytes, no further. */
void fl__struct_out(void *dst, size_t size, const void *src, size_t full);

/* options.c */
void fl__options_defaults(fl_options *opt);
size_t fl__sample_bytes(const fl_dataset *ds);
int fl__options_check(const fl_dataset *ds, const fl_options *opt,
                      int iterable, char *err, size_t errlen);
/* An iterable's next or next_fields against its nfields: 0, or FL_EINVAL
   with why in err. */
int fl__iterable_check(const fl_iterable *it, char *err, size_t errlen);

#endif /* FL_INTERNAL_H */
