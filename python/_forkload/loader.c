/*
 * The Loader type: one fl_loader over a Python dataset, or over one of
 * libforkload's built-in datasets (a NativeDataset).  Its arguments are
 * forkload.DataLoader's, already checked and resolved by dataloader.py
 * into what libforkload takes.  The consumer's waits release the GIL and
 * are cut in slices (fl_loader_poll) to answer Ctrl-C and `timeout`.
 *
 * Locks, in the order they are taken: the loader's lock (`lock`: one
 * thread in libforkload at a time), then the GIL, then the releaser's
 * `pending_lock` (release.c).
 *  - A thread holding the GIL never blocks on `lock`: it tries it, or
 *    lets the GIL go while it waits (lock_loader, release.c's release).
 *  - Nor does it call libforkload, but for calls that take none of its
 *    locks (state_save, len): a thread waiting for libforkload's
 *    process-wide fork table lock must not hold what its holder may wait
 *    for (the fork hooks take the GIL, and so did the pin hooks under
 *    that lock until libforkload ran them after it), so a call that takes
 *    that lock (create, begin, release, stats, stop, next, destroy) is
 *    made with the GIL let go.
 *  - With `lock` held and the GIL let go, libforkload's callbacks take the
 *    GIL themselves (PyGILState_Ensure): the fork hooks, pin and unpin
 *    (pin.c), and in a worker the dataset's (worker.c); the log hook
 *    (hear) takes nothing and calls no Python.
 *  - `pending_lock` is a leaf: with it held, no Python runs and nothing
 *    else is taken (a batch taken off the pending list is released after
 *    it is let go, since a release may unpin).
 * Python is called with `lock` held only from those callbacks and from
 * begin (the plan is pickled before the lock, written under it with no
 * Python).  Teardown that calls Python runs in tp_finalize.
 */
#include "module.h"

#include <structmember.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * A Loader: what makes its fl_loader, and the three parts that other
 * files run: the source (worker.c's, in the workers), the releaser
 * (release.c's: batches back to libforkload) and the unpacker (unpack.c's:
 * a blob into the consumer's batch).
 */
#define FLPY_HEARD 8
typedef struct {
  PyObject_HEAD
  PyObject *weakrefs;
  PyObject *module;
  fl_loader *l;
  flpy_source src;
  flpy_releaser rel;
  flpy_unpacker unp;
  pthread_mutex_t lock;    /* one thread in libforkload at a time */
  double timeout;          /* seconds; 0: none */
  PyObject *timeout_given; /* as the user gave it, for the message */
  PyObject *on_end;        /* called with stats and budget at its end */
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
} flpy_loader;

/* How often a waiting consumer looks at its signals, and at the events
   of its pinned batches' copies while any is in flight. */
#define FLPY_POLL_MS 100
#define FLPY_SETTLE_MS 5

static double
now(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* libforkload's code and sentence as forkload.Error (a RuntimeError),
   or MemoryError. */
static PyObject *
raise_fl(flpy_loader *self, int code, const char *why)
{
  return flpy_raise(self->module, code, why);
}

/* torch's sentence for `timeout`, which names it as the user gave it
   ("1 seconds" for 1). */
static PyObject *
timed_out(flpy_loader *self)
{
  PyErr_Format(PyExc_RuntimeError, "DataLoader timed out after %S seconds",
               self->timeout_given);
  return NULL;
}

/* fl_options.log, in a call on the loader with the GIL let go: the
   sentence kept for speak (past FLPY_HEARD unspoken, dropped). */
static void
hear(void *arg, const char *msg)
{
  flpy_loader *self = arg;
  char *copy;

  if (self->nheard < FLPY_HEARD && (copy = strdup(msg)) != NULL)
    self->heard[self->nheard++] = copy;
}

/* With the GIL: what was heard, as RuntimeWarnings; -1 where one raised
   (warnings made errors), the rest dropped. */
static int
speak(flpy_loader *self)
{
  size_t i;
  int rc = 0;

  for (i = 0; i < self->nheard; i++) {
    if (rc == 0 && PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "forkload: %s",
                                    self->heard[i]) != 0)
      rc = -1;
    free(self->heard[i]);
  }
  self->nheard = 0;
  return rc;
}

/* The loader's lock, taken with the GIL held: where a consumer holds it
   while it waits (a respawn's fork_before takes the GIL), the GIL is let
   go while this one waits. */
static void
lock_loader(flpy_loader *self)
{
  if (pthread_mutex_trylock(&self->lock) == 0)
    return;
  Py_BEGIN_ALLOW_THREADS
  pthread_mutex_lock(&self->lock);
  Py_END_ALLOW_THREADS
}

/* With the lock held and the GIL let go: an unfinished epoch's batches
   still being filled are waited for, workers forked (fork_before takes
   the GIL). */
static int
fork_begin(flpy_loader *self)
{
  int forks = self->opt.num_workers > 0 &&
              !(self->opt.persistent_workers && self->workers_up);
  int rc;

  /* New workers: no state of an earlier one to take. */
  if (forks && self->src.rng != NULL)
    memset(self->src.rng, 0, flpy_rng_bytes(self->src.rng_workers));
  rc = fl_loader_begin(self->l);
  if (forks)
    self->workers_up = rc == 0;
  return rc;
}

/*
 * Around each fork of a worker, fl_loader_begin's (the GIL held) and a
 * respawn's inside fl_loader_poll (the GIL released while the consumer
 * waits): the GIL taken, and os.fork's hooks run, so that the child copies
 * no other thread midway through the interpreter.
 */
static void
fork_before(void *arg)
{
  flpy_loader *self = arg;

  self->fork_gil = PyGILState_Ensure();
  PyOS_BeforeFork();
}

static void
fork_after(void *arg)
{
  flpy_loader *self = arg;

  PyOS_AfterFork_Parent();
  PyGILState_Release(self->fork_gil);
}

/* End the epoch under way and its workers; batches held stay whole.
   Stopping waits for the workers (up to libforkload's grace for one that
   does not answer): other threads run meanwhile, the GIL let go as in
   next(); what the stop calls back into (unpin, log) takes it or needs
   none. */
static int
stop_workers(flpy_loader *self)
{
  int rc;

  Py_BEGIN_ALLOW_THREADS
  pthread_mutex_lock(&self->lock);
  flpy_release_drain(&self->rel);
  rc = fl_loader_stop(self->l);
  pthread_mutex_unlock(&self->lock);
  Py_END_ALLOW_THREADS
  self->workers_up = 0;
  return rc;
}

static int
create(flpy_loader *self, size_t room)
{
  fl_dataset ds;
  fl_iterable it;
  int rc;

  room = (room + FLPY_ALIGN - 1) & ~(size_t)(FLPY_ALIGN - 1);
  /* fl_loader_create takes libforkload's fork table lock: never with the
     GIL (the lock order at the top of this file). */
  self->src.room = room;
  if (self->src.kind == FLPY_ITERABLE) {
    memset(&it, 0, sizeof(it));
    it.ctx = &self->src;
    it.sample_bytes = room;
    it.open = flpy_source_open;
    it.next = flpy_source_next;
    it.close = flpy_source_close;
    Py_BEGIN_ALLOW_THREADS
    rc = fl_loader_create_iterable(&self->l, &it, &self->opt);
    Py_END_ALLOW_THREADS
  } else {
    memset(&ds, 0, sizeof(ds));
    ds.ctx = &self->src;
    ds.len = self->length;
    ds.sample_bytes = room;
    ds.get_batch = flpy_source_get_batch;
    Py_BEGIN_ALLOW_THREADS
    rc = fl_loader_create(&self->l, &ds, &self->opt);
    Py_END_ALLOW_THREADS
  }
  if (rc != 0) {
    raise_fl(self, rc, fl_loader_error(NULL));
    return -1;
  }
  return 0;
}

/* Over a built-in dataset: its own fl_dataset or fl_iterable, whose
   sizes are known. */
static int
create_native(flpy_loader *self)
{
  flpy_native *nd = (flpy_native *)self->src.dataset;
  size_t f;
  int rc;

  self->src.room = 0;
  for (f = 0; f < nd->nfields; f++)
    self->src.room += nd->field_bytes[f];
  Py_BEGIN_ALLOW_THREADS
  if (nd->iterable)
    rc = fl_loader_create_iterable(&self->l, &nd->it, &self->opt);
  else
    rc = fl_loader_create(&self->l, &nd->ds, &self->opt);
  Py_END_ALLOW_THREADS
  if (rc != 0) {
    raise_fl(self, rc, fl_loader_error(NULL));
    return -1;
  }
  return 0;
}

/* A memfd for the epochs' plans, and a shared page saying which. */
static int
plan_setup(flpy_loader *self)
{
  void *page;

  self->src.plan_fd = memfd_create("forkload-plan", MFD_CLOEXEC);
  if (self->src.plan_fd < 0) {
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
              -1, 0);
  if (page == MAP_FAILED) {
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  self->src.plan_gen = page;
  return 0;
}

/*
 * The epoch's plan (bytes, pickled) into the plan memfd, with the loader's
 * lock held: a worker of the last epoch may still be filling one of its
 * batches and read the plan meanwhile.  With no batch in flight the plan
 * goes over the last one; otherwise after it, so that no reader's plan is
 * cut or rewritten.  It is published (plan_publish) once the last epoch's
 * tasks are all filled.
 */
static int
plan_write(flpy_loader *self, PyObject *bytes)
{
  fl_stats stats;
  char *p;
  Py_ssize_t len;
  size_t left;
  ssize_t n;
  off_t at, start;

  if (PyBytes_AsStringAndSize(bytes, &p, &len) != 0)
    return -1;
  if (fl_loader_stats(self->l, &stats) != 0 || stats.in_flight > 0)
    start = (off_t)self->src.plan_end;
  else if (ftruncate(self->src.plan_fd, 0) != 0)
    goto fail;
  else
    start = 0;
  at = start;
  left = (size_t)len;
  while (left > 0) {
    n = pwrite(self->src.plan_fd, p, left, at);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      goto fail;
    p += n;
    at += n;
    left -= (size_t)n;
  }
  self->src.plan_end = (uint64_t)at;
  self->plan_len = (uint64_t)len;
  self->plan_start = (uint64_t)start;
  return 0;
fail:
  PyErr_SetFromErrno(PyExc_OSError);
  return -1;
}

/* The plan written last, where the workers read it (the sequence lock). */
static void
plan_publish(flpy_loader *self)
{
  uint64_t *seq = self->src.plan_gen,
           gen = __atomic_load_n(&seq[0], __ATOMIC_RELAXED);

  __atomic_store_n(&seq[0], gen + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&seq[1], self->plan_len, __ATOMIC_RELAXED);
  __atomic_store_n(&seq[2], self->plan_start, __ATOMIC_RELAXED);
  __atomic_store_n(&seq[0], gen + 2, __ATOMIC_RELEASE);
}

/* The plan's batches, in order: the sampler libforkload calls at each
   begin (the batch ids; the plan says what each is), once the tasks of
   the epoch before are filled (persistent workers fill every one sent),
   before any of this one's is sent: the plan is published here. */
static size_t
plan_order(void *ctx, uint64_t epoch, size_t *order, size_t cap)
{
  flpy_loader *self = ctx;
  size_t n = (size_t)self->plan_batches, i;

  (void)epoch;
  plan_publish(self);
  n = n < cap ? n : cap;
  for (i = 0; i < n; i++)
    order[i] = i;
  return n;
}

/* A built-in dataset's plan: its indices, one batch after the other. */
static size_t
native_order(void *ctx, uint64_t epoch, size_t *order, size_t cap)
{
  flpy_loader *self = ctx;
  size_t n = self->order_len < cap ? self->order_len : cap;

  (void)epoch;
  if (n > 0)
    memcpy(order, self->order, n * sizeof(*order));
  return n;
}

/* Add one index of the plan to order (room: cap). */
static int
plan_index(PyObject *item, size_t *order, size_t *n, size_t cap)
{
  size_t i = PyLong_AsSize_t(item);

  if (i == (size_t)-1 && PyErr_Occurred())
    return -1;
  if (*n >= cap) {
    PyErr_SetString(PyExc_ValueError, "forkload: this epoch's plan does "
                    "not fit the loader");
    return -1;
  }
  order[(*n)++] = i;
  return 0;
}

/*
 * The epoch's batches (lists of indices; unbatched, indices) as the order
 * libforkload cuts into batches of opt.batch_size: every batch of that
 * size but the last, which may be shorter.
 */
static int
native_plan(flpy_loader *self, PyObject *plan)
{
  size_t cap = self->opt.sampler_len, bs = self->opt.batch_size, n = 0;
  PyObject *fast = PySequence_Fast(plan, "forkload: a plan of batches");
  Py_ssize_t i, j, k, nb;
  size_t *order = NULL;
  int rc = -1;

  if (fast == NULL)
    return -1;
  nb = flpy_fast_size(fast);
  if ((order = malloc((cap ? cap : 1) * sizeof(*order))) == NULL) {
    PyErr_NoMemory();
    goto out;
  }
  for (i = 0; i < nb; i++) {
    PyObject *item = flpy_fast_item(fast, i), *batch;

    if (self->unbatched) {
      if (plan_index(item, order, &n, cap) != 0)
        goto out;
      continue;
    }
    batch = PySequence_Fast(item, "forkload: a batch of indices");
    if (batch == NULL)
      goto out;
    k = flpy_fast_size(batch);
    if (k == 0 || (size_t)k > bs || ((size_t)k != bs && i != nb - 1)) {
      PyErr_Format(PyExc_ValueError, "forkload: batch %zd of the sampler "
                   "has %zd samples: the batches of a forkload.datasets "
                   "dataset all have the same size (%zu here), but the "
                   "last, which may have fewer", i, k, bs);
      Py_DECREF(batch);
      goto out;
    }
    for (j = 0; j < k; j++)
      if (plan_index(flpy_fast_item(batch, j), order, &n, cap) != 0)
        break;
    Py_DECREF(batch);
    if (j < k)
      goto out;
  }
  free(self->order);
  self->order = order;
  self->order_len = n;
  self->plan_batches = (size_t)nb;
  order = NULL;
  rc = 0;
out:
  free(order);
  Py_DECREF(fast);
  return rc;
}

static int
parse_choice(const char *s, const char *const *names, const char *what)
{
  int i;

  for (i = 0; names[i] != NULL; i++)
    if (strcmp(s, names[i]) == 0)
      return i;
  PyErr_Format(PyExc_ValueError, "forkload: unknown %s '%s'", what, s);
  return -1;
}

/* With respawns: the shared place of the workers' generator states. */
static int
rng_setup(flpy_loader *self, unsigned workers)
{
  void *p;

  p = mmap(NULL, flpy_rng_bytes(workers), PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  self->src.rng = p;
  self->src.rng_workers = workers;
  return 0;
}

/* What Loader(...) was given, parsed and checked, with libforkload's
   options that follow from it alone; the objects borrowed. */
typedef struct {
  PyObject *dataset, *collate_fn, *setup, *pinner, *timeout_given, *on_end,
      *epoch_start;
  const char *faults;
  int kind, tensor_type, native, unbatched, drop_last;
  size_t batch_size, length, sample_bytes;
  double timeout;
  fl_options opt;
} loader_args;

static int
parse_args(PyObject *module, PyObject *args, PyObject *kwds, loader_args *a)
{
  static char *kwlist[] = {
      "dataset", "kind", "collate_fn", "worker_setup", "batch_size",
      "length", "num_workers", "prefetch_factor", "persistent_workers",
      "in_order", "drop_last", "shuffle", "shuffle_algorithm", "seed",
      "rank", "world_size", "shard_mode", "sharing", "sample_bytes",
      "timeout", "tensor_type", "pinner",
      "max_worker_restarts", "faults", "unbatched", "on_end", "epoch_start",
      NULL};
  static const char *const kinds[] = {"map", "plan", "iterable", NULL};
  static const char *const shards[] = {"pad", "trim", "uneven", NULL};
  static const char *const sharings[] = {"fd", "file_system", NULL};
  static const char *const algos[] = {"torch", "bijection", NULL};
  static const char *const tensors[] = {"torch", "numpy", NULL};
  const char *kind, *shard = "pad", *sharing = "fd", *algo = "torch",
             *tensor = "torch";
  Py_ssize_t batch_size = 1, length = 0, sample_bytes = 0;
  unsigned num_workers = 0, prefetch = 2, rank = 0, world = 1, restarts = 0;
  int persistent = 0, in_order = 1, shuffle = 0, k;
  unsigned long long seed = 0;

  memset(a, 0, sizeof(*a));
  a->pinner = a->on_end = a->epoch_start = Py_None;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwds, "OsOO|$nnIIppppsKIIssnOsOIzpOO:Loader", kwlist,
          &a->dataset, &kind, &a->collate_fn, &a->setup, &batch_size,
          &length, &num_workers, &prefetch, &persistent, &in_order,
          &a->drop_last, &shuffle, &algo, &seed, &rank, &world, &shard,
          &sharing, &sample_bytes, &a->timeout_given, &tensor, &a->pinner,
          &restarts, &a->faults, &a->unbatched, &a->on_end, &a->epoch_start))
    return -1;
  /* Without one, no deadline: timed_out is never reached. */
  if (a->timeout_given != NULL &&
      (a->timeout = PyFloat_AsDouble(a->timeout_given)) == -1.0 &&
      PyErr_Occurred())
    return -1;
  if (batch_size < 0 || length < 0 || sample_bytes < 0 || a->timeout < 0) {
    PyErr_SetString(PyExc_ValueError, "Loader: negative size or timeout");
    return -1;
  }
  a->batch_size = (size_t)batch_size;
  a->length = (size_t)length;
  a->sample_bytes = (size_t)sample_bytes;
  fl_options_init(&a->opt);
  if ((a->kind = parse_choice(kind, kinds, "kind")) < 0)
    return -1;
  if ((k = parse_choice(shard, shards, "shard mode")) < 0)
    return -1;
  a->opt.shard_mode = (fl_shard_mode)k;
  if ((k = parse_choice(sharing, sharings, "sharing strategy")) < 0)
    return -1;
  a->opt.sharing = k ? FL_SHARE_FILE_SYSTEM : FL_SHARE_FILE_DESCRIPTOR;
  if ((k = parse_choice(algo, algos, "shuffle_algorithm")) < 0)
    return -1;
  a->opt.shuffle_algorithm = k ? FL_SHUFFLE_BIJECTION : FL_SHUFFLE_TORCH;
  if ((k = parse_choice(tensor, tensors, "tensor_type")) < 0)
    return -1;
  a->tensor_type = k ? FLPY_LEAF_NDARRAY : FLPY_LEAF_TENSOR;
  a->native =
      PyObject_TypeCheck(a->dataset, flpy_state_of(module)->native_type);
  if (a->native && ((flpy_native *)a->dataset)->iterable !=
                       (a->kind == FLPY_ITERABLE)) {
    PyErr_SetString(PyExc_ValueError, "forkload: a stream is loaded as "
                    "kind 'iterable', a map-style dataset as 'map' or "
                    "'plan'");
    return -1;
  }
  if (a->native && a->collate_fn != Py_None && a->collate_fn != Py_False) {
    PyErr_SetString(PyExc_ValueError, "forkload: a forkload.datasets "
                    "dataset's batches are made in C: collate_fn must be "
                    "None");
    return -1;
  }
  /* A libforkload sample is a whole batch but in a map-style loader. */
  a->opt.batch_size = a->kind == FLPY_MAP ? a->batch_size : 1;
  a->opt.drop_last = a->kind == FLPY_MAP && a->drop_last;
  a->opt.shuffle = shuffle;
  a->opt.seed = seed;
  a->opt.num_workers = num_workers;
  a->opt.prefetch_factor = num_workers ? prefetch : 2;
  a->opt.persistent_workers = persistent;
  a->opt.in_order = in_order;
  a->opt.rank = rank;
  a->opt.world_size = world;
  a->opt.max_worker_restarts = restarts;
  if (a->kind == FLPY_PLAN)
    a->opt.sampler_len = a->length;
  if (a->native) {
    /* libforkload batches the samples itself. */
    a->opt.batch_size = a->collate_fn == Py_False || a->batch_size == 0
                            ? 1 : a->batch_size;
    a->opt.drop_last = a->kind != FLPY_PLAN && a->drop_last;
    if (a->kind == FLPY_PLAN)
      a->opt.sampler_len = a->length * a->opt.batch_size;
  }
  return 0;
}

/* The source: what the workers' callbacks read of the dataset. */
static int
source_init(flpy_loader *self, const loader_args *a)
{
  flpy_source *src = &self->src;

  src->module = self->module;
  src->kind = a->kind;
  src->dataset = Py_NewRef(a->dataset);
  src->worker_setup = Py_NewRef(a->setup);
  if (a->epoch_start != Py_None)
    src->epoch_start = Py_NewRef(a->epoch_start);
  /* batch_size None: each sample alone, default_convert's or given to
     the collate_fn as it is, as torch does without auto-collation. */
  src->unbatched = a->collate_fn == Py_False || a->unbatched;
  if (a->collate_fn == Py_False) {
    src->collate = FLPY_CONVERT;
  } else if (a->collate_fn == Py_None) {
    src->collate = FLPY_COLLATE;
  } else {
    src->collate = FLPY_CUSTOM;
    src->collate_fn = Py_NewRef(a->collate_fn);
  }
  src->batch_size = a->batch_size;
  src->drop_last = a->drop_last;
  if (a->kind != FLPY_ITERABLE && !a->native) {
    PyObject *gi = PyObject_GetAttrString(a->dataset, "__getitems__");

    /* torch calls __getitems__ where the dataset has a true one. */
    if (gi != NULL && PyObject_IsTrue(gi) == 1)
      src->getitems = gi;
    else
      Py_XDECREF(gi);
    PyErr_Clear();
  }
  /* num_workers 0: the batches are filled here, their skeletons kept for
     the unpacker under keys. */
  if (a->opt.num_workers == 0 && !a->native) {
    if ((src->inline_batches = PyDict_New()) == NULL)
      return -1;
    self->unp.inline_batches = Py_NewRef(src->inline_batches);
  }
  if (a->kind == FLPY_PLAN && !a->native && plan_setup(self) != 0)
    return -1;
  if (a->opt.max_worker_restarts > 0 && a->opt.num_workers > 0 &&
      !a->native && a->kind != FLPY_ITERABLE &&
      rng_setup(self, a->opt.num_workers) != 0)
    return -1;
  return 0;
}

/* libforkload's callbacks into this loader, and the options that hold
   what the loader keeps. */
static int
options_finish(flpy_loader *self, const loader_args *a, fl_options *opt)
{
  opt->worker_init = flpy_source_worker_init;
  opt->worker_init_arg = &self->src;
  opt->fork_before = fork_before;
  opt->fork_after = fork_after;
  opt->fork_arg = self;
  opt->log = hear;
  opt->log_arg = self;
  if (a->faults != NULL) {
    /* Read at create. */
    if ((self->faults = strdup(a->faults)) == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    opt->faults = self->faults;
  }
  if (a->pinner != Py_None) {
    /* pin_memory: each segment registered once, through the pinner. */
    self->rel.pinner = Py_NewRef(a->pinner);
    opt->pin_memory = 1;
    opt->pin = flpy_pin;
    opt->unpin = flpy_unpin;
    opt->pin_arg = &self->rel;
  }
  if (a->kind == FLPY_PLAN) {
    opt->sampler = a->native ? native_order : plan_order;
    opt->sampler_ctx = self;
  }
  /* Over a built-in dataset Python runs in a worker only for a
     worker_init_fn. */
  if (a->native && a->setup == Py_None)
    opt->worker_init = NULL;
  return 0;
}

static int
loader_init(PyObject *op, PyObject *args, PyObject *kwds)
{
  flpy_loader *self = (flpy_loader *)op;
  loader_args a;
  size_t per_room;

  if (parse_args(self->module, args, kwds, &a) != 0)
    return -1;
  /* Once: a second call after a failure late in the first would
     overwrite what the first kept (the dataset, generator states, the
     faults' copy). */
  if (self->l != NULL || self->src.dataset != NULL) {
    PyErr_SetString(PyExc_RuntimeError,
                    "Loader is already made (its __init__ runs once)");
    return -1;
  }
  self->native = a.native;
  self->unbatched = a.native && a.collate_fn == Py_False;
  self->timeout = a.timeout;
  self->timeout_given = Py_XNewRef(a.timeout_given);
  if (a.on_end != Py_None)
    self->on_end = Py_NewRef(a.on_end);
  self->length = a.length;
  self->plan_cap = a.length;
  self->unp.tensor_type = a.tensor_type;
  self->unp.rooms = a.kind == FLPY_MAP && a.batch_size ? a.batch_size : 1;
  if (source_init(self, &a) != 0 || options_finish(self, &a, &a.opt) != 0)
    return -1;
  self->opt = a.opt;
  if (a.native)
    return create_native(self);
  /* The user's room for the arrays, and overhead; or a small room that
     the first batch in each segment grows (nothing is read to measure
     it: torch reads no sample before the workers). */
  per_room = a.kind == FLPY_MAP || a.batch_size == 0 ? 1 : a.batch_size;
  if (a.sample_bytes > 0)
    return create(self, a.sample_bytes * per_room + 65536);
  return create(self, FLPY_ROOM_DEFAULT * per_room + FLPY_ROOM_DEFAULT);
}

static int begin(flpy_loader *self, uint64_t epoch, uint64_t base_seed,
                 PyObject *plan, const Py_buffer *state);

/* begin(epoch, base_seed, plan=None, state=None): start an epoch, as
   iter(), or resume the one a state saved. */
static PyObject *
loader_begin(PyObject *op, PyObject *args, PyObject *kwds)
{
  static char *kwlist[] = {"epoch", "base_seed", "plan", "state", NULL};
  flpy_loader *self = (flpy_loader *)op;
  unsigned long long epoch, base_seed;
  PyObject *plan = Py_None;
  Py_buffer state = {0};
  int rc;

  if (!PyArg_ParseTupleAndKeywords(args, kwds, "KK|Oz*:begin", kwlist,
                                   &epoch, &base_seed, &plan, &state))
    return NULL;
  rc = begin(self, epoch, base_seed, plan, &state);
  PyBuffer_Release(&state);
  if (rc != 0 || speak(self) != 0)
    return NULL;
  Py_RETURN_NONE;
}

static int
begin(flpy_loader *self, uint64_t epoch, uint64_t base_seed, PyObject *plan,
      const Py_buffer *state)
{
  PyObject *pickled = NULL;
  Py_ssize_t n = 0;
  int rc;

  if (self->closed) {
    PyErr_SetString(PyExc_RuntimeError, "forkload: this loader is closed");
    return -1;
  }
  if (plan != Py_None) {
    n = PyObject_Length(plan);
    if (n < 0)
      return -1;
    if (self->src.kind != FLPY_PLAN || (size_t)n > self->plan_cap) {
      PyErr_SetString(PyExc_ValueError, "forkload: this epoch's plan does "
                      "not fit the loader");
      return -1;
    }
    if (self->native) {
      if (native_plan(self, plan) != 0)
        return -1;
    } else {
      /* Written below, under the lock (plan_write). */
      pickled = PyObject_CallFunction(flpy_state_of(self->module)->dumps,
                                      "Oi", plan, 4);
      if (pickled == NULL)
        return -1;
    }
  }
  self->src.base_seed = base_seed;
  if (self->rel.pinner != NULL && flpy_release_settle(&self->rel, 0) < 0) {
    Py_XDECREF(pickled);
    return -1;
  }
  lock_loader(self);
  if (pickled != NULL) {
    rc = plan_write(self, pickled);
    Py_DECREF(pickled);
    if (rc != 0) {
      pthread_mutex_unlock(&self->lock);
      return -1;
    }
    self->plan_batches = (size_t)n;
  }
  Py_BEGIN_ALLOW_THREADS
  flpy_release_drain(&self->rel);
  rc = fl_loader_set_epoch(self->l, epoch);
  /* A state saved by state_save: this epoch resumes where it stood. */
  if (rc == 0 && state->buf != NULL)
    rc = fl_loader_state_load(self->l, state->buf, (size_t)state->len);
  if (rc == 0)
    rc = fork_begin(self);
  Py_END_ALLOW_THREADS
  pthread_mutex_unlock(&self->lock);
  if (rc != 0) {
    raise_fl(self, rc, fl_loader_error(self->l));
    return -1;
  }
  return 0;
}

/* The sentence libforkload gave the batch, and what the pinner raised. */
static int
warn_unpinned(flpy_loader *self)
{
  PyObject *why = self->rel.pin_error;
  int rc;

  self->rel.pin_error = NULL;
  rc = PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "forkload: %s (%S)",
                        fl_loader_error(self->l), why);
  Py_DECREF(why);
  return rc;
}

static PyObject *
loader_next(PyObject *op, PyObject *unused)
{
  flpy_loader *self = (flpy_loader *)op;
  double deadline = self->timeout > 0 ? now() + self->timeout : 0, left;
  unsigned wait;
  fl_batch *b = NULL;
  PyObject *seg, *out;
  Py_ssize_t inflight;
  int rc;

  (void)unused;
  if (self->l == NULL || self->closed) {
    PyErr_SetString(PyExc_RuntimeError, "forkload: this loader is closed");
    return NULL;
  }
  for (;;) {
    wait = FLPY_POLL_MS;
    if (self->rel.pinner != NULL) {
      /* Batches whose copies are done go back to the workers; while
         one is in flight, look again soon. */
      if ((inflight = flpy_release_settle(&self->rel, 0)) < 0)
        return NULL;
      if (inflight > 0)
        wait = FLPY_SETTLE_MS;
    }
    if (deadline > 0) {
      left = deadline - now();
      if (left <= 0)
        return timed_out(self);
      if (left * 1000 < wait)
        wait = (unsigned)ceil(left * 1000);
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    flpy_release_drain(&self->rel);
    rc = fl_loader_poll(self->l, &b, wait);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (rc == FL_ENOMEM && self->rel.pin_error != NULL) {
      /* The pinner could not register the batch's segment: the next
         poll hands the batch out, unpinned. */
      if (warn_unpinned(self) != 0)
        return NULL;
      continue;
    }
    if (rc != FL_EAGAIN)
      break;
    if (PyErr_CheckSignals() != 0) {
      stop_workers(self); /* Ctrl-C: the workers go now */
      return NULL;
    }
  }
  if (speak(self) != 0) {
    if (rc > 0)
      flpy_release(&self->rel, b);
    return NULL;
  }
  /* The end is StopIteration, never a value: a batch may be None (a
     collate_fn's rejection, a sample that is None). */
  if (rc == 0) {
    PyErr_SetNone(PyExc_StopIteration);
    return NULL;
  }
  if (rc < 0)
    return raise_fl(self, rc, fl_loader_error(self->l));
  seg = flpy_segment_new(flpy_state_of(self->module), op, &self->rel, b);
  if (seg == NULL)
    return NULL;
  out = self->native ? flpy_native_unpack(&self->unp, self->src.dataset,
                                          self->unbatched, seg)
                     : flpy_unpack(&self->unp, seg);
  Py_DECREF(seg);
  return out;
}

/* close(): the workers go now; the loader itself, when the last batch
   held is released. */
static PyObject *
loader_close(PyObject *op, PyObject *unused)
{
  flpy_loader *self = (flpy_loader *)op;

  (void)unused;
  if (self->l != NULL && !self->closed && self->rel.owner == getpid())
    stop_workers(self);
  self->closed = 1;
  Py_RETURN_NONE;
}

static PyObject *
loader_state_save(PyObject *op, PyObject *unused)
{
  flpy_loader *self = (flpy_loader *)op;
  PyObject *bytes;
  int n;

  (void)unused;
  if (self->l == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "forkload: this loader is closed");
    return NULL;
  }
  n = fl_loader_state_save(self->l, NULL, 0);
  if (n < 0)
    return raise_fl(self, n, fl_loader_error(self->l));
  bytes = PyBytes_FromStringAndSize(NULL, n);
  if (bytes == NULL)
    return NULL;
  n = fl_loader_state_save(self->l, PyBytes_AsString(bytes), (size_t)n);
  if (n < 0) {
    Py_DECREF(bytes);
    return raise_fl(self, n, fl_loader_error(self->l));
  }
  return bytes;
}

/* UINT64_MAX, libforkload's "none", is None. */
static PyObject *
figure(uint64_t v)
{
  if (v == UINT64_MAX)
    Py_RETURN_NONE;
  return PyLong_FromUnsignedLongLong(v);
}

/* fl_loader_stats into st, or fl_loader_budget into b, under the
   loader's lock (another thread may be in next()); -1 with the exception
   set. */
static int
loader_read(flpy_loader *self, fl_stats *st, fl_budget *b)
{
  int rc;

  if (self->l == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "forkload: this loader is closed");
    return -1;
  }
  lock_loader(self);
  Py_BEGIN_ALLOW_THREADS
  rc = st != NULL ? fl_loader_stats(self->l, st)
                  : fl_loader_budget(self->l, b);
  Py_END_ALLOW_THREADS
  pthread_mutex_unlock(&self->lock);
  if (rc != 0) {
    raise_fl(self, rc, fl_loader_error(self->l));
    return -1;
  }
  return 0;
}

/* fl_loader_stats as a dict, its field names for keys. */
static PyObject *
loader_stats(PyObject *op, PyObject *unused)
{
  flpy_loader *self = (flpy_loader *)op;
  fl_stats st;

  (void)unused;
  if (loader_read(self, &st, NULL) != 0)
    return NULL;
  return Py_BuildValue(
      "{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:K,s:d,s:n,s:n,s:K,s:K}",
      "segments", (Py_ssize_t)st.segments, "segments_peak",
      (Py_ssize_t)st.segments_peak, "bytes_mapped",
      (Py_ssize_t)st.bytes_mapped, "bytes_mapped_peak",
      (Py_ssize_t)st.bytes_mapped_peak, "fds", (Py_ssize_t)st.fds,
      "fds_peak", (Py_ssize_t)st.fds_peak, "batches_held",
      (Py_ssize_t)st.batches_held, "reorder_depth",
      (Py_ssize_t)st.reorder_depth, "reorder_peak",
      (Py_ssize_t)st.reorder_peak, "batches_delivered",
      (unsigned long long)st.batches_delivered, "wait_seconds",
      st.wait_seconds, "in_flight", (Py_ssize_t)st.in_flight,
      "in_flight_peak", (Py_ssize_t)st.in_flight_peak, "worker_restarts",
      (unsigned long long)st.worker_restarts, "faults_injected",
      (unsigned long long)st.faults_injected);
}

/* fl_loader_budget as a list of dicts, one a resource, and the index of
   the one that binds first; a figure of none is None. */
static PyObject *
loader_budget(PyObject *op, PyObject *unused)
{
  flpy_loader *self = (flpy_loader *)op;
  PyObject *items = NULL, *item = NULL, *limit = NULL, *in_use = NULL,
           *per_batch = NULL, *max_held = NULL, *res = NULL;
  fl_budget b;
  size_t i;

  (void)unused;
  if (loader_read(self, NULL, &b) != 0)
    return NULL;
  items = PyList_New(0);
  if (items == NULL)
    return NULL;
  for (i = 0; i < b.n; i++) {
    limit = figure(b.item[i].limit);
    in_use = figure(b.item[i].in_use);
    per_batch = figure(b.item[i].per_batch);
    max_held = figure(b.item[i].max_held);
    if (limit == NULL || in_use == NULL || per_batch == NULL ||
        max_held == NULL)
      goto out;
    item = Py_BuildValue("{s:s,s:O,s:O,s:O,s:O}", "resource",
                         b.item[i].resource, "limit", limit, "in_use",
                         in_use, "per_batch", per_batch, "max_held",
                         max_held);
    if (item == NULL || PyList_Append(items, item) != 0)
      goto out;
    Py_CLEAR(item);
    Py_CLEAR(limit);
    Py_CLEAR(in_use);
    Py_CLEAR(per_batch);
    Py_CLEAR(max_held);
  }
  /* -1 where nothing binds: every item's max_held is none. */
  res = Py_BuildValue("(On)", items,
                      b.n > 0 && b.item[b.binding].max_held != UINT64_MAX
                          ? (Py_ssize_t)b.binding
                          : (Py_ssize_t)-1);
out:
  Py_CLEAR(item);
  Py_CLEAR(limit);
  Py_CLEAR(in_use);
  Py_CLEAR(per_batch);
  Py_CLEAR(max_held);
  Py_CLEAR(items);
  return res;
}

static PyObject *
loader_len(PyObject *op, PyObject *unused)
{
  flpy_loader *self = (flpy_loader *)op;

  (void)unused;
  return PyLong_FromSize_t(self->l != NULL ? fl_loader_len(self->l) : 0);
}

static PyObject *
loader_get_room(PyObject *op, void *closure)
{
  (void)closure;
  return PyLong_FromSize_t(((flpy_loader *)op)->src.room);
}

static PyObject *
loader_get_inflight(PyObject *op, void *closure)
{
  (void)closure;
  return PyLong_FromSize_t(((flpy_loader *)op)->rel.inflight);
}

static PyObject *
loader_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
  allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
  flpy_loader *self;
  PyObject *module;

  (void)args;
  (void)kwds;
  module = PyType_GetModule(type);
  if (module == NULL)
    return NULL;
  self = (flpy_loader *)alloc(type, 0);
  if (self == NULL)
    return NULL;
  Py_INCREF(module);
  self->module = module;
  self->src.plan_fd = -1;
  pthread_mutex_init(&self->lock, NULL);
  flpy_releaser_init(&self->rel, &self->lock);
  self->unp.module = module;
  return (PyObject *)self;
}

static int
loader_traverse(PyObject *op, visitproc visit, void *arg)
{
  flpy_loader *self = (flpy_loader *)op;

  Py_VISIT(Py_TYPE(op));
  Py_VISIT(self->module);
  Py_VISIT(self->src.dataset);
  Py_VISIT(self->src.collate_fn);
  Py_VISIT(self->src.worker_setup);
  Py_VISIT(self->src.epoch_start);
  Py_VISIT(self->src.getitems);
  Py_VISIT(self->src.init_error);
  Py_VISIT(self->src.iterator);
  Py_VISIT(self->src.stream_error);
  Py_VISIT(self->src.inline_batches);
  Py_VISIT(self->src.plan);
  Py_VISIT(self->rel.pinner);
  Py_VISIT(self->rel.pin_error);
  Py_VISIT(self->timeout_given);
  Py_VISIT(self->on_end);
  return flpy_unpacker_traverse(&self->unp, visit, arg);
}

static int
loader_clear(PyObject *op)
{
  flpy_loader *self = (flpy_loader *)op;

  Py_CLEAR(self->src.dataset);
  Py_CLEAR(self->src.collate_fn);
  Py_CLEAR(self->src.worker_setup);
  Py_CLEAR(self->src.epoch_start);
  Py_CLEAR(self->src.getitems);
  Py_CLEAR(self->src.init_error);
  Py_CLEAR(self->src.iterator);
  Py_CLEAR(self->src.stream_error);
  Py_CLEAR(self->src.inline_batches);
  Py_CLEAR(self->src.plan);
  Py_CLEAR(self->rel.pinner);
  Py_CLEAR(self->rel.pin_error);
  Py_CLEAR(self->timeout_given);
  Py_CLEAR(self->on_end);
  flpy_unpacker_clear(&self->unp);
  return 0;
}

/*
 * The teardown that calls Python (the pinner's events and unregister),
 * while the Loader is still whole: PEP 442's finalizer, which the
 * collector runs before it clears a cycle, and dealloc runs where it has
 * not run.  Once: the fl_loader is gone after it.
 */
/* Its counters and budget at its end, its batches freed, to on_end:
   what DataLoader.stats() and budget() say once it is gone. */
static void
report_end(flpy_loader *self)
{
  PyObject *st, *b = NULL, *r = NULL;

  st = loader_stats((PyObject *)self, NULL);
  if (st != NULL)
    b = loader_budget((PyObject *)self, NULL);
  if (b != NULL)
    r = PyObject_CallFunctionObjArgs(self->on_end, st, b, NULL);
  if (r == NULL)
    PyErr_WriteUnraisable(self->on_end);
  Py_XDECREF(r);
  Py_XDECREF(b);
  Py_XDECREF(st);
}

static void
loader_finalize(PyObject *op)
{
  flpy_loader *self = (flpy_loader *)op;
  PyObject *type, *value, *tb;

  if (self->rel.owner != getpid())
    return; /* a worker's copy: the workers and segments are not its */
  PyErr_Fetch(&type, &value, &tb);
  if (self->l != NULL) {
    /* destroy unpins and unmaps every segment: no copy may still read
       one. */
    if (self->rel.pinner != NULL)
      flpy_release_settle(&self->rel, 1);
    /* Reaping the workers can wait: let other threads run. */
    Py_BEGIN_ALLOW_THREADS
    flpy_release_drain(&self->rel);
    Py_END_ALLOW_THREADS
    if (self->on_end != NULL)
      report_end(self);
    Py_BEGIN_ALLOW_THREADS
    fl_loader_destroy(self->l);
    Py_END_ALLOW_THREADS
    self->l = NULL;
  }
  PyErr_Restore(type, value, tb);
}

static void
loader_dealloc(PyObject *op)
{
  flpy_loader *self = (flpy_loader *)op;
  PyTypeObject *tp = Py_TYPE(op);

  PyObject_GC_UnTrack(op);
  if (self->weakrefs != NULL)
    PyObject_ClearWeakRefs(op);
  loader_finalize(op);
  free(self->order);
  free(self->faults);
  while (self->nheard > 0)
    free(self->heard[--self->nheard]);
  if (self->src.rng != NULL)
    munmap(self->src.rng, flpy_rng_bytes(self->src.rng_workers));
  if (self->src.plan_fd >= 0)
    close(self->src.plan_fd);
  if (self->src.plan_gen != NULL)
    munmap((void *)self->src.plan_gen, 4096);
  pthread_mutex_destroy(&self->lock);
  flpy_releaser_fini(&self->rel);
  loader_clear(op);
  Py_CLEAR(self->module);
  ((freefunc)PyType_GetSlot(tp, Py_tp_free))(op);
  Py_DECREF(tp);
}

static PyMethodDef loader_methods[] = {
    {"begin", (PyCFunction)(void (*)(void))loader_begin,
     METH_VARARGS | METH_KEYWORDS,
     "begin(epoch, base_seed, plan=None, state=None): start an epoch, or "
     "resume the one state_save saved."},
    {"next", loader_next, METH_NOARGS,
     "The next batch; StopIteration when the epoch is over."},
    {"close", loader_close, METH_NOARGS,
     "Stop the workers for good; the loader goes with its last batch."},
    {"state_save", loader_state_save, METH_NOARGS,
     "libforkload's state of the loader (fl_loader_state_save)."},
    {"batches", loader_len, METH_NOARGS, "Batches per epoch (fl_loader_len)."},
    {"stats", loader_stats, METH_NOARGS,
     "The loader's counters as a dict (fl_loader_stats)."},
    {"budget", loader_budget, METH_NOARGS,
     "(items, binding): each resource's limit, use, cost a held batch and "
     "batches that can be held, and the index of the first to bind "
     "(fl_loader_budget)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef loader_getset[] = {
    {"room", loader_get_room, NULL, "Bytes of a batch's blob room.", NULL},
    {"inflight", loader_get_inflight, NULL,
     "Released pinned batches whose copies' events have not completed.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* Weak references: forkload.dataloader closes the loaders alive at exit. */
static PyMemberDef loader_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(flpy_loader, weakrefs),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot loader_slots[] = {
    {Py_tp_members, loader_members},
    {Py_tp_new, loader_new},
    {Py_tp_init, loader_init},
    {Py_tp_dealloc, loader_dealloc},
    {Py_tp_finalize, loader_finalize},
    {Py_tp_traverse, loader_traverse},
    {Py_tp_clear, loader_clear},
    {Py_tp_methods, loader_methods},
    {Py_tp_getset, loader_getset},
    {Py_tp_doc, "One libforkload loader over a Python dataset "
                "(forkload.DataLoader's engine)."},
    {0, NULL},
};

PyType_Spec flpy_loader_spec = {
    .name = "forkload._forkload.Loader",
    .basicsize = sizeof(flpy_loader),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = loader_slots,
};
