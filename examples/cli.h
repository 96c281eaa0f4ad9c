/*
 * Declarations shared by the files of the forkload command, grouped by the
 * file that defines them.
 */
#ifndef FORKLOAD_CLI_H
#define FORKLOAD_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "forkload.h"

/* forkload.c */
void usage(int status) __attribute__((noreturn));
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* synthetic.c: the dataset and the checks of what a loader delivers. */
struct synth {
  size_t samples;
  size_t sample_bytes;
  unsigned delay_us; /* slept per get, or per get_batch */
};

/* The indices a sampler gives, before any shuffle: first + k*step. */
struct synth_span {
  size_t first, step, count;
};

struct synth_check {
  const struct synth *data;
  struct synth_span span;
  size_t batch_size;
  size_t nbatches;     /* batches in an epoch */
  size_t expect;       /* samples in an epoch, after drop_last */
  int shuffle, in_order;
  unsigned char *seen; /* per span position, this epoch */
  size_t got;          /* samples delivered this epoch */
  size_t batches;      /* batches delivered this epoch */
  unsigned epoch;
};

void synth_dataset(struct synth *s, int batched, fl_dataset *ds);
void synth_worker_init(unsigned id, void *arg);
int synth_check_init(struct synth_check *c, const struct synth *data,
                     const struct synth_span *span, const fl_options *opt);
void synth_check_begin(struct synth_check *c);
int synth_check_batch(struct synth_check *c, const fl_batch *b, char *why,
                      size_t len);
int synth_check_end(struct synth_check *c, char *why, size_t len);
void synth_check_free(struct synth_check *c);

/* progress.c */
struct tally {
  uint64_t batches, samples, bytes;
  uint64_t checksum; /* the first value of every sample, summed */
};

struct progress {
  int on;        /* drawing at all */
  int shown;     /* a line is on the terminal */
  double start;  /* when the run began */
  double drawn;  /* when the line was last drawn */
};

double cli_now(void);
double cli_rate(double amount, double seconds);
void progress_init(struct progress *p, int wanted);
void progress_draw(struct progress *p, unsigned epoch, unsigned epochs,
                   size_t done, size_t total, const struct tally *t);
void progress_clear(struct progress *p);

/* run.c */
int run_main(int argc, char **argv);

#endif /* FORKLOAD_CLI_H */
