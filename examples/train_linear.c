/*
 * A softmax-regression classifier trained in plain C on .npy files that
 * forkload reads: the way a C training program uses the library on data
 * kept in files, inputs and labels apart, as numpy users keep them.
 *
 * It first writes its dataset: X.npy, a '<f4' array of shape (SAMPLES, D),
 * each row D features drawn around the mean of its class, and y.npy, the
 * classes, 0 to K - 1, a '<i8' array of shape (SAMPLES,).
 * fl_dataset_npy_zip maps both as one dataset of two fields; a loader with
 * 2 persistent workers shuffles it into batches of 64 each epoch, and each
 * batch comes as two arrays, the inputs (fl_batch_field 0) and the labels
 * (fl_batch_field 1), with no copy; SGD fits the weights.  Everything is
 * seeded, so every run prints the same losses.
 *
 * usage: train_linear [-n SAMPLES] [-s fd|fs] [DIR]
 *
 * Without DIR the files are written in a new directory under $TMPDIR (or
 * /tmp) and removed at the end; with DIR (made if it does not exist) they
 * are written there and kept.  It exits 0 when the last epoch's mean loss
 * is below LOSS_BOUND, 1 when it is not or something failed, and 2 on bad
 * usage.
 *
 * Against an installed forkload it builds with
 *   cc train_linear.c $(pkg-config --cflags --libs forkload) -lm
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, getopt */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <forkload.h>

#define K 4  /* classes */
#define D 16 /* features */
#define SAMPLES 4000
#define EPOCHS 8
#define BATCH 64
#define LEARNING_RATE 0.1f
#define SEED 42
/* The class means are Gaussian, SPREAD apart per feature on average, and
   the features add unit Gaussian noise to them: that leaves some rows
   near another class's mean, so the loss cannot reach 0, but a linear
   model still goes well below LOSS_BOUND (guessing scores log 4, 1.39). */
#define SPREAD 0.7
#define LOSS_BOUND 0.5

struct config {
  size_t samples;
  fl_sharing sharing;
  const char *dir; /* NULL: a temporary directory */
};

struct model {
  float w[K][D];
  float b[K];
};

/* A splitmix64 stream: uniform in (0, 1), and Gaussian by Box-Muller. */
static double
uniform(uint64_t *state)
{
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return ((double)(z >> 11) + 0.5) * 0x1p-53;
}

static double
gaussian(uint64_t *state)
{
  double r = sqrt(-2 * log(uniform(state)));

  return r * cos(6.283185307179586 * uniform(state));
}

/*
 * The version 1.0 .npy header of an array of descr and shape (n, cols),
 * or (n,) when cols is 0, padded with spaces to a newline so that the data
 * starts at a multiple of 64, as numpy.save writes it.  `forkload gen` has
 * the general one: this example keeps its own so that it builds from this
 * one file.
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
write_dataset(const char *xpath, const char *ypath, size_t samples)
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
      mean[k][j] = (float)(SPREAD * gaussian(&state));
  x = npy_open(xpath, little ? "<f4" : ">f4", samples, D);
  if (x != NULL) {
    failed = ypath;
    y = npy_open(ypath, little ? "<i8" : ">i8", samples, 0);
  }
  for (i = 0; y != NULL && i < samples; i++) {
    k = (int)(uniform(&state) * K);
    for (j = 0; j < D; j++)
      row[j] = mean[k][j] + (float)gaussian(&state);
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
    fprintf(stderr, "train_linear: %s: %s\n", failed, strerror(errno));
  return rc;
}

/*
 * One SGD step on the batch's mean cross-entropy: n rows of D features at
 * x, their classes at y.  Adds the batch's summed loss and its right
 * predictions, both from before the step, to *loss and *right.  Returns 0,
 * or -1 when a class is not one of the K: then the files are not what
 * write_dataset wrote.
 */
static int
step(struct model *m, const float *x, const int64_t *y, size_t n,
     double *loss, size_t *right)
{
  float gw[K][D] = {{0}}, gb[K] = {0}, p[K], top, sum, g;
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
      g = p[k] / sum - (k == c);
      gb[k] += g;
      for (j = 0; j < D; j++)
        gw[k][j] += g * row[j];
    }
  }
  for (k = 0; k < K; k++) {
    m->b[k] -= LEARNING_RATE * gb[k] / (float)n;
    for (j = 0; j < D; j++)
      m->w[k][j] -= LEARNING_RATE * gw[k][j] / (float)n;
  }
  return 0;
}

/*
 * One epoch: its mean loss and accuracy.  A batch that fails (a bad
 * sample) is skipped with a word; an error after which the loader cannot
 * go on ends the run.  0, or -1 having said why.
 */
static int
epoch(fl_loader *l, struct model *m, double *loss, double *accuracy)
{
  fl_batch *b;
  size_t seen = 0, right = 0;
  double sum = 0;
  int rc, bad = 0;

  if ((rc = fl_loader_begin(l)) < 0)
    goto out;
  while (!bad && (rc = fl_loader_next(l, &b)) != 0) {
    if (rc < 0 && fl_error_is_final(rc))
      goto out;
    if (rc < 0) {
      fprintf(stderr, "train_linear: skipped: %s\n", fl_loader_error(l));
      continue;
    }
    /* Field 0 is a ready (n, D) array of inputs, field 1 the labels. */
    bad = step(m, fl_batch_field(b, 0), fl_batch_field(b, 1),
               fl_batch_count(b), &sum, &right) < 0;
    seen += fl_batch_count(b);
    fl_batch_release(b);
  }
  *loss = seen > 0 ? sum / (double)seen : 0;
  *accuracy = seen > 0 ? (double)right / (double)seen : 0;
out:
  if (rc < 0)
    fprintf(stderr, "train_linear: %s: %s\n", fl_err_name(rc),
            fl_loader_error(l));
  if (bad)
    fprintf(stderr, "train_linear: a label is not 0 to %d\n", K - 1);
  return rc < 0 || bad ? -1 : 0;
}

/* 0, or -1 having printed the usage. */
static int
parse_args(int argc, char **argv, struct config *c)
{
  char *end;
  int opt, bad = 0;

  while ((opt = getopt(argc, argv, "n:s:")) != -1) {
    if (opt == 'n') {
      errno = 0;
      c->samples = strtoul(optarg, &end, 10);
      bad |= optarg[0] < '1' || optarg[0] > '9' || *end != '\0' ||
             errno != 0;
    } else if (opt == 's') {
      c->sharing = strcmp(optarg, "fs") == 0 ? FL_SHARE_FILE_SYSTEM
                                             : FL_SHARE_FILE_DESCRIPTOR;
      bad |= strcmp(optarg, "fs") != 0 && strcmp(optarg, "fd") != 0;
    } else {
      bad = 1;
    }
  }
  c->dir = optind < argc ? argv[optind] : NULL;
  if (!bad && optind + 1 >= argc)
    return 0;
  fprintf(stderr, "usage: train_linear [-n SAMPLES] [-s fd|fs] [DIR]\n");
  return -1;
}

/* The directory of the dataset: c->dir (made if need be), or a new one
   under $TMPDIR, which *made says to remove.  0, or -1 having said why. */
static int
place(const struct config *c, char *dir, int *made, char *x, char *y)
{
  const char *tmp = getenv("TMPDIR");

  *made = 0;
  if (c->dir != NULL) {
    snprintf(dir, PATH_MAX, "%s", c->dir);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "train_linear: %s: %s\n", dir, strerror(errno));
      return -1;
    }
  } else {
    snprintf(dir, PATH_MAX, "%s/train_linear.XXXXXX",
             tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
      fprintf(stderr, "train_linear: %s: %s\n", dir, strerror(errno));
      return -1;
    }
    *made = 1;
  }
  if (snprintf(x, PATH_MAX, "%s/X.npy", dir) >= PATH_MAX ||
      snprintf(y, PATH_MAX, "%s/y.npy", dir) >= PATH_MAX) {
    fprintf(stderr, "train_linear: %s: the path is too long\n", dir);
    return -1;
  }
  return 0;
}

int
main(int argc, char **argv)
{
  struct config c = {SAMPLES, FL_SHARE_FILE_DESCRIPTOR, NULL};
  char dir[PATH_MAX] = "", x[PATH_MAX] = "", y[PATH_MAX] = "";
  const char *paths[2] = {x, y};
  struct model m = {{{0}}, {0}};
  fl_dataset ds;
  fl_loader *l = NULL;
  fl_options opt;
  fl_stats st = {0};
  double loss = 0, accuracy;
  int e, made = 0, opened = 0, status = 1;

  if (parse_args(argc, argv, &c) < 0)
    return 2;
  if (place(&c, dir, &made, x, y) < 0 || write_dataset(x, y, c.samples) < 0)
    goto out;
  printf("data: %zu samples of %d features in %d classes: X.npy '<f4' of "
         "shape (%zu, %d), y.npy '<i8' of shape (%zu,)\n", c.samples, D, K,
         c.samples, D, c.samples);
  if (fl_dataset_npy_zip(&ds, paths, 2) < 0) {
    /* There is no dataset: fl_loader_error(NULL) says why. */
    fprintf(stderr, "train_linear: %s\n", fl_loader_error(NULL));
    goto out;
  }
  opened = 1;
  /* Rows of D floats and one label each, whatever the files say: step()
     reads them so. */
  if (ds.field_bytes[0] != sizeof(float) * D ||
      ds.field_bytes[1] != sizeof(int64_t)) {
    fprintf(stderr, "train_linear: %s: fields of %zu and %zu bytes, not "
            "%zu and %zu\n", dir, ds.field_bytes[0], ds.field_bytes[1],
            sizeof(float) * D, sizeof(int64_t));
    goto out;
  }
  fl_options_init(&opt);
  opt.batch_size = BATCH;
  opt.shuffle = 1;
  opt.seed = SEED;
  opt.num_workers = 2;
  opt.persistent_workers = 1;
  opt.sharing = c.sharing;
  if (fl_loader_create(&l, &ds, &opt) < 0) {
    fprintf(stderr, "train_linear: %s\n", fl_loader_error(NULL));
    goto out;
  }
  for (e = 1; e <= EPOCHS; e++) {
    if (epoch(l, &m, &loss, &accuracy) < 0)
      goto out;
    printf("epoch %d: loss %.4f, accuracy %.3f\n", e, loss, accuracy);
  }
  if (fl_loader_stats(l, &st) == 0)
    printf("waited %.3f s for data over %d epochs\n", st.wait_seconds,
           EPOCHS);
  status = loss < LOSS_BOUND ? 0 : 1;
  printf("final loss %.4f %s %.1f: %s\n", loss, status ? ">=" : "<",
         LOSS_BOUND, status ? "the model did not learn" : "ok");
out:
  fl_loader_destroy(l);
  if (opened)
    fl_dataset_close(&ds);
  if (made) {
    unlink(x);
    unlink(y);
    rmdir(dir);
  }
  return status;
}
