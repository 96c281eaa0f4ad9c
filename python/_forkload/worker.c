/*
 * The dataset's side, run by libforkload in each worker (or in the
 * consumer with num_workers 0): set the forked interpreter up and seed it
 * as PyTorch's worker loop does, then fetch each batch's samples from the
 * Python dataset, collate them into the batch's room and finish its blob.
 * An exception becomes an error blob at its batch: the worker goes on.
 */
#include "module.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

static flpy_state *
state(const flpy_source *src)
{
  return flpy_state_of(src->module);
}

/* The worker id torch's messages name; -1 in the consumer. */
static int
worker_id(void)
{
  const fl_worker_info *info = fl_get_worker_info();

  return info != NULL && info->num_workers > 0 ? (int)info->id : -1;
}

/*
 * The exception being raised, as an error blob's record: pickled by
 * forkload._worker.wrap in a worker, as PyTorch's ExceptionWrapper; kept
 * whole (with its traceback) in the consumer, which raises it as it is.
 */
static PyObject *
error_record(flpy_source *src)
{
  PyObject *exc, *rec;

  exc = flpy_take_exception();
  if (exc == NULL)
    return NULL;
  /* Cut to fit (forkload._worker.wrap says where). */
  rec = PyObject_CallFunction(state(src)->w_wrap, "Oin", exc, worker_id(),
                              (Py_ssize_t)src->room);
  Py_DECREF(exc);
  return rec;
}

static int
write_error(flpy_source *src, PyObject *record, flpy_writer *w)
{
  size_t *room_at = w->room_at, samples = w->samples;

  flpy_writer_init(w, w->base, w->cap);
  flpy_writer_segment(w, room_at, samples);
  if (flpy_blob_finish(state(src), w, record, FLPY_BLOB_ERROR) != 0)
    return -1;
  return w->over ? -1 : 1;
}

/* The exception now raised becomes the batch. */
static int
fail_batch(flpy_source *src, flpy_writer *w)
{
  PyObject *rec = error_record(src);
  int rc;

  if (rec == NULL)
    return -1;
  rc = write_error(src, rec, w);
  Py_DECREF(rec);
  return rc;
}

/*
 * With num_workers 0 the batch never leaves the consumer: its skeleton is
 * kept as it is, under the key its blob holds, as torch hands the
 * collate_fn's result over without pickling it (a generator, a namedtuple
 * defined in a class body).  Kept only once the blob is whole.
 */
static int
finish_inline(flpy_source *src, flpy_writer *w, PyObject *out)
{
  uint64_t key = ++src->inline_next;
  PyObject *bytes, *k;
  int rc;

  bytes = PyBytes_FromStringAndSize((const char *)&key, sizeof(key));
  if (bytes == NULL)
    return -1;
  rc = flpy_blob_finish(state(src), w, bytes, FLPY_BLOB_INLINE);
  Py_DECREF(bytes);
  if (rc != 0 || w->over)
    return rc;
  k = PyLong_FromUnsignedLongLong(key);
  if (k == NULL)
    return -1;
  rc = PyDict_SetItem(src->inline_batches, k, out);
  Py_DECREF(k);
  return rc;
}

/* FLPY_PLAN: where the current plan lies, read whole under the parent's
   sequence lock (module.h): its generation, length and offset. */
static uint64_t
plan_where(const flpy_source *src, uint64_t *len, uint64_t *off)
{
  uint64_t gen;

  for (;;) {
    gen = __atomic_load_n(&src->plan_gen[0], __ATOMIC_ACQUIRE);
    *len = __atomic_load_n(&src->plan_gen[1], __ATOMIC_RELAXED);
    *off = __atomic_load_n(&src->plan_gen[2], __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (!(gen & 1) &&
        __atomic_load_n(&src->plan_gen[0], __ATOMIC_RELAXED) == gen)
      return gen;
    sched_yield();
  }
}

/* FLPY_PLAN: the worker's copy of the epoch's batches, read again from
   the parent's memfd when its generation moved on (pread: a file that
   changed under it reads short, never SIGBUS). */
static PyObject *
plan_of(flpy_source *src)
{
  uint64_t len, off, gen = plan_where(src, &len, &off), got = 0;
  PyObject *bytes;
  ssize_t n;

  if (src->plan != NULL && gen == src->plan_seen)
    return src->plan;
  bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
  if (bytes == NULL)
    return NULL;
  while (got < len) {
    n = pread(src->plan_fd, PyBytes_AsString(bytes) + got, len - got,
              (off_t)(off + got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      Py_DECREF(bytes);
      if (n == 0)
        errno = EIO;
      return PyErr_SetFromErrno(PyExc_OSError);
    }
    got += (uint64_t)n;
  }
  Py_XSETREF(src->plan, flpy_call1(state(src)->loads, bytes));
  Py_DECREF(bytes);
  src->plan_seen = gen;
  return src->plan;
}

/* The samples of a batch: __getitems__(keys), or [dataset[k] ...].  The
   keys are a list, or with a plan whatever the batch sampler gave. */
static PyObject *
fetch(flpy_source *src, PyObject *keys)
{
  Py_ssize_t i, n;
  PyObject *fast, *out, *v;

  if (src->unbatched)
    return PyObject_GetItem(src->dataset, keys);
  if (src->getitems != NULL)
    return flpy_call1(src->getitems, keys);
  fast = PySequence_Fast(keys, "forkload: a batch of indices");
  if (fast == NULL)
    return NULL;
  n = flpy_fast_size(fast);
  out = PyList_New(n);
  for (i = 0; out != NULL && i < n; i++) {
    v = PyObject_GetItem(src->dataset, flpy_fast_item(fast, i));
    if (v == NULL || PyList_SetItem(out, i, v) != 0)
      Py_CLEAR(out);
  }
  Py_DECREF(fast);
  return out;
}

/* An iterable's next batch: a list of up to batch_size samples, NULL at
   the stream's end (no error) or on an error. */
static PyObject *
take(flpy_source *src)
{
  size_t want = src->batch_size ? src->batch_size : 1;
  PyObject *list, *v;

  if (src->iterator == NULL || src->exhausted)
    return NULL;
  list = PyList_New(0);
  if (list == NULL)
    return NULL;
  while ((size_t)PyList_Size(list) < want) {
    v = PyIter_Next(src->iterator);
    if (v == NULL)
      break;
    if (PyList_Append(list, v) != 0) {
      Py_DECREF(v);
      Py_DECREF(list);
      return NULL;
    }
    Py_DECREF(v);
  }
  if (PyErr_Occurred()) {
    Py_DECREF(list);
    return NULL;
  }
  if ((size_t)PyList_Size(list) < want) {
    src->exhausted = 1;
    if (PyList_Size(list) == 0 || src->drop_last) {
      Py_DECREF(list);
      return NULL;
    }
  }
  return list;
}

/* Whether the batch being filled is of the epoch the worker started in:
   without persistent workers, always. */
static int
first_run(const flpy_source *src)
{
  const fl_worker_info *info = fl_get_worker_info();

  return info == NULL || info->run == src->init_run;
}

/* Whether this worker has no fetcher, as torch's after its init raised:
   a later run of persistent workers has one (torch's makes it at each
   resumed epoch). */
static int
fetcherless(flpy_source *src)
{
  if (src->no_fetcher && !first_run(src))
    src->no_fetcher = 0;
  return src->no_fetcher;
}

int
flpy_source_fill(flpy_source *src, PyObject *keys, flpy_writer *w)
{
  flpy_state *st = state(src);
  PyObject *data, *out;
  int rc;

  /* As PyTorch: the init's exception at the worker's first batch, then
     UnboundLocalError (its fetcher never made) at each of its batches,
     until a later epoch of persistent workers. */
  if (src->init_error != NULL) {
    rc = write_error(src, src->init_error, w);
    Py_CLEAR(src->init_error);
    return rc;
  }
  if (fetcherless(src)) {
    Py_XDECREF(PyObject_CallNoArgs(st->w_no_fetcher));
    return fail_batch(src, w);
  }
  if (keys != NULL) {
    data = fetch(src, keys);
  } else {
    data = take(src);
    if (data == NULL && !PyErr_Occurred())
      return 0;
    if (data != NULL && src->unbatched)
      Py_SETREF(data, PySequence_GetItem(data, 0));
  }
  if (data == NULL)
    return fail_batch(src, w);
  if (src->collate == FLPY_CUSTOM) {
    Py_SETREF(data, flpy_call1(src->collate_fn, data));
    out = data == NULL ? NULL : flpy_convert(st, data, 1, w);
  } else if (src->collate == FLPY_CONVERT) {
    out = flpy_convert(st, data, 0, w);
  } else {
    out = flpy_collate(st, data, w);
  }
  Py_XDECREF(data);
  if (out == NULL)
    return fail_batch(src, w);
  rc = worker_id() < 0 ? finish_inline(src, w, out)
                       : flpy_blob_finish(st, w, out, FLPY_BLOB_BATCH);
  Py_DECREF(out);
  if (rc != 0)
    return fail_batch(src, w);
  if (w->over) {
    /* The segment could not grow to hold the batch: fl_worker_grow
       says why (its size and the limit). */
    PyErr_Format(PyExc_RuntimeError,
                 "this batch needs %zu bytes of shared memory, more than "
                 "the %zu its segment has, and no larger segment could be "
                 "had: %s", w->len, w->cap, fl_loader_error(NULL));
    w->room_at = NULL; /* the error's record fits the room it has */
    return fail_batch(src, w);
  }
  return 1;
}

/*
 * The generators' states of each worker, after its setup and after each
 * batch it filled: the latest three, so that the one before a batch whose
 * reply its worker died sending is still there.  A record is written
 * whole before the count that makes it the latest is stored.
 */
#define RNG_RECORDS 3
#define RNG_ROOM 32768

struct rng_record {
  uint64_t key;  /* the batch it follows (0: the setup) */
  uint64_t len;  /* bytes of state; 0: none (too large, or not taken) */
  unsigned char state[RNG_ROOM - 16];
};

struct rng_worker {
  uint64_t starts;   /* workers started in this place */
  uint64_t written;  /* records written; the latest is (written - 1) % 3 */
  unsigned char pad[RNG_ROOM - 16];
  struct rng_record rec[RNG_RECORDS];
};

size_t
flpy_rng_bytes(unsigned n)
{
  return (size_t)n * sizeof(struct rng_worker);
}

static struct rng_worker *
rng_of(const flpy_source *src)
{
  return (struct rng_worker *)(void *)src->rng + src->worker;
}

/* A batch's key: its epoch and indices hashed (FNV-1a), never 0. */
static uint64_t
batch_key(const size_t *indices, size_t n)
{
  const fl_worker_info *info = fl_get_worker_info();
  uint64_t h = 14695981039346656037ULL ^ (info != NULL ? info->epoch : 0);
  size_t i;

  for (i = 0; i < n; i++)
    h = (h ^ (uint64_t)indices[i]) * 1099511628211ULL;
  return h | 1;
}

/* Records the generators' states after the batch of key. */
static void
rng_save(flpy_source *src, uint64_t key)
{
  struct rng_worker *w = rng_of(src);
  uint64_t n = __atomic_load_n(&w->written, __ATOMIC_RELAXED);
  struct rng_record *r = &w->rec[n % RNG_RECORDS];
  PyObject *b = PyObject_CallNoArgs(state(src)->w_rng_state);
  Py_ssize_t len;
  char *p;

  r->len = 0;
  if (b != NULL && PyBytes_AsStringAndSize(b, &p, &len) == 0 &&
      (size_t)len <= sizeof(r->state)) {
    memcpy(r->state, p, (size_t)len);
    r->len = (uint64_t)len;
  }
  Py_XDECREF(b);
  PyErr_Clear(); /* a state not taken is a redo that draws anew */
  r->key = key;
  __atomic_store_n(&w->written, n + 1, __ATOMIC_RELEASE);
}

/* In a respawned worker, before its first batch (key): the states its
   predecessor had after the batch before it. */
static void
rng_load(flpy_source *src, uint64_t key)
{
  struct rng_worker *w = rng_of(src);
  uint64_t n = __atomic_load_n(&w->written, __ATOMIC_ACQUIRE);
  const struct rng_record *r;
  PyObject *b, *res;

  if (n == 0)
    return;
  r = &w->rec[(n - 1) % RNG_RECORDS];
  /* Filled, but its reply lost with its worker: redone from before it. */
  if (r->key == key && n >= 2)
    r = &w->rec[(n - 2) % RNG_RECORDS];
  if (r->len == 0)
    return;
  b = PyBytes_FromStringAndSize((const char *)r->state, (Py_ssize_t)r->len);
  res = b != NULL ? flpy_call1(state(src)->w_set_rng_state, b) : NULL;
  Py_XDECREF(res);
  Py_XDECREF(b);
  PyErr_Clear();
}

/* A hard failure, where not even an error blob could be written. */
static int
hard_failure(void)
{
  PyObject *exc = flpy_take_exception(), *s;
  const char *text;

  s = exc != NULL ? PyObject_Str(exc) : NULL;
  text = s != NULL ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
  fl_worker_error("%s", text != NULL ? text : "Python error");
  if (text == NULL)
    PyErr_Clear();
  Py_XDECREF(s);
  Py_XDECREF(exc);
  return -1;
}

int
flpy_source_get_batch(void *ctx, const size_t *indices, size_t n, void *dst,
                      size_t *nbytes)
{
  flpy_source *src = ctx;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *keys = NULL, *plan;
  flpy_writer w;
  uint64_t key = 0;
  size_t i;
  int rc = -1;

  flpy_writer_init(&w, dst, n * nbytes[0]);
  flpy_writer_segment(&w, nbytes, n);
  if (src->kind == FLPY_PLAN) {
    plan = plan_of(src);
    keys = plan == NULL ? NULL
                        : PySequence_GetItem(plan, (Py_ssize_t)indices[0]);
  } else if (src->unbatched) {
    keys = PyLong_FromSize_t(indices[0]); /* batch_size None: one key */
  } else {
    keys = PyList_New((Py_ssize_t)n);
    for (i = 0; keys != NULL && i < n; i++) {
      PyObject *k = PyLong_FromSize_t(indices[i]);

      if (k == NULL || PyList_SetItem(keys, (Py_ssize_t)i, k) != 0)
        Py_CLEAR(keys);
    }
  }
  if (src->rng != NULL && worker_id() >= 0) {
    key = batch_key(indices, n);
    if (src->rng_restore) {
      src->rng_restore = 0;
      rng_load(src, key);
    }
  }
  if (keys == NULL)
    rc = fail_batch(src, &w);
  else
    rc = flpy_source_fill(src, keys, &w);
  if (key != 0)
    rng_save(src, key);
  Py_XDECREF(keys);
  /* What each room holds of the blob: the classes batches need, which
     decide when a grown segment is made smaller again, read it. */
  for (i = 0; i < n; i++)
    nbytes[i] = (w.len + n - 1) / n < nbytes[i] ? (w.len + n - 1) / n
                                                : nbytes[i];
  rc = rc < 0 ? hard_failure() : 0;
  PyGILState_Release(g);
  return rc;
}

/*
 * First thing in a forked worker: the interpreter is made whole again
 * (PyOS_AfterFork_Child, before any Python runs), then
 * forkload._worker.setup seeds random, torch and numpy and calls
 * worker_init_fn.  What it raises is raised at this worker's first
 * batch, and the worker has no fetcher (flpy_source_fill), as in PyTorch.
 */
void
flpy_source_worker_init(unsigned id, void *arg)
{
  flpy_source *src = arg;
  PyObject *r;

  /* Forked with the GIL held (fork_before in loader.c). */
  PyOS_AfterFork_Child();
  r = PyObject_CallFunction(src->worker_setup, "IK", id,
                            (unsigned long long)src->base_seed);
  src->init_run = fl_get_worker_info()->run;
  if (r == NULL) {
    src->init_error = error_record(src);
    src->no_fetcher = 1;
  }
  Py_XDECREF(r);
  PyErr_Clear();
  src->worker = id;
  if (src->rng != NULL && id < src->rng_workers) {
    /* The first worker here saves its seeded state; a respawned one
       takes its predecessor's at its first batch. */
    if (__atomic_fetch_add(&rng_of(src)->starts, 1, __ATOMIC_RELAXED) == 0)
      rng_save(src, 0);
    else
      src->rng_restore = 1;
  }
}

int
flpy_source_open(void *ctx, const fl_worker_info *info)
{
  flpy_source *src = ctx;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *r;

  src->exhausted = 0;
  /* A worker without a fetcher opens no stream (torch's calls no iter()). */
  if (fetcherless(src)) {
    Py_CLEAR(src->iterator);
    PyGILState_Release(g);
    return 0;
  }
  /* First what the epoch sets up in a worker (an IterDataPipe's seeds, as
     torch's worker sets them; without workers, info NULL, the consumer
     did), then the stream; a failure of either is the stream's error:
     in the run the worker started in, its init's (torch's worker makes
     the stream's iterator as it starts), in a later one its stream's. */
  r = src->epoch_start == NULL || info == NULL
          ? Py_NewRef(Py_None)
          : PyObject_CallFunction(src->epoch_start, "K",
                                  (unsigned long long)info->epoch);
  Py_XSETREF(src->iterator, r == NULL ? NULL
                                      : PyObject_GetIter(src->dataset));
  Py_XDECREF(r);
  /* Raised at this stream's first batch, which is then its last (in a
     later run: torch's worker dies of it). */
  if (src->iterator == NULL && info != NULL && first_run(src)) {
    Py_XSETREF(src->init_error, error_record(src));
    src->no_fetcher = 1;
  } else if (src->iterator == NULL) {
    Py_XSETREF(src->stream_error, error_record(src));
  }
  PyErr_Clear();
  PyGILState_Release(g);
  return 0;
}

int
flpy_source_next(void *ctx, void *dst, size_t *nbytes)
{
  flpy_source *src = ctx;
  PyGILState_STATE g = PyGILState_Ensure();
  flpy_writer w;
  int rc;

  flpy_writer_init(&w, dst, *nbytes);
  flpy_writer_segment(&w, nbytes, 1);
  if (src->stream_error != NULL) {
    rc = write_error(src, src->stream_error, &w);
    Py_CLEAR(src->stream_error);
  } else {
    rc = flpy_source_fill(src, NULL, &w);
  }
  if (w.len < *nbytes)
    *nbytes = w.len;
  if (rc < 0)
    rc = hard_failure();
  PyGILState_Release(g);
  return rc;
}

void
flpy_source_close(void *ctx)
{
  flpy_source *src = ctx;
  PyGILState_STATE g = PyGILState_Ensure();

  Py_CLEAR(src->iterator);
  PyGILState_Release(g);
}
