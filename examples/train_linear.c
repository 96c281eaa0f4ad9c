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
 * The data and the model are in softmax.c, which train_ddp shares.
 * Against an installed forkload it builds with
 *   cc train_linear.c softmax.c $(pkg-config --cflags --libs forkload) -lm
 */
#define _POSIX_C_SOURCE 200809L /* getopt */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <forkload.h>

#include "softmax.h"

#define SAMPLES 4000
#define EPOCHS 8
#define BATCH 64
#define LOSS_BOUND 0.5

struct config {
  size_t samples;
  fl_sharing sharing;
  const char *dir; /* NULL: a temporary directory */
};

/* One SGD step on the batch's mean cross-entropy, as sm_grad counts. */
static int
step(struct model *m, const float *x, const int64_t *y, size_t n,
     double *loss, size_t *right)
{
  struct model g = {{{0}}, {0}};

  if (sm_grad(m, x, y, n, &g, loss, right) < 0)
    return -1;
  sm_apply(m, &g, n);
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

int
main(int argc, char **argv)
{
  struct config c = {SAMPLES, FL_SHARE_FILE_DESCRIPTOR, NULL};
  struct model m = {{{0}}, {0}};
  struct sm_data d;
  fl_loader *l = NULL;
  fl_options opt;
  fl_stats st = {0};
  double loss = 0, accuracy;
  int e, status = 1;

  if (parse_args(argc, argv, &c) < 0)
    return 2;
  if (sm_data_open(&d, "train_linear", c.dir, c.samples) < 0)
    goto out;
  printf("data: %zu samples of %d features in %d classes: X.npy '<f4' of "
         "shape (%zu, %d), y.npy '<i8' of shape (%zu,)\n", c.samples, D, K,
         c.samples, D, c.samples);
  sm_options(&opt, BATCH);
  opt.sharing = c.sharing;
  if (fl_loader_create(&l, &d.ds, &opt) < 0) {
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
  sm_data_close(&d);
  return status;
}
