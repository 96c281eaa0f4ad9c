/*
 * The softmax classifier of train_linear, data-parallel over MPI: one
 * process per rank, each with a forkload loader of its own that takes its
 * rank's share of every shuffled epoch (rank and world_size from
 * MPI_Comm_rank and MPI_Comm_size, as PyTorch's DistributedSampler), and
 * the gradients added up with MPI_Allreduce at every step, so that every
 * rank holds the same model.  The workers add a little noise to each
 * sample's features, drawn from fl_sample_seed(index): the same whichever
 * worker fills the sample, in a resumed run too.
 *
 * Rank 0 checkpoints the model, the counters and partial sums of the
 * epoch, and its loader's state (fl_loader_state_save).  A run resumed
 * from it on as many ranks prints the same losses as a run that never
 * stopped; on another number of ranks the rest of the epoch is split
 * among the new ranks.
 *
 * usage: mpirun -np W train_ddp [--epochs N] [--samples N]
 *          [--checkpoint FILE [--checkpoint-every STEPS]
 *          [--stop-after STEPS]] [--resume FILE] [--log-indices DIR]
 *
 * Each rank writes the dataset (the same on every rank) to a directory of
 * its own under $TMPDIR and removes it at the end.  Rank 0 prints one
 * line per epoch, "epoch E: loss L", E from 1.  --checkpoint writes FILE
 * every STEPS steps (default 100); --stop-after STEPS writes it after
 * that step and stops, as a preempted job would; --resume goes on from
 * one.  --log-indices appends each sample index a rank trained on to
 * DIR/epoch-E.rank-R, one a line, making DIR (0700) as mkdir -p would.  It exits 0, 1 when something failed
 * (the rank that failed says why), and 2 on bad usage.
 *
 * Against an installed forkload and Open MPI it builds with
 *   mpicc train_ddp.c softmax.c $(pkg-config --cflags --libs forkload) -lm
 */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fsync */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <forkload.h>
#include <mpi.h>

#include "softmax.h"

#define SAMPLES 4000
#define EPOCHS 8
#define BATCH 32 /* per rank */
#define EVERY 100
#define NOISE 0.1 /* of the augmentation, against unit noise in the data */
#define CKPT_MAGIC "FLDDP01\n"
#define CKPT_MAX 65536 /* the loader's state is a few hundred bytes */

struct config {
  uint64_t epochs, samples, every, stop_after; /* stop_after 0: never */
  const char *checkpoint, *resume, *log_dir;   /* NULL: none */
};

/* Where training stands, the same on every rank: its sums are over all
   ranks. */
struct progress {
  uint64_t step;  /* steps taken, over all epochs */
  uint64_t epoch; /* the epoch under way, from 0 */
  uint64_t seen;  /* its samples so far, padding included */
  double loss;    /* their summed loss */
};

/* A checkpoint file is this head, the model, then the loader's state.
   The head and the model are in this machine's byte order; the state is
   portable on its own. */
struct ckpt_head {
  char magic[8];
  struct progress p;
  uint32_t world;     /* the ranks that wrote it */
  uint32_t state_len; /* bytes of the loader's state */
};

struct trainer {
  const struct config *c;
  int rank, world;
  struct sm_data data;
  fl_dataset noisy; /* data.ds with the augmentation */
  fl_loader *l;
  struct model m;
  struct progress p;
  FILE *log; /* this epoch's index log, or NULL */
};

/* What the ranks add up at each step: the gradient sums, then these. */
enum { SUM_LOSS = K * D + K, SUM_SEEN, SUM_DONE, SUM_FAILED, NSUM };

/*
 * The dataset's get_batch with the augmentation, in the workers: each
 * feature gets Gaussian noise from a stream seeded by fl_sample_seed, a
 * function of the seed, the epoch and the index alone.
 */
static int
noisy_get_batch(void *ctx, const size_t *indices, size_t n, void *dst,
                size_t *nbytes)
{
  const fl_dataset *ds = ctx;
  float *x = ((void *const *)dst)[0];
  uint64_t state;
  size_t i;
  int j;

  if (ds->get_batch(ds->ctx, indices, n, dst, nbytes) != 0)
    return -1;
  for (i = 0; i < n; i++) {
    state = fl_sample_seed(indices[i]);
    for (j = 0; j < D; j++)
      x[i * D + j] += (float)(NOISE * sm_gaussian(&state));
  }
  return 0;
}

/* Whether ok is true on every rank. */
static int
all_ok(int ok)
{
  int all = 0;

  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all;
}

/* A count of 1 or more, or -1. */
static int
count(const char *s, uint64_t *out)
{
  char *end;

  errno = 0;
  *out = strtoull(s, &end, 10);
  return s[0] >= '1' && s[0] <= '9' && *end == '\0' && errno == 0 ? 0 : -1;
}

/* 0, or -1 having printed the usage (rank 0 only: all ranks parse). */
static int
parse_args(int argc, char **argv, struct config *c, int say)
{
  static const struct option longs[] = {
      {"epochs", required_argument, NULL, 'e'},
      {"samples", required_argument, NULL, 'n'},
      {"checkpoint", required_argument, NULL, 'c'},
      {"checkpoint-every", required_argument, NULL, 'k'},
      {"stop-after", required_argument, NULL, 's'},
      {"resume", required_argument, NULL, 'r'},
      {"log-indices", required_argument, NULL, 'l'},
      {NULL, 0, NULL, 0}};
  int opt, bad = 0;

  opterr = say;
  while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    if (opt == 'e')
      bad |= count(optarg, &c->epochs);
    else if (opt == 'n')
      bad |= count(optarg, &c->samples);
    else if (opt == 'k')
      bad |= count(optarg, &c->every);
    else if (opt == 's')
      bad |= count(optarg, &c->stop_after);
    else if (opt == 'c')
      c->checkpoint = optarg;
    else if (opt == 'r')
      c->resume = optarg;
    else if (opt == 'l')
      c->log_dir = optarg;
    else
      bad = 1;
  }
  /* Stopping only makes sense with a checkpoint to resume from. */
  if (!bad && optind == argc && (c->checkpoint != NULL || !c->stop_after))
    return 0;
  if (say)
    fprintf(stderr, "usage: mpirun -np W train_ddp [--epochs N] "
            "[--samples N]\n         [--checkpoint FILE "
            "[--checkpoint-every STEPS] [--stop-after STEPS]]\n"
            "         [--resume FILE] [--log-indices DIR]\n");
  return -1;
}

/* This rank's data and loader: 0, or -1 having said why. */
/*
 * Makes dir and its missing parents, as mkdir -p does, each 0700: the
 * logs say what a run trained on.  Ranks race here; a folder another
 * made first is fine.  0, or -1 having said why.
 */
static int
make_dirs(const char *dir, int rank)
{
  char path[PATH_MAX], *p;
  struct stat st;
  int last;

  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
    fprintf(stderr, "train_ddp: %s: the path is too long\n", dir);
    return -1;
  }
  for (p = path;; p++) {
    if ((*p != '/' && *p != '\0') || (*p == '/' && p == path))
      continue;
    last = *p == '\0';
    *p = '\0';
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
      fprintf(stderr, "train_ddp: rank %d: cannot make %s: %s\n", rank, path,
              strerror(errno));
      return -1;
    }
    if (last)
      break;
    *p = '/';
  }
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "train_ddp: rank %d: %s is not a directory\n", rank,
            dir);
    return -1;
  }
  return 0;
}

static int
setup(struct trainer *t)
{
  fl_options opt;

  if (t->c->log_dir != NULL && make_dirs(t->c->log_dir, t->rank) < 0)
    return -1;
  if (sm_data_open(&t->data, "train_ddp", NULL, t->c->samples) < 0)
    return -1;
  t->noisy = t->data.ds;
  t->noisy.ctx = &t->data.ds;
  t->noisy.get_fields = NULL;
  t->noisy.get_batch = noisy_get_batch;
  sm_options(&opt, BATCH);
  opt.rank = (unsigned)t->rank;
  opt.world_size = (unsigned)t->world;
  if (fl_loader_create(&t->l, &t->noisy, &opt) < 0) {
    fprintf(stderr, "train_ddp: rank %d: %s\n", t->rank,
            fl_loader_error(NULL));
    return -1;
  }
  return 0;
}

/*
 * Writes the checkpoint to path atomically: a temporary file in the same
 * directory, fsync, rename over the old one, then an fsync of the
 * directory so that the rename outlives a crash.  0, or -1 having said
 * why.
 */
static int
write_checkpoint(const char *path, const struct ckpt_head *h,
                 const struct model *m, const void *state)
{
  char tmp[PATH_MAX], dir[PATH_MAX], *slash;
  const char *what = tmp;
  FILE *f = NULL;
  int fd, dfd, err, rc = -1;

  if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp) {
    fprintf(stderr, "train_ddp: %s: the path is too long\n", path);
    return -1;
  }
  if ((fd = mkstemp(tmp)) < 0)
    goto out;
  if ((f = fdopen(fd, "wb")) == NULL)
    close(fd);
  else if (fwrite(h, sizeof(*h), 1, f) == 1 &&
           fwrite(m, sizeof(*m), 1, f) == 1 &&
           fwrite(state, 1, h->state_len, f) == h->state_len &&
           fflush(f) == 0 && fsync(fileno(f)) == 0)
    rc = 0;
  if (f != NULL && fclose(f) != 0)
    rc = -1;
  if (rc == 0 && rename(tmp, path) != 0) {
    what = path;
    rc = -1;
  }
  if (rc < 0) {
    err = errno;
    unlink(tmp);
    errno = err;
    goto out;
  }
  snprintf(dir, sizeof dir, "%s", path);
  slash = strrchr(dir, '/');
  if (slash == NULL)
    snprintf(dir, sizeof dir, ".");
  else
    slash[slash == dir] = '\0'; /* "/ckpt" is in "/" */
  what = dir;
  if ((dfd = open(dir, O_RDONLY | O_DIRECTORY)) < 0 || fsync(dfd) != 0)
    rc = -1;
  if (dfd >= 0)
    close(dfd);
out:
  if (rc < 0)
    fprintf(stderr, "train_ddp: checkpoint %s: %s\n", what, strerror(errno));
  return rc;
}

/* Rank 0 writes a checkpoint, and every rank hears whether it did: 0, or
   -1. */
static int
checkpoint(struct trainer *t)
{
  static unsigned char state[CKPT_MAX];
  struct ckpt_head h;
  int n, ok = 1;

  if (t->rank == 0) {
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, CKPT_MAGIC, sizeof(h.magic));
    h.p = t->p;
    h.world = (uint32_t)t->world;
    if ((n = fl_loader_state_save(t->l, state, sizeof(state))) < 0) {
      fprintf(stderr, "train_ddp: fl_loader_state_save: %s\n",
              fl_strerror(n));
      ok = 0;
    } else {
      h.state_len = (uint32_t)n;
      ok = write_checkpoint(t->c->checkpoint, &h, &t->m, state) == 0;
    }
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return ok ? 0 : -1;
}

/* Rank 0 reads the file whole into buf: its length, or -1 having said
   why. */
static long
read_checkpoint(const char *path, unsigned char *buf, size_t cap)
{
  FILE *f = fopen(path, "rb");
  size_t n = 0;
  int rc = -1;

  if (f != NULL) {
    n = fread(buf, 1, cap, f);
    if (!ferror(f) && n < cap)
      rc = 0;
    else if (!ferror(f))
      errno = EFBIG;
    fclose(f);
  }
  if (rc < 0) {
    fprintf(stderr, "train_ddp: %s: %s\n", path, strerror(errno));
    return -1;
  }
  return (long)n;
}

/* Rank 0 prints the epoch's line; the next epoch starts from nothing. */
static void
end_epoch(struct trainer *t)
{
  if (t->rank == 0)
    printf("epoch %llu: loss %.6f\n", (unsigned long long)t->p.epoch + 1,
           t->p.loss / (double)t->p.seen);
  t->p.epoch++;
  t->p.seen = 0;
  t->p.loss = 0;
}

/*
 * Every rank takes the checkpoint rank 0 read: the model, the progress
 * and rank 0's loader state, whatever the world was.  An epoch whose last
 * step was checkpointed ended there: its line is printed now.  0, or -1.
 */
static int
resume(struct trainer *t)
{
  static unsigned char buf[CKPT_MAX];
  struct ckpt_head h;
  long n = 0;
  int ok;

  if (t->rank == 0)
    n = read_checkpoint(t->c->resume, buf, sizeof(buf));
  MPI_Bcast(&n, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  if (n < 0)
    return -1;
  MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
  if ((size_t)n >= sizeof(h))
    memcpy(&h, buf, sizeof(h));
  ok = (size_t)n >= sizeof(h) &&
       memcmp(h.magic, CKPT_MAGIC, sizeof(h.magic)) == 0 &&
       (size_t)n == sizeof(h) + sizeof(t->m) + h.state_len;
  if (!ok && t->rank == 0)
    fprintf(stderr, "train_ddp: %s: not a checkpoint of this program\n",
            t->c->resume);
  if (ok && fl_loader_state_load(t->l, buf + sizeof(h) + sizeof(t->m),
                                 h.state_len) < 0) {
    fprintf(stderr, "train_ddp: rank %d: %s: %s\n", t->rank, t->c->resume,
            fl_loader_error(t->l));
    ok = 0;
  }
  if (!all_ok(ok))
    return -1;
  memcpy(&t->m, buf + sizeof(h), sizeof(t->m));
  t->p = h.p;
  if (t->rank == 0)
    printf("resumed from %s: step %llu, epoch %llu, saved by %u rank(s), "
           "now %d\n", t->c->resume, (unsigned long long)h.p.step,
           (unsigned long long)h.p.epoch + 1, h.world, t->world);
  /* The state then starts the next epoch. */
  if (fl_loader_epoch(t->l) != t->p.epoch)
    end_epoch(t);
  return 0;
}

/*
 * One step on every rank at once.  b is this rank's batch, NULL when its
 * epoch is over or when failed; the ranks add up their gradient sums,
 * losses and samples, and how many are done or failed, in one
 * MPI_Allreduce, and every rank applies the same update.  1: a step
 * taken, 0: the epoch is over on every rank, -1: a rank failed (it said
 * why).
 */
static int
step(struct trainer *t, const fl_batch *b, int failed)
{
  double sum[NSUM] = {0};
  struct model g = {{{0}}, {0}};
  size_t n = b != NULL ? fl_batch_count(b) : 0, right = 0;
  int k, j;

  if (b != NULL && sm_grad(&t->m, fl_batch_field(b, 0), fl_batch_field(b, 1),
                           n, &g, &sum[SUM_LOSS], &right) < 0) {
    fprintf(stderr, "train_ddp: rank %d: a label is not 0 to %d\n", t->rank,
            K - 1);
    failed = 1;
  }
  for (k = 0; k < K; k++) {
    for (j = 0; j < D; j++)
      sum[k * D + j] = g.w[k][j];
    sum[K * D + k] = g.b[k];
  }
  sum[SUM_SEEN] = (double)n;
  sum[SUM_DONE] = b == NULL && !failed;
  sum[SUM_FAILED] = failed;
  MPI_Allreduce(MPI_IN_PLACE, sum, NSUM, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (sum[SUM_FAILED] > 0)
    return -1;
  if (sum[SUM_DONE] == t->world)
    return 0;
  if (sum[SUM_DONE] > 0) {
    /* Equal shares keep the ranks in step: this would be a bug. */
    if (t->rank == 0)
      fprintf(stderr, "train_ddp: %.0f of %d ranks ran out of batches "
              "before the others\n", sum[SUM_DONE], t->world);
    return -1;
  }
  for (k = 0; k < K; k++) {
    for (j = 0; j < D; j++)
      g.w[k][j] = (float)sum[k * D + j];
    g.b[k] = (float)sum[K * D + k];
  }
  sm_apply(&t->m, &g, (size_t)sum[SUM_SEEN]);
  t->p.loss += sum[SUM_LOSS];
  t->p.seen += (uint64_t)sum[SUM_SEEN];
  t->p.step++;
  return 1;
}

/* Appends the batch's indices to the epoch's log: 0, or -1. */
static int
log_indices(struct trainer *t, const fl_batch *b)
{
  const size_t *idx = fl_batch_indices(b);
  size_t i;

  for (i = 0; i < fl_batch_count(b); i++)
    if (fprintf(t->log, "%zu\n", idx[i]) < 0)
      return -1;
  return 0;
}

/* Begins the epoch and opens its log: 0, or -1 having said why. */
static int
begin(struct trainer *t)
{
  char path[PATH_MAX];
  int rc;

  if ((rc = fl_loader_begin(t->l)) < 0) {
    fprintf(stderr, "train_ddp: rank %d: %s\n", t->rank,
            fl_loader_error(t->l));
    return -1;
  }
  if (t->c->log_dir == NULL)
    return 0;
  snprintf(path, sizeof path, "%s/epoch-%llu.rank-%d", t->c->log_dir,
           (unsigned long long)t->p.epoch + 1, t->rank);
  if ((t->log = fopen(path, "a")) == NULL) {
    fprintf(stderr, "train_ddp: %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* Closes the epoch's log: 0, or -1 having said why. */
static int
end_log(struct trainer *t)
{
  int rc = 0;

  if (t->log != NULL && fclose(t->log) != 0) {
    fprintf(stderr, "train_ddp: rank %d: an index log: %s\n", t->rank,
            strerror(errno));
    rc = -1;
  }
  t->log = NULL;
  return rc;
}

/*
 * The epochs from where t stands: 0 when all are done or after a stop,
 * -1 when a rank failed.
 */
static int
train(struct trainer *t)
{
  const struct config *c = t->c;
  fl_batch *b;
  int rc, r, failed;

  while (t->p.epoch < c->epochs) {
    if (!all_ok(begin(t) == 0))
      return -1;
    do {
      /* A rank that fails says so in the step, so that none waits. */
      b = NULL;
      failed = 0;
      if ((rc = fl_loader_next(t->l, &b)) < 0) {
        fprintf(stderr, "train_ddp: rank %d: %s: %s\n", t->rank,
                fl_err_name(rc), fl_loader_error(t->l));
        failed = 1;
      } else if (rc == 1 && t->log != NULL && log_indices(t, b) < 0) {
        fprintf(stderr, "train_ddp: rank %d: an index log: %s\n", t->rank,
                strerror(errno));
        failed = 1;
      }
      r = step(t, failed ? NULL : b, failed);
      fl_batch_release(b);
      if (r > 0 && c->checkpoint != NULL &&
          (t->p.step % c->every == 0 || t->p.step == c->stop_after)) {
        if (checkpoint(t) < 0)
          r = -1;
        else if (t->p.step == c->stop_after) {
          if (t->rank == 0)
            printf("stopped after step %llu: checkpoint in %s\n",
                   (unsigned long long)t->p.step, c->checkpoint);
          return end_log(t);
        }
      }
    } while (r > 0);
    if (!all_ok(end_log(t) == 0) || r < 0)
      return -1;
    end_epoch(t);
  }
  return 0;
}

int
main(int argc, char **argv)
{
  struct config c = {EPOCHS, SAMPLES, EVERY, 0, NULL, NULL, NULL};
  struct trainer t = {0};
  int status = 1;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &t.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t.world);
  t.c = &c;
  if (parse_args(argc, argv, &c, t.rank == 0) < 0) {
    status = 2;
    goto out;
  }
  if (!all_ok(setup(&t) == 0))
    goto out;
  if (t.rank == 0)
    printf("data: %llu samples of %d features in %d classes; %d rank(s), "
           "batches of %d per rank\n", (unsigned long long)c.samples, D, K,
           t.world, BATCH);
  if (c.resume != NULL && resume(&t) < 0)
    goto out;
  if (train(&t) == 0)
    status = 0;
out:
  /* The workers go before MPI does. */
  end_log(&t);
  fl_loader_destroy(t.l);
  sm_data_close(&t.data);
  MPI_Finalize();
  return status;
}
