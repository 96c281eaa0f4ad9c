/*
 * The GPU side of examples/feed_cuda: a stand-in for a training step that
 * reads the batch just copied and then holds the GPU for a set time, so
 * that a step's length is a flag and not a model.  nvcc compiles this file
 * alone; the host program is C and calls fc_step_launch.
 *
 * What it reads is each sample's first and last 8 bytes, which the
 * example's dataset sets from the sample's index: their sum, written to
 * *sum, tells the host whether the batch that reached the GPU is the one
 * it took from the loader, whole, and not a mix of two (feed_cuda.h,
 * FC_SAMPLE_SUM).
 */
#include <cuda_runtime.h>

#include "feed_cuda.h"

#define THREADS 256

/* Nanoseconds of the GPU's global timer, which runs at a fixed rate
   whatever the clocks (unlike clock64). */
static __device__ unsigned long long
now_ns(void)
{
  unsigned long long t;

  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __global__ void
step(const unsigned char *batch, size_t count, size_t sample_bytes,
     unsigned long long ns, unsigned long long *sum)
{
  __shared__ unsigned long long part[THREADS];
  unsigned long long t0 = now_ns(), s = 0;
  size_t i;
  unsigned k;

  for (i = threadIdx.x; i < count; i += THREADS) {
    const unsigned char *p = batch + i * sample_bytes;

    s += FC_SAMPLE_SUM(*(const unsigned long long *)p,
                       *(const unsigned long long *)(p + sample_bytes - 8));
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (k = THREADS / 2; k > 0; k /= 2) {
    if (threadIdx.x < k)
      part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x != 0)
    return;
  *sum = part[0];
  /* The rest of the step's time: one thread spins, as a kernel would
     compute; the copy engine meanwhile is free for the next batch. */
  while (now_ns() - t0 < ns)
    ;
}

/* A launch says nothing itself: cudaGetLastError tells, once cleared of
   what an earlier call left there (the host checks each call's own
   result, so nothing it has not seen is lost). */
extern "C" int
fc_step_launch(const void *batch, size_t count, size_t sample_bytes,
               double ms, unsigned long long *sum, cudaStream_t stream)
{
  (void)cudaGetLastError();
  step<<<1, THREADS, 0, stream>>>((const unsigned char *)batch, count,
                                  sample_bytes,
                                  (unsigned long long)(ms * 1e6), sum);
  return (int)cudaGetLastError();
}
