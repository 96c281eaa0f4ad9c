/*
 * libFuzzer target for fl_loader_state_load, built by `make fuzz` with the
 * whole core library.  Four loaders are made once, with no workers, so
 * that nothing forks while fuzzing: a map-style dataset in order, the same
 * as they arrive, an iterable one, and the first shuffled by the
 * bijection (whose states are version 2).  Each input is loaded into all
 * three.  A refusal must be a negative code with a sentence of its own; a
 * state that is accepted must resume: its epoch delivers only batches that
 * are whole and in their place (in order, the rest of the epoch from where
 * it starts; as they arrive, no batch twice), within the epoch's length,
 * and the loader can then save a state that it loads again.
 *
 * The input's first byte is a mode, the rest the blob.  Random bytes
 * almost never carry the right size and FNV-1a checksum, so with bit 0 of
 * the mode set the harness writes the blob's length into its size field
 * and its checksum at its end, and the fuzzer reaches the field checks.
 *
 * The seeds in tests/fuzz_state_corpus are valid states of these loaders
 * (mode 0), at an epoch's start, mid-epoch, between epochs, from a world of
 * two ranks, with a list of batches not handed out, of the iterable, and
 * of the bijection's.
 * This program wrote them, and writes them again if they must change:
 *
 *   FUZZ_STATE_SEEDS=tests/fuzz_state_corpus tests/fuzz_state
 *
 * (it writes them and exits before fuzzing; only that seed with a list
 * forks workers).
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define LEN 37        /* map-style samples: 10 batches, the last short */
#define STREAM_LEN 29 /* the iterable's samples */
#define BS 4
#define SAMPLE 16     /* a value, then its complement */
#define MAX_STATE 4096

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { ORDERED, ARRIVAL, STREAM, BIJECTION, NLOADERS };

static fl_loader *loaders[NLOADERS];

/* A sample says which it is: v, then ~v, so that a stale or misplaced
   byte shows. */
static void
write_sample(void *dst, uint64_t v)
{
  uint64_t w[2] = {v, ~v};

  memcpy(dst, w, sizeof(w));
}

static int
sample_is(const unsigned char *p, uint64_t v)
{
  uint64_t w[2];

  memcpy(w, p, sizeof(w));
  return w[0] == v && w[1] == ~v;
}

static int
get(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  (void)ctx;
  write_sample(dst, index);
  *nbytes = SAMPLE;
  return 0;
}

/* The iterable's stream: its position, from 0 at each open.  It has no
   skip, so that a resume runs the library's own skipping, which the
   stream's end bounds whatever position a state holds. */
static uint64_t stream_pos;

static int
stream_open(void *ctx, const fl_worker_info *w)
{
  (void)ctx;
  (void)w;
  stream_pos = 0;
  return 0;
}

static int
stream_next(void *ctx, void *dst, size_t *nbytes)
{
  (void)ctx;
  if (stream_pos >= STREAM_LEN)
    return 0;
  write_sample(dst, stream_pos++);
  *nbytes = SAMPLE;
  return 1;
}

/* l NULL: a create failed. */
static void
die(const char *what, const fl_loader *l)
{
  fprintf(stderr, "fuzz_state: %s: %s\n", what, fl_loader_error(l));
  abort();
}

/* Loader i, or a variant for the seeds (workers, world size, rank). */
static fl_loader *
make(int i, unsigned workers, unsigned world, unsigned rank)
{
  fl_dataset ds = {0};
  fl_iterable it = {0};
  fl_options opt;
  fl_loader *l = NULL;
  int rc;

  fl_options_init(&opt);
  opt.batch_size = BS;
  opt.num_workers = workers;
  opt.world_size = world;
  opt.rank = rank;
  if (i == STREAM) {
    it.sample_bytes = SAMPLE;
    it.open = stream_open;
    it.next = stream_next;
    rc = fl_loader_create_iterable(&l, &it, &opt);
  } else {
    opt.shuffle = 1;
    opt.seed = 7;
    opt.in_order = i != ARRIVAL;
    opt.shuffle_algorithm = i == BIJECTION ? FL_SHUFFLE_BIJECTION
                                           : FL_SHUFFLE_TORCH;
    opt.prefetch_factor = 3;
    ds.len = LEN;
    ds.sample_bytes = SAMPLE;
    ds.get = get;
    rc = fl_loader_create(&l, &ds, &opt);
  }
  if (rc != 0)
    die("fl_loader_create", NULL);
  return l;
}

/*
 * A call that failed must say why in a sentence of its own: the harness
 * empties the loader's message before each call, so that one left by an
 * earlier error does not pass for it.
 */
static void
refused(fl_loader *l, int rc)
{
  if (rc >= 0 || fl_loader_error(l)[0] == '\0')
    abort();
}

/* The loader can save a state; with reload, that state loads again. */
static void
save_state(fl_loader *l, int reload)
{
  unsigned char buf[MAX_STATE];
  int need = fl_loader_state_save(l, NULL, 0);

  if (need <= 0 || need > MAX_STATE ||
      fl_loader_state_save(l, buf, sizeof(buf)) != need)
    abort();
  l->err[0] = '\0';
  if (reload && fl_loader_state_load(l, buf, (size_t)need) != 0)
    abort();
}

/*
 * Whether batch k of the resumed epoch is whole and in its place.  *last
 * is what the one before ended with: a seq, or the iterable's last value
 * (its stream goes on from wherever the state put it, one by one).
 * ordered: each seq follows the last.
 */
static int
batch_ok(int i, int ordered, const fl_batch *b, size_t k, uint64_t *last,
         unsigned char *seen)
{
  const unsigned char *data = fl_batch_data(b);
  size_t n = fl_batch_count(b), j;
  uint64_t seq = fl_batch_seq(b), v;

  if (n == 0 || n > BS)
    return 0;
  for (j = 0; j < n; j++) {
    if (i == STREAM) {
      memcpy(&v, data + j * SAMPLE, sizeof(v));
      if (v >= STREAM_LEN || (k + j > 0 && v != *last + 1))
        return 0;
      *last = v;
    } else {
      v = fl_batch_indices(b)[j];
    }
    if (fl_batch_sizes(b)[j] != SAMPLE || v >= LEN ||
        !sample_is(data + j * SAMPLE, v))
      return 0;
  }
  if (i == STREAM)
    return 1;
  if (seq >= fl_loader_len(loaders[i]) || seen[seq]++ ||
      (ordered && k > 0 && seq != *last + 1))
    return 0;
  *last = seq;
  return 1;
}

/* Loader i anew, after an error left it mid-epoch or failed. */
static void
remake(int i)
{
  fl_loader_destroy(loaders[i]);
  loaders[i] = make(i, 0, 1, 0);
}

/*
 * The resumed epoch to its end.  It has at most fl_loader_len batches (the
 * iterable: its stream's); more would be a batch twice, or a loop.  In
 * order (ordered), it goes on to its last batch; a stream, to its end.
 */
static void
drain(int i, int ordered)
{
  fl_loader *l = loaders[i];
  unsigned char seen[LEN] = {0};
  size_t k, most;
  uint64_t last = UINT64_MAX;
  fl_batch *b;
  int rc;

  most = i == STREAM ? STREAM_LEN / BS + 1 : fl_loader_len(l);
  for (k = 0;; k++) {
    l->err[0] = '\0';
    rc = fl_loader_next(l, &b);
    if (rc == 0)
      break;
    if (rc != 1) {
      refused(l, rc);
      remake(i);
      return;
    }
    if (k >= most || !batch_ok(i, ordered, b, k, &last, seen))
      abort();
    fl_batch_release(b);
    if (k == 0)
      save_state(l, 0); /* mid-epoch: a save, no load */
  }
  if (k > 0 && ((ordered && last + 1 != fl_loader_len(l)) ||
                (i == STREAM && last + 1 != STREAM_LEN)))
    abort();
}

static void
try_state(int i, const unsigned char *blob, size_t len)
{
  fl_loader *l = loaders[i];
  int rc;

  l->err[0] = '\0';
  rc = fl_loader_state_load(l, blob, len);
  if (rc != 0) {
    refused(l, rc);
    return;
  }
  /* Loaded, not begun: the same place again. */
  save_state(l, 1);
  l->err[0] = '\0';
  rc = fl_loader_begin(l);
  if (rc != 0) {
    refused(l, rc);
    remake(i);
    return;
  }
  drain(i, i == ORDERED || i == BIJECTION);
  save_state(loaders[i], 1);
}

/* The blob's size field (4 bytes at 8) and checksum (its last 8), made
   right for its length, little-endian as state.c writes them. */
static void
patch(unsigned char *p, size_t len)
{
  uint64_t h = 0xcbf29ce484222325ull;
  size_t j;

  for (j = 0; len >= 12 && j < 4; j++)
    p[8 + j] = (unsigned char)(len >> (8 * j));
  for (j = 0; len >= 8 && j < len - 8; j++)
    h = (h ^ p[j]) * 0x100000001b3ull;
  for (j = 0; len >= 8 && j < 8; j++)
    p[len - 8 + j] = (unsigned char)(h >> (8 * j));
}

/* One seed: mode 0, then the state loader l saves now. */
static void
write_seed(const char *dir, const char *name, fl_loader *l)
{
  unsigned char buf[1 + MAX_STATE];
  char path[4096];
  FILE *f;
  int n = fl_loader_state_save(l, buf + 1, MAX_STATE);

  buf[0] = 0;
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  if (n <= 0 || (f = fopen(path, "wb")) == NULL ||
      fwrite(buf, 1, (size_t)n + 1, f) != (size_t)n + 1 || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

/* Begin an epoch and take k of its batches. */
static void
begin_and_take(fl_loader *l, size_t k)
{
  fl_batch *b;

  if (fl_loader_begin(l) != 0)
    die("fl_loader_begin", l);
  while (k-- > 0) {
    if (fl_loader_next(l, &b) != 1)
      die("fl_loader_next", l);
    fl_batch_release(b);
  }
}

static void
write_seeds(const char *dir)
{
  fl_loader *l;

  l = make(ORDERED, 0, 1, 0);
  write_seed(dir, "ordered-start", l);
  begin_and_take(l, 3);
  write_seed(dir, "ordered-3", l);
  /* All 10 batches of epoch 1 taken: the state starts epoch 2. */
  begin_and_take(l, 10);
  write_seed(dir, "ordered-between", l);
  fl_loader_destroy(l);
  /* Rank 1 of two: an elastic resume in a world of one. */
  l = make(ORDERED, 0, 2, 1);
  begin_and_take(l, 2);
  write_seed(dir, "ordered-world2", l);
  fl_loader_destroy(l);
  /* With workers ahead, batches not handed out sit below the next. */
  l = make(ARRIVAL, 2, 1, 0);
  begin_and_take(l, 4);
  write_seed(dir, "arrival-4", l);
  fl_loader_destroy(l);
  l = make(STREAM, 0, 1, 0);
  write_seed(dir, "stream-start", l);
  begin_and_take(l, 3);
  write_seed(dir, "stream-3", l);
  fl_loader_destroy(l);
  l = make(BIJECTION, 0, 1, 0);
  begin_and_take(l, 3);
  write_seed(dir, "bijection-3", l);
  fl_loader_destroy(l);
  l = make(BIJECTION, 0, 2, 1);
  begin_and_take(l, 2);
  write_seed(dir, "bijection-world2", l);
  fl_loader_destroy(l);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
  const char *seeds = getenv("FUZZ_STATE_SEEDS");
  int i;

  (void)argc;
  (void)argv;
  if (seeds != NULL) {
    write_seeds(seeds);
    exit(0);
  }
  for (i = 0; i < NLOADERS; i++)
    loaders[i] = make(i, 0, 1, 0);
  return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  size_t len = size > 0 ? size - 1 : 0;
  unsigned char *blob;
  int i;

  /* A heap copy of exactly the blob: AddressSanitizer sees a read past
     it, and the patch has somewhere to write. */
  blob = malloc(len > 0 ? len : 1);
  if (blob == NULL)
    return 0;
  if (len > 0)
    memcpy(blob, data + 1, len);
  if (size > 0 && (data[0] & 1))
    patch(blob, len);
  for (i = 0; i < NLOADERS; i++)
    try_state(i, blob, len);
  free(blob);
  return 0;
}
