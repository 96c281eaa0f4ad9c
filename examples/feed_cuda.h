/*
 * What examples/feed_cuda's files share: the run's settings, what a run
 * measured, the loop (feed_cuda.c), the benchmark (feed_cuda_bench.c) and
 * the kernel's launcher (feed_cuda_kernel.cu, the one C++ file, compiled
 * by nvcc; everything else is C).
 */
#ifndef FEED_CUDA_H
#define FEED_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Sample i of the example's dataset begins and ends with 8 bytes that say
 * i: FC_HEAD(i) and FC_TAIL(i).  A step adds FC_SAMPLE_SUM over its batch,
 * on the GPU, and the host the same over the indices it took: a batch that
 * reached the GPU refilled in part, or another batch's, gives another sum.
 */
#define FC_HEAD(i) ((unsigned long long)(i))
#define FC_TAIL(i) ((unsigned long long)(i) * 0x9e3779b97f4a7c15ULL)
#define FC_SAMPLE_SUM(head, tail) ((head) + 3 * (tail))

struct fc_config {
  size_t batch_size;   /* samples a batch */
  size_t sample_bytes; /* a multiple of 8, at least 16 */
  size_t batches;      /* an epoch's */
  unsigned epochs;
  unsigned workers;
  double step_ms;      /* the kernel's time per batch */
  int pin;             /* pin_memory through cudaHostRegister */
  int overlap;         /* copy batch k + 1 while step k runs */
  int quiet;           /* no line per epoch (the benchmark's runs) */
};

/* The last epoch of a run. */
struct fc_result {
  size_t batches;
  uint64_t bytes;
  double seconds;      /* first fl_loader_next to the last step's end */
  double copy_seconds; /* the copies' own time, from their events */
  double wait_seconds; /* fl_loader_next waiting for the workers */
  unsigned pins;       /* segments pinned during the epoch */
  double pin_seconds;  /* in cudaHostRegister */
};

/* A CUDA call that failed: say which, with CUDA's words; returns -1. */
int fc_cuda_failed(const char *call, cudaError_t e);

/* One run of c's loop: 0 and *out, or -1 having said why. */
int fc_run(const struct fc_config *c, struct fc_result *out);

/* --bench: the bandwidth and overlap tables; 0, or -1 having said why. */
int fc_bench(const struct fc_config *c);

/* Enqueue one step on stream: cudaSuccess or its error, as an int. */
int fc_step_launch(const void *batch, size_t count, size_t sample_bytes,
                   double ms, unsigned long long *sum, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
