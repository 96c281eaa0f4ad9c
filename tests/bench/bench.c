/*
 * make bench: forkload beside PyTorch's DataLoader, same workloads, same
 * machine, same run.  Each round runs a workload with forkload, then with
 * PyTorch (tests/bench/torch_side.py, when `import torch` works); the table
 * gives medians, the ratio, and PASS/FAIL against the targets of the
 * performance issue.  The machine's warm memset bandwidth is measured in
 * the same run, to put forkload's MB/s in proportion; the image rows'
 * folder of JPEGs is written by `forkload gen images`, and libjpeg's
 * decoding speed measured beside them; the LMDB rows' environment is
 * written here with liblmdb, and the token rows write llm.c shards of
 * their own; the scale rows run each sample count in a process of its
 * own, this program again (--scale-child).  --smoke runs tiny sizes and
 * no PyTorch, so that CI can keep this program from rotting.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The image rows need what fl_dataset_image_folder needs: both decoders. */
#if defined(HAVE_LIBJPEG) && defined(HAVE_SPNG)
#define BENCH_IMAGES 1
#include <jpeglib.h>
#endif

/* The LMDB rows write their environment with liblmdb. */
#ifdef HAVE_LMDB
#include <lmdb.h>
#endif
#ifdef HAVE_LIBARCHIVE
#include <archive.h>
#include <archive_entry.h>
#endif

#include "forkload.h"
#ifdef BENCH_IMAGES
#include "image/decode.h" /* the crop draw: the crop floor's crops */
#endif

#define MAX_ROUNDS 9
#define RESUMES 5 /* restarts per round in the resume rows, both sides */

static int smoke;
static int rounds = 3;
static const char *torch_script = "tests/bench/torch_side.py";
static int have_torch;

static double
now(void)
{
  struct timespec t;

  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void
sleep_us(unsigned us)
{
  struct timespec t = {us / 1000000, (long)(us % 1000000) * 1000};

  while (nanosleep(&t, &t) != 0 && errno == EINTR)
    ;
}

static void
spin_us(double us)
{
  double end = now() + us / 1e6;

  while (now() < end)
    ;
}

static void
die(const char *what, fl_loader *l, int rc)
{
  fprintf(stderr, "bench: %s: %s\n", what,
          l != NULL ? fl_loader_error(l) : fl_strerror(rc));
  exit(1);
}

static int
cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return (x > y) - (x < y);
}

static double
median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The datasets: each mirrors its twin in torch_side.py. */
struct data {
  size_t floats;         /* per sample */
  const float *src;      /* bandwidth: a decoded image to copy */
  unsigned delay_us;     /* per sample, or per batch with get_batch */
  unsigned slow_us;      /* head-of-line: worker 0's per-sample delay */
};

static void
fill(const struct data *d, size_t i, float *dst)
{
  size_t k;

  if (d->src != NULL) {
    memcpy(dst, d->src, d->floats * sizeof(float));
    return;
  }
  for (k = 0; k < d->floats; k++)
    dst[k] = (float)(i % 251);
}

static int
get(void *ctx, size_t i, void *dst, size_t *nbytes)
{
  const struct data *d = ctx;
  const fl_worker_info *w = fl_get_worker_info();

  if (d->slow_us != 0 && w != NULL)
    sleep_us(w->id == 0 ? d->slow_us : d->delay_us);
  else if (d->delay_us != 0)
    sleep_us(d->delay_us);
  fill(d, i, dst);
  *nbytes = d->floats * sizeof(float);
  return 0;
}

static int
get_batch(void *ctx, const size_t *idx, size_t n, void *dst, size_t *nbytes)
{
  const struct data *d = ctx;
  size_t i;

  sleep_us(d->delay_us); /* one read for the whole batch */
  for (i = 0; i < n; i++) {
    fill(d, idx[i], (float *)dst + i * d->floats);
    nbytes[i] = d->floats * sizeof(float);
  }
  return 0;
}

static fl_loader *
make(struct data *d, size_t len, int batched, fl_options *opt)
{
  fl_dataset ds = {0};
  fl_loader *l = NULL;
  int rc;

  ds.ctx = d;
  ds.len = len;
  ds.sample_bytes = d->floats * sizeof(float);
  if (batched)
    ds.get_batch = get_batch;
  else
    ds.get = get;
  rc = fl_loader_create(&l, &ds, opt);
  if (rc != 0)
    die("create", NULL, rc);
  return l;
}

static void
default_opt(fl_options *opt, size_t bs, unsigned workers)
{
  fl_options_init(opt);
  opt->batch_size = bs;
  opt->num_workers = workers;
  opt->prefetch_factor = 2;
  opt->persistent_workers = 1;
}

/*
 * One epoch as a trainer consumes it: read one value of each sample.
 * spin_before: busy time between batches (0: none).  lat: when not NULL,
 * the duration of each fl_loader_next call, in microseconds.
 */
static size_t
epoch(fl_loader *l, size_t floats, double spin_before, double *lat,
      size_t *nlat, double *sum, uint64_t *bytes)
{
  fl_batch *b;
  double t0;
  size_t n = 0, i;
  int rc;

  if ((rc = fl_loader_begin(l)) != 0)
    die("begin", l, rc);
  for (;;) {
    if (spin_before > 0)
      spin_us(spin_before);
    t0 = now();
    rc = fl_loader_next(l, &b);
    if (rc == 0)
      break;
    if (rc < 0)
      die("next", l, rc);
    if (lat != NULL)
      lat[(*nlat)++] = (now() - t0) * 1e6;
    for (i = 0; i < fl_batch_count(b); i++)
      *sum += ((const float *)fl_batch_data(b))[i * floats];
    *bytes += fl_batch_count(b) * floats * sizeof(float);
    fl_batch_release(b);
    n++;
  }
  return n;
}

/*
 * The bound on memory, from the batch's shape and not from what was
 * measured: (prefetch x workers + 1 held) batches, each its samples,
 * indices and sizes plus at most a page of header, in whole pages.
 */
static size_t
window_bound(const fl_options *opt, size_t sample_bytes)
{
  size_t page = (size_t)sysconf(_SC_PAGESIZE), bs = opt->batch_size;

  return (opt->prefetch_factor * opt->num_workers + 1) *
         ((bs * sample_bytes + 2 * bs * sizeof(size_t) + 2 * page - 1) /
          page * page);
}

/* A measurement: up to four named values. */
struct result {
  double v[4];
  int unsupported;
};

/* Workload 1: per-batch overhead on 1 KiB samples. */
static void
fl_overhead(struct result *r)
{
  struct data d = {256, NULL, 0, 0};
  size_t len = smoke ? 6400 : 128000, n = 0, nlat = 0;
  double sum = 0, t0, *lat;
  uint64_t bytes = 0;
  fl_options opt;
  fl_loader *l;

  default_opt(&opt, 64, 2);
  l = make(&d, len, 0, &opt);
  lat = calloc(len / 64 + 1, sizeof(*lat));
  epoch(l, 256, 0, NULL, NULL, &sum, &bytes); /* warm-up */
  t0 = now();
  n += epoch(l, 256, 0, NULL, NULL, &sum, &bytes);
  n += epoch(l, 256, 0, NULL, NULL, &sum, &bytes);
  r->v[0] = (double)n / (now() - t0);
  /* Latency when the batch is ready: the consumer is the slow side. */
  epoch(l, 256, 300, lat, &nlat, &sum, &bytes);
  qsort(lat + 10, nlat - 10, sizeof(*lat), cmp_double);
  r->v[1] = lat[10 + (nlat - 10) / 2];
  r->v[2] = lat[10 + (size_t)((nlat - 10) * 0.99)];
  free(lat);
  fl_loader_destroy(l);
}

/* Workload 2: bandwidth, 3x224x224 float32 samples, batch 32. */
static void
fl_bandwidth(struct result *r, size_t *peak, size_t *bound, size_t *segs)
{
  const size_t floats = 3 * 224 * 224, bs = 32;
  size_t len = smoke ? 64 : 2048, i;
  float *src = malloc(floats * sizeof(float));
  struct data d = {floats, src, 0, 0};
  uint64_t bytes = 0;
  double sum = 0, t0;
  fl_options opt;
  fl_loader *l;
  fl_stats st;

  for (i = 0; i < floats; i++)
    src[i] = (float)rand() / (float)RAND_MAX;
  default_opt(&opt, bs, 2);
  l = make(&d, len, 0, &opt);
  t0 = now();
  epoch(l, floats, 0, NULL, NULL, &sum, &bytes);
  r->v[1] = (double)bytes / 1e6 / (now() - t0); /* cold */
  bytes = 0;
  t0 = now();
  epoch(l, floats, 0, NULL, NULL, &sum, &bytes);
  epoch(l, floats, 0, NULL, NULL, &sum, &bytes);
  r->v[0] = (double)bytes / 1e6 / (now() - t0);
  fl_loader_stats(l, &st);
  *peak = st.bytes_mapped_peak;
  *segs = st.segments_peak;
  *bound = window_bound(&opt, floats * sizeof(float));
  fl_loader_destroy(l);
  free(src);
}

/*
 * Workload 3: the seed tutorial, 5 ms per sample (or per batch), each
 * sample a 3x224x224 float32 image generated in the worker.  v[0]: the
 * seconds; v[1], v[2]: the peak of bytes mapped and of segments; v[3]:
 * the bound on the first.
 */
static void
fl_tutorial(const char *config, struct result *r)
{
  struct data d = {smoke ? 16 : 3 * 224 * 224, NULL, 5000, 0};
  size_t len = smoke ? 64 : 512, e, epochs = smoke ? 1 : 10;
  uint64_t bytes = 0;
  double sum = 0, t0;
  fl_options opt;
  fl_loader *l;
  fl_stats st;

  default_opt(&opt, 32, config[1] == '0' ? 0 : 4);
  opt.shuffle = 1;
  opt.persistent_workers = strcmp(config, "w4") != 0;
  l = make(&d, len, strcmp(config, "w4b") == 0, &opt);
  t0 = now();
  for (e = 0; e < epochs; e++)
    epoch(l, d.floats, 0, NULL, NULL, &sum, &bytes);
  r->v[0] = now() - t0;
  fl_loader_stats(l, &st);
  r->v[1] = (double)st.bytes_mapped_peak;
  r->v[2] = (double)st.segments_peak;
  r->v[3] = (double)window_bound(&opt, d.floats * sizeof(float));
  fl_loader_destroy(l);
}

/* Workload 4: head-of-line, worker 0 ten times slower per sample. */
static void
fl_hol(int in_order, struct result *r)
{
  struct data d = {16, NULL, 100, 1000};
  size_t len = smoke ? 160 : 1600, n;
  uint64_t bytes = 0;
  double sum = 0, t0;
  fl_options opt;
  fl_loader *l;

  default_opt(&opt, 8, 2);
  opt.in_order = in_order;
  l = make(&d, len, 0, &opt);
  epoch(l, 16, 0, NULL, NULL, &sum, &bytes);
  t0 = now();
  n = epoch(l, 16, 0, NULL, NULL, &sum, &bytes);
  r->v[0] = (double)n / (now() - t0);
  fl_loader_destroy(l);
}

/*
 * What one worker alone delivers with a per-sample delay: the reference
 * for head-of-line, measured rather than computed, since sleeps overshoot.
 */
static double
fl_one_worker(unsigned delay_us)
{
  struct data d = {16, NULL, delay_us, 0};
  size_t len = smoke ? 80 : 800, n;
  uint64_t bytes = 0;
  double sum = 0, t0;
  fl_options opt;
  fl_loader *l;

  default_opt(&opt, 8, 1);
  l = make(&d, len, 0, &opt);
  t0 = now();
  n = epoch(l, 16, 0, NULL, NULL, &sum, &bytes);
  t0 = now() - t0; /* the epoch, not the teardown */
  fl_loader_destroy(l);
  return (double)n / t0;
}

/* Workload 5: from fl_loader_create to the first batch. */
static void
fl_startup(struct result *r)
{
  struct data d = {256, NULL, 0, 0};
  fl_options opt;
  fl_loader *l;
  fl_batch *b;
  double t0 = now();
  int rc;

  default_opt(&opt, 64, 2);
  l = make(&d, 6400, 0, &opt);
  if ((rc = fl_loader_begin(l)) != 0 || (rc = fl_loader_next(l, &b)) != 1)
    die("first batch", l, rc);
  r->v[0] = (now() - t0) * 1e3;
  fl_batch_release(b);
  fl_loader_destroy(l);
}

/* Write one NPY 1.0 file of 4-byte items (descr '<f4' or '<i4') with the
   given shape. */
static void
write_npy(const char *path, const char *descr, size_t rows, size_t cols,
          const void *data)
{
  char dict[128], head[128];
  size_t n, pad;
  FILE *f = fopen(path, "wb");

  if (f == NULL) {
    perror(path);
    exit(1);
  }
  if (rows == 0)
    snprintf(dict, sizeof(dict),
             "{'descr': '%s', 'fortran_order': False, 'shape': (%zu,), }",
             descr, cols);
  else
    snprintf(dict, sizeof(dict),
             "{'descr': '%s', 'fortran_order': False, 'shape': (%zu, %zu), }",
             descr, rows, cols);
  n = strlen(dict);
  pad = 128 - 10 - n - 1; /* data from byte 128: a multiple of 64 */
  memcpy(head, "\x93NUMPY\x01\x00", 8);
  head[8] = (char)(118 & 0xff);
  head[9] = 0;
  fwrite(head, 1, 10, f);
  fprintf(f, "%s%*s\n", dict, (int)pad, "");
  fwrite(data, 4, (rows ? rows : 1) * cols, f);
  fclose(f);
}

/*
 * The seed's case: a directory of small .npy files, one sample each.  Both
 * sides get the same files, written here: sample i holds the value i.
 */
static void
npy_make(char *dir, size_t n, size_t cols, char *array)
{
  float *v = malloc(n * cols * sizeof(float));
  char path[512];
  size_t i, k;

  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
  for (i = 0; i < n; i++)
    for (k = 0; k < cols; k++)
      v[i * cols + k] = (float)i;
  for (i = 0; i < n; i++) {
    snprintf(path, sizeof(path), "%s/%08zu.npy", dir, i);
    write_npy(path, "<f4", 0, cols, v + i * cols);
  }
  snprintf(array, 512, "%s.npy", dir);
  write_npy(array, "<f4", n, cols, v);
  free(v);
}

static void
npy_remove(const char *dir, size_t n, const char *array)
{
  char path[512];
  size_t i;

  for (i = 0; i < n; i++) {
    snprintf(path, sizeof(path), "%s/%08zu.npy", dir, i);
    unlink(path);
  }
  rmdir(dir);
  unlink(array);
}

enum file_kind { FILE_NPY_ARRAY, FILE_NPY_DIR, FILE_LMDB };

/* Samples/s of one warm epoch, 2 workers, batch 64, from a file dataset
   of float32 samples (LMDB: values of 3072 of them, 12 KiB). */
static double
fl_file(const char *path, enum file_kind kind)
{
  fl_dataset ds;
  fl_options opt;
  fl_loader *l = NULL;
  uint64_t bytes = 0;
  double sum = 0, t0;
  size_t n;
  int rc;

  rc = kind == FILE_NPY_DIR     ? fl_dataset_npy_dir(&ds, path)
       : kind == FILE_NPY_ARRAY ? fl_dataset_npy_array(&ds, path)
                                : fl_dataset_lmdb(&ds, path, 3072 * 4);
  if (rc != 0)
    die("dataset", NULL, rc);
  default_opt(&opt, 64, 2);
  if ((rc = fl_loader_create(&l, &ds, &opt)) != 0)
    die("create", NULL, rc);
  epoch(l, ds.sample_bytes / sizeof(float), 0, NULL, NULL, &sum, &bytes);
  t0 = now();
  epoch(l, ds.sample_bytes / sizeof(float), 0, NULL, NULL, &sum, &bytes);
  n = ds.len;
  t0 = now() - t0; /* the epoch, not the teardown */
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  return (double)n / t0;
}

#ifdef HAVE_LMDB
/* The LMDB rows' environment in a new directory dir: n values of cols
   float32, value i under the key %08zu of i holding i, as npy_make's.
   Returns n (0: a build without liblmdb, which writes none). */
static size_t
lmdb_make(char *dir, size_t n, size_t cols)
{
  float *v = malloc(cols * sizeof(float));
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  MDB_val key, val = {cols * sizeof(float), v};
  char k[16];
  size_t i, c;
  int rc;

  if (v == NULL || mkdtemp(dir) == NULL) {
    perror("lmdb_make");
    exit(1);
  }
  if ((rc = mdb_env_create(&env)) != 0 ||
      (rc = mdb_env_set_mapsize(env, n * (cols * 4 + 8192) + (64 << 20))) !=
          0 ||
      (rc = mdb_env_open(env, dir, MDB_NOSYNC, 0644)) != 0 ||
      (rc = mdb_txn_begin(env, NULL, 0, &txn)) != 0 ||
      (rc = mdb_dbi_open(txn, NULL, 0, &dbi)) != 0) {
    fprintf(stderr, "bench: %s: %s\n", dir, mdb_strerror(rc));
    exit(1);
  }
  for (i = 0; i < n && rc == 0; i++) {
    for (c = 0; c < cols; c++)
      v[c] = (float)i;
    key.mv_size = (size_t)snprintf(k, sizeof(k), "%08zu", i);
    key.mv_data = k;
    rc = mdb_put(txn, dbi, &key, &val, MDB_APPEND);
  }
  if (rc != 0 || (rc = mdb_txn_commit(txn)) != 0 ||
      (rc = mdb_env_sync(env, 1)) != 0) {
    fprintf(stderr, "bench: %s: %s\n", dir, mdb_strerror(rc));
    exit(1);
  }
  mdb_env_close(env);
  free(v);
  return n;
}

static void
lmdb_remove(const char *dir)
{
  char path[512];

  snprintf(path, sizeof(path), "%s/data.mdb", dir);
  unlink(path);
  snprintf(path, sizeof(path), "%s/lock.mdb", dir);
  unlink(path);
  rmdir(dir);
}

/* The random-access rows (issue 28): fl_dataset_lmdb's get called here,
   no loader around it, over small values, so that finding a sample's key
   is most of what is timed. */
enum lmdb_how {
  LMDB_RANDOM,   /* its get, in a shuffled order */
  LMDB_IN_ORDER, /* its get, in key order */
  LMDB_BY_KEY    /* an mdb_get by the whole key kept in memory, in the
                    same shuffled order: what a get by position is held to */
};

/* Gets/s of one pass over the n values of 4 floats in dir, after one
   untimed pass in key order that opens the environment and maps its
   pages. */
static double
fl_lmdb_gets(const char *dir, size_t n, enum lmdb_how how)
{
  size_t *order = malloc(n * sizeof(*order)), i, j, t, nb;
  char(*keys)[24] = how == LMDB_BY_KEY ? malloc(n * 24) : NULL;
  uint64_t x = 88172645463325252ull; /* xorshift64's state */
  unsigned char buf[16];
  fl_dataset ds;
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  MDB_val k = {8, NULL}, v;
  double t0 = 0;
  int pass, rc = 0;

  if (order == NULL || (how == LMDB_BY_KEY && keys == NULL)) {
    perror("fl_lmdb_gets");
    exit(1);
  }
  for (i = 0; i < n; i++)
    order[i] = i;
  for (i = n; i > 1 && how != LMDB_IN_ORDER; i--) { /* Fisher-Yates */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    j = (size_t)(x % i);
    t = order[i - 1];
    order[i - 1] = order[j];
    order[j] = t;
  }
  if (how == LMDB_BY_KEY) {
    for (i = 0; i < n; i++)
      snprintf(keys[i], 24, "%08zu", i);
    if ((rc = mdb_env_create(&env)) != 0 ||
        (rc = mdb_env_open(env, dir,
                           MDB_RDONLY | MDB_NOLOCK | MDB_NORDAHEAD, 0)) !=
            0 ||
        (rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) != 0 ||
        (rc = mdb_dbi_open(txn, NULL, 0, &dbi)) != 0) {
      fprintf(stderr, "bench: %s: %s\n", dir, mdb_strerror(rc));
      exit(1);
    }
  } else if ((rc = fl_dataset_lmdb(&ds, dir, sizeof(buf))) != 0) {
    die("dataset", NULL, rc);
  }
  for (pass = 0; pass < 2; pass++) {
    t0 = now();
    for (i = 0; i < n && rc == 0; i++) {
      j = pass == 0 ? i : order[i];
      if (how != LMDB_BY_KEY) {
        nb = sizeof(buf);
        rc = ds.get(ds.ctx, j, buf, &nb);
      } else {
        k.mv_data = keys[j];
        if ((rc = mdb_get(txn, dbi, &k, &v)) == 0)
          memcpy(buf, v.mv_data, v.mv_size < 16 ? v.mv_size : 16);
      }
    }
    t0 = now() - t0;
  }
  if (rc != 0) {
    fprintf(stderr, "bench: %s: a get failed: %d\n", dir, rc);
    exit(1);
  }
  if (how == LMDB_BY_KEY) {
    mdb_txn_abort(txn);
    mdb_env_close(env);
  } else {
    fl_dataset_close(&ds);
  }
  free(keys);
  free(order);
  return (double)n / t0;
}
#else
static size_t
lmdb_make(char *dir, size_t n, size_t cols)
{
  (void)dir;
  (void)n;
  (void)cols;
  return 0;
}

static void
lmdb_remove(const char *dir)
{
  (void)dir;
}

enum lmdb_how { LMDB_RANDOM, LMDB_IN_ORDER, LMDB_BY_KEY };

static double
fl_lmdb_gets(const char *dir, size_t n, enum lmdb_how how)
{
  (void)dir;
  (void)n;
  (void)how;
  return 0;
}
#endif

/*
 * A restarted run's side of a resume: a new loader over the open dataset
 * loads the state, begins and hands out its first batch, which must be
 * batch pos, each sample holding its index.  Returns the milliseconds.
 */
static double
resume_once(fl_dataset *ds, const fl_options *opt, const void *state,
            size_t len, size_t pos)
{
  fl_loader *l = NULL;
  const float *v;
  fl_batch *b;
  double t0 = now(), ms;
  size_t i;
  int rc;

  if ((rc = fl_loader_create(&l, ds, opt)) != 0)
    die("create", NULL, rc);
  if ((rc = fl_loader_state_load(l, state, len)) != 0 ||
      (rc = fl_loader_begin(l)) != 0 || (rc = fl_loader_next(l, &b)) != 1)
    die("resume", l, rc);
  ms = (now() - t0) * 1e3;
  v = fl_batch_data(b);
  for (i = 0; i < fl_batch_count(b); i++) {
    if (fl_batch_seq(b) != pos ||
        v[i * ds->sample_bytes / sizeof(float)] != (float)(pos * 64 + i)) {
      fprintf(stderr, "bench: resume at batch %zu gave batch %llu\n", pos,
              (unsigned long long)fl_batch_seq(b));
      exit(1);
    }
  }
  fl_batch_release(b);
  fl_loader_destroy(l);
  return ms;
}

/*
 * Resume at batch pos of an epoch of the npy directory, 2 workers, batch
 * 64: the state of a loader that handed out pos batches is saved (timed),
 * that loader goes as its process would, and RESUMES restarts resume from
 * the state.  Returns the save plus the median restart, in milliseconds:
 * a first batch costs a fork and 64 files, and the median of several
 * keeps one slow wake-up from being the figure.
 */
static double
fl_resume(const char *dir, size_t pos)
{
  unsigned char state[4096];
  double t0, save, ms[RESUMES];
  fl_dataset ds;
  fl_options opt;
  fl_loader *l = NULL;
  fl_batch *b;
  size_t i;
  int n, rc;

  if ((rc = fl_dataset_npy_dir(&ds, dir)) != 0)
    die("dataset", NULL, rc);
  default_opt(&opt, 64, 2);
  if ((rc = fl_loader_create(&l, &ds, &opt)) != 0)
    die("create", NULL, rc);
  if ((rc = fl_loader_begin(l)) != 0)
    die("begin", l, rc);
  for (i = 0; i < pos; i++) {
    if ((rc = fl_loader_next(l, &b)) != 1)
      die("next", l, rc);
    fl_batch_release(b);
  }
  t0 = now();
  n = fl_loader_state_save(l, state, sizeof(state));
  save = (now() - t0) * 1e3;
  if (n < 0)
    die("state save", l, n);
  fl_loader_destroy(l);
  for (i = 0; i < RESUMES; i++)
    ms[i] = resume_once(&ds, &opt, state, (size_t)n, pos);
  fl_dataset_close(&ds);
  return save + median(ms, RESUMES);
}

/*
 * llm.c's token shards: TOK_SHARDS shards of tokens that make the same
 * number of windows of TOK_T + 1, ~20M tokens in all, written to a
 * temporary directory with the same windows as two .npy int32 arrays
 * (inputs, targets) beside them.  Each side reads one warm epoch,
 * shuffled, 2 workers, batch 8, and sums each window's first input and
 * last target, which must come to the sum taken when writing.
 */
#define TOK_SHARDS 4
#define TOK_T 1024

struct tokens {
  char dir[64];
  char shard[TOK_SHARDS][96];
  char npy[2][96]; /* inputs, targets */
  size_t windows;  /* in all */
  double sum;      /* of each window's first input and last target */
};

static uint16_t
tok_value(size_t s, size_t p)
{
  uint32_t x = (uint32_t)(s + 1) * 2654435761u ^ (uint32_t)p * 40503u;

  return (uint16_t)((x ^ x >> 15) % 50257);
}

static void
tok_make(struct tokens *tk)
{
  size_t per = smoke ? 8 : 4882, ntok = per * TOK_T + 1, s, p, k;
  uint16_t *t = malloc(ntok * sizeof(*t));
  int32_t *arr[2];
  unsigned char head[1024] = {0};
  const int32_t word[3] = {FL_TOKENS_MAGIC, FL_TOKENS_VERSION,
                            (int32_t)ntok};
  FILE *f;

  snprintf(tk->dir, sizeof(tk->dir), "/tmp/forkload-bench-tok-XXXXXX");
  tk->windows = TOK_SHARDS * per;
  arr[0] = malloc(tk->windows * TOK_T * sizeof(int32_t));
  arr[1] = malloc(tk->windows * TOK_T * sizeof(int32_t));
  if (t == NULL || arr[0] == NULL || arr[1] == NULL ||
      mkdtemp(tk->dir) == NULL) {
    perror("bench: tokens");
    exit(1);
  }
  memcpy(head, word, sizeof(word)); /* little-endian, as the bench */
  tk->sum = 0;
  for (s = 0; s < TOK_SHARDS; s++) {
    for (p = 0; p < ntok; p++)
      t[p] = tok_value(s, p);
    for (k = 0; k < per; k++) {
      for (p = 0; p < TOK_T; p++) {
        arr[0][((s * per + k) * TOK_T) + p] = t[k * TOK_T + p];
        arr[1][((s * per + k) * TOK_T) + p] = t[k * TOK_T + p + 1];
      }
      tk->sum += t[k * TOK_T] + t[k * TOK_T + TOK_T];
    }
    snprintf(tk->shard[s], sizeof(tk->shard[s]), "%s/shard_%03zu.bin",
             tk->dir, s);
    if ((f = fopen(tk->shard[s], "wb")) == NULL ||
        fwrite(head, 1, sizeof(head), f) != sizeof(head) ||
        fwrite(t, sizeof(*t), ntok, f) != ntok || fclose(f) != 0) {
      perror(tk->shard[s]);
      exit(1);
    }
  }
  for (k = 0; k < 2; k++) {
    snprintf(tk->npy[k], sizeof(tk->npy[k]), "%s/%s.npy", tk->dir,
             k == 0 ? "inputs" : "targets");
    write_npy(tk->npy[k], "<i4", tk->windows, TOK_T, arr[k]);
    free(arr[k]);
  }
  free(t);
}

static void
tok_remove(const struct tokens *tk)
{
  size_t k;

  for (k = 0; k < TOK_SHARDS; k++)
    unlink(tk->shard[k]);
  unlink(tk->npy[0]);
  unlink(tk->npy[1]);
  rmdir(tk->dir);
}

/* Samples/s of one warm shuffled epoch of the shards (npy 0) or of the
   two arrays (npy 1), each window's sum checked. */
static double
fl_tokens(const struct tokens *tk, int npy)
{
  const char *paths[TOK_SHARDS], *arrays[2] = {tk->npy[0], tk->npy[1]};
  const int32_t *in, *tg;
  fl_dataset ds;
  fl_options opt;
  fl_loader *l = NULL;
  fl_batch *b;
  double sum = 0, t0 = 0;
  size_t i, e;
  int rc;

  for (i = 0; i < TOK_SHARDS; i++)
    paths[i] = tk->shard[i];
  rc = npy ? fl_dataset_npy_zip(&ds, arrays, 2)
           : fl_dataset_tokens(&ds, paths, TOK_SHARDS, TOK_T);
  if (rc != 0)
    die("tokens dataset", NULL, rc);
  default_opt(&opt, 8, 2);
  opt.shuffle = 1;
  if ((rc = fl_loader_create(&l, &ds, &opt)) != 0)
    die("create", NULL, rc);
  for (e = 0; e < 2; e++) { /* a warm-up epoch, then the timed one */
    t0 = now();
    sum = 0;
    if ((rc = fl_loader_begin(l)) != 0)
      die("begin", l, rc);
    while ((rc = fl_loader_next(l, &b)) > 0) {
      in = fl_batch_field(b, 0);
      tg = fl_batch_field(b, 1);
      for (i = 0; i < fl_batch_count(b); i++)
        sum += in[i * TOK_T] + tg[i * TOK_T + TOK_T - 1];
      fl_batch_release(b);
    }
    if (rc < 0)
      die("next", l, rc);
    t0 = now() - t0;
  }
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  if (sum != tk->sum) {
    fprintf(stderr, "bench: tokens: the windows sum to %.0f, not %.0f\n",
            sum, tk->sum);
    exit(1);
  }
  return (double)tk->windows / t0;
}

/*
 * The image pipeline: a folder of JPEGs in ImageFolder's layout, which
 * `forkload gen images` writes and both sides read: ImageNet's sizes
 * (360 to 500 x 300 to 400), tens of KB each at quality 90, as
 * photographs of that size are.
 */
#define IMG_CLASSES 4

struct images {
  char dir[64];
  size_t n;
  int64_t label_sum; /* of one epoch, to check that each image came */
  uint64_t bytes;    /* of the files */
};

#ifdef BENCH_IMAGES
static const char *forkload_bin = "examples/forkload";

/* gen's names: sample i in class i % IMG_CLASSES. */
static void
img_path(char *path, size_t size, const char *dir, size_t i)
{
  snprintf(path, size, "%s/class%03zu/%08zu.jpg", dir, i % IMG_CLASSES, i);
}

static void
img_make(struct images *im, size_t n)
{
  char cmd[256], path[128];
  struct stat st;
  size_t i;

  snprintf(im->dir, sizeof(im->dir), "/tmp/forkload-bench-img-XXXXXX");
  if (mkdtemp(im->dir) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
  snprintf(cmd, sizeof(cmd), "%s gen images %s --samples %zu --classes %d "
           "--force >/dev/null", forkload_bin, im->dir, n, IMG_CLASSES);
  if (system(cmd) != 0) {
    fprintf(stderr, "bench: images: %s failed\n", cmd);
    exit(1);
  }
  im->n = n;
  im->label_sum = 0;
  im->bytes = 0;
  for (i = 0; i < n; i++) {
    img_path(path, sizeof(path), im->dir, i);
    if (stat(path, &st) == 0)
      im->bytes += (uint64_t)st.st_size;
    im->label_sum += (int64_t)(i % IMG_CLASSES);
  }
}

static void
img_remove(const struct images *im)
{
  char path[128];
  size_t i;

  for (i = 0; i < im->n; i++) {
    img_path(path, sizeof(path), im->dir, i);
    unlink(path);
  }
  for (i = 0; i < IMG_CLASSES; i++) {
    snprintf(path, sizeof(path), "%s/class%03zu", im->dir, i);
    rmdir(path);
  }
  rmdir(im->dir);
}

/*
 * The crop floor (issue 36): a dataset of the folder's files in
 * ImageFolder's order (classes, then names) that only decodes, with
 * libjpeg-turbo, the crop the training transform draws for the sample
 * (the library's own draw, from the same seed): jpeg_crop_scanline to its
 * columns, jpeg_skip_scanlines to its top, its rows, then stop.  Its
 * image field is one float, a byte of the crop, so that the consumer
 * reads what it decoded.  The row is one byte off 16-byte alignment, as
 * the stage's is: libjpeg-turbo writes aligned rows with non-temporal
 * stores, slower here (1,900 against 2,400 images/s measured).
 */
struct crop_ds {
  const struct images *im;
  fl_image_options io;
  struct jpeg_decompress_struct j;
  struct jpeg_error_mgr e;
  unsigned char *buf, *row; /* decoded at row + 1 */
  size_t cap, rcap;
};

static int
crop_get(void *ctx, size_t index, void *const *dst, size_t *nbytes)
{
  struct crop_ds *c = ctx;
  size_t per = c->im->n / IMG_CLASSES, extra = c->im->n % IMG_CLASSES;
  size_t cls = 0, first = 0, len, i;
  struct fl__geom g;
  JDIMENSION x0, w, y;
  char path[128];
  int64_t label;
  float v = 0;
  FILE *f;

  /* Class k holds the files i with i % IMG_CLASSES == k, in order. */
  while (index >= first + per + (cls < extra))
    first += per + (cls++ < extra);
  i = (index - first) * IMG_CLASSES + cls;
  img_path(path, sizeof(path), c->im->dir, i);
  if ((f = fopen(path, "rb")) == NULL || fseek(f, 0, SEEK_END) != 0 ||
      (len = (size_t)ftell(f)) == 0 || fseek(f, 0, SEEK_SET) != 0 ||
      (len > c->cap && (free(c->buf), (c->buf = malloc(c->cap = len)) ==
                                          NULL)) ||
      fread(c->buf, 1, len, f) != len) {
    perror(path);
    exit(1);
  }
  fclose(f);
  jpeg_mem_src(&c->j, c->buf, (unsigned long)len);
  jpeg_read_header(&c->j, TRUE);
  c->j.out_color_space = JCS_RGB;
  fl__crop_random(&c->io, c->j.image_width, c->j.image_height,
                  fl_sample_seed(index), &g);
  jpeg_start_decompress(&c->j);
  x0 = g.cx0;
  w = g.cx1 - g.cx0;
  if (w < c->j.output_width)
    jpeg_crop_scanline(&c->j, &x0, &w);
  if ((size_t)c->j.output_width * 3 > c->rcap) {
    free(c->row);
    c->rcap = (size_t)c->j.output_width * 3;
    if ((c->row = malloc(c->rcap + 1)) == NULL) {
      perror("malloc");
      exit(1);
    }
  }
  if (g.cy0 > 0)
    jpeg_skip_scanlines(&c->j, g.cy0);
  for (y = g.cy0; y < g.cy1; y++) {
    JSAMPROW r = c->row + 1;

    jpeg_read_scanlines(&c->j, &r, 1);
    v += r[0];
  }
  jpeg_abort_decompress(&c->j);
  label = (int64_t)cls;
  memcpy(dst[0], &v, sizeof(v));
  memcpy(dst[1], &label, sizeof(label));
  nbytes[0] = sizeof(v);
  nbytes[1] = sizeof(label);
  return 0;
}

/*
 * Images/s of one warm epoch, batch 32, float32 CHW output: train is
 * RandomResizedCrop(224) and a flip (shuffled, as training reads), else
 * Resize(256) and CenterCrop(224); 2 persistent workers, or workers 0:
 * in this process, one core, over three warm epochs (one lasts a fifth
 * of a second, shorter than this shared machine's slow spells).  crops:
 * the crop floor's dataset in place of the image folder, read the same
 * way (train's crops).  The consumer reads each image's first value and
 * each label; the labels must sum to the folder's, as on the torch
 * side.
 */
static double
fl_images(const struct images *im, int train, unsigned workers, int crops)
{
  static const size_t crop_fields[2] = {sizeof(float), sizeof(int64_t)};
  struct crop_ds cd = {.im = im};
  const int epochs = workers == 0 ? 4 : 2; /* the first is a warm-up */
  fl_image_options io;
  fl_dataset ds;
  fl_options opt;
  fl_loader *l = NULL;
  fl_batch *b;
  const unsigned char *img, *lab;
  double sum = 0, t0 = 0, t = 0;
  int64_t labels, y;
  size_t n, i;
  float v;
  int rc, e;

  fl_image_options_init(&io);
  io.height = io.width = 224;
  io.chw_float = 1;
  if (train) {
    io.crop = FL_CROP_RANDOM_RESIZED;
    io.hflip = 0.5;
  } else {
    io.crop = FL_CROP_CENTER;
    io.resize = 256;
  }
  if (crops) {
    cd.io = io;
    cd.j.err = jpeg_std_error(&cd.e);
    jpeg_create_decompress(&cd.j);
    memset(&ds, 0, sizeof(ds));
    ds.ctx = &cd;
    ds.len = im->n;
    ds.nfields = 2;
    ds.field_bytes = crop_fields;
    ds.get_fields = crop_get;
  } else if ((rc = fl_dataset_image_folder(&ds, im->dir, &io)) != 0) {
    die("image folder", NULL, rc);
  }
  default_opt(&opt, 32, workers);
  opt.shuffle = train;
  if ((rc = fl_loader_create(&l, &ds, &opt)) != 0)
    die("create", NULL, rc);
  for (e = 0; e < epochs; e++) {
    n = 0;
    labels = 0;
    if ((rc = fl_loader_begin(l)) != 0)
      die("begin", l, rc);
    t0 = now();
    while ((rc = fl_loader_next(l, &b)) == 1) {
      img = fl_batch_field(b, 0);
      lab = fl_batch_field(b, 1);
      for (i = 0; i < fl_batch_count(b); i++) {
        memcpy(&v, img + i * fl_batch_stride(b, 0), sizeof(v));
        memcpy(&y, lab + i * fl_batch_stride(b, 1), sizeof(y));
        sum += v;
        labels += y;
      }
      n += fl_batch_count(b);
      fl_batch_release(b);
    }
    if (e > 0)
      t += now() - t0; /* the epochs, not the teardown */
    if (rc < 0)
      die("next", l, rc);
    if (n != im->n || labels != im->label_sum) {
      fprintf(stderr, "bench: images: %zu images, labels summing to %lld; "
              "expected %zu and %lld\n", n, (long long)labels, im->n,
              (long long)im->label_sum);
      exit(1);
    }
  }
  fl_loader_destroy(l);
  if (crops) {
    jpeg_destroy_decompress(&cd.j);
    free(cd.buf);
    free(cd.row);
  } else {
    fl_dataset_close(&ds);
  }
  if (!isfinite(sum)) {
    fprintf(stderr, "bench: images: the pixels sum to %g\n", sum);
    exit(1);
  }
  return (double)n * (epochs - 1) / t;
}

/*
 * The ceiling: libjpeg-turbo decoding each image whole to RGB, with the
 * defaults PIL decodes with, in this process (one core), the files read
 * into memory first.  Images/s.
 */
static double
decode_per_s(const struct images *im)
{
  struct jpeg_decompress_struct j;
  struct jpeg_error_mgr e;
  unsigned char **file = calloc(im->n, sizeof(*file)), *rgb = NULL;
  size_t *len = calloc(im->n, sizeof(*len)), cap = 0, i;
  unsigned long sum = 0;
  char path[128];
  JSAMPROW row;
  double t0, t;
  FILE *f;

  for (i = 0; i < im->n; i++) {
    img_path(path, sizeof(path), im->dir, i);
    if ((f = fopen(path, "rb")) == NULL || fseek(f, 0, SEEK_END) != 0 ||
        (len[i] = (size_t)ftell(f)) == 0 || fseek(f, 0, SEEK_SET) != 0 ||
        (file[i] = malloc(len[i])) == NULL ||
        fread(file[i], 1, len[i], f) != len[i]) {
      perror(path);
      exit(1);
    }
    fclose(f);
  }
  j.err = jpeg_std_error(&e);
  jpeg_create_decompress(&j);
  t0 = now();
  for (i = 0; i < im->n; i++) {
    jpeg_mem_src(&j, file[i], (unsigned long)len[i]);
    jpeg_read_header(&j, TRUE);
    j.out_color_space = JCS_RGB;
    jpeg_start_decompress(&j);
    if ((size_t)j.output_width * j.output_height * 3 > cap) {
      cap = (size_t)j.output_width * j.output_height * 3;
      free(rgb);
      if ((rgb = malloc(cap)) == NULL) {
        perror("malloc");
        exit(1);
      }
    }
    while (j.output_scanline < j.output_height) {
      row = rgb + (size_t)j.output_scanline * j.output_width * 3;
      jpeg_read_scanlines(&j, &row, 1);
    }
    sum += rgb[(size_t)j.output_width * j.output_height * 3 / 2];
    jpeg_finish_decompress(&j);
  }
  t = now() - t0;
  jpeg_destroy_decompress(&j);
  __asm__ __volatile__("" : : "r"(sum));
  for (i = 0; i < im->n; i++)
    free(file[i]);
  free(file);
  free(len);
  free(rgb);
  return (double)im->n / t;
}

/*
 * The floor (issue 27): libjpeg-turbo decoding each image at 1/8 DCT
 * scale, all its rows, no transform, one core; each file read in the
 * timed loop as the image folder reads it.  Almost all of it is entropy
 * decoding, which any exact decoder pays for the rows it reads.  The
 * second of two passes (the first warms the caches).  Images/s.
 */
static double
floor_per_s(const struct images *im)
{
  struct jpeg_decompress_struct j;
  struct jpeg_error_mgr e;
  unsigned char *buf = NULL, *row = NULL;
  size_t cap = 0, rcap = 0, len, i;
  unsigned long sum = 0;
  char path[128];
  double t0 = 0, t = 0;
  int pass;
  FILE *f;

  j.err = jpeg_std_error(&e);
  jpeg_create_decompress(&j);
  for (pass = 0; pass < 2; pass++) {
    t0 = now();
    for (i = 0; i < im->n; i++) {
      img_path(path, sizeof(path), im->dir, i);
      if ((f = fopen(path, "rb")) == NULL || fseek(f, 0, SEEK_END) != 0 ||
          (len = (size_t)ftell(f)) == 0 || fseek(f, 0, SEEK_SET) != 0) {
        perror(path);
        exit(1);
      }
      if (len > cap) {
        free(buf);
        if ((buf = malloc(cap = len)) == NULL) {
          perror("malloc");
          exit(1);
        }
      }
      if (fread(buf, 1, len, f) != len) {
        perror(path);
        exit(1);
      }
      fclose(f);
      jpeg_mem_src(&j, buf, (unsigned long)len);
      jpeg_read_header(&j, TRUE);
      j.out_color_space = JCS_RGB;
      j.scale_num = 1;
      j.scale_denom = 8;
      jpeg_start_decompress(&j);
      if ((size_t)j.output_width * 3 > rcap) {
        free(row);
        if ((row = malloc(rcap = (size_t)j.output_width * 3)) == NULL) {
          perror("malloc");
          exit(1);
        }
      }
      while (j.output_scanline < j.output_height) {
        JSAMPROW r = row;

        jpeg_read_scanlines(&j, &r, 1);
        sum += row[0];
      }
      jpeg_finish_decompress(&j);
    }
    t = now() - t0;
  }
  jpeg_destroy_decompress(&j);
  __asm__ __volatile__("" : : "r"(sum));
  free(buf);
  free(row);
  return (double)im->n / t;
}
#endif /* BENCH_IMAGES */

/* The CPU's name, as /proc/cpuinfo gives it, and its vector widths. */
static void
cpu_name(char *buf, size_t size)
{
  char line[4096], name[128] = "unknown CPU";
  int avx2 = 0, avx512 = 0, got_flags = 0;
  FILE *f = fopen("/proc/cpuinfo", "r");

  while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
    char *v = strchr(line, ':');

    if (v == NULL)
      continue;
    v += 1 + (v[1] == ' ');
    v[strcspn(v, "\n")] = '\0';
    if (strncmp(line, "model name", 10) == 0 && name[0] == 'u')
      snprintf(name, sizeof(name), "%s", v);
    else if (strncmp(line, "flags", 5) == 0 && !got_flags) {
      got_flags = 1;
      avx2 = strstr(v, " avx2") != NULL;
      avx512 = strstr(v, " avx512f") != NULL;
    }
  }
  if (f != NULL)
    fclose(f);
  snprintf(buf, size, "%s, %ld CPUs online, %s", name,
           sysconf(_SC_NPROCESSORS_ONLN),
           avx512 ? "AVX-512" : avx2 ? "AVX2" : "no AVX2");
}

/* The machine's warm memset bandwidth, MB/s: the ceiling for a batch. */
static double
memset_mb_per_s(void)
{
  size_t size = (smoke ? 16 : 256) << 20;
  unsigned char *buf = malloc(size);
  double best = 0, t0, t;
  int i;

  memset(buf, 1, size); /* fault every page in first */
  for (i = 0; i < 5; i++) {
    t0 = now();
    memset(buf, i, size);
    __asm__ __volatile__("" : : "r"(buf) : "memory");
    t = now() - t0;
    if (size / t / 1e6 > best)
      best = (double)size / t / 1e6;
  }
  free(buf);
  return best;
}

/* Run a shell command; read the named keys from its one line of JSON. */
static int
json_run(const char *cmd, const char **keys, int nkeys, struct result *r)
{
  char line[2048], *p;
  FILE *f;
  int i, ok = 0;

  f = popen(cmd, "r");
  if (f == NULL)
    return -1;
  if (fgets(line, sizeof(line), f) != NULL) {
    ok = 1;
    r->unsupported = strstr(line, "\"unsupported\": true") != NULL ||
                     strstr(line, "\"unsupported\":true") != NULL;
    for (i = 0; i < nkeys; i++) {
      char key[64];

      snprintf(key, sizeof(key), "\"%s\"", keys[i]);
      p = strstr(line, key);
      if (p == NULL || (p = strchr(p, ':')) == NULL)
        r->v[i] = -1;
      else
        r->v[i] = strtod(p + 1, NULL);
    }
  }
  if (pclose(f) != 0 || !ok) {
    fprintf(stderr, "bench: %s failed\n", cmd);
    return -1;
  }
  return 0;
}

/* Run torch_side.py; read the named keys from its one line of JSON. */
static int
torch_run(const char *args, const char **keys, int nkeys, struct result *r)
{
  char cmd[8448]; /* args: up to 8300 bytes, webdataset's shard list */

  snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s %s%s", torch_script, args,
           smoke ? " --smoke" : "");
  return json_run(cmd, keys, nkeys, r);
}

/* A row of the table: medians of forkload's and PyTorch's rounds. */
struct row {
  const char *name, *metric;
  double fl[MAX_ROUNDS], pt[MAX_ROUNDS];
  int nfl, npt, unsupported;
  int decimals; /* of the figures; 0 means 1 */
};

#ifdef HAVE_LIBARCHIVE
/*
 * The same samples as WebDataset tar shards, written with libarchive:
 * sample i of `nshards` runs is %08zu.bin (its floats) and %08zu.cls.
 */
static void
tar_make(const char *base, size_t n, size_t cols, int nshards, char *list,
         size_t len)
{
  struct archive_entry *e = archive_entry_new();
  char path[512], name[32], cls[8];
  size_t i, k, at = 0;
  int s, m;

  list[0] = '\0';
  for (s = 0; s < nshards; s++) {
    struct archive *ar = archive_write_new();
    float *v = malloc(cols * sizeof(float));

    snprintf(path, sizeof(path), "%s.wds-%d.tar", base, s);
    at += (size_t)snprintf(list + at, len - at, "%s%s", s ? "," : "", path);
    if (archive_write_set_format_ustar(ar) != ARCHIVE_OK ||
        archive_write_open_filename(ar, path) != ARCHIVE_OK || v == NULL) {
      fprintf(stderr, "bench: %s: cannot write it\n", path);
      exit(1);
    }
    for (i = n * (size_t)s / (size_t)nshards;
         i < n * (size_t)(s + 1) / (size_t)nshards; i++) {
      for (k = 0; k < cols; k++)
        v[k] = (float)i;
      snprintf(cls, sizeof(cls), "%zu", i % 10);
      for (m = 0; m < 2; m++) {
        snprintf(name, sizeof(name), "%08zu.%s", i, m ? "cls" : "bin");
        archive_entry_clear(e);
        archive_entry_set_pathname(e, name);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_size(e, m ? (la_int64_t)strlen(cls)
                                    : (la_int64_t)(cols * sizeof(float)));
        archive_write_header(ar, e);
        archive_write_data(ar, m ? (const void *)cls : (const void *)v,
                           m ? strlen(cls) : cols * sizeof(float));
      }
    }
    archive_write_close(ar);
    archive_write_free(ar);
    free(v);
  }
  archive_entry_free(e);
}

/* Samples/s of one warm epoch of the tar shards (list: comma-separated),
   2 workers, batch 64, as fl_file. */
static double
fl_wds(const char *list, size_t n, size_t cols)
{
  const char *shards[16], *exts[] = {"bin", "cls"};
  const size_t max[] = {cols * sizeof(float), 8};
  char copy[8192], *p, *save = NULL;
  fl_iterable it;
  fl_options opt;
  fl_loader *l = NULL;
  uint64_t bytes = 0;
  double sum = 0, t0;
  size_t ns = 0;
  int rc;

  snprintf(copy, sizeof(copy), "%s", list);
  for (p = strtok_r(copy, ",", &save); p != NULL && ns < 16;
       p = strtok_r(NULL, ",", &save))
    shards[ns++] = p;
  if ((rc = fl_dataset_webdataset(&it, shards, ns, exts, max, 2)) != 0)
    die("webdataset", NULL, rc);
  default_opt(&opt, 64, 2);
  if ((rc = fl_loader_create_iterable(&l, &it, &opt)) != 0)
    die("create", NULL, rc);
  epoch(l, cols, 0, NULL, NULL, &sum, &bytes);
  sum = 0;
  t0 = now();
  epoch(l, cols, 0, NULL, NULL, &sum, &bytes);
  t0 = now() - t0;
  if (sum != (double)n * (double)(n - 1) / 2) {
    fprintf(stderr, "bench: webdataset: the samples sum to %g\n", sum);
    exit(1);
  }
  fl_loader_destroy(l);
  fl_iterable_close(&it);
  return (double)n / t0;
}
#endif /* HAVE_LIBARCHIVE */

/* One line of the table; pass < 0: no verdict. */
static void
print_cells(const char *name, const char *metric, int decimals, double f,
            const char *pt, const char *ratio, const char *target, int pass)
{
  if (smoke)
    pass = -1; /* tiny sizes: no verdict means anything */
  printf("%-22s %-14s %12.*f %12s %9s  %-26s %s\n", name, metric, decimals, f,
         pt, ratio, target, pass < 0 ? "-" : pass ? "PASS" : "FAIL");
}

/* A measured row; a workload left out by --only has none. */
static void
print_row(struct row *w, const char *target, int pass)
{
  int d = w->decimals ? w->decimals : 1;
  double f, p, r;
  char pt[32] = "-", ratio[32] = "-";

  if (w->nfl == 0)
    return;
  f = median(w->fl, w->nfl);
  p = w->npt > 0 ? median(w->pt, w->npt) : 0;
  if (w->unsupported)
    snprintf(pt, sizeof(pt), "n/a");
  else if (w->npt > 0) {
    snprintf(pt, sizeof(pt), "%.*f", d, p);
    /* Two digits, or two significant ones for a ratio far below 1 (4
       digits up to 0.001, and 0.000038x rather than 0.0000x past it). */
    r = f / p;
    snprintf(ratio, sizeof(ratio), "%.*fx",
             r > 0 && r < 0.01 ? 1 - (int)floor(log10(r)) : 2, r);
  }
  print_cells(w->name, w->metric, d, f, pt, ratio, target, pass);
}

/*
 * Data at scale (issue 19): what a shuffled epoch of n samples costs
 * before its first batch, and in the parent's memory, with torch's order
 * (a shared table of 8 bytes a sample, drawn as batches are sent) and
 * with the bijection (no table), beside PyTorch's RandomSampler, which
 * makes randperm(n).tolist() before an epoch's first indices go out.  A
 * sample is 8 bytes, its index, so that only the order and the workers
 * are timed.  Each n and side runs in a process of its own, this program
 * exec'd with --scale-child (torch_side.py scale for PyTorch), so that
 * the peak RSS is that configuration's alone; each under ulimit -v, so
 * that a size that does not fit fails instead of taking the memory of
 * whatever else the machine runs.
 */
#define SCALE_NS 6
#define SCALE_TABLE_MAX 1e8 /* torch's order: 10^9 would be 8 GB of table */
#define SCALE_PT_MAX 1e8    /* PyTorch: 10^9 would be 48 GB of list */
#define SCALE_PT_ONCE 1e8   /* PyTorch there: a minute and 5 GB a run */

enum { SC_CREATE, SC_EPOCH0, SC_EPOCH1, SC_RSS, SC_FIRST, SC_METRICS };

struct scale {
  const double *n; /* the sizes, nn of them */
  int nn;
  struct row cell[SCALE_NS][2][SC_METRICS]; /* [n][torch, bijection] */
  char name[SCALE_NS][2][32];
};

static const char *scale_keys[] = {"create_ms", "epoch0_ms", "epoch1_ms",
                                   "peak_rss_mb"};
static char self_exe[PATH_MAX]; /* this program, for --scale-child */

/* scale's samples: sample i holds i, a batch a call. */
static int
index_batch(void *ctx, const size_t *idx, size_t n, void *dst,
            size_t *nbytes)
{
  uint64_t *v = dst;
  size_t i;

  (void)ctx;
  for (i = 0; i < n; i++) {
    v[i] = idx[i];
    nbytes[i] = sizeof(*v);
  }
  return 0;
}

/* This process's peak RSS in MB: VmHWM, the high-water mark of its
   address space since exec, in which are the pages of the shared order
   that it touched. */
static double
peak_rss_mb(void)
{
  char line[256];
  unsigned long kb = 0;
  FILE *f = fopen("/proc/self/status", "r");

  while (f != NULL && fgets(line, sizeof(line), f) != NULL &&
         sscanf(line, "VmHWM: %lu kB", &kb) != 1)
    ;
  if (f != NULL)
    fclose(f);
  return (double)kb * 1024 / 1e6;
}

/* From begin to the first batch of an epoch, in ms; the batch must be
   distinct indices below n, as a permutation's are. */
static double
first_batch_ms(fl_loader *l, size_t n)
{
  const uint64_t *v;
  fl_batch *b;
  double t0 = now(), ms;
  size_t i, k;
  int rc;

  if ((rc = fl_loader_begin(l)) != 0 || (rc = fl_loader_next(l, &b)) != 1)
    die("scale: first batch", l, rc);
  ms = (now() - t0) * 1e3;
  v = fl_batch_data(b);
  for (i = 0; i < fl_batch_count(b); i++) {
    for (k = 0; k < i && v[k] != v[i]; k++)
      ;
    if (v[i] >= n || k < i) {
      fprintf(stderr, "bench: scale: sample %zu of the first batch is %llu"
              ", of %zu\n", i, (unsigned long long)v[i], n);
      exit(1);
    }
  }
  fl_batch_release(b);
  return ms;
}

/*
 * --scale-child N ORDER: one configuration, in the process's own memory:
 * create, epoch 0's first batch, then epoch 1's (epoch 0 cut short, as
 * on PyTorch's side), then the peak RSS.  One line of JSON, as
 * torch_side.py prints.
 */
static int
scale_child(const char *count, const char *order)
{
  fl_dataset ds = {0};
  fl_options opt;
  fl_loader *l = NULL;
  double t0, create, e0, e1;
  int rc;

  ds.len = (size_t)strtoull(count, NULL, 10);
  ds.sample_bytes = sizeof(uint64_t);
  ds.get_batch = index_batch;
  default_opt(&opt, 256, 2);
  opt.shuffle = 1;
  opt.shuffle_algorithm = strcmp(order, "bijection") == 0
                              ? FL_SHUFFLE_BIJECTION
                              : FL_SHUFFLE_TORCH;
  t0 = now();
  if ((rc = fl_loader_create(&l, &ds, &opt)) != 0)
    die("scale: create", NULL, rc);
  create = (now() - t0) * 1e3;
  e0 = first_batch_ms(l, ds.len);
  e1 = first_batch_ms(l, ds.len);
  printf("{\"workload\": \"scale\", \"n\": %zu, \"create_ms\": %.3f, "
         "\"epoch0_ms\": %.3f, \"epoch1_ms\": %.3f, \"peak_rss_mb\": %.1f}\n",
         ds.len, create, e0, e1, peak_rss_mb());
  fl_loader_destroy(l);
  return 0;
}

/* n as the table writes it: 1e6, 5e7. */
static void
scale_label(char *buf, size_t size, double n)
{
  int e = (int)floor(log10(n) + 1e-9);

  snprintf(buf, size, "%.0fe%d", n / pow(10, e), e);
}

static void
scale_init(struct scale *sc, const double *n, int nn)
{
  static const char *metric[SC_METRICS] = {
      "create ms", "ep0 to b1 ms", "ep1 to b1 ms", "peak RSS MB",
      "create+ep0 ms"};
  char label[16];
  int k, o, m;

  memset(sc, 0, sizeof(*sc));
  sc->n = n;
  sc->nn = nn;
  for (k = 0; k < nn; k++) {
    scale_label(label, sizeof(label), n[k]);
    for (o = 0; o < 2; o++) {
      snprintf(sc->name[k][o], sizeof(sc->name[k][o]), "scale %s %s", label,
               o ? "bijection" : "torch");
      for (m = 0; m < SC_METRICS; m++) {
        sc->cell[k][o][m].name = sc->name[k][o];
        sc->cell[k][o][m].metric = metric[m];
        sc->cell[k][o][m].decimals = m == SC_RSS ? 1 : 2;
      }
    }
  }
}

/* A run's figures into the cells of one n, on forkload's side or
   PyTorch's; create+ep0 is summed per run, its median taken after. */
static void
scale_add(struct row *cell, const struct result *r, int pytorch)
{
  double v;
  int m;

  for (m = 0; m < SC_METRICS; m++) {
    v = m == SC_FIRST ? r->v[SC_CREATE] + r->v[SC_EPOCH0] : r->v[m];
    if (pytorch)
      cell[m].pt[cell[m].npt++] = v;
    else
      cell[m].fl[cell[m].nfl++] = v;
  }
}

/* One round: each n with each order that fits, then PyTorch's. */
static void
scale_round(struct scale *sc, int round)
{
  char cmd[PATH_MAX + 128];
  struct result r;
  double n;
  int k, o;

  for (k = 0; k < sc->nn; k++) {
    n = sc->n[k];
    for (o = 0; o < 2; o++) {
      if (o == 0 && n > SCALE_TABLE_MAX)
        continue;
      /* The order's table, if any, and a GiB for the rest. */
      snprintf(cmd, sizeof(cmd), "ulimit -v %.0f && exec %s --scale-child "
               "%.0f %s", ((o == 0 ? 8 * n : 0) + (1 << 30)) / 1024,
               self_exe, n, o ? "bijection" : "torch");
      if (json_run(cmd, scale_keys, 4, &r) != 0)
        exit(1);
      scale_add(sc->cell[k][o], &r, 0);
    }
    if (!have_torch || n > SCALE_PT_MAX || (n >= SCALE_PT_ONCE && round > 0))
      continue;
    /* randperm's tensor and its list (an 8-byte pointer and a 32-byte
       int an index) with room to spare, and 2 GiB for torch. */
    snprintf(cmd, sizeof(cmd), "ulimit -v %.0f && exec /usr/bin/python3 %s "
             "scale %.0f", (64 * n + 2.0 * (1 << 30)) / 1024, torch_script,
             n);
    if (json_run(cmd, scale_keys, 4, &r) == 0)
      for (o = 0; o < 2; o++)
        scale_add(sc->cell[k][o], &r, 1);
  }
}

/* The rows; the targets are issue 19's. */
static void
scale_print(struct scale *sc)
{
  struct row *c;
  char gb[32], label[16];
  double n;
  int k, o, m;

  for (k = 0; k < sc->nn; k++) {
    n = sc->n[k];
    snprintf(gb, sizeof(gb), "not run: %.0f GB", 8 * n / 1e9);
    for (o = 0; o < 2; o++) {
      c = sc->cell[k][o];
      if (o == 0 && n > SCALE_TABLE_MAX) {
        printf("%-22s %-14s %12s\n", c->name, "-", gb);
        continue;
      }
      for (m = 0; m < SC_RSS; m++) {
        if (o == 0 && n == 5e7 && m != SC_CREATE)
          print_row(&c[m], "<= 50 ms", median(c[m].fl, c[m].nfl) <= 50);
        else
          print_row(&c[m], "", -1);
      }
      if (o == 1 && n == 1e10) {
        print_row(&c[SC_RSS], "< 100 MB",
                  median(c[SC_RSS].fl, c[SC_RSS].nfl) < 100);
        print_row(&c[SC_FIRST], "<= 100 ms",
                  median(c[SC_FIRST].fl, c[SC_FIRST].nfl) <= 100);
      } else {
        print_row(&c[SC_RSS], "", -1);
      }
    }
  }
  scale_label(label, sizeof(label), SCALE_PT_MAX);
  printf("scale: a fresh process per n and side; shuffled, 2 persistent "
         "workers, batch 256, 8-byte samples; ep0/ep1 to b1: from begin "
         "(iter()) to the\nfirst batch of epoch 0, then of epoch 1 begun "
         "with epoch 0 cut short; not run: the torch order's table; "
         "PyTorch: RandomSampler, up to n=%s", label);
  if (have_torch && rounds > 1) {
    scale_label(label, sizeof(label), SCALE_PT_ONCE);
    printf(", once from n=%s (a minute and 5 GB a run)", label);
  }
  printf("\n");
}

/* --scale-out: the medians, a line per n and side, for
   tools/plot_scale.py; what was not run says why. */
static int
scale_write(struct scale *sc, const char *path)
{
  static const char *series[] = {"forkload torch order", "forkload bijection",
                                 "PyTorch RandomSampler"};
  FILE *f = fopen(path, "w");
  struct row *c;
  double n;
  int k, s, m, nv;

  if (f == NULL) {
    perror(path);
    return -1;
  }
  fprintf(f, "n\tseries\tcreate_ms\tepoch0_ms\tepoch1_ms\tpeak_rss_mb\t"
          "rounds\tnote\n");
  for (k = 0; k < sc->nn; k++) {
    n = sc->n[k];
    for (s = 0; s < 3; s++) {
      c = sc->cell[k][s == 0 ? 0 : 1];
      nv = s < 2 ? c->nfl : c->npt;
      if (nv == 0 && s == 0)
        fprintf(f, "%.0f\t%s\t\t\t\t\t0\tnot run: %.0f GB of order table\n",
                n, series[s], 8 * n / 1e9);
      /* randperm's tensor and list: 5 GB measured at 10^8. */
      if (nv == 0 && s == 2 && have_torch && n > SCALE_PT_MAX)
        fprintf(f, "%.0f\t%s\t\t\t\t\t0\tnot run: about %.0f GB of "
                "randperm and its list\n", n, series[s], 50 * n / 1e9);
      if (nv == 0)
        continue;
      fprintf(f, "%.0f\t%s", n, series[s]);
      for (m = 0; m < SC_FIRST; m++)
        fprintf(f, "\t%.3f", s < 2 ? median(c[m].fl, c[m].nfl)
                                   : median(c[m].pt, c[m].npt));
      fprintf(f, "\t%d\t\n", nv);
    }
  }
  return fclose(f) == 0 ? 0 : -1;
}

/* The workloads, by the names torch_side.py knows them by. */
static const char *const workloads[] = {
    "overhead", "bandwidth", "tutorial", "hol", "startup", "npydir", "resume",
    "images", "lmdb", "tokens", "webdataset", "scale"};
static const char *only; /* --only's list, comma-separated; NULL: all */

static int
wanted(const char *workload)
{
  size_t n = strlen(workload);
  const char *p;

  if (only == NULL)
    return 1;
  for (p = only; (p = strstr(p, workload)) != NULL; p += n)
    if ((p == only || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
      return 1;
  return 0;
}

/* Whether every name in --only's list is a workload's, each once. */
static int
only_valid(void)
{
  size_t k, names = 1, known = 0;
  const char *p;

  for (p = only; *p != '\0'; p++)
    names += *p == ',';
  for (k = 0; k < sizeof(workloads) / sizeof(*workloads); k++)
    known += (size_t)wanted(workloads[k]);
  return known == names;
}

int
main(int argc, char **argv)
{
  static const char *tut[] = {"w0", "w4", "w4p", "w4b"};
  static const char *bpk[] = {"batches_per_s", "next_p50_us", "next_p99_us"};
  static const char *bwk[] = {"mb_per_s", "cold_mb_per_s"};
  static const char *sk[] = {"seconds"};
  static const char *fbk[] = {"first_batch_ms"};
  struct row ovh = {.name = "overhead", .metric = "batches/s"},
             p50 = {.name = "  next() p50", .metric = "us"},
             p99 = {.name = "  next() p99", .metric = "us"},
             bw = {.name = "bandwidth", .metric = "MB/s"},
             cold = {.name = "  cold epoch", .metric = "MB/s"}, tr[4], hol[2],
             start = {.name = "startup", .metric = "ms to batch 1"};
  struct row npd = {.name = "npy dir (np.load)", .metric = "samples/s"},
             npa = {.name = "  npy one array", .metric = "samples/s"};
  static const char *nk[] = {"samples_per_s"};
  /* Resume deep in the epoch (90%) and at its start: PyTorch's restart
     and skip loads every batch before the position, a state none. */
  struct row res[2] = {
      {.name = "resume at 90% (npy)", .metric = "ms to batch"},
      {.name = "  resume at 0%", .metric = "ms to batch"}};
  static const char *rk[] = {"ms_to_batch"};
  /* The image pipeline, torchvision's training and evaluation transforms,
     and the decoder alone on one core. */
  struct row img[2] = {
      {.name = "images train (RRC)", .metric = "images/s"},
      {.name = "images eval (center)", .metric = "images/s"}};
  struct row dec = {.name = "  jpeg decode, 1 core", .metric = "images/s"};
  /* One core: the training and evaluation transforms in this process,
     and the floor they are held to, decoding at 1/8 DCT scale. */
  struct row one[2] = {
      {.name = "  train, 1 core", .metric = "images/s"},
      {.name = "  eval, 1 core", .metric = "images/s"}};
  struct row flo = {.name = "  jpeg 1/8 DCT, 1 core", .metric = "images/s"};
  /* And the crop floor (issue 36): libjpeg-turbo decoding only train's
     crops, read by the same loader. */
  struct row crp = {.name = "  jpeg crops, 1 core", .metric = "images/s"};
  /* Each round's train 1 core over its crops, timed one right after the
     other: this shared machine's speed drifts between runs, and a
     ratio of neighbours keeps less of the drift than one of medians. */
  double crop_share[MAX_ROUNDS];
  int ncrop_share = 0;
  /* An LMDB environment of 12 KiB values (python3-lmdb on PyTorch's
     side), and the same samples as a directory of .npy files. */
  struct row ldb[2] = {
      {.name = "lmdb (python3-lmdb)", .metric = "samples/s"},
      {.name = "  same as npy dir", .metric = "samples/s"}};
  /* Random access (issue 28): a million values of 16 bytes, read with
     the dataset's get, beside an mdb_get by the whole key. */
  struct row lget[3] = {
      {.name = "lmdb random get", .metric = "gets/s"},
      {.name = "  in key order", .metric = "gets/s"},
      {.name = "  mdb_get by key", .metric = "gets/s"}};
  char lgdir[] = "/tmp/forkload-bench-lmget-XXXXXX";
  size_t lgn = 0;
  char lmdir[] = "/tmp/forkload-bench-lmdb-XXXXXX";
  char lmnpy[] = "/tmp/forkload-bench-lmnpy-XXXXXX", lmarray[512];
  size_t lmn = 0;
  struct images im = {.n = 0};
  /* llm.c's shards beside the same windows as .npy, and PyTorch's
     memmap of the shards. */
  struct row tkr[2] = {
      {.name = "tokens (llm.c shards)", .metric = "samples/s"},
      {.name = "  tokens as npy zip", .metric = "samples/s"}};
  struct tokens tk = {.windows = 0};
  /* Tar shards of the npy samples, beside those npy samples and PyTorch
     reading the tars with tarfile in an IterableDataset. */
  struct row wds = {.name = "webdataset (4 tars)", .metric = "samples/s"},
             wnpy = {.name = "  same samples, .npy", .metric = "samples/s"};
  char shards[8192] = "";
  size_t at[2];
  char npdir[] = "/tmp/forkload-bench-XXXXXX", nparray[512];
  int npy = 0;
  size_t npn;
  struct result r;
  size_t peak = 0, bound = 0, segs = 0;
  /* The tutorial's memory, per config: the most mapped, in segments. */
  double tpeak[4] = {0}, tsegs[4] = {0}, tbound = 0;
  double mem, ideal[4], fast_alone, f, p, slower, worst;
  char args[8300], target[64], pt[32], cpu[256], loadavg[64] = "?\n";
  FILE *lf;
  int i, k, pass;
  /* Data at scale: n from 10^6 to 10^10, smoke's two tiny ones. */
  static const double scale_n[SCALE_NS] = {1e6, 1e7, 5e7, 1e8, 1e9, 1e10},
                      scale_smoke[] = {1e3, 1e5};
  static struct scale sc;
  const char *scale_out = NULL;

  /* scale's own process for one configuration (scale_round). */
  if (argc == 4 && strcmp(argv[1], "--scale-child") == 0)
    return scale_child(argv[2], argv[3]);
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--smoke") == 0)
      smoke = 1;
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (strcmp(argv[i], "--torch-script") == 0 && i + 1 < argc)
      torch_script = argv[++i];
#ifdef BENCH_IMAGES
    else if (strcmp(argv[i], "--forkload") == 0 && i + 1 < argc)
      forkload_bin = argv[++i];
#endif
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp(argv[i], "--scale-out") == 0 && i + 1 < argc)
      scale_out = argv[++i];
    else
      break;
  }
  if (i < argc || (only != NULL && !only_valid())) {
    fprintf(stderr, "usage: bench [--smoke] [--rounds N] "
                    "[--torch-script PATH] [--forkload PATH] [--only W,...] "
                    "[--scale-out FILE]\n"
                    "W: overhead, bandwidth, tutorial, hol, startup, "
                    "npydir, resume, images, lmdb, tokens, webdataset, "
                    "scale\n");
    return 2;
  }
  if (rounds < 1 || rounds > MAX_ROUNDS)
    rounds = 3;
  if (smoke)
    rounds = 1;
  have_torch = !smoke &&
               system("/usr/bin/python3 -c 'import torch' 2>/dev/null") == 0;
  memset(tr, 0, sizeof(tr));
  memset(hol, 0, sizeof(hol));
  for (k = 0; k < 4; k++) {
    tr[k].name = k == 0 ? "tutorial w0" : k == 1 ? "tutorial w4"
                 : k == 2 ? "tutorial w4 persist" : "tutorial w4 get_batch";
    tr[k].metric = "seconds";
    tr[k].decimals = 2; /* w4 and w4 persist are compared within 5% */
  }
  hol[0].name = "head-of-line in order";
  hol[1].name = "head-of-line arrival";
  hol[0].metric = hol[1].metric = "batches/s";
  fprintf(stderr, "bench: %d round(s), PyTorch %s\n", rounds,
          have_torch ? "found" : "not found: forkload only");
  mem = memset_mb_per_s();
  npn = smoke ? 200 : 10000; /* once --smoke is known */
  if (wanted("npydir") || wanted("resume") || wanted("webdataset")) {
    npy_make(npdir, npn, 3072, nparray); /* 12 KiB samples */
    npy = 1;
  }
#ifdef HAVE_LIBARCHIVE
  if (wanted("webdataset"))
    tar_make(npdir, npn, 3072, 4, shards, sizeof(shards));
#endif
#ifdef BENCH_IMAGES
  if (wanted("images"))
    img_make(&im, smoke ? 16 : 320); /* outside the timings, once */
#endif
  if (wanted("tokens"))
    tok_make(&tk); /* outside the timings, once */
  if (wanted("scale")) {
    if (readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1) < 0) {
      perror("bench: /proc/self/exe");
      return 1;
    }
    if (smoke)
      scale_init(&sc, scale_smoke, 2);
    else
      scale_init(&sc, scale_n, SCALE_NS);
  }
  if (wanted("lmdb") && (lmn = lmdb_make(lmdir, smoke ? 200 : 20000, 3072)))
    npy_make(lmnpy, lmn, 3072, lmarray);
  if (wanted("lmdb"))
    lgn = lmdb_make(lgdir, smoke ? 2000 : 1000000, 4);
  at[0] = (npn + 63) / 64 * 9 / 10;
  at[1] = 0;
  for (i = 0; i < rounds; i++) {
    fprintf(stderr, "bench: round %d\n", i + 1);
    if (wanted("overhead")) {
      fl_overhead(&r);
      ovh.fl[ovh.nfl++] = r.v[0];
      p50.fl[p50.nfl++] = r.v[1];
      p99.fl[p99.nfl++] = r.v[2];
      if (have_torch && torch_run("overhead", bpk, 3, &r) == 0) {
        ovh.pt[ovh.npt++] = r.v[0];
        p50.pt[p50.npt++] = r.v[1];
        p99.pt[p99.npt++] = r.v[2];
      }
    }
    if (wanted("bandwidth")) {
      fl_bandwidth(&r, &peak, &bound, &segs);
      bw.fl[bw.nfl++] = r.v[0];
      cold.fl[cold.nfl++] = r.v[1];
      if (have_torch && torch_run("bandwidth", bwk, 2, &r) == 0) {
        bw.pt[bw.npt++] = r.v[0];
        cold.pt[cold.npt++] = r.v[1];
      }
    }
    /* The 0-worker tutorial takes 27 s a side: once is enough. */
    for (k = i == 0 ? 0 : 1; k < 4 && wanted("tutorial"); k++) {
      fl_tutorial(tut[k], &r);
      tr[k].fl[tr[k].nfl++] = r.v[0];
      tpeak[k] = r.v[1] > tpeak[k] ? r.v[1] : tpeak[k];
      tsegs[k] = r.v[2] > tsegs[k] ? r.v[2] : tsegs[k];
      tbound = r.v[3];
      snprintf(args, sizeof(args), "tutorial %s", tut[k]);
      if (have_torch && torch_run(args, sk, 1, &r) == 0)
        tr[k].pt[tr[k].npt++] = r.v[0];
    }
    for (k = 0; k < 2 && wanted("hol"); k++) {
      fl_hol(k == 0, &r);
      hol[k].fl[hol[k].nfl++] = r.v[0];
      snprintf(args, sizeof(args), "hol %s", k == 0 ? "in" : "out");
      if (have_torch && torch_run(args, bpk, 1, &r) == 0) {
        if (r.unsupported)
          hol[k].unsupported = 1;
        else
          hol[k].pt[hol[k].npt++] = r.v[0];
      }
    }
    if (wanted("startup")) {
      fl_startup(&r);
      start.fl[start.nfl++] = r.v[0];
      if (have_torch && torch_run("startup", fbk, 1, &r) == 0)
        start.pt[start.npt++] = r.v[0];
    }
    if (wanted("npydir")) {
      npd.fl[npd.nfl++] = fl_file(npdir, FILE_NPY_DIR);
      npa.fl[npa.nfl++] = fl_file(nparray, FILE_NPY_ARRAY);
      snprintf(args, sizeof(args), "npydir %s", npdir);
      if (have_torch && torch_run(args, nk, 1, &r) == 0)
        npd.pt[npd.npt++] = r.v[0];
    }
#ifdef HAVE_LIBARCHIVE
    if (wanted("webdataset")) {
      wds.fl[wds.nfl++] = fl_wds(shards, npn, 3072);
      wnpy.fl[wnpy.nfl++] = fl_file(nparray, FILE_NPY_ARRAY);
      snprintf(args, sizeof(args), "webdataset %s", shards);
      if (have_torch && torch_run(args, nk, 1, &r) == 0)
        wds.pt[wds.npt++] = r.v[0];
    }
#endif
    for (k = 0; k < 2 && wanted("resume"); k++) {
      res[k].fl[res[k].nfl++] = fl_resume(npdir, at[k]);
      snprintf(args, sizeof(args), "resume %s --position %zu", npdir, at[k]);
      if (have_torch && torch_run(args, rk, 1, &r) == 0)
        res[k].pt[res[k].npt++] = r.v[0];
    }
    for (k = 0; k < 2 && lmn > 0; k++) {
      ldb[k].fl[ldb[k].nfl++] = fl_file(k == 0 ? lmdir : lmnpy,
                                        k == 0 ? FILE_LMDB : FILE_NPY_DIR);
      snprintf(args, sizeof(args), "%s %s", k == 0 ? "lmdb" : "npydir",
               k == 0 ? lmdir : lmnpy);
      if (have_torch && torch_run(args, nk, 1, &r) == 0)
        ldb[k].pt[ldb[k].npt++] = r.v[0];
    }
    for (k = 0; k < 3 && lgn > 0; k++)
      lget[k].fl[lget[k].nfl++] = fl_lmdb_gets(lgdir, lgn, k);
#ifdef BENCH_IMAGES
    for (k = 0; k < 2 && im.n > 0; k++) {
      static const char *ik[] = {"images_per_s"};

      img[k].fl[img[k].nfl++] = fl_images(&im, k == 0, 2, 0);
      snprintf(args, sizeof(args), "images %s --transform %s", im.dir,
               k == 0 ? "train" : "eval");
      if (have_torch && torch_run(args, ik, 1, &r) == 0)
        img[k].pt[img[k].npt++] = r.v[0];
    }
    if (im.n > 0) {
      dec.fl[dec.nfl++] = decode_per_s(&im);
      one[0].fl[one[0].nfl++] = fl_images(&im, 1, 0, 0);
      crp.fl[crp.nfl++] = fl_images(&im, 1, 0, 1);
      crop_share[ncrop_share++] = one[0].fl[one[0].nfl - 1] /
                                  crp.fl[crp.nfl - 1];
      one[1].fl[one[1].nfl++] = fl_images(&im, 0, 0, 0);
      flo.fl[flo.nfl++] = floor_per_s(&im);
    }
#endif
    if (wanted("scale"))
      scale_round(&sc, i);
    for (k = 0; k < 2 && tk.windows > 0; k++) {
      tkr[k].fl[tkr[k].nfl++] = fl_tokens(&tk, k);
      snprintf(args, sizeof(args), "tokens %s", tk.dir);
      if (k == 0 && have_torch && torch_run(args, nk, 1, &r) == 0)
        tkr[k].pt[tkr[k].npt++] = r.v[0];
    }
  }
  if (tk.windows > 0)
    tok_remove(&tk);
  if (npy)
    npy_remove(npdir, npn, nparray);
  if (lmn > 0) {
    lmdb_remove(lmdir);
    npy_remove(lmnpy, lmn, lmarray);
  }
  if (lgn > 0)
    lmdb_remove(lgdir);
  for (k = 0; k < 4 && shards[0] != '\0'; k++) {
    snprintf(args, sizeof(args), "%s.wds-%d.tar", npdir, k);
    unlink(args);
  }
#ifdef BENCH_IMAGES
  if (im.n > 0)
    img_remove(&im);
#endif

  printf("\nforkload vs PyTorch DataLoader, medians of %d round(s)%s\n",
         rounds, smoke ? " (smoke sizes: figures are not comparable)" : "");
  cpu_name(cpu, sizeof(cpu));
  if ((lf = fopen("/proc/loadavg", "r")) != NULL) {
    if (fgets(loadavg, sizeof(loadavg), lf) == NULL)
      snprintf(loadavg, sizeof(loadavg), "?\n");
    fclose(lf);
  }
  printf("cpu: %s; /proc/loadavg at the end: %s", cpu, loadavg);
  printf("warm memset bandwidth of this machine: %.0f MB/s\n\n", mem);
  printf("%-22s %-14s %12s %12s %9s  %-26s %s\n", "workload", "metric",
         "forkload", "pytorch", "ratio", "target", "verdict");
  if (wanted("overhead")) {
    f = median(ovh.fl, ovh.nfl);
    p = ovh.npt ? median(ovh.pt, ovh.npt) : 0;
    pass = ovh.npt ? f >= 50 * p : -1;
    print_row(&ovh, ">= 50x PyTorch", pass);
    print_row(&p50, "", -1);
    print_row(&p99, "", -1);
  }
  if (wanted("bandwidth")) {
    f = median(bw.fl, bw.nfl);
    p = bw.npt ? median(bw.pt, bw.npt) : 0;
    snprintf(target, sizeof(target), ">= 5x PyTorch, >= %.0f", 0.4 * mem);
    pass = f >= 0.4 * mem && (bw.npt == 0 || f >= 5 * p);
    print_row(&bw, target, pass);
    print_row(&cold, "", -1);
  }
  if (wanted("tutorial")) {
    /*
     * Ideal: sleep-bound, 5 ms per sample spread over 4 workers.  With
     * get_batch the sleep is once per batch of 19 MB, which takes about
     * as long to write: no target there, the bound is shown.
     */
    ideal[0] = (smoke ? 64 : 512) * 0.005 * (smoke ? 1 : 10);
    ideal[1] = ideal[2] = ideal[0] / 4;
    ideal[3] = (smoke ? 2 : 16) * 0.005 / 4 * (smoke ? 1 : 10);
    for (k = 0; k < 4; k++) {
      f = median(tr[k].fl, tr[k].nfl);
      snprintf(target, sizeof(target),
               k == 0 ? "ideal %.2f s" : k == 3 ? "sleep-bound %.2f s"
                                                : "<= 1.1 x ideal %.2f s",
               ideal[k]);
      print_row(&tr[k], target, k == 1 || k == 2 ? f <= 1.1 * ideal[k] : -1);
    }
    /* Workers forked each epoch are granted the segments of the last
       epoch's: they must cost almost nothing over persistent ones. */
    slower = median(tr[1].fl, tr[1].nfl) / median(tr[2].fl, tr[2].nfl);
    if (tr[1].npt > 0 && tr[2].npt > 0)
      snprintf(pt, sizeof(pt), "%.1f",
               (median(tr[1].pt, tr[1].npt) / median(tr[2].pt, tr[2].npt) -
                1) * 100);
    else
      snprintf(pt, sizeof(pt), "-");
    print_cells("  w4 over w4 persist", "%", 1, (slower - 1) * 100, pt, "-",
                "<= 5%", slower <= 1.05);
    worst = tpeak[1] > tpeak[2] ? tpeak[1] : tpeak[2];
    worst = worst > tpeak[3] ? worst : tpeak[3];
    snprintf(target, sizeof(target), "<= %.1f (9 batches)", tbound / 1e6);
    print_cells("  memory peak", "MB", 1, worst / 1e6, "-", "-", target,
                worst <= tbound);
    for (k = 1; k < 4; k++)
      printf("  %-22s speedup over 0 workers: forkload %.1fx\n", tr[k].name,
             median(tr[0].fl, tr[0].nfl) / median(tr[k].fl, tr[k].nfl));
  }
  if (wanted("hol")) {
    /* The fast worker alone, plus the slow one's share, as measured. */
    fast_alone = fl_one_worker(100) + fl_one_worker(1000);
    print_row(&hol[0], "", -1);
    snprintf(target, sizeof(target), ">= 0.9 x %.0f", fast_alone);
    f = median(hol[1].fl, hol[1].nfl);
    print_row(&hol[1], target, f >= 0.9 * fast_alone);
  }
  print_row(&start, "", -1);
  print_row(&npd, "", -1);
  print_row(&npa, "", -1);
  print_row(&wds, "", -1);
  print_row(&wnpy, "", -1);
  if (wanted("resume")) {
    /* Flat in the position: a restart that loaded the batches before it
       would cost their loading, 141 batches, tens of ms even for
       forkload; 3x leaves room for this machine's spread of first
       batches (1 to 3 ms measured, a fork and 64 files). */
    f = median(res[1].fl, res[1].nfl);
    snprintf(target, sizeof(target), "<= 3 x at 0%%: %.1f ms", f);
    print_row(&res[0], target, median(res[0].fl, res[0].nfl) <= 3 * f);
    print_row(&res[1], "", -1);
  }
  if (wanted("images") && im.n > 0) {
    /* Both sides decode with libjpeg-turbo; forkload decodes only the
       crop's rows and columns and resizes in C, where PIL decodes whole.
       Evaluation keeps more of each image, so saves less, but the work is
       of the same kind on both sides: the same target (issue 36's). */
    for (k = 0; k < 2; k++) {
      f = median(img[k].fl, img[k].nfl);
      p = img[k].npt ? median(img[k].pt, img[k].npt) : 0;
      print_row(&img[k], ">= 3.5x torchvision",
                img[k].npt ? f >= 3.5 * p : -1);
    }
    /* 2 workers on 2 cores: the most whole decodes could give. */
    print_row(&dec, "", -1);
    f = median(img[0].fl, img[0].nfl);
    p = 2 * median(dec.fl, dec.nfl);
    snprintf(target, sizeof(target), "of 2 x decode: %.0f/s", p);
    print_cells("  train / 2 x decode", "%", 1, f / p * 100, "-", "-",
                target, -1);
    /* One core against issue 27's floor, the whole image at 1/8 DCT
       scale: shown, not judged, since issue 36 found it the wrong
       yardstick (PIL's pixels force the crop's inverse DCT). */
    for (k = 0; k < 2; k++)
      print_row(&one[k], "", -1);
    print_row(&flo, "", -1);
    p = median(flo.fl, flo.nfl);
    for (k = 0; k < 2; k++) {
      f = median(one[k].fl, one[k].nfl);
      snprintf(target, sizeof(target), "of 1/8: %.0f/s", p);
      print_cells(k == 0 ? "  train 1 core / 1/8" : "  eval 1 core / 1/8",
                  "%", 1, f / p * 100, "-", "-", target, -1);
    }
    /* Issue 36: forkload's own stages (the resize, the float write, the
       rest) at most a third of the decoding its crops force; the median
       of the rounds' ratios. */
    print_row(&crp, "", -1);
    p = median(crp.fl, crp.nfl);
    f = median(crop_share, ncrop_share);
    snprintf(target, sizeof(target), ">= 75%% of crops: %.0f/s", p);
    print_cells("  train 1 core / crops", "%", 1, f * 100, "-", "-",
                target, f >= 0.75);
  } else if (wanted("images")) {
    printf("images: skipped, this forkload was built without libjpeg-turbo "
           "or libspng (sh tools/setup.sh, then configure)\n");
  }
  print_row(&tkr[0], "", -1);
  print_row(&tkr[1], "", -1);
  if (lmn > 0) {
    print_row(&ldb[0], "", -1);
    print_row(&ldb[1], "", -1);
    printf("lmdb: %zu values of 12 KiB (float32), keys %%08zu; 2 workers, "
           "batch 64, one warm epoch\n", lmn);
  }
  if (lgn > 0) {
    /* Issue 28's bound: a get by position costs at most 2 by-key gets. */
    f = median(lget[2].fl, lget[2].nfl);
    snprintf(target, sizeof(target), ">= 0.5 x by key: %.0f", f);
    print_row(&lget[0], target, median(lget[0].fl, lget[0].nfl) >= 0.5 * f);
    print_row(&lget[1], "", -1);
    print_row(&lget[2], "", -1);
    printf("lmdb gets: %zu values of 16 bytes, keys %%08zu; the dataset's "
           "get in this process, one pass after an untimed one\n", lgn);
  } else if (wanted("lmdb")) {
    printf("lmdb: skipped, this forkload was built without liblmdb (sh "
           "tools/setup.sh, then configure)\n");
  }
  if (wanted("scale")) {
    scale_print(&sc);
    if (scale_out != NULL && scale_write(&sc, scale_out) != 0)
      return 1;
  }
  if (wanted("bandwidth")) {
    snprintf(target, sizeof(target), "<= %.1f (5 batches)", bound / 1e6);
    print_cells("memory peak", "MB", 1, peak / 1e6, "-", "-", target,
                peak <= bound);
    printf("\nmemory: %zu segments at most, for (prefetch 2 x 2 workers + 1 "
           "held) batches; a batch's segment holds its %zu bytes of "
           "samples,\nthen its indices, sizes and header, in whole pages: "
           "%zu bytes\n", segs, (size_t)32 * 602112,
           segs ? peak / segs : 0);
  }
  if (wanted("tutorial"))
    printf("%stutorial memory: segments at most, for (prefetch 2 x 4 "
           "workers + 1 held) batches: w4 %.0f, w4 persist %.0f, "
           "get_batch %.0f\n", wanted("bandwidth") ? "" : "\n", tsegs[1],
           tsegs[2], tsegs[3]);
  if (im.n > 0)
    printf("%simages: %zu JPEGs of 360-500 x 300-400 at quality 90, %.0f KB "
           "each on average, in %d classes; 2 workers, batch 32, float32 "
           "3 x 224 x 224; the 1 core rows: 3 warm epochs\n",
           wanted("bandwidth") || wanted("tutorial") ? "" : "\n", im.n,
           (double)im.bytes / im.n / 1e3, IMG_CLASSES);
  if (tk.windows > 0)
    printf("%stokens: %d shards, %zu windows of %d + 1 tokens (%.1fM "
           "tokens); shuffled, 2 workers, batch 8, int32 inputs and targets "
           "(PyTorch: int64)\n", wanted("bandwidth") || wanted("tutorial") ||
           im.n > 0 ? "" : "\n", TOK_SHARDS, tk.windows, TOK_T,
           (double)tk.windows * TOK_T / 1e6);
  return 0;
}
