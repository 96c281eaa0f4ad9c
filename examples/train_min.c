/*
 * A minimal training loop over forkload: a linear model fitted by SGD to a
 * synthetic regression dataset whose samples are computed from their index
 * in two persistent worker processes.  It prints the mean loss of each
 * epoch and, at the end, how long the loop waited for data.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <forkload.h>

#define DIM 8
#define NSAMPLES 8192
#define EPOCHS 3
#define LEARNING_RATE 0.02f

struct sample {
  float x[DIM];
  float y;
};

struct synth {
  size_t len;
};

/* The weights the model should find; the last one is the bias. */
static const float true_w[DIM + 1] = {0.5f, -1.0f, 2.0f, 0.25f,
                                      -0.75f, 1.5f, -2.0f, 1.0f, 0.3f};

/* A uniform number in [-1, 1) from a splitmix64 stream. */
static float
uniform(uint64_t *state)
{
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return (float)(z >> 40) / (float)(1 << 23) - 1.0f;
}

/*
 * Sample `index`: random inputs and a linear target, from the index, and
 * noise on the target drawn anew each epoch (an augmentation), from
 * fl_sample_seed: whichever worker fills the sample, and after a resume,
 * it comes out the same.
 */
static int
synth_get(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  const struct synth *d = ctx;
  struct sample *s = dst;
  uint64_t state = index, noise = fl_sample_seed(index);
  size_t j;

  if (index >= d->len) {
    fl_worker_error("index %zu is past the end (%zu)", index, d->len);
    return -1;
  }
  s->y = true_w[DIM];
  for (j = 0; j < DIM; j++) {
    s->x[j] = uniform(&state);
    s->y += true_w[j] * s->x[j];
  }
  s->y += 0.01f * uniform(&noise);
  *nbytes = sizeof(*s);
  return 0;
}

/* One SGD step on the batch's mean squared error; returns its summed loss. */
static double
sgd_step(float *w, const struct sample *s, size_t n)
{
  float grad[DIM + 1] = {0};
  double loss = 0;
  size_t i, j;

  for (i = 0; i < n; i++) {
    float err = w[DIM] - s[i].y;

    for (j = 0; j < DIM; j++)
      err += w[j] * s[i].x[j];
    loss += 0.5 * (double)err * err;
    for (j = 0; j < DIM; j++)
      grad[j] += err * s[i].x[j];
    grad[DIM] += err;
  }
  for (j = 0; j <= DIM; j++)
    w[j] -= LEARNING_RATE * grad[j] / (float)n;
  return loss;
}

int
main(void)
{
  struct synth synth = {NSAMPLES};
  fl_dataset ds;
  fl_options opt;
  fl_loader *l = NULL;
  fl_batch *b;
  fl_stats st;
  float w[DIM + 1] = {0};
  int epoch, r;

  memset(&ds, 0, sizeof(ds));
  ds.ctx = &synth;
  ds.len = synth.len;
  ds.sample_bytes = sizeof(struct sample);
  ds.get = synth_get;

  fl_options_init(&opt);
  opt.batch_size = 32;
  opt.shuffle = 1;
  opt.seed = 1;
  opt.num_workers = 2;
  opt.persistent_workers = 1;

  if ((r = fl_loader_create(&l, &ds, &opt)) < 0) {
    /* There is no loader: fl_loader_error(NULL) says why. */
    fprintf(stderr, "train_min: %s: %s\n", fl_err_name(r),
            fl_loader_error(NULL));
    return 1;
  }
  for (epoch = 1; epoch <= EPOCHS; epoch++) {
    double loss = 0;
    size_t seen = 0;

    if ((r = fl_loader_begin(l)) < 0)
      goto fail;
    while ((r = fl_loader_next(l, &b)) != 0) {
      size_t n;

      if (r < 0 && fl_error_is_final(r))
        goto fail;
      if (r < 0) {
        /* One batch failed (a bad sample): train on the others. */
        fprintf(stderr, "train_min: skipped: %s\n", fl_loader_error(l));
        continue;
      }
      n = fl_batch_count(b);
      loss += sgd_step(w, fl_batch_data(b), n);
      seen += n;
      fl_batch_release(b);
    }
    printf("epoch %d: loss %.6g over %zu samples\n", epoch,
           seen ? loss / (double)seen : 0.0, seen);
  }
  if ((r = fl_loader_stats(l, &st)) < 0)
    goto fail;
  printf("waited %.3f s for data over %llu batches\n", st.wait_seconds,
         (unsigned long long)st.batches_delivered);
  fl_loader_destroy(l);
  return 0;

fail:
  fprintf(stderr, "train_min: %s: %s\n", fl_err_name(r), fl_loader_error(l));
  fl_loader_destroy(l);
  return 1;
}
