/*
 * Declarations shared by the files of the forkload command, grouped by the
 * file that defines them.
 */
#ifndef FORKLOAD_CLI_H
#define FORKLOAD_CLI_H

#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "forkload.h"

/* forkload.c */
/* A subcommand, as main() dispatches it and its --help shows it (tmux's
   cmd_entry): the text and the table of its options sit side by side in
   its file, so that the one follows the other. */
struct cli_command {
  const char *name;
  const char *usage;               /* its synopsis, a line or more */
  const char *help;                /* what it does, and its own options */
  const struct option *options;    /* its own options, for getopt_long */
  int (*main)(int argc, char **argv);
};

/* The overview of every subcommand: on stdout and exit 0, or on stderr
   and exit status. */
void usage(int status) __attribute__((noreturn));
/* Prints the lines of a synopsis, the first after "usage: " if first. */
void cli_print_usage(FILE *f, const char *lines, int first);
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *cli_loader_error(const fl_loader *l, int rc);

/* fl_options.log of run and exhaust: each warning of the library on
   stderr, after "forkload: warning: ", a progress line cleared first.  A
   warning that the call at hand also returns (an unpinned segment) is its
   caller's to say, once per run (cli_pin_warning). */
struct cli_log {
  const fl_loader *loader; /* once created, or NULL */
  struct progress *pg;     /* a progress line to clear first, or NULL */
};
void cli_log(void *arg, const char *msg);
/* Whether rc of fl_loader_next is a batch kept at the fd, /dev/shm or
   memory limit (vm.max_map_count's too; real or injected): not final, and
   it comes with a later call. */
int cli_kept(int rc);
/* Whether rc of fl_loader_next is a poisoned batch, one whose filling
   killed its worker twice: then 1, and *seq its place in the epoch (the
   library names it only in its message). */
int cli_poisoned(const fl_loader *l, int rc, uint64_t *seq);

/* --pin-memory past RLIMIT_MEMLOCK: fl_loader_next returns FL_ENOMEM
   (FL_EPERM under a limit of 0) once for each segment it cannot lock, and
   hands that batch out with the next call. */
struct cli_pin {
  int said;            /* the warning was printed */
  int last;            /* the call before was such a warning */
  struct progress *pg; /* a progress line to clear first, or NULL */
};
/* Takes each result of fl_loader_next: 1 when rc is that warning, which is
   printed once per run; 0 when rc is a batch, the end or an error. */
int cli_pin_warning(struct cli_pin *w, const fl_loader *l,
                    const fl_options *opt, int rc);
/* Makes room for one more element in *v, which holds n of size bytes:
   0, or -1 when out of memory (*v is then unchanged). */
int cli_grow(void **v, size_t n, size_t size);
/* Prints s as a JSON string, or null. */
void cli_json_string(const char *s);
/* Formats why (len bytes) and returns -1: the checks' way to fail. */
int cli_fail(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* synthetic.c: the dataset and the check of each sample's content.
   `forkload gen` writes its content to files, which --verify checks. */
#define SYNTH_MAX_FIELDS 32 /* as many as the library takes */

struct synth {
  size_t samples;
  size_t sample_bytes; /* with fields, their sum */
  size_t nfields;      /* 0: one field of sample_bytes, as fl_dataset's */
  size_t field_bytes[SYNTH_MAX_FIELDS];
  unsigned delay_us; /* slept per get, or per get_batch */
  uint64_t seed;     /* keys the content with the index */
};

/* The indices a sampler gives, before any shuffle: first + k*step. */
struct synth_span {
  size_t first, step, count;
};

void synth_dataset(struct synth *s, int batched, fl_dataset *ds);
/* splitmix64's finaliser, which keys the content: every input bit
   reaches every output bit. */
uint64_t synth_mix64(uint64_t x);
/* The fields of a sample, 1 without fields, and the bytes of field f. */
size_t synth_nfields(const struct synth *s);
size_t synth_field_bytes(const struct synth *s, size_t f);
/* Writes field f of sample index to dst. */
void synth_fill(const struct synth *s, size_t index, size_t f, void *dst);
/* Token g of the stream that `gen tokens` cuts into shards (GPT-2's
   vocabulary, below 50257), keyed by the seed. */
uint16_t synth_token(uint64_t seed, uint64_t g);
/* "1024 bytes", or "21 bytes in 3 fields of 12,8,1", in buf. */
const char *synth_sizes(const struct synth *s, char *buf, size_t len);
void synth_worker_init(unsigned id, void *arg);
/* Checks the size and content of every field of sample i of b against
   its index: 0, or -1 with why set. */
/* The offset of the first byte of field f of sample index at src that is
   not the dataset's, or the field's size when all are. */
size_t synth_mismatch(const struct synth *s, size_t index, size_t f,
                      const unsigned char *src);
int synth_check_sample(const struct synth *s, const fl_batch *b, size_t i,
                       char *why, size_t len);

/* verify.c: --verify's reference, the batches an in-process loader with
   the run's order options (and a dataset that only gives indices) hands
   out, each by its fl_batch_seq, and the checks of the run's batches
   against it. */
struct ref_epoch {
  uint64_t epoch;
  size_t nbatches; /* seqs 0 .. nbatches - 1 */
  size_t *start;   /* per seq: where its indices begin in idx */
  size_t *count;   /* per seq: how many; 0 for a seq the epoch lacks */
  size_t *idx;
  size_t nidx, cap;
};

/* verify_stream.c: --verify over a stream of `gen webdataset`'s shards. */
struct dataset_spec;
struct verify_stream {
  const struct dataset_spec *spec; /* NULL: not a stream */
  uint64_t seed;
  unsigned rank, world;
  size_t nf, keyf, binf, clsf; /* the fields; SIZE_MAX: not asked for */
  size_t *keys, nkeys, cap;    /* this rank's shards' keys, sorted */
  unsigned char *seen;         /* per key: come this epoch */
  size_t came, bin_bytes;
  uint64_t epoch;
};

struct verify {
  const struct synth *data;
  const fl_dataset *images; /* --dataset images: labels checked instead */
  size_t tokens_seq;        /* --dataset tokens: its seq_len, windows
                               checked instead; 0 otherwise */
  struct synth_span span;
  fl_options opt;       /* the order's options, without workers */
  const void *state;    /* --resume's state, until its epoch begins */
  size_t state_len;
  struct ref_epoch ref; /* the epoch under way */
  int began;            /* ref holds it */
  int resumed;          /* -1: no resume; 0: the resumed batches are the
                           uninterrupted run's; 1: an elastic split */
  uint64_t resumed_at;  /* the first seq the resumed epoch had left */
  unsigned char *got;   /* per seq of ref: handed out */
  unsigned char *seen;  /* per span position: come this epoch */
  uint64_t due;         /* in order: the seq that comes next */
  /* The content check of sample i of b, chosen at each epoch's begin. */
  int (*check)(const struct verify *v, const fl_batch *b, size_t i,
               char *why, size_t len);
  struct verify_stream stream; /* a stream's checks instead of the above */
};

/* The most samples --verify checks: its reference epoch is 900 MB then. */
#define VERIFY_MAX_SAMPLES 100000000ull

/* 0, or FL_ENOMEM.  state (len bytes, NULL without --resume) must stay
   until the run's first epoch has begun. */
int verify_init(struct verify *v, const struct synth *data,
                const struct synth_span *span, const fl_options *opt,
                const void *state, size_t len);
/* Each returns 0, or -1 with why set: the loader began epoch; b came; the
   epoch ended; the run's state, saved (len bytes), resumes exactly the
   batches the run has not handed out. */
int verify_begin(struct verify *v, uint64_t epoch, char *why, size_t len);
int verify_batch(struct verify *v, const fl_batch *b, char *why, size_t len);
/* The batch of seq came poisoned (its filling killed its worker twice):
   it holds its place, once, and its samples are not due this epoch. */
int verify_poisoned(struct verify *v, uint64_t seq, char *why, size_t len);
int verify_end(struct verify *v, char *why, size_t len);
int verify_saved(struct verify *v, const void *state, size_t len, char *why,
                 size_t whylen);
void verify_free(struct verify *v);
/* A stream is checked by its keys: adds the __key__ field to d unless it
   has it (0, or -1 when it has no room for one more field). */
int verify_stream_spec(struct dataset_spec *d);
/* v checks the stream of d (this rank's shards of opt) from here on. */
void verify_stream_init(struct verify *v, const struct dataset_spec *d,
                        const fl_options *opt, uint64_t seed);
/* As verify_begin, verify_batch and verify_end, which call them. */
int verify_stream_begin(struct verify_stream *s, uint64_t epoch, char *why,
                        size_t len);
int verify_stream_batch(struct verify_stream *s, const fl_batch *b,
                        char *why, size_t len);
int verify_stream_end(const struct verify_stream *s, char *why, size_t len);
void verify_stream_free(struct verify_stream *s);

/* state.c: --resume reads FILE whole into *buf (the caller frees it): 0,
   or the exit status having said why not.  --save-state: state_dir_ok
   says, before the run, whether FILE's directory takes files (0, or -1
   having said why not); state_write writes it atomically (0, or -1
   having said why not, with FILE as it was). */
int state_read(const char *path, void **buf, size_t *len);
int state_dir_ok(const char *path);
int state_write(const char *path, const void *buf, size_t len);

/* progress.c */
struct tally {
  uint64_t batches, samples, bytes;
  uint64_t checksum; /* the first value of every sample, summed */
  uint64_t poisoned; /* batches whose filling killed their worker twice */
  uint64_t kept;     /* calls that found the batch due kept at a limit */
  int interrupted;   /* the signal that ended the run early, or 0 */
  int stopped;       /* --stop-after ended it */
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

/* dataset.c: --dataset SPEC, a dataset the library reads from files. */
enum ds_kind {
  DS_SYNTHETIC,
  DS_NPY_DIR,
  DS_NPY,
  DS_RAW,
  DS_NPY_ZIP,
  DS_IMAGES,
  DS_TOKENS,
  DS_LMDB,
  DS_WEBDATASET
};

struct dataset_spec {
  enum ds_kind kind;
  const char *spec; /* as given */
  char *path;       /* npy-zip: its paths, each ended by a '\0' */
  size_t record_bytes, header_bytes; /* raw only */
  size_t lmdb_max;                   /* lmdb only: MAX_BYTES */
  const char *paths[SYNTH_MAX_FIELDS]; /* npy-zip, tokens: in path */
  size_t npaths;
  size_t seq_len; /* tokens only */
  const fl_image_options *io; /* images only: the --image-* flags */
  /* webdataset only: its shards (in path), its extensions and their
     maxima (in path too) */
  const char **shards;
  size_t nshards, nexts;
  const char *exts[SYNTH_MAX_FIELDS];
  size_t max_bytes[SYNTH_MAX_FIELDS];
};

/* The kind named by the len bytes at name, or -1. */
int dataset_kind(const char *name, size_t len);
const char *dataset_kind_name(enum ds_kind kind);
/* Cuts list, of paths separated by commas, into paths (room for
   SYNTH_MAX_FIELDS), putting a '\0' in place of each comma: returns how
   many, or 0 when one is empty or there are too many. */
size_t dataset_split(char *list, const char **paths);
/* 0, or -1 having printed one line naming --dataset. */
int dataset_parse(const char *spec, struct dataset_spec *out);
/* 0, or -1 having printed why the library could not open it. */
int dataset_open(const struct dataset_spec *spec, fl_dataset *ds);
/* The same for an iterable kind (webdataset). */
int dataset_open_iterable(const struct dataset_spec *spec, fl_iterable *it);
void dataset_spec_free(struct dataset_spec *spec);

/* gen_atomic.c: each target of `forkload gen` is written at path, in a
   sibling TARGET.gen-XXXXXX that gen_out_open makes, and renamed into
   place by gen_out_place only when whole; gen_out_close removes the
   sibling, with what is left in it: the old target, or on a failure the
   new one.  Each returns 0, or -1 having said why not. */
struct gen_out {
  char *target; /* as given, without a trailing '/' */
  char *tmp;    /* the sibling, once made */
  char *path;   /* tmp/new: the file or directory (made) to write */
  char *old;    /* tmp/old: where --force moves the target aside */
  int dir;      /* the target is a directory */
  int placed;   /* how it was put in place (gen_atomic.c) */
  int keep;     /* the old target could not be put back: keep tmp */
};

int gen_out_open(struct gen_out *o, const char *target, int dir);
/* All n targets, or none (a failure puts back those put in place, and a
   signal caught since cli_catch_signals stops any from being): without
   force an existing file or non-empty directory is refused; with force
   it is replaced, a file by a file and a directory by a directory. */
int gen_out_place(struct gen_out *o, size_t n, int force);
int gen_out_close(struct gen_out *o, size_t n);
/* gen_webdataset.c: `forkload gen webdataset` into the directory dir, a
   sample at a time through buf (sample_bytes): 0, or -1 having said why
   not; adds the bytes written to *bytes. */
int gen_webdataset(const char *dir, const struct synth *data,
                   unsigned shards, unsigned char *buf, char *what,
                   size_t len, uint64_t *bytes);
/* gen_images.c: `forkload gen images` into the directory dir: 0, or -1
   having said why not. */
int gen_images(const char *dir, size_t samples, unsigned classes,
               uint64_t seed, char *what, size_t len, uint64_t *bytes);
/* gen_lmdb.c: `forkload gen lmdb` into the directory dir: 0, or -1
   having said why not. */
int gen_lmdb(const char *dir, const struct synth *data, unsigned char *buf,
             char *what, size_t len, uint64_t *bytes);

/* options.c: the options of the dataset and the loader, which run,
   doctor and exhaust share, take the values below OPT_OWN. */
enum {
  OPT_SAMPLES = 256, /* past every short option */
  OPT_SAMPLE_BYTES,
  OPT_DELAY_US,
  OPT_BATCHED,
  OPT_INDICES,
  OPT_BATCH_SIZE,
  OPT_SHUFFLE,
  OPT_SHUFFLE_ALGORITHM,
  OPT_SEED,
  OPT_DROP_LAST,
  OPT_WORKERS,
  OPT_PREFETCH,
  OPT_PERSISTENT,
  OPT_OUT_OF_ORDER,
  OPT_PIN_MEMORY,
  OPT_TIMEOUT_MS,
  OPT_NO_REUSE,
  OPT_FD_IN_DEV_SHM,
  OPT_SHOW_WORKERS,
  OPT_DATASET,
  OPT_SHARD,
  OPT_SHARING,
  OPT_STRATEGY, /* --sharing under its other name */
  OPT_RANK,
  OPT_WORLD_SIZE,
  OPT_SHARD_MODE,
  OPT_MAX_RESTARTS,
  OPT_FAULTS,
  OPT_IMAGE_SIZE,
  OPT_CROP,
  OPT_RESIZE,
  OPT_HFLIP,
  OPT_FLOAT,
  OPT_OWN /* a subcommand's own options from here on */
};

struct load_args {
  fl_options opt;
  struct synth data;      /* the synthetic dataset, or a file dataset's
                             size, set by load_dataset */
  struct synth_span span; /* what the sampler gives, before any shuffle */
  const char *indices;    /* --indices as given, or NULL */
  int batched;
  int synth_only;         /* an option given that --dataset refuses */
  int image_only;         /* one that only --dataset images: takes */
  fl_image_options image; /* what those set */
  int sharing_set;        /* --sharing (or --strategy) was given */
  struct dataset_spec file; /* --dataset, or kind DS_SYNTHETIC */
  fl_dataset ds;          /* made by load_dataset */
  int ds_open;            /* ds (or it) is a file dataset, to be closed */
  fl_iterable it;         /* made by load_dataset when iterable */
  int iterable;           /* --dataset webdataset: */
  const char **shard_args; /* each --shard, after the spec's shards */
  size_t nshard_args;
  size_t *index_list;     /* the span as opt.indices, made by load_dataset */
};

/* Takes a subcommand's own option c (arg NULL when it has no value):
   returns 0, or -1 having said what is wrong. */
typedef int (*cli_own_fn)(int c, const char *arg, void *ctx);

/* Parses argv: the shared options into *a (unless a is NULL: then none
   are taken), and cmd's own through fn.  0, or -1 having printed one
   line.  -h or --help prints cmd's help, with the shared options' when it
   takes them, and exits 0. */
int cli_parse(const struct cli_command *cmd, int argc, char **argv,
              struct load_args *a, cli_own_fn fn, void *ctx);
/* The options alone, as cli_parse, for a subcommand that takes operands:
   returns the index in argv of the first, or -1. */
int cli_options(const struct cli_command *cmd, int argc, char **argv,
                struct load_args *a, cli_own_fn fn, void *ctx);
int cli_scan_uint(const char *s, char **end, uint64_t *out);
/* --sample-bytes B[,B...] into out's sizes: one size is a sample of one
   field (nfields 0), a list of 2 to 32 one of fields.  0, or -1 having
   said what is wrong, naming the option val. */
int cli_sample_bytes(int val, const char *s, struct synth *out);
int cli_uint(int val, const char *s, uint64_t min, uint64_t max,
             uint64_t *out);
/* "pad", "trim" or "uneven", as --shard-mode takes them. */
const char *cli_shard_mode_name(fl_shard_mode mode);
/* Says why fl_loader_create failed with rc, naming the flags where the
   library names the fields of fl_options and fl_dataset they set; returns
   the exit status, 2 for options the library refuses. */
int cli_create_error(int rc);
/* Makes a->ds (or a->it): 0, or the exit status having said why not. */
int load_dataset(struct load_args *a);
/* "N samples of SIZES", or "streams of samples of SIZES", in buf. */
const char *load_samples(const struct load_args *a, char *buf, size_t len);
/* fl_loader_create, or fl_loader_create_iterable for an iterable. */
int load_create(struct load_args *a, fl_loader **l);
/* Frees what parsing and load_dataset made, closing a file dataset: call
   it after the loaders that use a->ds are destroyed. */
void load_args_free(struct load_args *a);

/* signals.c: the signal that asked to stop, or 0. */
extern volatile sig_atomic_t cli_interrupted;
void cli_catch_signals(void);
/* "SIGINT" or "SIGTERM", the signals caught. */
const char *cli_signal_name(int sig);

/* census.c: what a loader might leave behind in this process. */
struct census {
  int *fds; /* open fds, ascending */
  size_t nfds;
  char **names; /* names in /dev/shm this process owns */
  size_t nnames;
};

int census_take(struct census *c);
void census_free(struct census *c);
size_t census_new_names(const struct census *before,
                        const struct census *after, char *list, size_t len);
size_t census_new_fds(const struct census *before,
                      const struct census *after, char *list, size_t len);
size_t census_children(double wait_seconds, char *list, size_t len);
/* Makes and destroys a loader without workers, so that libuv's fds for
   the life of the process are open before a census: 0, or -1 having said
   why not, after "who: ". */
int census_warm_up(const char *who);

/* npy_header.c: puts the header of a version 1.0 .npy file holding an
   array of descr and shape (ndim 1 or 2) in buf, NPY_HEADER_MAX bytes;
   returns its length, a multiple of 64. */
#define NPY_HEADER_MAX 256
size_t npy_header(char *buf, const char *descr, const size_t *shape,
                  int ndim);

/* soak_config.c: a configuration of `forkload soak`, a pure function of
   the soak's seed and its number, so that it can be run again alone. */
#define SOAK_HOLD_MAX 8 /* batches a configuration holds at most */

struct soak_config {
  uint64_t seed, index; /* the soak's seed, and its number */
  int iterable;         /* an iterable dataset, not a map-style one */
  struct synth data;    /* the samples: how many, their sizes, the seed */
  int batched;          /* map-style: get_batch */
  int skip;             /* iterable: a skip function, not next n times */
  fl_options opt;       /* the loader's, but faults */
  char faults[192];     /* the spec, or "" */
  unsigned epochs;
  unsigned hold_pct;    /* chance that a batch is held for a while */
  unsigned hold_max;    /* at most, up to SOAK_HOLD_MAX */
  unsigned cut_pct;     /* chance that an epoch is cut short by a begin */
  int destroy_held;     /* destroy with batches held, not release first */
  uint64_t rng;         /* the consumer's draws go on from here */
};

/* The next draw of *rng, and one below n (n > 0). */
uint64_t soak_rand(uint64_t *rng);
unsigned soak_below(uint64_t *rng, unsigned n);
void soak_config_draw(struct soak_config *c, uint64_t seed, uint64_t index);
/* One line, in the words of run's summary. */
const char *soak_config_describe(const struct soak_config *c, char *buf,
                                 size_t len);

/* soak_stream.c: the iterable dataset of the soak and its check.  Worker
   w of W reads indices w, w + W, ... below the samples (one stream of all
   without workers); a sample holds its index in its first 8 bytes, then
   the synthetic content of that index. */
struct soak_stream {
  const struct synth *data; /* samples, sample_bytes (at least 8), seed */
  size_t streams;           /* max(1, num_workers) */
  int ordered;              /* each stream's order is checked too */
  size_t next, step;        /* in the reader: its next index, and W */
  unsigned char *seen;      /* per index: come this epoch */
  size_t *due;              /* per stream: the index it gives next */
  unsigned char *seqs;      /* per fl_batch_seq: come this epoch */
  size_t nseqs;             /* room for every seq an epoch can have */
  unsigned char *want;      /* a sample as it must be */
  uint64_t epoch;
};

/* 0, or FL_ENOMEM.  Without ordered, only that each index comes once,
   from its stream's worker. */
int soak_stream_init(struct soak_stream *s, const struct synth *data,
                     unsigned num_workers, int skip, int ordered,
                     fl_iterable *it);
void soak_stream_free(struct soak_stream *s);

/* How soak_run checks a configuration's batches: verify.c's checks for a
   map-style dataset, soak_stream.c's for an iterable one.  Each returns 0,
   or -1 with why set.  again checks the content of a batch held a while,
   when it is released. */
struct soak_check {
  void *ctx;
  int (*begin)(void *ctx, uint64_t epoch, char *why, size_t len);
  int (*batch)(void *ctx, const fl_batch *b, char *why, size_t len);
  int (*poisoned)(void *ctx, uint64_t seq, char *why, size_t len);
  int (*end)(void *ctx, char *why, size_t len); /* an epoch handed out whole */
  int (*again)(void *ctx, const fl_batch *b, char *why, size_t len);
};

void soak_stream_check(struct soak_stream *s, struct soak_check *check);

/* soak_run.c: runs one configuration, checking every batch. */
struct soak_tally {
  uint64_t configs, iterable, refused; /* refused: by admission, at create */
  uint64_t epochs, cut;                /* begun; cut short */
  uint64_t batches, samples, held, kept, poisoned;
  uint64_t faults, restarts;
};

/* 0 (also when a signal asked to stop it: see cli_interrupted), or -1
   with why set: a violation. */
int soak_run(const struct soak_config *c, struct soak_tally *t, char *why,
             size_t len);

/* doctor.c: a loader's budget, as doctor prints it and exhaust reads it. */
/* Lowers the soft RLIMIT_NOFILE to n (--fd-limit), fds_open being open:
   0, or the exit status having said why not. */
int cli_fd_limit(uint64_t n, size_t fds_open);
/* The item whose limit stops the loader first: the least max_held but
   memlock's, past which batches only come unpinned. */
const fl_budget_item *budget_stopping(const fl_budget *b);
/* The item of that resource, or NULL. */
const fl_budget_item *budget_item(const fl_budget *b, const char *resource);
/* The prefetch factor in force for l, made from a: prefetch_factor,
   capped at the epoch's batches per worker where they are known
   (fl_loader_create(3)). */
unsigned budget_prefetch(const struct load_args *a, const fl_loader *l);
/* In order, how many batches past max_held may be held before the loader
   stops: those that came ahead of the one due (fl_loader_budget). */
uint64_t budget_ahead(const struct load_args *a, const fl_loader *l);
/* What to do about the resource that binds, in the flags' words. */
const char *budget_remedy(const char *resource, const fl_options *o);
/* A figure of the budget as JSON: UINT64_MAX is null. */
void budget_json_number(uint64_t v);

/* run.c, exhaust.c, soak.c, cleanup.c, gen.c, doctor.c: the subcommands. */
extern const struct cli_command cli_run, cli_exhaust, cli_soak, cli_cleanup,
    cli_gen, cli_doctor;

#endif /* FORKLOAD_CLI_H */
