/*
 * feed_cuda --bench (make bench-gpu): what pinned segments and overlapped
 * copies are worth on this GPU.
 *
 * First the host-to-device bandwidth of one batch, the median of COPIES
 * copies each timed from cudaMemcpyAsync to the end of its stream's sync:
 * from memory cudaMallocHost gave (what the link allows), from a forkload
 * segment pinned by the hooks, from one not pinned, and from malloc's
 * pageable memory.
 *
 * Then the overlap.  L is a batch's load and copy alone (the loop with a
 * step of 0 ms, per batch); for a step C of L / 2 and of 2 L, N batches
 * take, overlapped, about N max(L, C) at best, and serially N (L + C).
 * Each run times its second epoch, whose segments are already pinned.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <forkload.h>

#include "feed_cuda.h"

#define COPIES 15
#define WARM_COPIES 3

static double
now(void)
{
  struct timespec t;

  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int
by_value(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;

  return (x > y) - (x < y);
}

/* The median GB/s of COPIES copies of bytes from src: 0, or -1 (said). */
static int
h2d_rate(void *dev, const void *src, size_t bytes, cudaStream_t s,
         double *gbps)
{
  double t[COPIES], t0;
  cudaError_t e;
  int i;

  for (i = -WARM_COPIES; i < COPIES; i++) {
    t0 = now();
    e = cudaMemcpyAsync(dev, src, bytes, cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess)
      return fc_cuda_failed("cudaMemcpyAsync", e);
    if ((e = cudaStreamSynchronize(s)) != cudaSuccess)
      return fc_cuda_failed("cudaStreamSynchronize", e);
    if (i >= 0)
      t[i] = now() - t0;
  }
  qsort(t, COPIES, sizeof(t[0]), by_value);
  *gbps = (double)bytes * 1e-9 / t[COPIES / 2];
  return 0;
}

static int
pin(void *addr, size_t len, void *arg)
{
  (void)arg;
  if (cudaHostRegister(addr, len, cudaHostRegisterDefault) == cudaSuccess)
    return 0;
  (void)cudaGetLastError();
  return -1;
}

static void
unpin(void *addr, size_t len, void *arg)
{
  (void)len, (void)arg;
  cudaHostUnregister(addr);
}

static int
fill(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  (void)ctx;
  memset(dst, (int)(index & 0xff), *nbytes);
  return 0;
}

/* The rate from a batch of a forkload segment, pinned or not: 0, or -1. */
static int
segment_rate(const struct fc_config *c, int pinned, void *dev,
             cudaStream_t s, double *gbps)
{
  fl_dataset ds;
  fl_options opt;
  fl_loader *l = NULL;
  fl_batch *b = NULL;
  int rc = -1;

  memset(&ds, 0, sizeof(ds));
  ds.len = c->batch_size;
  ds.sample_bytes = c->sample_bytes;
  ds.get = fill;
  fl_options_init(&opt);
  opt.batch_size = c->batch_size;
  opt.num_workers = 1; /* a segment a worker made, as in training */
  opt.pin_memory = pinned;
  if (pinned) {
    opt.pin = pin;
    opt.unpin = unpin;
  }
  if (fl_loader_create(&l, &ds, &opt) < 0) {
    fprintf(stderr, "feed_cuda: %s\n", fl_loader_error(NULL));
    return -1;
  }
  if (fl_loader_begin(l) < 0 || fl_loader_next(l, &b) != 1) {
    fprintf(stderr, "feed_cuda: %s\n", fl_loader_error(l));
    goto out;
  }
  rc = h2d_rate(dev, fl_batch_data(b), fl_batch_count(b) * c->sample_bytes,
                s, gbps);
out:
  /* h2d_rate synchronized each copy: the batch may go. */
  fl_batch_release(b);
  fl_loader_destroy(l);
  return rc;
}

static int
bandwidth(const struct fc_config *c)
{
  static const char *const what[] = {
      "cudaMallocHost (the link's limit)", "forkload segment, pinned by "
      "the hooks", "forkload segment, not pinned", "malloc (pageable)"};
  size_t bytes = c->batch_size * c->sample_bytes;
  void *dev = NULL, *host = NULL, *pageable = NULL;
  double gbps[4];
  cudaStream_t s = NULL;
  cudaError_t e;
  int rc = -1, i;

  if ((e = cudaStreamCreate(&s)) != cudaSuccess ||
      (e = cudaMalloc(&dev, bytes)) != cudaSuccess) {
    fc_cuda_failed(s == NULL ? "cudaStreamCreate" : "cudaMalloc", e);
    goto out;
  }
  /* The segments first: their loaders fork while nothing is pinned. */
  if (segment_rate(c, 1, dev, s, &gbps[1]) < 0 ||
      segment_rate(c, 0, dev, s, &gbps[2]) < 0)
    goto out;
  if ((e = cudaMallocHost(&host, bytes)) != cudaSuccess) {
    fc_cuda_failed("cudaMallocHost", e);
    goto out;
  }
  if ((pageable = malloc(bytes)) == NULL) {
    fprintf(stderr, "feed_cuda: out of memory for %zu bytes\n", bytes);
    goto out;
  }
  /* Touched, so that no copy pays for the first faults. */
  memset(host, 1, bytes);
  memset(pageable, 1, bytes);
  if (h2d_rate(dev, host, bytes, s, &gbps[0]) < 0 ||
      h2d_rate(dev, pageable, bytes, s, &gbps[3]) < 0)
    goto out;
  printf("\nhost to device, one batch of %.1f MiB, median of %d copies:\n",
         (double)bytes / (1 << 20), COPIES);
  printf("  %-40s %8s %8s\n", "from", "GB/s", "of limit");
  for (i = 0; i < 4; i++)
    printf("  %-40s %8.1f %7.0f%%\n", what[i], gbps[i],
           100 * gbps[i] / gbps[0]);
  rc = 0;
out:
  free(pageable);
  cudaFreeHost(host);
  cudaFree(dev);
  if (s != NULL)
    cudaStreamDestroy(s);
  return rc;
}

/* The load and copy of a batch alone, and the copy's own time, in ms: 0,
   or -1. */
static int
load_ms(const struct fc_config *base, int pinned, double *ms, double *copy)
{
  struct fc_config c = *base;
  struct fc_result r;

  c.pin = pinned;
  c.overlap = 1;
  c.step_ms = 0;
  if (fc_run(&c, &r) < 0)
    return -1;
  *ms = r.seconds * 1e3 / (double)r.batches;
  *copy = r.copy_seconds * 1e3 / (double)r.batches;
  return 0;
}

/* A row of the overlap table: 0, or -1. */
static int
overlap_row(const struct fc_config *base, double step_ms, double load,
            int pinned, int overlapped)
{
  struct fc_config c = *base;
  struct fc_result r;
  double n = (double)c.batches, best, serial;

  c.step_ms = step_ms;
  c.pin = pinned;
  c.overlap = overlapped;
  if (fc_run(&c, &r) < 0)
    return -1;
  best = n * (load > step_ms ? load : step_ms) * 1e-3;
  serial = n * (load + step_ms) * 1e-3;
  printf("  %7.3f  %-10s %-10s %9.3f %12.3f %9.3f %8.0f%%\n", step_ms,
         pinned ? "pinned" : "pageable", overlapped ? "overlapped" : "serial",
         r.seconds, best, serial,
         serial > best ? 100 * (serial - r.seconds) / (serial - best) : 0);
  return 0;
}

int
fc_bench(const struct fc_config *base)
{
  struct fc_config c = *base;
  double lp, lu, cp, cu, step;
  int i;

  c.epochs = 2;
  c.quiet = 1;
  if (bandwidth(&c) < 0 || load_ms(&c, 1, &lp, &cp) < 0 ||
      load_ms(&c, 0, &lu, &cu) < 0)
    return -1;
  printf("\noverlap over %zu batches, %u workers: a batch's load and copy "
         "alone (L) takes %.3f ms pinned (the copy %.3f ms), %.3f ms "
         "pageable (the copy %.3f ms)\n", c.batches, c.workers, lp, cp, lu,
         cu);
  printf("  %7s  %-10s %-10s %9s %12s %9s %9s\n", "step ms", "memory",
         "copies", "total s", "N max(L,C)", "N (L+C)", "hidden");
  for (i = 0; i < 2; i++) {
    /* A step shorter than the load, then one longer. */
    step = i == 0 ? lp / 2 : 2 * lp;
    if (overlap_row(&c, step, lp, 1, 1) < 0 ||
        overlap_row(&c, step, lp, 1, 0) < 0 ||
        overlap_row(&c, step, lu, 0, 1) < 0)
      return -1;
  }
  printf("  (serial: copy, wait, step, wait, while the workers still load "
         "ahead; hidden: how much of the shorter of L and C the run hid, "
         "from N (L+C) down to N max(L,C))\n");
  return 0;
}
