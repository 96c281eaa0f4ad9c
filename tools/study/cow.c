/*
 * The forkload side of `make study`'s copy-on-write experiment: a dataset
 * of about 1 GB held in the parent's memory as one malloc'd array, as a
 * C program would hold it, read for one epoch by forked workers whose
 * get() copies each sample out of the array into its batch.  When the
 * epoch is over, with the persistent workers still alive, it prints one
 * JSON line with its pid, so that the driver can read /proc/PID/smaps_rollup
 * of the parent and of each worker, and waits for standard input to close.
 *
 *     cow WORKERS SAMPLES
 *
 * Samples are 12,288 bytes (forkload's default, a float32 3x32x32 image),
 * in batches of 64 with prefetch 2 and the fd strategy (memfd), as PyTorch's
 * side of the experiment (tools/study/torch_side.py cow) loads them.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <forkload.h>

#define SAMPLE_BYTES 12288

struct array {
  unsigned char *bytes;
  size_t len;
};

static int
array_get(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  const struct array *a = ctx;

  if (index >= a->len) {
    fl_worker_error("index %zu is past the end (%zu)", index, a->len);
    return -1;
  }
  memcpy(dst, a->bytes + index * SAMPLE_BYTES, SAMPLE_BYTES);
  *nbytes = SAMPLE_BYTES;
  return 0;
}

/* Every byte written, so that all of the array is resident in the parent
   before the workers fork; sample i starts with the float i, which the
   epoch's checksum reads back. */
static unsigned char *
fill(size_t samples)
{
  unsigned char *bytes = malloc(samples * SAMPLE_BYTES);
  size_t i;

  if (bytes == NULL)
    return NULL;
  for (i = 0; i < samples; i++) {
    float first = (float)i;

    memset(bytes + i * SAMPLE_BYTES, (int)(i & 0xff), SAMPLE_BYTES);
    memcpy(bytes + i * SAMPLE_BYTES, &first, sizeof first);
  }
  return bytes;
}

int
main(int argc, char **argv)
{
  struct array a = {0};
  fl_dataset ds;
  fl_options opt;
  fl_loader *l = NULL;
  fl_batch *b;
  double checksum = 0, want;
  int rc, c;

  if (argc != 3 || atoi(argv[1]) < 1 || atol(argv[2]) < 1) {
    fprintf(stderr, "usage: cow WORKERS SAMPLES\n");
    return 2;
  }
  a.len = (size_t)atol(argv[2]);
  if ((a.bytes = fill(a.len)) == NULL) {
    fprintf(stderr, "cow: cannot allocate %zu samples\n", a.len);
    return 1;
  }
  memset(&ds, 0, sizeof ds);
  ds.ctx = &a;
  ds.len = a.len;
  ds.sample_bytes = SAMPLE_BYTES;
  ds.get = array_get;
  fl_options_init(&opt);
  opt.batch_size = 64;
  opt.num_workers = (unsigned)atoi(argv[1]);
  opt.prefetch_factor = 2;
  opt.persistent_workers = 1; /* alive after the epoch, to be measured */
  if ((rc = fl_loader_create(&l, &ds, &opt)) < 0 ||
      (rc = fl_loader_begin(l)) < 0)
    goto fail;
  while ((rc = fl_loader_next(l, &b)) > 0) {
    const unsigned char *p = fl_batch_data(b);
    size_t i, n = fl_batch_count(b);

    for (i = 0; i < n; i++) {
      float first;

      memcpy(&first, p + i * SAMPLE_BYTES, sizeof first);
      checksum += first;
    }
    fl_batch_release(b);
  }
  if (rc < 0)
    goto fail;
  want = (double)a.len * (double)(a.len - 1) / 2;
  if (checksum != want) {
    fprintf(stderr, "cow: checksum %.0f, expected %.0f\n", checksum, want);
    fl_loader_destroy(l);
    free(a.bytes);
    return 1;
  }
  printf("{\"pid\":%ld,\"samples\":%zu}\n", (long)getpid(), a.len);
  fflush(stdout);
  while ((c = getchar()) != EOF)
    ;
  fl_loader_destroy(l);
  free(a.bytes);
  return 0;

fail:
  fprintf(stderr, "cow: %s: %s\n", fl_err_name(rc), fl_loader_error(l));
  fl_loader_destroy(l);
  free(a.bytes);
  return 1;
}
