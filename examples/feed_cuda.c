/*
 * A training loop's shape that feeds a GPU from forkload, as a PyTorch
 * loop does with pin_memory=True, .to(device, non_blocking=True) and a
 * prefetcher: each segment is page-locked once, where it lies, by pin
 * hooks that call cudaHostRegister (PyTorch copies every batch into
 * pinned memory instead); batch k + 1 is copied with cudaMemcpyAsync on a
 * copy stream, into the other of two device buffers, while the step of
 * batch k runs on a compute stream that waits for its copy's event.
 *
 * The rule that makes it safe: a batch is released only once its copy's
 * event has completed (cudaEventQuery or cudaEventSynchronize), never when
 * cudaMemcpyAsync returns.  Released, its segment goes back to a worker,
 * which refills it while the copy engine may still be reading it, and the
 * GPU would get a mix of two batches without a word.  Each step here adds
 * up 16 bytes of every sample of its batch on the GPU and the host checks
 * the sum against the indices it took, so such a mix is an error.
 *
 * The step is a kernel that holds the GPU for --step-ms, so that the load
 * and the compute can be set against each other; the dataset is synthetic,
 * its samples' bytes filled by the workers from their indices.
 *
 * usage: feed_cuda [--batch-size N] [--sample-bytes N] [--batches N]
 *          [--epochs N] [--workers N] [--step-ms MS] [--no-pin]
 *          [--no-overlap] [--bench]
 *
 * It prints a line per epoch: its batches and bytes, the time, the time a
 * batch, the copies' bandwidth, the time spent waiting for the workers and
 * the segments pinned.  The first epoch pins the segments as they come;
 * the workers are persistent, so the next ones pin none.  --bench prints
 * the benchmark's tables instead (feed_cuda_bench.c).  It exits 0, 1 when
 * something failed (a CUDA call, with the call and CUDA's words), 2 on
 * bad usage, and 77 when there is no CUDA device, saying so.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <forkload.h>

#include "feed_cuda.h"

/* Steps in flight: the batches held until their copies are done, and the
   sums not yet checked. */
#define RING 4

/* One step: a batch's copy into a device buffer, then its kernel. */
struct step {
  fl_batch *batch;        /* held until its copy has completed */
  int result_pending;     /* its sum not read yet */
  size_t seq;             /* the step's number in its epoch */
  unsigned long long expected;
  cudaEvent_t start, copied, done;
};

struct gpu {
  cudaStream_t copy, compute;
  void *buf[2];             /* step k copies into buf[k % 2] */
  unsigned long long *dsum; /* RING sums on the device */
  unsigned long long *hsum; /* and read back to pinned host memory */
  struct step ring[RING];
  double copy_seconds;
};

/* What the pin hooks did, for the epoch's line. */
struct pins {
  unsigned n;
  double seconds;
  cudaError_t pin_error, unpin_error;
};

static double
now(void)
{
  struct timespec t;

  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int
fc_cuda_failed(const char *call, cudaError_t e)
{
  fprintf(stderr, "feed_cuda: %s failed: %s (%s)\n", call,
          cudaGetErrorString(e), cudaGetErrorName(e));
  return -1;
}

/* 0, or -1 having said which call failed. */
static int
cu(cudaError_t e, const char *call)
{
  return e == cudaSuccess ? 0 : fc_cuda_failed(call, e);
}

/*
 * Sample i: FC_HEAD(i), bytes of i's low byte, FC_TAIL(i).  The workers
 * call it; it uses no CUDA (a forked worker must not).
 */
static int
synth_get(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  const struct fc_config *c = ctx;
  unsigned char *p = dst;
  unsigned long long head = FC_HEAD(index), tail = FC_TAIL(index);

  memset(p + 8, (int)(index & 0xff), c->sample_bytes - 16);
  memcpy(p, &head, 8);
  memcpy(p + c->sample_bytes - 8, &tail, 8);
  *nbytes = c->sample_bytes;
  return 0;
}

/*
 * The pin hooks: the loader calls pin once per segment, in this process,
 * before the first batch the segment carries is handed out, and unpin
 * before it unmaps the segment, so cudaHostRegister is paid once per
 * segment and a registered range never outlives its mapping.
 */
static int
pin(void *addr, size_t len, void *arg)
{
  struct pins *p = arg;
  double t0 = now();
  cudaError_t e = cudaHostRegister(addr, len, cudaHostRegisterDefault);

  p->seconds += now() - t0;
  if (e != cudaSuccess) {
    /* The segment serves unpinned, and the error is cleared, so that
       no later cudaGetLastError takes it for its own. */
    p->pin_error = e;
    (void)cudaGetLastError();
    return (int)e;
  }
  p->n++;
  return 0;
}

static void
unpin(void *addr, size_t len, void *arg)
{
  struct pins *p = arg;
  cudaError_t e = cudaHostUnregister(addr);

  (void)len;
  if (e != cudaSuccess && p->unpin_error == cudaSuccess)
    p->unpin_error = e;
}

static int
gpu_open(struct gpu *g, size_t bytes)
{
  unsigned i;

  if (cu(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking),
         "cudaStreamCreateWithFlags") < 0 ||
      cu(cudaStreamCreateWithFlags(&g->compute, cudaStreamNonBlocking),
         "cudaStreamCreateWithFlags") < 0 ||
      cu(cudaMalloc(&g->buf[0], bytes), "cudaMalloc") < 0 ||
      cu(cudaMalloc(&g->buf[1], bytes), "cudaMalloc") < 0 ||
      cu(cudaMalloc((void **)&g->dsum, RING * sizeof(*g->dsum)),
         "cudaMalloc") < 0 ||
      cu(cudaMallocHost((void **)&g->hsum, RING * sizeof(*g->hsum)),
         "cudaMallocHost") < 0)
    return -1;
  for (i = 0; i < RING; i++)
    if (cu(cudaEventCreate(&g->ring[i].start), "cudaEventCreate") < 0 ||
        cu(cudaEventCreate(&g->ring[i].copied), "cudaEventCreate") < 0 ||
        cu(cudaEventCreateWithFlags(&g->ring[i].done,
                                    cudaEventDisableTiming),
           "cudaEventCreateWithFlags") < 0)
      return -1;
  return 0;
}

/* After cudaDeviceSynchronize: nothing of g is in use any more.  g was
   zeroed before gpu_open, which may have failed half-way. */
static void
gpu_close(struct gpu *g)
{
  unsigned i;

  for (i = 0; i < RING; i++) {
    if (g->ring[i].start != NULL)
      cudaEventDestroy(g->ring[i].start);
    if (g->ring[i].copied != NULL)
      cudaEventDestroy(g->ring[i].copied);
    if (g->ring[i].done != NULL)
      cudaEventDestroy(g->ring[i].done);
  }
  cudaFreeHost(g->hsum);
  cudaFree(g->dsum);
  cudaFree(g->buf[1]);
  cudaFree(g->buf[0]);
  if (g->compute != NULL)
    cudaStreamDestroy(g->compute);
  if (g->copy != NULL)
    cudaStreamDestroy(g->copy);
}

/*
 * 1 when e has completed, 0 when not yet, -1 on an error (said).  With
 * wait, it waits.
 */
static int
completed(cudaEvent_t e, int wait)
{
  cudaError_t r = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);

  if (r == cudaErrorNotReady)
    return 0;
  return cu(r, wait ? "cudaEventSynchronize" : "cudaEventQuery") < 0 ? -1 : 1;
}

/*
 * What can be done with step s now (with wait: once its work is over):
 * release its batch once its copy has completed, and check its sum once
 * its kernel has.  0, or -1 having said why.
 */
static int
step_finish(struct gpu *g, struct step *s, int wait)
{
  float ms;
  int r;

  if (s->batch != NULL) {
    if ((r = completed(s->copied, wait)) <= 0)
      return r;
    if (cu(cudaEventElapsedTime(&ms, s->start, s->copied),
           "cudaEventElapsedTime") < 0)
      return -1;
    g->copy_seconds += ms * 1e-3;
    /* The copy engine is done with the segment: a worker may refill it. */
    fl_batch_release(s->batch);
    s->batch = NULL;
  }
  if (s->result_pending) {
    if ((r = completed(s->done, wait)) <= 0)
      return r;
    s->result_pending = 0;
    if (g->hsum[s - g->ring] != s->expected) {
      fprintf(stderr, "feed_cuda: batch %zu reached the GPU altered: its "
              "samples' sum there is %llu, not %llu\n", s->seq,
              g->hsum[s - g->ring], s->expected);
      return -1;
    }
  }
  return 0;
}

/*
 * Step k of an epoch on batch b, which s holds from now on: the copy into
 * buf[k % 2] once step k - 2 is done with that buffer, then the kernel
 * once the copy is.  Serial (no overlap): the copy, a wait, the kernel, a
 * wait.  0, or -1 having said why.
 */
static int
step_start(struct gpu *g, struct step *s, fl_batch *b, size_t k,
           const struct fc_config *c)
{
  const size_t *idx = fl_batch_indices(b);
  size_t i, n = fl_batch_count(b);
  unsigned slot = (unsigned)(s - g->ring);
  void *dst = g->buf[k % 2];

  s->batch = b;
  s->seq = k;
  s->expected = 0;
  for (i = 0; i < n; i++)
    s->expected += FC_SAMPLE_SUM(FC_HEAD(idx[i]), FC_TAIL(idx[i]));
  if (k >= 2 &&
      cu(cudaStreamWaitEvent(g->copy, g->ring[(k - 2) % RING].done, 0),
         "cudaStreamWaitEvent") < 0)
    return -1;
  if (cu(cudaEventRecord(s->start, g->copy), "cudaEventRecord") < 0 ||
      cu(cudaMemcpyAsync(dst, fl_batch_data(b), n * c->sample_bytes,
                         cudaMemcpyHostToDevice, g->copy),
         "cudaMemcpyAsync") < 0 ||
      cu(cudaEventRecord(s->copied, g->copy), "cudaEventRecord") < 0)
    return -1;
  if (!c->overlap && step_finish(g, s, 1) < 0)
    return -1;
  if (cu(cudaStreamWaitEvent(g->compute, s->copied, 0),
         "cudaStreamWaitEvent") < 0 ||
      cu(fc_step_launch(dst, n, c->sample_bytes, c->step_ms,
                        &g->dsum[slot], g->compute),
         "the step's kernel launch") < 0 ||
      cu(cudaMemcpyAsync(&g->hsum[slot], &g->dsum[slot], sizeof(*g->hsum),
                         cudaMemcpyDeviceToHost, g->compute),
         "cudaMemcpyAsync") < 0 ||
      cu(cudaEventRecord(s->done, g->compute), "cudaEventRecord") < 0)
    return -1;
  s->result_pending = 1;
  return c->overlap ? 0 : step_finish(g, s, 1);
}

/*
 * One epoch, timed from its first fl_loader_next to its last step's end.
 * 0, or -1 having said why; the steps still in flight are the caller's.
 */
static int
epoch(fl_loader *l, struct gpu *g, const struct fc_config *c,
      const struct pins *pins, struct fc_result *r)
{
  double t0 = now();
  fl_stats st0, st;
  fl_batch *b;
  size_t k, j;
  int rc;

  g->copy_seconds = 0;
  if ((rc = fl_loader_stats(l, &st0)) < 0 || (rc = fl_loader_begin(l)) < 0)
    goto loader_failed;
  for (k = 0;; k++) {
    /* The ring's slot for step k holds step k - RING: finish it. */
    if (step_finish(g, &g->ring[k % RING], 1) < 0)
      return -1;
    while ((rc = fl_loader_next(l, &b)) < 0 && !fl_error_is_final(rc)) {
      /* A segment cudaHostRegister refused (FL_ENOMEM): its batch comes
         next, unpinned, and is copied from pageable memory. */
      fprintf(stderr, "feed_cuda: %s", fl_loader_error(l));
      if (rc == FL_ENOMEM && pins->pin_error != cudaSuccess)
        fprintf(stderr, " (cudaHostRegister: %s)",
                cudaGetErrorString(pins->pin_error));
      fputc('\n', stderr);
    }
    if (rc == 0)
      break;
    if (rc < 0)
      goto loader_failed;
    if (step_start(g, &g->ring[k % RING], b, k, c) < 0)
      return -1;
    /* Release the batches whose copies are done, oldest first. */
    for (j = k + 1 >= RING ? k + 1 - RING : 0; j <= k; j++)
      if (step_finish(g, &g->ring[j % RING], 0) < 0)
        return -1;
  }
  for (j = 0; j < RING; j++)
    if (step_finish(g, &g->ring[(k + j) % RING], 1) < 0)
      return -1;
  r->seconds = now() - t0;
  if ((rc = fl_loader_stats(l, &st)) < 0)
    goto loader_failed;
  r->batches = k;
  r->bytes = (uint64_t)k * c->batch_size * c->sample_bytes;
  r->copy_seconds = g->copy_seconds;
  r->wait_seconds = st.wait_seconds - st0.wait_seconds;
  return 0;

loader_failed:
  fprintf(stderr, "feed_cuda: %s: %s\n", fl_err_name(rc), fl_loader_error(l));
  return -1;
}

static void
print_epoch(unsigned e, const struct fc_result *r)
{
  printf("epoch %u: %zu batches, %.2f GB in %.3f s, %.3f ms a batch; "
         "copies at %.1f GB/s; waited %.3f s for the workers; %u segments "
         "pinned in %.3f s\n", e, r->batches, (double)r->bytes * 1e-9,
         r->seconds, r->batches ? r->seconds * 1e3 / (double)r->batches : 0,
         r->copy_seconds > 0 ? (double)r->bytes * 1e-9 / r->copy_seconds : 0,
         r->wait_seconds, r->pins, r->pin_seconds);
}

int
fc_run(const struct fc_config *c, struct fc_result *out)
{
  struct pins pins = {0, 0, cudaSuccess, cudaSuccess};
  struct fc_result r;
  fl_dataset ds;
  fl_options opt;
  fl_loader *l = NULL;
  struct gpu g;
  cudaError_t e;
  unsigned n, i;
  int status = -1;

  memset(&ds, 0, sizeof(ds));
  ds.ctx = (void *)c;
  ds.len = c->batches * c->batch_size;
  ds.sample_bytes = c->sample_bytes;
  ds.get = synth_get;
  fl_options_init(&opt);
  opt.batch_size = c->batch_size;
  opt.num_workers = c->workers;
  /* Persistent workers keep their segments, pinned, across epochs. */
  opt.persistent_workers = c->workers > 0;
  if (c->pin) {
    opt.pin_memory = 1;
    opt.pin = pin;
    opt.unpin = unpin;
    opt.pin_arg = &pins;
  }
  /* The workers are forked before any memory is pinned: a child of a
     process that pinned memory shares no pinned page with it, and never
     calls CUDA (a forked child must not). */
  memset(&g, 0, sizeof(g));
  if (fl_loader_create(&l, &ds, &opt) < 0) {
    fprintf(stderr, "feed_cuda: %s\n", fl_loader_error(NULL));
    goto out;
  }
  if (gpu_open(&g, c->batch_size * c->sample_bytes) < 0)
    goto out;
  for (n = 1; n <= c->epochs; n++) {
    unsigned n0 = pins.n;
    double s0 = pins.seconds;

    memset(&r, 0, sizeof(r));
    if (epoch(l, &g, c, &pins, &r) < 0)
      goto out;
    r.pins = pins.n - n0;
    r.pin_seconds = pins.seconds - s0;
    if (!c->quiet)
      print_epoch(n, &r);
  }
  *out = r;
  status = 0;
out:
  /* No copy may still read a segment when it is released or unmapped. */
  if ((e = cudaDeviceSynchronize()) != cudaSuccess)
    status = fc_cuda_failed("cudaDeviceSynchronize", e);
  for (i = 0; i < RING; i++)
    if (g.ring[i].batch != NULL)
      fl_batch_release(g.ring[i].batch);
  fl_loader_destroy(l);
  gpu_close(&g);
  if (pins.unpin_error != cudaSuccess)
    status = fc_cuda_failed("cudaHostUnregister", pins.unpin_error);
  return status;
}

/* A count of 1 or more into *out, or -1. */
static int
count(const char *s, size_t *out)
{
  unsigned long long v;
  char *end;

  errno = 0;
  v = strtoull(s, &end, 10);
  *out = (size_t)v;
  return s[0] >= '1' && s[0] <= '9' && *end == '\0' && errno == 0 &&
                 v == *out
             ? 0
             : -1;
}

/* 0, 1 for --help (said), or -1 having printed the usage. */
static int
parse_args(int argc, char **argv, struct fc_config *c, int *bench)
{
  static const struct option longs[] = {
      {"batch-size", required_argument, NULL, 'b'},
      {"sample-bytes", required_argument, NULL, 's'},
      {"batches", required_argument, NULL, 'n'},
      {"epochs", required_argument, NULL, 'e'},
      {"workers", required_argument, NULL, 'w'},
      {"step-ms", required_argument, NULL, 'k'},
      {"no-pin", no_argument, NULL, 'P'},
      {"no-overlap", no_argument, NULL, 'O'},
      {"bench", no_argument, NULL, 'B'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  static const char usage[] =
      "usage: feed_cuda [--batch-size N] [--sample-bytes N] [--batches N]\n"
      "         [--epochs N] [--workers N] [--step-ms MS] [--no-pin]\n"
      "         [--no-overlap] [--bench]\n";
  size_t v;
  char *end;
  int opt, bad = 0;

  while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    if (opt == 'b') {
      bad |= count(optarg, &c->batch_size);
    } else if (opt == 's') {
      bad |= count(optarg, &c->sample_bytes);
    } else if (opt == 'n') {
      bad |= count(optarg, &c->batches);
    } else if (opt == 'e') {
      bad |= count(optarg, &v) < 0 || v > 1000;
      c->epochs = (unsigned)v;
    } else if (opt == 'w') {
      /* 0 is allowed: the batches are then loaded in this process. */
      bad |= strcmp(optarg, "0") != 0 && (count(optarg, &v) < 0 || v > 64);
      c->workers = strcmp(optarg, "0") == 0 ? 0 : (unsigned)v;
    } else if (opt == 'k') {
      errno = 0;
      c->step_ms = strtod(optarg, &end);
      bad |= end == optarg || *end != '\0' || errno != 0 ||
             !(c->step_ms >= 0 && c->step_ms <= 60e3);
    } else if (opt == 'P') {
      c->pin = 0;
    } else if (opt == 'O') {
      c->overlap = 0;
    } else if (opt == 'B') {
      *bench = 1;
    } else if (opt == 'h') {
      fputs(usage, stdout);
      return 1;
    } else {
      bad = 1;
    }
  }
  if (c->sample_bytes % 8 != 0 || c->sample_bytes < 16) {
    fprintf(stderr, "feed_cuda: --sample-bytes must be a multiple of 8, "
            "16 or more: a sample begins and ends with its index\n");
    bad = 1;
  }
  /* A batch's bytes and the dataset's samples are products of these. */
  if (!bad && (__builtin_mul_overflow(c->batch_size, c->sample_bytes, &v) ||
               __builtin_mul_overflow(c->batch_size, c->batches, &v))) {
    fprintf(stderr, "feed_cuda: --batch-size %zu is too large for "
            "--sample-bytes %zu and --batches %zu\n", c->batch_size,
            c->sample_bytes, c->batches);
    bad = 1;
  }
  if (!bad && optind == argc)
    return 0;
  fputs(usage, stderr);
  return -1;
}

int
main(int argc, char **argv)
{
  /* 32 MiB batches, a step of 1 ms. */
  struct fc_config c = {64, 512 * 1024, 100, 2, 4, 1.0, 1, 1, 0};
  struct cudaDeviceProp prop;
  struct fc_result r;
  cudaError_t e;
  int bench = 0, n = 0, rc;

  if ((rc = parse_args(argc, argv, &c, &bench)) != 0)
    return rc > 0 ? 0 : 2;
  e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    fprintf(stderr, "feed_cuda: there is no CUDA device to feed here (%s), "
            "so nothing ran.\n", e != cudaSuccess ? cudaGetErrorString(e)
                                                  : "none found");
    return 77;
  }
  if (cu(cudaSetDevice(0), "cudaSetDevice") < 0 ||
      cu(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties") < 0)
    return 1;
  printf("feed_cuda: %s; batches of %zu x %zu bytes (%.1f MiB), %u "
         "worker%s\n", prop.name, c.batch_size, c.sample_bytes,
         (double)(c.batch_size * c.sample_bytes) / (1 << 20), c.workers,
         c.workers == 1 ? "" : "s");
  if (bench)
    return fc_bench(&c) < 0 ? 1 : 0;
  printf("%s, %s, a step of %.3f ms\n",
         c.pin ? "pinned by cudaHostRegister" : "not pinned (pageable)",
         c.overlap ? "copies overlapping the steps" : "copy, then step",
         c.step_ms);
  return fc_run(&c, &r) < 0 ? 1 : 0;
}
