/*
 * The softmax classifier and its dataset, shared by train_linear (one
 * process) and train_ddp (data-parallel over MPI): the .npy files it
 * writes and opens with fl_dataset_npy_zip, the model, and the SGD step
 * split in two (a batch's gradient sums, then the update) so that ranks
 * can add up their sums between the two.
 */
#ifndef SOFTMAX_H
#define SOFTMAX_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <forkload.h>

#define K 4  /* classes */
#define D 16 /* features */
#define SEED 42
#define LEARNING_RATE 0.1f

/* The weights, or a batch's gradient sums, which have the same shape. */
struct model {
  float w[K][D];
  float b[K];
};

/* The two .npy files and the dataset that reads them. */
struct sm_data {
  char dir[PATH_MAX], x[PATH_MAX], y[PATH_MAX];
  int made;   /* dir is a temporary one, removed by sm_data_close */
  int opened; /* ds is to be closed */
  fl_dataset ds;
};

/* A splitmix64 stream: uniform in (0, 1), and Gaussian by Box-Muller. */
double sm_uniform(uint64_t *state);
double sm_gaussian(uint64_t *state);

/*
 * Writes X.npy, a '<f4' array of shape (samples, D), each row D features
 * drawn around the mean of its class, and y.npy, the classes, a '<i8'
 * array of shape (samples,), the same for the same samples on every run.
 * They go in dir (made if it does not exist), or with dir NULL in a new
 * directory under $TMPDIR (or /tmp).  Then opens them as d->ds, a dataset
 * of two fields.  0, or -1 having said why after "prog: ".  Either way
 * sm_data_close(d) undoes what was done.
 */
int sm_data_open(struct sm_data *d, const char *prog, const char *dir,
                 size_t samples);
/* Closes the dataset, after its loaders are destroyed, and removes a
   temporary directory with its files. */
void sm_data_close(struct sm_data *d);
/* The loader both examples use: batches of batch, shuffled from SEED, by
   2 persistent workers. */
void sm_options(fl_options *opt, size_t batch);

/*
 * Adds the gradient sums of the mean cross-entropy of n rows of D
 * features at x, their classes at y, to *g, and their summed loss and
 * right predictions to *loss and *right.  Returns 0, or -1 when a class is
 * not one of the K: then the files are not what sm_data_open wrote.
 */
int sm_grad(const struct model *m, const float *x, const int64_t *y,
            size_t n, struct model *g, double *loss, size_t *right);
/* One SGD step: m -= LEARNING_RATE * g / n, g summed over n samples. */
void sm_apply(struct model *m, const struct model *g, size_t n);

#endif /* SOFTMAX_H */
