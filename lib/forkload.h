/*
 * forkload: a process-based batch loader for C training programs.
 *
 * A parent process forks worker processes; each worker fills whole batches
 * straight into POSIX shared memory; the batch reaches the parent as an fd
 * over a Unix socket or as a named segment in /dev/shm; a reorder buffer hands
 * batches to the consumer in sampler order, or as they arrive.
 *
 * Every fallible call returns 0 (or a count) on success and a negative
 * error code on failure: a negative errno where one fits, otherwise one of
 * the FL_E* codes below.  forkload(3) maps the pages that state each
 * function's contract.
 *
 * How the public structs grow (the ABI rule).  fl_options, fl_stats,
 * fl_dataset, fl_iterable and fl_budget are allocated by the caller, and
 * new fields are only ever added at their end.  Every call that reads or
 * writes one is told its size: the macros below (fl_options_init,
 * fl_loader_create, ...) pass sizeof of the struct in the header the
 * program was built with to the function named *_sized.  The library reads
 * only the fields that size holds and takes the defaults for the rest, and
 * writes no further.  A struct larger than the library knows (a program
 * built against a newer forkload) is refused with FL_EINVAL if it sets a
 * field the library lacks.  Programs built against 0.1, which passed no
 * size, keep working with this library: it still exports the 0.1
 * functions under their names.
 */
#ifndef FORKLOAD_H
#define FORKLOAD_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FL_EXTERN __attribute__((visibility("default")))
#else
#define FL_EXTERN
#endif

#include "forkload_version.h"

/*
 * The error table: name, value, description.  Codes that have an errno are
 * that errno negated; forkload's own codes sit far below the errno range.
 */
#define FL_ERRNO_MAP(XX)                                                      \
  XX(EINVAL, -EINVAL, "invalid argument")                                     \
  XX(ENOMEM, -ENOMEM, "not enough memory")                                    \
  XX(EMFILE, -EMFILE, "too many open files in this process")                  \
  XX(ENFILE, -ENFILE, "too many open files in the system")                    \
  XX(ENOSPC, -ENOSPC, "no space left for shared memory")                      \
  XX(ETIMEDOUT, -ETIMEDOUT, "timed out waiting for the workers")              \
  XX(EAGAIN, -EAGAIN, "resource temporarily unavailable")                     \
  XX(EPERM, -EPERM, "operation not permitted")                                \
  XX(EPROTO, -EPROTO, "malformed message between parent and worker")        \
  XX(ENOTSUP, -ENOTSUP, "not supported by this build of forkload")           \
  XX(EDATASET, -4001, "the dataset failed to produce a sample")               \
  XX(EWORKER, -4002, "a worker process died")                                 \
  XX(ESTATE, -4003, "call not allowed in the loader's current state")       \
  XX(EFATAL, -4004, "the loader failed and can only be destroyed")

typedef enum {
#define FL__ERR_ENUM(name, value, text) FL_##name = (value),
  FL_ERRNO_MAP(FL__ERR_ENUM)
#undef FL__ERR_ENUM
} fl_errno_t;

typedef struct fl_loader fl_loader; /* opaque */
typedef struct fl_batch fl_batch;   /* opaque */

typedef struct fl_dataset {
  void *ctx;
  size_t len;          /* number of samples */
  size_t sample_bytes; /* the most bytes one sample may take in a batch */
  /* Write sample `index` to dst (room: sample_bytes).  *nbytes is
     sample_bytes on entry; set it to the bytes written.  Return 0, or
     non-zero on failure (fl_worker_error() may say why). */
  int (*get)(void *ctx, size_t index, void *dst, size_t *nbytes);
  /* Optional batched fetch, PyTorch's __getitems__: fill n samples at once,
     sample i at dst + i*sample_bytes, its size in nbytes[i] (sample_bytes on
     entry).  When set, workers call it instead of get.  With fields, dst
     is a void *const * of nfields arrays: field f of sample i at
     dst[f] + i*field_bytes[f], its size in nbytes[i*nfields + f]. */
  int (*get_batch)(void *ctx, const size_t *indices, size_t n, void *dst,
                   size_t *nbytes);
  /* Since 0.2: samples of several fields, each field batched into an array
     of its own (struct of arrays: inputs in one, labels in another). */
  size_t nfields;            /* 0: one field of sample_bytes, as in 0.1 */
  const size_t *field_bytes; /* nfields sizes (copied at create);
                                sample_bytes is 0 or their sum */
  /* Write field f of sample `index` to dst[f] (room: field_bytes[f]);
     nbytes[f] is that on entry, set it to the bytes written.  Used instead
     of get when nfields > 0 (get_batch still comes first). */
  int (*get_fields)(void *ctx, size_t index, void *const *dst,
                    size_t *nbytes);
} fl_dataset;

typedef struct fl_worker_info {
  unsigned id, num_workers;
  uint64_t seed;
  const fl_dataset *dataset;
  /* Since 0.3, valid in get, get_batch, get_fields, open and next: */
  unsigned rank, world_size; /* the loader's (fl_options) */
  uint64_t epoch;            /* of the batch being filled */
  /* Since 0.9, valid where epoch is: which fl_loader_begin (1 the first)
     the batch being filled is of; in worker_init, the one that forked the
     worker.  Persistent workers fill an epoch cut short's batches first
     (fl_loader_begin), whatever the epochs' numbers. */
  uint64_t run;
} fl_worker_info;

/*
 * An iterable-style dataset, as PyTorch's IterableDataset: each worker
 * reads its own stream, sharded by the dataset itself from
 * fl_get_worker_info().
 */
typedef struct fl_iterable {
  void *ctx;
  size_t sample_bytes;
  /* In each worker, at each epoch's start. */
  int (*open)(void *ctx, const fl_worker_info *w);
  /* 1: a sample written (*nbytes: sample_bytes on entry, bytes written on
     return), 0: stream over, <0: error. */
  int (*next)(void *ctx, void *dst, size_t *nbytes);
  void (*close)(void *ctx);
  /* Since 0.3, optional: skip n samples right after open, as n calls of
     next would (a resumed epoch); 0, or <0 on error.  NULL: next n times. */
  int (*skip)(void *ctx, uint64_t n);
  /* Since 0.6: samples of several fields, each batched into an array of
     its own, as fl_dataset's (field_bytes copied at create; sample_bytes
     0 or their sum).  next_fields writes field f to dst[f] (room:
     field_bytes[f], the size written in nbytes[f]) and returns as next
     does; it is used instead of next when nfields > 0. */
  size_t nfields;
  const size_t *field_bytes;
  int (*next_fields)(void *ctx, void *const *dst, size_t *nbytes);
} fl_iterable;

typedef enum { FL_SHARE_FILE_DESCRIPTOR, FL_SHARE_FILE_SYSTEM } fl_sharing;

/* How an epoch's order is split among world_size ranks, as PyTorch's
   DistributedSampler does. */
typedef enum {
  FL_SHARD_PAD,   /* default: pad to equal shares by repeating the order's
                     first indices (DistributedSampler drop_last=False) */
  FL_SHARD_TRIM,  /* drop the tail so shares are equal (drop_last=True) */
  FL_SHARD_UNEVEN /* no padding, no trimming: shares differ by at most one
                     sample (evaluation) */
} fl_shard_mode;

/* Since 0.7: which shuffled order, with shuffle (fl_loader_create(3)). */
typedef enum {
  FL_SHUFFLE_TORCH,    /* default: torch.randperm's, bit for bit; 8 bytes a
                          sample, drawn as batches are sent */
  FL_SHUFFLE_BIJECTION /* a keyed bijection of positions: no memory, O(1) a
                          sample, a different order per (seed, epoch) */
} fl_shuffle_algorithm;

typedef struct fl_options {
  size_t batch_size;         /* default 1 */
  int shuffle;               /* default 0 */
  uint64_t seed;             /* the same seed gives the same epochs */
  int drop_last;             /* default 0 */
  unsigned num_workers;      /* 0: load in the calling process */
  unsigned prefetch_factor;  /* default 2: batches sent, not handed out,
                                per worker; map-style, at most the
                                epoch's batches per worker */
  int persistent_workers;    /* default 0: workers forked each epoch */
  int in_order;              /* default 1 */
  int pin_memory;            /* default 0: mlock batch memory in the parent */
  unsigned timeout_ms;       /* default 0: wait forever */
  fl_sharing sharing;        /* default FL_SHARE_FILE_DESCRIPTOR */
  void (*worker_init)(unsigned worker_id, void *arg);
  void *worker_init_arg;
  const size_t *indices;     /* optional sampler: this order, not 0..len-1 */
  size_t indices_len;
  int reuse_segments;        /* default 1: refill released segments; 0: a
                                new segment per batch, as PyTorch does */
  int fd_in_dev_shm;         /* default 0: FL_SHARE_FILE_DESCRIPTOR makes
                                segments with memfd_create, not charged to
                                /dev/shm; 1: shm_open + shm_unlink in
                                /dev/shm, as PyTorch does */
  /* Since 0.2: a sampler of your own, a pure function of the epoch (what
     makes runs reproducible and resumable), called in the parent at each
     fl_loader_begin.  It writes the epoch's order (dataset indices,
     repeats allowed) and returns its length, at most cap (= sampler_len).
     Refused with shuffle or indices. */
  size_t (*sampler)(void *ctx, uint64_t epoch, size_t *order, size_t cap);
  void *sampler_ctx;
  size_t sampler_len;
  /* Since 0.3: this process's share of each epoch's order, of world_size
     data-parallel ranks (shuffle, indices or the sampler give the order,
     the same on every rank). */
  unsigned rank;             /* default 0; below world_size */
  unsigned world_size;       /* default 1 */
  fl_shard_mode shard_mode;  /* default FL_SHARD_PAD */
  /* With pin_memory: called in this process once per segment, before its
     first batch is handed out (NULL: mlock), and unpin before the segment
     is unmapped.  0, or non-zero when it could not pin. */
  int (*pin)(void *addr, size_t len, void *arg);
  void (*unpin)(void *addr, size_t len, void *arg);
  void *pin_arg;
  /* Since 0.4: a worker that dies is respawned, at most this many times
     over the loader's life, and nothing is lost or repeated (default 0: a
     dead worker is FL_EWORKER, as in PyTorch). */
  unsigned max_worker_restarts;
  /* Warnings as sentences (a restart, names swept), in the calling
     process; NULL: none.  What a call returns as its error is not told
     here again. */
  void (*log)(void *arg, const char *msg);
  void *log_arg;
  /* Fault injection for testing a trainer's error handling, e.g.
     "kill=0.01,delay=0.1:50,seed=3" (see fl_get_worker_info(3)); NULL: the
     FORKLOAD_FAULTS environment variable, if set.  Copied at create. */
  const char *faults;
  /* Since 0.7: the shuffled order (default FL_SHUFFLE_TORCH). */
  fl_shuffle_algorithm shuffle_algorithm;
  unsigned reserved;         /* 0: fills what would be padding */
  /* Since 0.9, optional: called in this process right before each fork of
     a worker (fl_loader_begin's, and a respawn's inside fl_loader_next or
     fl_loader_poll) and right after it, in the parent only.  A runtime
     with threads of its own takes its lock here, so that the child copies
     none of them midway (CPython: the GIL and os.fork's hooks). */
  void (*fork_before)(void *arg);
  void (*fork_after)(void *arg);
  void *fork_arg;
} fl_options;

typedef struct fl_stats {
  size_t segments, segments_peak;         /* segments alive in the parent */
  size_t bytes_mapped, bytes_mapped_peak; /* bytes of those segments */
  size_t fds, fds_peak;                   /* fds the loader holds */
  size_t batches_held;                    /* handed out, not released */
  size_t reorder_depth, reorder_peak;     /* batches waiting in order */
  uint64_t batches_delivered;
  double wait_seconds; /* time fl_loader_next spent waiting for workers */
  size_t in_flight, in_flight_peak;       /* sent to workers, not handed out */
  /* Since 0.4: */
  uint64_t worker_restarts;  /* workers respawned */
  uint64_t faults_injected;  /* faults the faults option made happen */
} fl_stats;

/*
 * Since 0.5: the budget of a loader (fl_loader_budget), one item per
 * resource that the batches a consumer holds use up, or that the loader
 * needs whatever it holds.  A figure of UINT64_MAX means none: no limit,
 * or no batch count at which the limit is reached.  fl_budget_item never
 * grows (it is an array's element); what comes later is appended to
 * fl_budget.
 */
typedef struct fl_budget_item {
  const char *resource;   /* "fds", "/dev/shm bytes", "memory bytes",
                             "memlock bytes", "message queues",
                             "processes": a static string */
  uint64_t limit;         /* what the system allows now (the relevant
                             rlimit, the size of /dev/shm) */
  uint64_t in_use;        /* what this process or this loader uses now
                             (of /dev/shm: what everyone does) */
  uint64_t per_batch;     /* what each batch the consumer holds adds */
  uint64_t max_held;      /* batches the consumer can hold, those held
                             now included, before this limit stops the
                             loader; UINT64_MAX: none */
} fl_budget_item;

typedef struct fl_budget {
  fl_budget_item item[8];
  size_t n;               /* items filled */
  size_t binding;         /* index of the item that binds first (the
                             least max_held) */
} fl_budget;

/* The library's version at run time: FL_VERSION_HEX and
   FL_VERSION_STRING as it was built. */
FL_EXTERN unsigned fl_version(void);
FL_EXTERN const char *fl_version_string(void);

/*
 * Threads: one loader is used by one thread at a time.  Every call that
 * takes the loader, and fl_batch_release of its batches, counts as using
 * it; such calls must not overlap.  The other fl_batch_* functions only
 * read their batch and may be called from any thread while it is held.
 * Different loaders may be used by different threads at once, and the
 * functions that take no loader may be called from any thread.
 */

/* The defaults, in the caller's struct of `size` bytes. */
FL_EXTERN void fl_options_init_sized(fl_options *opt, size_t size);
#define fl_options_init(opt) fl_options_init_sized((opt), sizeof(fl_options))
/* 0, or a negative code with *out NULL and fl_loader_error(NULL) saying
   why (per thread).  opt NULL means the defaults.  Nothing is reserved
   before the options are checked and the prefetch window is known to fit
   in memory, RLIMIT_FSIZE, the fds, (where segments go there) /dev/shm,
   and the workers in processes (FL_EAGAIN). */
FL_EXTERN int fl_loader_create_sized(fl_loader **out, const fl_dataset *ds,
                                     size_t ds_size, const fl_options *opt,
                                     size_t opt_size);
#define fl_loader_create(out, ds, opt)                                       \
  fl_loader_create_sized((out), (ds), sizeof(fl_dataset), (opt),             \
                         sizeof(fl_options))
/* Like fl_loader_create, for an iterable-style dataset: shuffle and
   indices do not apply and are refused. */
FL_EXTERN int fl_loader_create_iterable_sized(fl_loader **out,
                                              const fl_iterable *it,
                                              size_t it_size,
                                              const fl_options *opt,
                                              size_t opt_size);
#define fl_loader_create_iterable(out, it, opt)                              \
  fl_loader_create_iterable_sized((out), (it), sizeof(fl_iterable), (opt),   \
                                  sizeof(fl_options))
/* Batches per epoch (with a sampler, of the epoch begun last, or of
   sampler_len before the first); 0 for an iterable dataset, whose length
   is unknown. */
FL_EXTERN size_t fl_loader_len(const fl_loader *l);
/* Start an epoch, like iter(loader); one left unfinished is dropped. */
FL_EXTERN int fl_loader_begin(fl_loader *l);
/* The next fl_loader_begin starts this epoch (from 0; each begin counts
   on from the last), as DistributedSampler.set_epoch: the shuffle and a
   sampler are functions of it. */
FL_EXTERN int fl_loader_set_epoch(fl_loader *l, uint64_t epoch);
/* The epoch the last fl_loader_begin started; before the first, the one
   it will start. */
FL_EXTERN uint64_t fl_loader_epoch(const fl_loader *l);
/*
 * A loader's place, to resume it in another process: every batch
 * fl_loader_next has handed out counts as consumed.  save writes a small
 * portable blob (its size bounded by the prefetch window) and returns its
 * length; with buf NULL and cap 0, the length it needs; FL_ENOSPC when cap
 * is too small.  load takes one before the first fl_loader_begin or after
 * an epoch ended (else FL_ESTATE); the next begin resumes the saved epoch
 * where it stood.  A state saved in order may be loaded on another
 * world_size (the rest of its epoch is split among the new ranks); any
 * other mismatch, or a corrupt blob, is FL_EINVAL.
 */
FL_EXTERN int fl_loader_state_save(const fl_loader *l, void *buf, size_t cap);
FL_EXTERN int fl_loader_state_load(fl_loader *l, const void *buf,
                                   size_t len);
/* 1 and a batch the caller owns until fl_batch_release; 0 (and *out NULL)
   when the epoch is over; a negative code on error. */
FL_EXTERN int fl_loader_next(fl_loader *l, fl_batch **out);
/* Since 0.8: fl_loader_next, waiting at most wait_ms for the workers (0:
   only what has arrived), for a caller with more to watch (Ctrl-C).  When
   the wait ends first, FL_EAGAIN (not final) and the epoch as it was: the
   next call goes on, nothing lost or repeated.  timeout_ms counts from
   each call's start, so a wait_ms below it never ends in FL_ETIMEDOUT.
   With num_workers 0 the batch is filled here, whatever wait_ms. */
FL_EXTERN int fl_loader_poll(fl_loader *l, fl_batch **out, unsigned wait_ms);
/* Since 0.8: end the epoch under way, if any, and stop every worker,
   persistent ones too, at once.  The batches sent to them and not handed
   out are dropped; those the caller holds stay valid until released or the
   loader destroyed.  fl_loader_next is then FL_ESTATE until
   fl_loader_begin, which forks new workers.  0, or a negative code (the
   loader's final error, its workers stopped all the same). */
FL_EXTERN int fl_loader_stop(fl_loader *l);
/* The last error as a sentence; NULL l: why the last fl_loader_create*
   or fl_dataset_* call of this thread failed. */
FL_EXTERN const char *fl_loader_error(const fl_loader *l);
FL_EXTERN int fl_loader_stats_sized(const fl_loader *l, fl_stats *out,
                                    size_t size);
#define fl_loader_stats(l, out)                                              \
  fl_loader_stats_sized((l), (out), sizeof(fl_stats))
/* Since 0.5: the budget, computed now from the loader's options and the
   machine (see fl_loader_budget(3) for each item's arithmetic).  max_held
   is a floor: in order, batches that came ahead of the one due may take up to
   (num_workers - 1) x the prefetch factor in force (fl_loader_create(3))
   more before the limit stops it.
   0, or FL_EINVAL. */
FL_EXTERN int fl_loader_budget_sized(const fl_loader *l, fl_budget *out,
                                     size_t size);
#define fl_loader_budget(l, out)                                             \
  fl_loader_budget_sized((l), (out), sizeof(fl_budget))
/* Stops and reaps the workers and frees every segment, held batches too:
   none may be used or released afterwards.  NULL is a no-op. */
FL_EXTERN void fl_loader_destroy(fl_loader *l);

/* Sample i of a batch is at data + i * sample_bytes (field 0 when the
   dataset has fields).  All of these stay valid until fl_batch_release. */
FL_EXTERN const void *fl_batch_data(const fl_batch *b);
/* Field f of sample 0; sample i at + i * fl_batch_stride(b, f).  NULL
   (and a stride of 0) past the last field.  A dataset without fields has
   one, field 0, which is fl_batch_data. */
FL_EXTERN const void *fl_batch_field(const fl_batch *b, size_t f);
FL_EXTERN size_t fl_batch_stride(const fl_batch *b, size_t f);
FL_EXTERN size_t fl_batch_count(const fl_batch *b);
FL_EXTERN const size_t *fl_batch_indices(const fl_batch *b);
/* The bytes get wrote per sample; with fields, nfields per sample:
   sizes[i * nfields + f]. */
FL_EXTERN const size_t *fl_batch_sizes(const fl_batch *b);
FL_EXTERN uint64_t fl_batch_seq(const fl_batch *b); /* from 0 each epoch */
FL_EXTERN unsigned fl_batch_worker(const fl_batch *b);
/* At most once, and not after fl_loader_destroy; NULL is a no-op. */
FL_EXTERN void fl_batch_release(fl_batch *b);


FL_EXTERN const fl_worker_info *fl_get_worker_info(void);
/* In a dataset's get, get_batch, get_fields, open or next (in a worker, or
   in the caller with num_workers 0): a seed for sample `index` that is a
   function of (fl_options.seed, the batch's epoch, index) alone, so that a
   sample re-fetched, resumed or filled by another worker draws the same
   randomness.  Elsewhere its value means nothing. */
FL_EXTERN uint64_t fl_sample_seed(size_t index);
FL_EXTERN void fl_worker_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/*
 * Since 0.9: in a dataset's get, get_batch, get_fields, next or
 * next_fields, when the sample being written needs more room than it was
 * given: room for `bytes` in field `field` (0 without fields).  The batch
 * moves to a segment of a larger size class (every field's room scaled by
 * the same power of two), admitted as fl_loader_create admits its
 * segments, with what the call wrote so far: a per-sample call's samples
 * at the new stride, get_batch's bytes at their offsets from each
 * array's start.  On 0, *dst (with fields: dst[0..nfields), the array
 * the call was given) is where the call writes now, the room is at least
 * `bytes`, the call's nbytes entries say the new room (a batched call's
 * samples are laid out by it), and they may report up to it.  Else the
 * negative code, the batch's error (FL_ENOMEM or FL_ENOSPC; the sentence,
 * naming the size and the limit, in fl_loader_error(NULL) and
 * fl_worker_error's text), and the call should fail: the next batch comes
 * as usual.
 */
FL_EXTERN int fl_worker_grow(size_t field, size_t bytes, void **dst);
/*
 * Built-in datasets.  Each fills a ready fl_dataset (sample_bytes = one
 * sample's bytes) and returns 0, or a negative code with
 * fl_loader_error(NULL) naming the file and what is wrong.  A dataset must
 * be closed after the loaders that use it are destroyed.
 */
FL_EXTERN int fl_dataset_npy_dir_sized(fl_dataset *out, size_t size,
                                       const char *dir);
#define fl_dataset_npy_dir(out, dir)                                         \
  fl_dataset_npy_dir_sized((out), sizeof(fl_dataset), (dir))
FL_EXTERN int fl_dataset_npy_array_sized(fl_dataset *out, size_t size,
                                         const char *path);
#define fl_dataset_npy_array(out, path)                                      \
  fl_dataset_npy_array_sized((out), sizeof(fl_dataset), (path))
FL_EXTERN int fl_dataset_raw_sized(fl_dataset *out, size_t size,
                                   const char *path, size_t record_bytes,
                                   size_t header_bytes);
#define fl_dataset_raw(out, path, record_bytes, header_bytes)                \
  fl_dataset_raw_sized((out), sizeof(fl_dataset), (path), (record_bytes),    \
                       (header_bytes))
/* n .npy arrays with the same first dimension: sample i is row i of each,
   one field per array (X.npy and y.npy: inputs and labels). */
FL_EXTERN int fl_dataset_npy_zip_sized(fl_dataset *out, size_t size,
                                       const char *const *paths, size_t n);
#define fl_dataset_npy_zip(out, paths, n)                                    \
  fl_dataset_npy_zip_sized((out), sizeof(fl_dataset), (paths), (n))
FL_EXTERN void fl_dataset_close_sized(fl_dataset *ds, size_t size);
#define fl_dataset_close(ds) fl_dataset_close_sized((ds), sizeof(fl_dataset))

/*
 * Since 0.6: a folder of images, as torchvision's ImageFolder, decoded and
 * transformed in the workers (fl_dataset_image_folder(3)).  Two fields: the
 * image, then its label (int64).  fl_image_options grows by the ABI rule.
 */
typedef enum { FL_CROP_CENTER = 0, FL_CROP_RANDOM_RESIZED = 1 } fl_crop;
typedef struct fl_image_options {
  unsigned height, width; /* output size, required */
  /* FL_CROP_CENTER: Resize(resize), then CenterCrop (torchvision's
     evaluation transform); FL_CROP_RANDOM_RESIZED: RandomResizedCrop
     (scale, ratio), the training one, drawn from fl_sample_seed. */
  fl_crop crop;
  unsigned resize; /* center: the shorter side's size first; 0: height */
  double scale_min, scale_max, ratio_min, ratio_max; /* 0.08 1 3/4 4/3 */
  double hflip;    /* probability of a horizontal flip; 0 */
  /* 0: uint8 RGB, height x width x 3; 1: float32, 3 x height x width,
     (x/255 - mean)/std. */
  int chw_float;
  float mean[3], std[3]; /* ImageNet's */
  uint64_t max_pixels;   /* larger images are refused; PIL's 89478485 */
} fl_image_options;
FL_EXTERN void fl_image_options_init_sized(fl_image_options *io, size_t size);
#define fl_image_options_init(io)                                            \
  fl_image_options_init_sized((io), sizeof(fl_image_options))
FL_EXTERN int fl_dataset_image_folder_sized(fl_dataset *out, size_t size,
                                            const char *root,
                                            const fl_image_options *io,
                                            size_t io_size);
#define fl_dataset_image_folder(out, root, io)                               \
  fl_dataset_image_folder_sized((out), sizeof(fl_dataset), (root), (io),     \
                                sizeof(fl_image_options))
/* Sample index's file (NULL past the end), and its label if label is set;
   class label's name (the folder's), NULL past the last. */
FL_EXTERN const char *fl_image_folder_sample(const fl_dataset *ds,
                                             size_t index, int64_t *label);
FL_EXTERN const char *fl_image_folder_class(const fl_dataset *ds,
                                            size_t label);
/* The image stage over any dataset whose field `field` holds encoded
   images (JPEG, PNG, WebP, TIFF, BMP or PNM bytes; a dataset of one
   field: field 0): out has
   in's fields, that one decoded and transformed as io says.  in must stay
   open while out is; close out first. */
FL_EXTERN int fl_dataset_decode_images_sized(fl_dataset *out, size_t size,
                                             const fl_dataset *in,
                                             size_t in_size, size_t field,
                                             const fl_image_options *io,
                                             size_t io_size);
#define fl_dataset_decode_images(out, in, field, io)                         \
  fl_dataset_decode_images_sized((out), sizeof(fl_dataset), (in),            \
                                 sizeof(fl_dataset), (field), (io),          \
                                 sizeof(fl_image_options))
/* The same over a stream (WebDataset's .jpg members): the k-th sample a
   stream gives in an epoch draws from fl_sample_seed(k).  Close out with
   fl_iterable_close, then in. */
FL_EXTERN int fl_iterable_decode_images_sized(fl_iterable *out, size_t size,
                                              const fl_iterable *in,
                                              size_t in_size, size_t field,
                                              const fl_image_options *io,
                                              size_t io_size);
#define fl_iterable_decode_images(out, in, field, io)                        \
  fl_iterable_decode_images_sized((out), sizeof(fl_iterable), (in),          \
                                  sizeof(fl_iterable), (field), (io),        \
                                  sizeof(fl_image_options))

/*
 * Since 0.6: llm.c's token shards (fl_dataset_tokens(3)), in the order
 * given.  Sample i is the i-th window of seq_len + 1 tokens, each shard's
 * windows starting every seq_len tokens, as llm.c's DataLoader reads them.
 * Two fields of seq_len int32: the inputs (tokens 0 .. seq_len - 1 of the
 * window), then the targets (tokens 1 .. seq_len).
 */
FL_EXTERN int fl_dataset_tokens_sized(fl_dataset *out, size_t size,
                                      const char *const *paths, size_t n,
                                      size_t seq_len);
#define fl_dataset_tokens(out, paths, n, seq_len)                            \
  fl_dataset_tokens_sized((out), sizeof(fl_dataset), (paths), (n),           \
                          (seq_len))
/* Since 0.8: the first two int32 of an llm.c token shard's header. */
#define FL_TOKENS_MAGIC 20240520
#define FL_TOKENS_VERSION 1

/*
 * Since 0.6: an LMDB environment (a directory holding data.mdb, or the
 * file itself), read-only: sample i is the value of the i-th key in key
 * order, one field of max_bytes, each value's size in fl_batch_sizes
 * (fl_dataset_lmdb(3)).  FL_ENOTSUP in a build without liblmdb.
 */
FL_EXTERN int fl_dataset_lmdb_sized(fl_dataset *out, size_t size,
                                    const char *path, size_t max_bytes);
#define fl_dataset_lmdb(out, path, max_bytes)                                \
  fl_dataset_lmdb_sized((out), sizeof(fl_dataset), (path), (max_bytes))

/*
 * Since 0.6: WebDataset tar shards, an iterable dataset
 * (fl_dataset_webdataset(3)).  A sample is a run of members sharing a key;
 * field f holds the member of extension exts[f] ("__key__": the key
 * itself), up to max_bytes[f].  Shards are split across ranks, then
 * across each rank's workers, as webdataset's split_by_node and
 * split_by_worker.  FL_ENOTSUP in a build without libarchive.  Close it
 * with fl_iterable_close after the loaders that use it are destroyed.
 */
FL_EXTERN int fl_dataset_webdataset_sized(fl_iterable *it, size_t size,
                                          const char *const *shards,
                                          size_t n, const char *const *exts,
                                          const size_t *max_bytes,
                                          size_t nexts);
#define fl_dataset_webdataset(it, shards, n, exts, max_bytes, nexts)         \
  fl_dataset_webdataset_sized((it), sizeof(fl_iterable), (shards), (n),      \
                              (exts), (max_bytes), (nexts))
FL_EXTERN void fl_iterable_close_sized(fl_iterable *it, size_t size);
#define fl_iterable_close(it) fl_iterable_close_sized((it), sizeof(fl_iterable))

/* Remove (dry_run: only list) forkload segments in /dev/shm whose owner
   process is gone; cb, if set, hears of each.  Returns how many, or a
   negative code.  fl_loader_create does this on its own.  A name made in
   another PID namespace (or boot) is left alone: its pid means nothing
   here. */
typedef void (*fl_sweep_cb)(const char *name, long owner_pid, void *arg);
FL_EXTERN int fl_shm_sweep(int dry_run, fl_sweep_cb cb, void *arg);
/* List, and never remove, the segments fl_shm_sweep leaves alone since it
   cannot tell whether their owner lives: made in another PID namespace or
   boot, or by (or judged from) a process that cannot read its own.  cb, if
   set, hears of each (owner_pid: the pid in the owner's namespace).
   Returns how many, or a negative code. */
FL_EXTERN int fl_shm_foreign(fl_sweep_cb cb, void *arg);

FL_EXTERN const char *fl_strerror(int code);
FL_EXTERN const char *fl_err_name(int code);
/* 1 when, after a call returned code, the loader can hand out no more
   batches (a dead worker, a protocol error, FL_EFATAL, a misuse): destroy
   it.  0 when the error concerned one batch or one call (a dataset error,
   a timeout, fl_loader_poll's wait, a batch kept at the fd or shm limit,
   an unpinned segment): call fl_loader_next again for the next batch. */
FL_EXTERN int fl_error_is_final(int code);

#ifdef __cplusplus
}
#endif

#endif /* FORKLOAD_H */
