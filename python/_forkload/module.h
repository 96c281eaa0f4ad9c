/*
 * forkload's CPython extension: what its files share.  The module is a thin
 * layer over libforkload's public API: a Loader wraps an fl_loader whose
 * dataset calls back into Python in the workers; each batch reaches the
 * consumer as a blob in the batch's segment (arrays laid out at aligned
 * offsets, then a pickled skeleton naming them), and unpack.c turns it into
 * views of that segment.  A Loader may instead wrap one of libforkload's
 * built-in datasets (datasets.c): no Python in the workers, and each field
 * of a batch a view of its segment.
 *
 * A file a type or a part, along the data path: worker.c and collate.c
 * fill a batch in a worker (flpy_source); loader.c is the Loader, which
 * receives it; segment.c, view.c and dlpack.c are the Segment, the View
 * and the DLPack capsules its arrays are made of; unpack.c rebuilds the
 * batch over them (flpy_unpacker); release.c gives it back to libforkload
 * when its last view is gone (flpy_releaser), through pin.c's hooks under
 * pin_memory.  The Loader's own fields are loader.c's alone.
 */
#ifndef FLPY_MODULE_H
#define FLPY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The module keeps to the limited API of 3.11 (below): no build without it
   but for CPython 3.10, whose limited API lacks the buffer protocol. */
#if !defined(Py_LIMITED_API) && PY_VERSION_HEX >= 0x030B0000
#error "build forkload._forkload with -DPy_LIMITED_API (configure.ac's fl_limited_api)"
#endif

#include <pthread.h>
#include <stdint.h>

#include <forkload.h>

/*
 * The state of one module object (multi-phase init): its types, and what
 * the per-batch path calls, looked up once.  Each object is listed once,
 * here: module.c looks them up, visits and clears them from the lists.
 *  - FLPY_TYPES: the module's own types (X(field, spec));
 *  - FLPY_WORKER_NAMES: forkload._worker's (X(field, name)), which the
 *    fill and the unpacking call by the field, never by a name;
 *  - FLPY_REQUIRED: of the standard library (X(field, module, name));
 *  - FLPY_OPTIONAL: of torch or numpy (X(field, torch|numpy, name)), None
 *    where the module does not import.
 */
#define FLPY_TYPES(X)                                                        \
  X(loader_type, flpy_loader_spec)                                           \
  X(segment_type, flpy_segment_spec)                                         \
  X(view_type, flpy_view_spec)                                               \
  X(native_type, flpy_native_spec)
#define FLPY_WORKER_NAMES(X)                                                 \
  X(leaf_type, "Leaf")                                                       \
  X(bytes_type, "_TensorBytes")                                              \
  X(w_like, "like")                                                          \
  X(w_torch_collate, "torch_collate")                                        \
  X(w_torch_convert, "torch_convert")                                        \
  X(w_carried, "carried")                                                    \
  X(w_wrap, "wrap")                                                          \
  X(w_reraise, "reraise")                                                    \
  X(w_error, "error")                                                        \
  X(w_no_fetcher, "no_fetcher")                                              \
  X(w_rng_state, "rng_state")                                                \
  X(w_set_rng_state, "set_rng_state")
#define FLPY_REQUIRED(X)                                                     \
  X(dumps, "pickle", "dumps")                                                \
  X(loads, "pickle", "loads")                                                \
  X(mapping_abc, "collections.abc", "Mapping")                               \
  X(sequence_abc, "collections.abc", "Sequence")
#define FLPY_OPTIONAL(X)                                                     \
  X(from_dlpack, torch, "from_dlpack")                                       \
  X(tensor_type, torch, "Tensor")                                            \
  X(torch_bool, torch, "bool")                                               \
  X(torch_uint8, torch, "uint8")                                             \
  X(torch_strided, torch, "strided")                                         \
  X(ndarray_type, numpy, "ndarray")                                          \
  X(np_generic, numpy, "generic")                                            \
  X(np_asarray, numpy, "asarray")

#define FLPY_STATE_TYPE(field, spec) PyTypeObject *field;
#define FLPY_STATE_OBJECT(field, ...) PyObject *field;
typedef struct {
  FLPY_TYPES(FLPY_STATE_TYPE)
  FLPY_WORKER_NAMES(FLPY_STATE_OBJECT)
  FLPY_REQUIRED(FLPY_STATE_OBJECT)
  FLPY_OPTIONAL(FLPY_STATE_OBJECT)
} flpy_state;
#undef FLPY_STATE_TYPE
#undef FLPY_STATE_OBJECT

flpy_state *flpy_state_of(PyObject *module);

/*
 * The module keeps to the limited API of CPython 3.11 (configure and
 * setup.py set Py_LIMITED_API), whatever the version of the headers it is
 * built with: one build serves 3.11 and later.  CPython 3.10 builds the
 * same code on its full API, for itself alone: it uses nothing of 3.11's
 * limited API that 3.10's full API lacks.  What that API lacks, here.
 */
/* Py_SETREF and Py_XSETREF, outside it: the old reference is dropped
   after the new one is stored. */
#ifndef Py_SETREF
#define Py_SETREF(dst, src)                                                  \
  do {                                                                       \
    PyObject **flpy_ref_ = (PyObject **)&(dst);                              \
    PyObject *flpy_old_ = *flpy_ref_;                                        \
    *flpy_ref_ = (PyObject *)(src);                                          \
    Py_DECREF(flpy_old_);                                                    \
  } while (0)
#endif
#ifndef Py_XSETREF
#define Py_XSETREF(dst, src)                                                 \
  do {                                                                       \
    PyObject **flpy_ref_ = (PyObject **)&(dst);                              \
    PyObject *flpy_old_ = *flpy_ref_;                                        \
    *flpy_ref_ = (PyObject *)(src);                                          \
    Py_XDECREF(flpy_old_);                                                   \
  } while (0)
#endif

/* f(arg): PyObject_CallOneArg is outside the limited API of 3.11; this
   goes through vectorcall all the same, with no tuple made. */
static inline PyObject *
flpy_call1(PyObject *f, PyObject *arg)
{
  return PyObject_CallFunctionObjArgs(f, arg, NULL);
}

/* The length and items (borrowed) of what PySequence_Fast returned, an
   exact list or tuple: its _GET_SIZE and _GET_ITEM macros are outside the
   limited API. */
static inline Py_ssize_t
flpy_fast_size(PyObject *fast)
{
  return PyList_CheckExact(fast) ? PyList_Size(fast) : PyTuple_Size(fast);
}

static inline PyObject *
flpy_fast_item(PyObject *fast, Py_ssize_t i)
{
  return PyList_CheckExact(fast) ? PyList_GetItem(fast, i)
                                 : PyTuple_GetItem(fast, i);
}

/* The name of o's type as its tp_name says it, for the messages that
   name it as CPython and torch do (new ref). */
PyObject *flpy_type_name(PyObject *o);

/* The exception being raised, with its traceback (new ref), cleared. */
PyObject *flpy_take_exception(void);
/* Raise libforkload's code and sentence: forkload.Error (a RuntimeError),
   or MemoryError.  NULL. */
PyObject *flpy_raise(PyObject *module, int code, const char *why);

/* Element types a batch's arrays may have: torch's, as default_collate
   makes them. */
enum flpy_dtype {
  FLPY_BOOL,
  FLPY_UINT8,
  FLPY_INT8,
  FLPY_INT16,
  FLPY_INT32,
  FLPY_INT64,
  FLPY_FLOAT16,
  FLPY_BFLOAT16,
  FLPY_FLOAT32,
  FLPY_FLOAT64,
  FLPY_COMPLEX64,
  FLPY_COMPLEX128,
  FLPY_NDTYPES
};
size_t flpy_dtype_size(int dtype);
const char *flpy_dtype_format(int dtype); /* the buffer protocol's; NULL */
const char *flpy_dtype_name(int dtype);

/* A leaf of a batch's skeleton: kind says what the consumer gets. */
enum flpy_leaf_kind { FLPY_LEAF_TENSOR, FLPY_LEAF_NDARRAY };

/*
 * A batch's blob, at the start of its room in the segment: the arrays
 * follow at FLPY_ALIGN-aligned offsets from the blob's start, then the
 * skeleton (pickled).  An error blob's skeleton is the pickled exception
 * record of forkload._worker.
 */
#define FLPY_MAGIC 0x59504c46u /* "FLPY" */
#define FLPY_ALIGN 64
/* FLPY_BLOB_INLINE: with num_workers 0, a batch whose skeleton stays an
   object in the consumer (flpy_source's inline), the blob holding its
   8-byte key: nothing is pickled where torch pickles nothing. */
enum flpy_blob_kind {
  FLPY_BLOB_BATCH = 1,
  FLPY_BLOB_ERROR = 2,
  FLPY_BLOB_INLINE = 3
};
typedef struct {
  uint32_t magic;
  uint32_t kind;
  uint64_t len;      /* bytes used, this header included */
  uint64_t skel_off; /* the pickled skeleton */
  uint64_t skel_len;
  uint64_t nleaves;
  uint64_t data_bytes; /* the arrays' bytes, padding included */
  uint64_t reserved[2];
} flpy_blob;

/*
 * A loader's first room per sample, where the user gives no sample_bytes:
 * small, for the first batch in each segment grows it to what the batches
 * need (a segment of a larger class, kept while they need it).
 */
#define FLPY_ROOM_DEFAULT 4096

/* Where a blob is written: the room in a segment. */
typedef struct {
  unsigned char *base;
  size_t cap, len;
  size_t nleaves;
  size_t data; /* bytes reserved, padding left out */
  int over; /* the room ran out: len is what it would have needed */
  /* A segment's room: past it, the batch moves to a larger segment
     (fl_worker_grow), whose room per sample the call's nbytes say. */
  size_t *room_at; /* NULL: no growing */
  size_t samples;  /* the rooms the blob spans */
} flpy_writer;

void flpy_writer_init(flpy_writer *w, void *base, size_t cap);
/* w writes into a dataset call's segment room of `samples` rooms, whose
   room each nbytes says: it grows the segment as the blob needs. */
void flpy_writer_segment(flpy_writer *w, size_t *nbytes, size_t samples);
/* Room for n bytes at an aligned offset: its offset.  Past the room, and
   the segment unable to grow, the writer counts on with nowhere to write:
   *at is NULL and w->over set. */
int64_t flpy_writer_reserve(flpy_writer *w, size_t n, unsigned char **at);

/* How the worker gets a batch from the dataset (loader.c sets it up). */
enum flpy_kind { FLPY_MAP, FLPY_PLAN, FLPY_ITERABLE };
/* What becomes of the samples: default_collate, default_convert (no
   batching), or the user's collate_fn. */
enum flpy_collate { FLPY_COLLATE, FLPY_CONVERT, FLPY_CUSTOM };

/* Everything the worker's callbacks read: set before the fork, read in
   the child (the fork copies it). */
typedef struct {
  PyObject *module;   /* borrowed: the Loader holds it */
  PyObject *dataset;
  PyObject *collate_fn;   /* FLPY_CUSTOM's */
  PyObject *worker_setup; /* forkload._worker's setup, bound to the loader */
  PyObject *epoch_start;  /* FLPY_ITERABLE: called with the epoch before
                             each worker's stream's iter(), or NULL */
  PyObject *getitems;     /* dataset.__getitems__, or NULL */
  int kind, collate;
  int unbatched;          /* batch_size None: a key a batch, no list */
  size_t batch_size;      /* FLPY_ITERABLE: samples a batch; 0: none */
  int drop_last;          /* FLPY_ITERABLE: a short batch is dropped */
  size_t room;            /* bytes of one fl batch's blob room */
  uint64_t base_seed;
  /* FLPY_PLAN: the epoch's batches, pickled into a memfd by the parent;
     a worker reads it again when its generation changes.  The shared
     page is a sequence lock over where the plan lies: plan_gen[0] the
     generation (odd while the parent changes it), [1] the length, [2]
     the offset.  A plan is written where no worker may be reading: over
     the last one when no batch is in flight, else after it. */
  int plan_fd;
  uint64_t *plan_gen;
  uint64_t plan_seen;
  uint64_t plan_end;      /* the parent's: where the last plan ends */
  PyObject *plan;         /* the worker's unpickled copy */
  /* In a worker: what went wrong in setup (worker_init_fn, or the first
     iter() of an iterable), raised at its first batch. */
  PyObject *init_error;   /* bytes: an error blob's skeleton */
  PyObject *iterator;     /* FLPY_ITERABLE: this worker's stream, */
  PyObject *stream_error; /* or why a later iter(dataset) failed */
  /* As torch's worker loop, which makes its fetcher (iter() of an
     iterable) after worker_init_fn: where either raised, the worker has
     none, and its batches after init_error raise UnboundLocalError until
     an epoch after the one it started in (persistent workers) makes it.
     init_run: fl_worker_info's run of the epoch that forked the worker. */
  int no_fetcher;
  uint64_t init_run;
  int exhausted;
  /* num_workers 0: the skeletons of the batches written and not yet
     unpacked, by key (FLPY_BLOB_INLINE). */
  PyObject *inline_batches;
  uint64_t inline_next;
  /* max_worker_restarts over a map-style dataset: each worker's generator
     states (forkload._worker.rng_state) after each batch, in a shared
     mapping of flpy_rng_bytes(num_workers), so that a respawned worker
     redoes a batch from the state its predecessor began it in; NULL: not
     kept. */
  unsigned char *rng;
  unsigned rng_workers;
  unsigned worker;        /* in a worker: its id */
  int rng_restore;        /* a respawned worker, before its first batch */
} flpy_source;

/* Bytes of the generator states' mapping for n workers. */
size_t flpy_rng_bytes(unsigned n);

/* worker.c: the fl_dataset and fl_iterable callbacks, in the workers. */
int flpy_source_get_batch(void *ctx, const size_t *indices, size_t n,
                          void *dst, size_t *nbytes);
void flpy_source_worker_init(unsigned worker_id, void *arg);
int flpy_source_open(void *ctx, const fl_worker_info *w);
int flpy_source_next(void *ctx, void *dst, size_t *nbytes);
void flpy_source_close(void *ctx);
/* One batch's blob for these keys (a list) into w, or for the iterable's
   next batch when keys is NULL: 1 written, 0 the stream is over, -1 a
   Python error that could not even be recorded. */
int flpy_source_fill(flpy_source *src, PyObject *keys, flpy_writer *w);

/* collate.c: a batch into a writer; the skeleton returned (new ref) has
   Leaf objects where arrays were written.  NULL and a Python error. */
PyObject *flpy_collate(flpy_state *st, PyObject *samples, flpy_writer *w);
PyObject *flpy_convert(flpy_state *st, PyObject *obj, int custom,
                       flpy_writer *w);
/* Finish a blob: pickle the skeleton after the arrays (a batch's; an
   error's and an inline batch's come as bytes), write the header.  0, or
   -1 and a Python error. */
int flpy_blob_finish(flpy_state *st, flpy_writer *w, PyObject *skeleton,
                     int kind);

/*
 * release.c: how a batch the consumer is done with goes back to
 * libforkload.  A batch whose last view is gone waits in the pending list
 * while the loader's lock is busy (a thread waits for a batch in
 * libforkload with the GIL released), and with pin_memory until the
 * event recorded on the current stream at that moment completes (the
 * copy engine may still read the segment).  The lock order is loader.c's.
 */
typedef struct {
  fl_batch *b;
  PyObject *event; /* NULL: nothing to wait for */
} flpy_deferred;

typedef struct {
  pid_t owner;                  /* the consumer: a worker's copy of a
                                   batch releases nothing */
  pthread_mutex_t *lock;        /* the loader's: one thread in libforkload */
  pthread_mutex_t pending_lock; /* a leaf lock: pending, npending */
  flpy_deferred *pending;
  size_t npending, cap_pending;
  size_t inflight;              /* entries of pending with an event; read
                                   and written with the GIL held */
  /* pin_memory: forkload.dataloader's pinner (register, unregister and
     record of a CUDA event, through torch.cuda), or NULL; what its
     register raised, for the warning at that batch (pin.c). */
  PyObject *pinner;
  PyObject *pin_error;
} flpy_releaser;

void flpy_releaser_init(flpy_releaser *r, pthread_mutex_t *lock);
void flpy_releaser_fini(flpy_releaser *r);
/* The segment's last view is gone: b goes back now, or once the lock is
   free and its copies done. */
void flpy_release(flpy_releaser *r, fl_batch *b);
/* With the lock held (and the GIL let go, or not): the batches with
   nothing left to wait for go back. */
void flpy_release_drain(flpy_releaser *r);
/* With the GIL: the batches whose events have completed may go back (the
   next drain releases them); with wait, every event is waited for first.
   The number still in flight, or -1 with an error (an event's query
   raised; it stays in flight). */
Py_ssize_t flpy_release_settle(flpy_releaser *r, int wait);

/* pin.c: fl_options.pin and unpin for a loader with a pinner (pin_arg:
   its releaser): register and unregister the segment through it. */
int flpy_pin(void *addr, size_t len, void *arg);
void flpy_unpin(void *addr, size_t len, void *arg);

/* segment.c: a received batch, which its views keep (and the Loader,
   which keeps r). */
PyObject *flpy_segment_new(flpy_state *st, PyObject *loader,
                           flpy_releaser *r, fl_batch *b);
const unsigned char *flpy_segment_data(PyObject *segment);
fl_batch *flpy_segment_batch(PyObject *segment);

/* view.c: an array of a batch over data that owner (a Segment, or any
   object) keeps, exporting the buffer protocol and DLPack. */
PyObject *flpy_view_at(flpy_state *st, PyObject *owner, const void *data,
                       int dtype, PyObject *shape);

/* dlpack.c: a DLPack capsule over data that owner keeps. */
PyObject *flpy_capsule_at(PyObject *owner, const void *data, int dtype,
                          PyObject *shape);

/*
 * unpack.c: a received segment into what the consumer gets.  What a
 * Loader's unpacking keeps between batches: the last skeleton and its
 * template (reused where nothing of it is mutable), and with num_workers 0
 * the skeletons written in this process (the source's inline_batches, a
 * reference of each).
 */
typedef struct {
  PyObject *module;        /* borrowed: the Loader holds it */
  int tensor_type;         /* FLPY_LEAF_TENSOR: torch; NDARRAY: numpy */
  size_t rooms;            /* the rooms of its segment a blob may span */
  PyObject *inline_batches;
  PyObject *last_skel;     /* bytes of the last skeleton, and */
  PyObject *last_template; /* what it unpickled to */
} flpy_unpacker;

/* The batch (new ref), or NULL with the batch's exception raised. */
PyObject *flpy_unpack(flpy_unpacker *u, PyObject *segment);
/* An array of dtype and shape over data that owner keeps: a torch tensor
   (DLPack) or a numpy array, as u->tensor_type says. */
PyObject *flpy_array_at(const flpy_unpacker *u, PyObject *owner,
                        const void *data, int dtype, PyObject *shape);
int flpy_unpacker_traverse(flpy_unpacker *u, visitproc visit, void *arg);
void flpy_unpacker_clear(flpy_unpacker *u);

/*
 * datasets.c: one of libforkload's built-in datasets, and the layout of
 * its batches: field f is an array of dtype[f], of shape (count,
 * *shapes[f]).  Closed when the last reference goes: every Loader over it
 * holds one.
 */
typedef struct {
  PyObject_HEAD
  int iterable, open;
  fl_dataset ds;
  fl_iterable it;
  PyObject *inner;   /* decode_images: the dataset it reads, kept open */
  size_t nfields;
  size_t *field_bytes;
  int *dtype;
  PyObject *shapes;  /* a tuple of tuples */
  int has_sizes;     /* batches end with fl_batch_sizes, int64 */
} flpy_native;

/* The batch a Segment holds of dataset (a NativeDataset): its fields'
   arrays (and sizes), as a list, or one field's array alone. */
PyObject *flpy_native_unpack(const flpy_unpacker *u, PyObject *dataset,
                             int unbatched, PyObject *segment);
extern PyMethodDef flpy_native_functions[];

extern PyType_Spec flpy_loader_spec, flpy_segment_spec, flpy_view_spec,
    flpy_native_spec;

#endif /* FLPY_MODULE_H */
