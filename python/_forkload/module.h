/*
 * forkload's CPython extension: what its files share.  The module is a thin
 * layer over libforkload's public API: a Loader wraps an fl_loader whose
 * dataset calls back into Python in the workers; each batch reaches the
 * consumer as a blob in the batch's segment (arrays laid out at aligned
 * offsets, then a pickled skeleton naming them), and unpack.c turns it into
 * views of that segment.  A Loader may instead wrap one of libforkload's
 * built-in datasets (datasets.c): no Python in the workers, and each field
 * of a batch a view of its segment.
 */
#ifndef FLPY_MODULE_H
#define FLPY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The module keeps to the limited API (below): no build without it. */
#ifndef Py_LIMITED_API
#error "build forkload._forkload with -DPy_LIMITED_API=0x030b0000"
#endif

#include <pthread.h>
#include <stdint.h>

#include <forkload.h>

/* The state of one module object (multi-phase init): its types, and what
   the per-batch path calls, looked up once. */
typedef struct {
  PyTypeObject *loader_type;
  PyTypeObject *segment_type;
  PyTypeObject *view_type;
  PyTypeObject *native_type;
  PyObject *leaf_type;      /* forkload._worker.Leaf */
  PyObject *bytes_type;     /* forkload._worker._TensorBytes */
  PyObject *worker_module;  /* forkload._worker */
  PyObject *dumps, *loads;  /* pickle's */
  PyObject *from_dlpack;    /* torch.from_dlpack, or None */
  PyObject *tensor_type;    /* torch.Tensor, or None */
  PyObject *torch_bool;     /* torch.bool, or None */
  PyObject *torch_uint8;    /* torch.uint8, or None */
  PyObject *torch_strided;  /* torch.strided, or None */
  PyObject *ndarray_type;   /* numpy.ndarray, or None */
  PyObject *np_generic;     /* numpy.generic, or None */
  PyObject *np_asarray;     /* numpy.asarray, or None */
  PyObject *mapping_abc, *sequence_abc; /* collections.abc's */
} flpy_state;

flpy_state *flpy_state_of(PyObject *module);

/*
 * The module keeps to the limited API of CPython 3.11 (Makefile.am sets
 * Py_LIMITED_API), whatever the version of the headers it is built with:
 * one build serves 3.11 and later.  What that API lacks, here.
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
  PyObject *rng_get, *rng_set;
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

/* A batch whose last view is gone, waiting to go back to libforkload:
   for the loader's lock, and with pin_memory for its event, recorded on
   the stream current at that moment, to complete (the copy engine may
   still be reading the segment).  event is read and written with the GIL
   and pending_lock held. */
typedef struct {
  fl_batch *b;
  PyObject *event; /* NULL: nothing to wait for */
} flpy_deferred;

/* The Python type of a Loader; segment.c and unpack.c use its lock. */
#define FLPY_HEARD 8
typedef struct flpy_loader flpy_loader;
struct flpy_loader {
  PyObject_HEAD
  PyObject *weakrefs;
  PyObject *module;
  fl_loader *l;
  flpy_source src;
  pid_t owner;             /* workers' copies never touch the loader */
  pthread_mutex_t lock;    /* one thread in libforkload at a time */
  pthread_mutex_t pending_lock;
  flpy_deferred *pending;  /* released while the lock was busy, or while
                              a copy may still read it */
  size_t npending, cap_pending;
  size_t inflight;         /* entries of pending with an event */
  /* pin_memory: forkload.dataloader's pinner (register, unregister and
     record of a CUDA event, through torch.cuda), or NULL; what its
     register raised, for the warning at that batch. */
  PyObject *pinner;
  PyObject *pin_error;
  int tensor_type;         /* FLPY_LEAF_TENSOR: torch; NDARRAY: numpy */
  double timeout;          /* seconds; 0: none */
  PyObject *timeout_given; /* as the user gave it, for the message */
  PyObject *on_end;        /* called with stats and budget at its end */
  PyObject *last_skel;     /* bytes of the last skeleton, and */
  PyObject *last_template; /* what it unpickled to */
  uint64_t plan_len, plan_start; /* FLPY_PLAN: where plan_write wrote it */
  size_t plan_batches;     /* FLPY_PLAN: this epoch's, */
  size_t plan_cap;         /* and the most any epoch may have */
  fl_options opt;          /* what made the fl_loader */
  size_t length;
  int workers_up;          /* persistent workers forked and alive */
  PyGILState_STATE fork_gil; /* taken by fork_before, for fork_after */
  int closed;
  /* Over a NativeDataset (src.dataset): no Python in the workers. */
  int native;
  int unbatched;           /* batch_size None: a sample, no batch axis */
  size_t *order;           /* FLPY_PLAN: the epoch's indices, batches of */
  size_t order_len;        /* opt.batch_size one after the other */
  char *faults;            /* opt.faults' own copy (malloc), or NULL */
  /* libforkload's warnings (a worker respawned, names swept), heard
     while the GIL was let go, until they are warned of (malloc). */
  char *heard[FLPY_HEARD];
  size_t nheard;
};

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

/* The batch a Segment holds: its fields' arrays (and sizes), as a list,
   or one field's array alone. */
PyObject *flpy_native_unpack(flpy_loader *self, PyObject *segment);
extern PyMethodDef flpy_native_functions[];

/* segment.c */
PyObject *flpy_segment_new(flpy_loader *owner, fl_batch *b);
const unsigned char *flpy_segment_data(PyObject *segment);
fl_batch *flpy_segment_batch(PyObject *segment);
PyObject *flpy_capsule_new(PyObject *segment, size_t offset, int dtype,
                           PyObject *shape);
PyObject *flpy_view_new(flpy_state *st, PyObject *segment, size_t offset,
                        int dtype, PyObject *shape);
/* The same over data that owner (a Segment, or any object) keeps. */
PyObject *flpy_capsule_at(PyObject *owner, const void *data, int dtype,
                          PyObject *shape);
PyObject *flpy_view_at(flpy_state *st, PyObject *owner, const void *data,
                       int dtype, PyObject *shape);
void flpy_loader_release(flpy_loader *self, fl_batch *b);
void flpy_loader_drain(flpy_loader *self);
/* With the GIL: the batches whose events have completed may go back (the
   next drain releases them); with wait, every event is waited for first.
   The number still in flight, or -1 with an error (an event's query
   raised; it stays in flight). */
Py_ssize_t flpy_loader_settle(flpy_loader *self, int wait);
/* fl_options.pin and unpin for a loader with a pinner (pin_arg: the
   loader): register and unregister the segment through it. */
int flpy_pin(void *addr, size_t len, void *arg);
void flpy_unpin(void *addr, size_t len, void *arg);

/* unpack.c: a received segment into what the consumer gets (new ref), or
   NULL with the batch's exception raised. */
PyObject *flpy_unpack(flpy_loader *self, PyObject *segment);
/* An array of dtype and shape over data that owner keeps: a torch tensor
   (DLPack) or a numpy array, as the loader's tensor_type says. */
PyObject *flpy_array_at(flpy_loader *self, PyObject *owner, const void *data,
                        int dtype, PyObject *shape);

extern PyType_Spec flpy_loader_spec, flpy_segment_spec, flpy_view_spec,
    flpy_native_spec;

#endif /* FLPY_MODULE_H */
