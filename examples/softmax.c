/*
 * The softmax classifier and its dataset, shared by train_linear and
 * train_ddp (see softmax.h): writing and opening the .npy files, and the
 * two halves of an SGD step.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "softmax.h"

/* The class means are Gaussian, SPREAD apart per feature on average, and
   the features add unit Gaussian noise to them: that leaves some rows
   near another class's mean, so the loss cannot reach 0, but a linear
   model still goes well below 0.5 (guessing scores log 4, 1.39). */
#define SPREAD 0.7

double
sm_uniform(uint64_t *state)
{
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return ((double)(z >> 11) + 0.5) * 0x1p-53;
}

double
sm_gaussian(uint64_t *state)
{
  double r = sqrt(-2 * log(sm_uniform(state)));

  return r * cos(6.283185307179586 * sm_uniform(state));
}

/*
 * The version 1.0 .npy header of an array of descr and shape (n, cols),
 * or (n,) when cols is 0, padded with spaces to a newline so that the data
 * starts at a multiple of 64, as numpy.save writes it.  `forkload gen` has
 * the general one: the examples keep their own so that they build from
 * their own files.
 */
static size_t
npy_header(char *buf, const char *descr, size_t n, int cols)
{
  char shape[48];
  size_t len, total;

  if (cols > 0)
    snprintf(shape, sizeof shape, "(%zu, %d)", n, cols);
  else
    snprintf(shape, sizeof shape, "(%zu,)", n);
  len = (size_t)snprintf(buf + 10, 118, "{'descr': '%s', 'fortran_order': "
                         "False, 'shape': %s, }", descr, shape);
  total = (10 + len + 1 + 63) / 64 * 64;
  memset(buf + 10 + len, ' ', total - 10 - len - 1);
  buf[total - 1] = '\n';
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)((total - 10) & 0xff);
  buf[9] = (char)((total - 10) >> 8);
  return total;
}

/* Opens path and writes its header: the stream, or NULL. */
static FILE *
npy_open(const char *path, const char *descr, size_t n, int cols)
{
  char head[128];
  size_t len = npy_header(head, descr, n, cols);
  FILE *f = fopen(path, "wb");

  if (f != NULL && fwrite(head, 1, len, f) != len) {
    fclose(f);
    return NULL;
  }
  return f;
}

/* Writes the dataset to x and y: 0, or -1 having said why. */
static int
write_dataset(const char *prog, const char *xpath, const char *ypath,
              size_t samples)
{
  const int little = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
  float mean[K][D], row[D];
  uint64_t state = SEED;
  const char *failed = xpath;
  FILE *x, *y = NULL;
  int64_t label;
  size_t i;
  int k, j, rc = -1;

  for (k = 0; k < K; k++)
    for (j = 0; j < D; j++)
      mean[k][j] = (float)(SPREAD * sm_gaussian(&state));
  x = npy_open(xpath, little ? "<f4" : ">f4", samples, D);
  if (x != NULL) {
    failed = ypath;
    y = npy_open(ypath, little ? "<i8" : ">i8", samples, 0);
  }
  for (i = 0; y != NULL && i < samples; i++) {
    k = (int)(sm_uniform(&state) * K);
    for (j = 0; j < D; j++)
      row[j] = mean[k][j] + (float)sm_gaussian(&state);
    label = k;
    failed = xpath;
    if (fwrite(row, sizeof row, 1, x) != 1)
      break;
    failed = ypath;
    if (fwrite(&label, sizeof label, 1, y) != 1)
      break;
  }
  if (y != NULL && i == samples)
    rc = 0;
  if (x != NULL && fclose(x) != 0)
    rc = -1;
  if (y != NULL && fclose(y) != 0)
    rc = -1;
  if (rc < 0)
    fprintf(stderr, "%s: %s: %s\n", prog, failed, strerror(errno));
  return rc;
}

/* The directory of the dataset: dir (made if need be), or a new one under
   $TMPDIR, which d->made says to remove.  0, or -1 having said why. */
static int
place(struct sm_data *d, const char *prog, const char *dir)
{
  const char *tmp = getenv("TMPDIR");

  if (dir != NULL) {
    snprintf(d->dir, PATH_MAX, "%s", dir);
    if (mkdir(d->dir, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "%s: %s: %s\n", prog, d->dir, strerror(errno));
      return -1;
    }
  } else {
    snprintf(d->dir, PATH_MAX, "%s/%s.XXXXXX",
             tmp != NULL && *tmp != '\0' ? tmp : "/tmp", prog);
    if (mkdtemp(d->dir) == NULL) {
      fprintf(stderr, "%s: %s: %s\n", prog, d->dir, strerror(errno));
      return -1;
    }
    d->made = 1;
  }
  if (snprintf(d->x, PATH_MAX, "%s/X.npy", d->dir) >= PATH_MAX ||
      snprintf(d->y, PATH_MAX, "%s/y.npy", d->dir) >= PATH_MAX) {
    fprintf(stderr, "%s: %s: the path is too long\n", prog, d->dir);
    return -1;
  }
  return 0;
}

int
sm_data_open(struct sm_data *d, const char *prog, const char *dir,
             size_t samples)
{
  const char *paths[2] = {d->x, d->y};

  memset(d, 0, sizeof(*d));
  if (place(d, prog, dir) < 0 || write_dataset(prog, d->x, d->y, samples) < 0)
    return -1;
  if (fl_dataset_npy_zip(&d->ds, paths, 2) < 0) {
    /* There is no dataset: fl_loader_error(NULL) says why. */
    fprintf(stderr, "%s: %s\n", prog, fl_loader_error(NULL));
    return -1;
  }
  d->opened = 1;
  /* Rows of D floats and one label each, whatever the files say:
     sm_grad reads them so. */
  if (d->ds.field_bytes[0] != sizeof(float) * D ||
      d->ds.field_bytes[1] != sizeof(int64_t)) {
    fprintf(stderr, "%s: %s: fields of %zu and %zu bytes, not %zu and "
            "%zu\n", prog, d->dir, d->ds.field_bytes[0],
            d->ds.field_bytes[1], sizeof(float) * D, sizeof(int64_t));
    return -1;
  }
  return 0;
}

void
sm_data_close(struct sm_data *d)
{
  if (d->opened)
    fl_dataset_close(&d->ds);
  if (d->made) {
    unlink(d->x);
    unlink(d->y);
    rmdir(d->dir);
  }
  d->opened = d->made = 0;
}

void
sm_options(fl_options *opt, size_t batch)
{
  fl_options_init(opt);
  opt->batch_size = batch;
  opt->shuffle = 1;
  opt->seed = SEED;
  opt->num_workers = 2;
  opt->persistent_workers = 1;
}

int
sm_grad(const struct model *m, const float *x, const int64_t *y, size_t n,
        struct model *g, double *loss, size_t *right)
{
  float p[K], top, sum, gk;
  const float *row;
  size_t i;
  int k, j, c, best;

  for (i = 0; i < n; i++) {
    row = x + i * D;
    if (y[i] < 0 || y[i] >= K)
      return -1;
    c = (int)y[i];
    for (k = 0, best = 0; k < K; k++) {
      p[k] = m->b[k];
      for (j = 0; j < D; j++)
        p[k] += m->w[k][j] * row[j];
      best = p[k] > p[best] ? k : best;
    }
    /* The largest logit is subtracted so that expf cannot overflow. */
    for (k = 0, top = p[best], sum = 0; k < K; k++)
      sum += p[k] = expf(p[k] - top);
    *loss -= log(p[c] / sum);
    *right += best == c;
    for (k = 0; k < K; k++) {
      gk = p[k] / sum - (k == c);
      g->b[k] += gk;
      for (j = 0; j < D; j++)
        g->w[k][j] += gk * row[j];
    }
  }
  return 0;
}

void
sm_apply(struct model *m, const struct model *g, size_t n)
{
  int k, j;

  for (k = 0; k < K; k++) {
    m->b[k] -= LEARNING_RATE * g->b[k] / (float)n;
    for (j = 0; j < D; j++)
      m->w[k][j] -= LEARNING_RATE * g->w[k][j] / (float)n;
  }
}
