/*
 * `forkload gen`: writes the synthetic dataset of `forkload run` to files
 * that the library's built-in datasets read (a directory of .npy files,
 * one .npy array, raw records, one .npy array per field, an LMDB
 * environment (gen_lmdb.c), or llm.c token shards of a stream keyed by
 * the seed, so that `run --dataset ... --verify` can check every byte the
 * library reads back against its index.  Each target is written beside
 * it and put in place whole, or not at all (gen_atomic.c).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct gen_args {
  enum ds_kind kind;
  const char *path;
  char *list;                          /* npy-zip, tokens: path, cut */
  const char *paths[SYNTH_MAX_FIELDS]; /* npy-zip: in list, one a field;
                                          tokens: one a shard */
  size_t npaths;
  struct synth data;
  size_t header_bytes;
  int header_set, force;
  unsigned classes; /* images: class folders */
  size_t seq_len;   /* tokens: the windows' */
  unsigned shards;  /* webdataset: tar files */
};

/* What is written: the files' header, and which samples follow it, of
   which field. */
struct gen_file {
  const char *path;
  const char *head;
  size_t head_bytes;
  size_t first, count;
  size_t field;
};

enum {
  OPT_GEN_SAMPLES = OPT_OWN,
  OPT_GEN_SAMPLE_BYTES,
  OPT_GEN_SEED,
  OPT_HEADER_BYTES,
  OPT_FORCE,
  OPT_CLASSES,
  OPT_SEQ_LEN,
  OPT_SHARDS
};

/* gen takes none of the loader's options: it makes no loader. */
static const char help[] =
  "Writes the synthetic dataset of run, with the same --samples,\n"
  "--sample-bytes and --seed, to PATH: a directory of .npy files, one\n"
  "per sample (npy-dir), one .npy array (npy), or raw records (raw),\n"
  "or samples of fields to one .npy array per field (npy-zip, one PATH\n"
  "per size of --sample-bytes), which run --dataset reads and --verify\n"
  "checks.  images writes a folder of JPEGs for --dataset images:\n"
  "(PATH/class000/00000000.jpg, ...), sample i in class i % K.  lmdb\n"
  "writes an LMDB environment in the directory PATH, sample i the value\n"
  "of the key %08zu of i, for --dataset lmdb:PATH:B.\n"
  "tokens writes llm.c token shards, one per PATH, of N windows of\n"
  "T + 1 tokens in all (--dataset tokens:PATH,...:T).\n"
  "webdataset writes K tar shards (PATH/shard-00000.tar, ...) of\n"
  "samples NNNNNNNN.bin (the content) and NNNNNNNN.cls (i % 10) for\n"
  "--dataset webdataset:.\n"
  "\n"
  "gen:\n"
  "  --samples N           samples to write (required)\n"
  "  --sample-bytes B[,B...]\n"
  "                        bytes per sample (required), or per field of\n"
  "                        npy-zip; arrays are of float32 when B is a\n"
  "                        multiple of 4, else bytes\n"
  "  --seed S              seed of the content (0)\n"
  "  --header-bytes H      raw: H bytes of zeros before the records (0)\n"
  "  --force               replace an existing file, or directory (and\n"
  "                        all in it); each target is written beside it\n"
  "                        and renamed into place only when whole\n"
  "  --classes K           images: class folders, at most N (10)\n"
  "  --seq-len T           tokens: the windows' length (required)\n"
  "  --shards K            webdataset: tar files, at most N (required)\n";

static const struct option options[] = {
  {"samples", required_argument, NULL, OPT_GEN_SAMPLES},
  {"sample-bytes", required_argument, NULL, OPT_GEN_SAMPLE_BYTES},
  {"seed", required_argument, NULL, OPT_GEN_SEED},
  {"header-bytes", required_argument, NULL, OPT_HEADER_BYTES},
  {"force", no_argument, NULL, OPT_FORCE},
  {"classes", required_argument, NULL, OPT_CLASSES},
  {"seq-len", required_argument, NULL, OPT_SEQ_LEN},
  {"shards", required_argument, NULL, OPT_SHARDS},
  {NULL, 0, NULL, 0}
};

static int
gen_option(int c, const char *arg, void *ctx)
{
  struct gen_args *a = ctx;
  uint64_t v = 0;
  int rc = 0;

  switch (c) {
  case OPT_GEN_SAMPLES:
    rc = cli_uint(c, arg, 1, SIZE_MAX, &v);
    a->data.samples = v;
    break;
  case OPT_GEN_SAMPLE_BYTES:
    rc = cli_sample_bytes(c, arg, &a->data);
    break;
  case OPT_GEN_SEED:
    rc = cli_uint(c, arg, 0, UINT64_MAX, &v);
    a->data.seed = v;
    break;
  case OPT_HEADER_BYTES:
    /* Not SIZE_MAX: write_raw allocates header_bytes + 1. */
    rc = cli_uint(c, arg, 0, SIZE_MAX - 1, &v);
    a->header_bytes = v;
    a->header_set = 1;
    break;
  case OPT_FORCE:
    a->force = 1;
    break;
  case OPT_CLASSES:
    rc = cli_uint(c, arg, 1, 1000, &v);
    a->classes = (unsigned)v;
    break;
  case OPT_SEQ_LEN:
    /* A shard counts its tokens in an int32. */
    rc = cli_uint(c, arg, 1, INT32_MAX - 1, &v);
    a->seq_len = v;
    break;
  case OPT_SHARDS:
    rc = cli_uint(c, arg, 1, 100000, &v);
    a->shards = (unsigned)v;
    break;
  }
  return rc;
}

/* npy-zip and tokens: the paths, each named once (a path named twice
   would hold only the last field, or shard, written). */
static int
split_paths(struct gen_args *a)
{
  const char *kind = dataset_kind_name(a->kind);
  size_t f, g;

  if ((a->list = strdup(a->path)) == NULL) {
    cli_error("gen: %s", fl_strerror(FL_ENOMEM));
    return -1;
  }
  a->npaths = dataset_split(a->list, a->paths);
  if (a->npaths == 0) {
    cli_error("gen: %s takes 1 to %d paths separated by commas, none "
              "of them empty, got '%s'", kind, SYNTH_MAX_FIELDS, a->path);
    return -1;
  }
  for (f = 1; f < a->npaths; f++)
    for (g = 0; g < f; g++)
      if (strcmp(a->paths[f], a->paths[g]) == 0) {
        cli_error("gen: %s: %s is named twice: one file is written per %s",
                  kind, a->paths[f], a->kind == DS_TOKENS ? "shard"
                                                          : "field");
        return -1;
      }
  return 0;
}

/* npy-zip: a path per field of --sample-bytes. */
static int
check_zip(struct gen_args *a)
{
  size_t nf = synth_nfields(&a->data);

  if (split_paths(a) < 0)
    return -1;
  if (a->npaths != nf) {
    cli_error("gen: npy-zip: %zu path(s) for %zu size(s) in "
              "--sample-bytes: one .npy is written per field", a->npaths,
              nf);
    return -1;
  }
  return 0;
}

/* tokens: --samples windows of --seq-len, at least one per shard, and no
   shard counting more tokens than its header's int32 holds. */
static int
check_tokens(struct gen_args *a)
{
  size_t most;

  if (a->data.samples == 0 || a->seq_len == 0 || a->data.sample_bytes != 0 ||
      a->header_set) {
    cli_error("gen: tokens takes --samples and --seq-len (required), "
              "--seed and --force");
    return -1;
  }
  if (split_paths(a) < 0)
    return -1;
  if (a->data.samples < a->npaths) {
    cli_error("gen: tokens: %zu windows for %zu shards: each shard needs "
              "one", a->data.samples, a->npaths);
    return -1;
  }
  most = (a->data.samples + a->npaths - 1) / a->npaths;
  if (most > (INT32_MAX - 1) / a->seq_len) {
    cli_error("gen: tokens: %zu windows of %zu tokens make a shard of "
              "more than %d tokens, the most its header counts", most,
              a->seq_len + 1, INT32_MAX);
    return -1;
  }
  return 0;
}

/* Returns 0, or -1 having said what is wrong with the command line. */
static int
check_args(int argc, char **argv, int first, struct gen_args *a)
{
  int kind = -1;

  if (argc - first == 2) {
    kind = dataset_kind(argv[first], strlen(argv[first]));
    a->path = argv[first + 1];
  }
  if (kind < 0) {
    cli_error("gen: expected npy-dir, npy, raw, npy-zip, images, lmdb, "
              "tokens or webdataset, then a PATH");
    return -1;
  }
  a->kind = kind;
  if (a->seq_len != 0 && kind != DS_TOKENS) {
    cli_error("--seq-len: only token shards are cut into windows");
    return -1;
  }
  if (kind == DS_TOKENS)
    return check_tokens(a);
  if (a->classes != 0 && kind != DS_IMAGES) {
    cli_error("--classes: only images are written to class folders");
    return -1;
  }
  if ((a->shards != 0) != (kind == DS_WEBDATASET)) {
    cli_error("--shards: webdataset needs it, and only it takes it");
    return -1;
  }
  if (kind == DS_WEBDATASET) {
    if (a->data.sample_bytes == 0)
      a->data.sample_bytes = 256;
    if (a->data.samples == 0 || a->data.nfields > 0 || a->header_set ||
        a->shards > a->data.samples) {
      cli_error("gen: webdataset takes --samples N and --shards K (K at "
                "most N), --sample-bytes B (one size, 256), --seed and "
                "--force");
      return -1;
    }
    return 0;
  }
  if (kind == DS_IMAGES) {
    if (a->data.samples == 0 || a->data.sample_bytes != 0 ||
        a->header_set) {
      cli_error("gen: images takes --samples (required), --classes, --seed "
                "and --force");
      return -1;
    }
    if (a->classes == 0) /* a class without images is an error to read */
      a->classes = a->data.samples < 10 ? (unsigned)a->data.samples : 10;
    if (a->classes > a->data.samples) {
      cli_error("--classes: %u classes need at least as many --samples",
                a->classes);
      return -1;
    }
    return 0;
  }
  if (a->data.samples == 0 || a->data.sample_bytes == 0) {
    cli_error("gen: --samples and --sample-bytes are required");
    return -1;
  }
  if (a->header_set && a->kind != DS_RAW) {
    cli_error("--header-bytes: only raw files have a header of your own");
    return -1;
  }
  if (a->kind == DS_NPY_ZIP)
    return check_zip(a);
  if (a->data.nfields > 0) {
    cli_error("--sample-bytes: a list makes samples of fields, which only "
              "npy-zip writes (one .npy per field), not %s",
              dataset_kind_name(a->kind));
    return -1;
  }
  return 0;
}

/* The samples are the float32 values of the synthetic dataset, so the
   arrays hold them as such; a size that is not whole floats is bytes. */
static const char *
npy_descr(size_t sample_bytes, size_t *items)
{
  if (sample_bytes % 4 != 0) {
    *items = sample_bytes;
    return "|u1";
  }
  *items = sample_bytes / 4;
  return __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? "<f4" : ">f4";
}

/* Creates path, new in gen's sibling of the target (gen_atomic.c): the
   stream, or NULL having said why. */
static FILE *
open_out(const char *path)
{
  FILE *out = fopen(path, "wx");

  if (out == NULL)
    cli_error("gen: %s: %s", path, strerror(errno));
  return out;
}

/* Writes f: its header, then its samples.  Returns 0, or -1 having said
   why.  A signal stops it early: gen_out_place then puts nothing in
   place. */
static int
write_file(const struct gen_args *a, const struct gen_file *f,
           unsigned char *buf)
{
  size_t i, sb = synth_field_bytes(&a->data, f->field);
  FILE *out = open_out(f->path);
  int err = 0;

  if (out == NULL)
    return -1;
  if (fwrite(f->head, 1, f->head_bytes, out) != f->head_bytes)
    err = errno;
  for (i = f->first; err == 0 && i < f->first + f->count && !cli_interrupted;
       i++) {
    synth_fill(&a->data, i, f->field, buf);
    if (fwrite(buf, 1, sb, out) != sb)
      err = errno;
  }
  if (fclose(out) != 0 && err == 0)
    err = errno;
  if (err == 0)
    return 0;
  cli_error("gen: %s: cannot write: %s", f->path, strerror(err));
  return -1;
}

/* npy-dir: one file per sample in the directory dir, %08zu.npy, each a
   1-D array. */
static int
write_npy_dir(const struct gen_args *a, const char *dir, unsigned char *buf,
              char *what, size_t len, uint64_t *bytes)
{
  char head[NPY_HEADER_MAX], name[PATH_MAX];
  struct gen_file f = {name, head, 0, 0, 1, 0};
  size_t items, n = a->data.samples;
  const char *descr = npy_descr(a->data.sample_bytes, &items);

  f.head_bytes = npy_header(head, descr, &items, 1);
  for (f.first = 0; f.first < n && !cli_interrupted; f.first++) {
    if (snprintf(name, sizeof name, "%s/%08zu.npy", dir, f.first) >=
        (int)sizeof name) {
      cli_error("gen: %s: %s", dir, strerror(ENAMETOOLONG));
      return -1;
    }
    if (write_file(a, &f, buf) < 0)
      return -1;
  }
  snprintf(what, len, "%zu files 00000000.npy to %08zu.npy, each '%s' "
           "of shape (%zu,)", n, n - 1, descr, items);
  *bytes = (uint64_t)n * (f.head_bytes + a->data.sample_bytes);
  return 0;
}

/* One 2-D array of field `field`, a row per sample, at path: that of
   npy, and each of npy-zip.  Adds the bytes written to *bytes. */
static int
write_array(const struct gen_args *a, const char *path, size_t field,
            unsigned char *buf, char *what, size_t len, uint64_t *bytes)
{
  char head[NPY_HEADER_MAX];
  struct gen_file f = {path, head, 0, 0, a->data.samples, field};
  size_t shape[2] = {a->data.samples, 0};
  size_t fb = synth_field_bytes(&a->data, field);
  const char *descr = npy_descr(fb, &shape[1]);

  f.head_bytes = npy_header(head, descr, shape, 2);
  if (write_file(a, &f, buf) < 0)
    return -1;
  snprintf(what, len, "'%s' of shape (%zu, %zu)", descr, shape[0],
           shape[1]);
  *bytes += f.head_bytes + (uint64_t)f.count * fb;
  return 0;
}

/* npy-zip: an array per field, each with a row per sample, at out[f]'s
   path (gen_out_place puts all of them in place or none). */
static int
write_npy_zip(const struct gen_args *a, const struct gen_out *out,
              unsigned char *buf, char *what, size_t len, uint64_t *bytes)
{
  char one[96]; /* "'<f4' of shape (N, M)" */
  size_t f, used;

  snprintf(what, len, "%zu array%s", a->npaths, a->npaths > 1 ? "s" : "");
  for (f = 0; f < a->npaths; f++) {
    if (write_array(a, out[f].path, f, buf, one, sizeof one, bytes) < 0)
      return -1;
    used = strlen(what);
    snprintf(what + used, len - used, ", %s", one);
  }
  return 0;
}

/* raw: --header-bytes of zeros, then the records back to back, at path. */
static int
write_raw(const struct gen_args *a, const char *path, unsigned char *buf,
          char *what, size_t len, uint64_t *bytes)
{
  char *zeros = calloc(1, a->header_bytes + 1);
  struct gen_file f = {path, zeros, a->header_bytes, 0, a->data.samples, 0};
  int rc = -1;

  if (zeros == NULL) {
    cli_error("gen: %s", fl_strerror(FL_ENOMEM));
    goto out;
  }
  if (write_file(a, &f, buf) < 0)
    goto out;
  if (f.head_bytes == 0)
    snprintf(what, len, "%zu records, no header", f.count);
  else
    snprintf(what, len, "%zu records after a %zu-byte header", f.count,
             f.head_bytes);
  *bytes = f.head_bytes + (uint64_t)f.count * a->data.sample_bytes;
  rc = 0;
out:
  free(zeros);
  return rc;
}

/* A shard of tokens at path: its header (llm.c's: magic, version 1, the
   count), then tokens first .. first + count - 1 of the stream,
   little-endian.  A signal stops it early: gen_out_place then puts
   nothing in place. */
static int
write_shard(const struct gen_args *a, const char *path, uint64_t first,
            size_t count)
{
  unsigned char head[1024] = {0}, buf[8192];
  const uint32_t word[3] = {FL_TOKENS_MAGIC, FL_TOKENS_VERSION,
                             (uint32_t)count};
  FILE *out = open_out(path);
  size_t i, k, n = 0;
  int err = 0;

  if (out == NULL)
    return -1;
  for (i = 0; i < 12; i++)
    head[i] = (unsigned char)(word[i / 4] >> (i % 4 * 8));
  if (fwrite(head, 1, sizeof head, out) != sizeof head)
    err = errno;
  for (i = 0; err == 0 && i < count && !cli_interrupted; i += n) {
    n = count - i < sizeof buf / 2 ? count - i : sizeof buf / 2;
    for (k = 0; k < n; k++) {
      uint16_t t = synth_token(a->data.seed, first + i + k);

      buf[2 * k] = (unsigned char)t;
      buf[2 * k + 1] = (unsigned char)(t >> 8);
    }
    if (fwrite(buf, 2, n, out) != n)
      err = errno;
  }
  if (fclose(out) != 0 && err == 0)
    err = errno;
  if (err == 0)
    return 0;
  cli_error("gen: %s: cannot write: %s", path, strerror(err));
  return -1;
}

/* tokens: the windows split among the shards in order, as evenly as can
   be, each shard one token past its last window's start + seq_len.  The
   next shard starts again at that token of the stream, so that window i
   is tokens i*T .. i*T + T of it whatever its shard (what --verify
   checks).  Shard f is written at out[f]'s path. */
static int
write_tokens(const struct gen_args *a, const struct gen_out *out,
             char *what, size_t len, uint64_t *bytes)
{
  size_t f, w, n = a->npaths, T = a->seq_len, first = 0;

  for (f = 0; f < n; f++, first += w) {
    w = a->data.samples / n + (f < a->data.samples % n);
    if (write_shard(a, out[f].path, (uint64_t)first * T, w * T + 1) < 0)
      return -1;
    *bytes += 1024 + 2 * ((uint64_t)w * T + 1);
  }
  snprintf(what, len, "%zu windows of %zu + 1 tokens in %zu shard%s, "
           "%" PRIu64 " tokens", a->data.samples, T, n, n > 1 ? "s" : "",
           (uint64_t)a->data.samples * T + n);
  return 0;
}

/* Writes the kind at out's paths (one a file of npy-zip or tokens): 0, or
   -1 having said why not. */
static int
generate(const struct gen_args *a, const struct gen_out *out, char *what,
         size_t len, uint64_t *bytes)
{
  unsigned char *buf;
  const char *path = out[0].path;
  int rc;

  if (a->kind == DS_IMAGES)
    return gen_images(path, a->data.samples, a->classes, a->data.seed,
                      what, len, bytes);
  if (a->kind == DS_TOKENS)
    return write_tokens(a, out, what, len, bytes);
  /* Room for the largest field, whichever it is. */
  if ((buf = malloc(a->data.sample_bytes)) == NULL) {
    cli_error("gen: %s", fl_strerror(FL_ENOMEM));
    return -1;
  }
  if (a->kind == DS_WEBDATASET)
    rc = gen_webdataset(path, &a->data, a->shards, buf, what, len, bytes);
  else if (a->kind == DS_NPY_DIR)
    rc = write_npy_dir(a, path, buf, what, len, bytes);
  else if (a->kind == DS_NPY)
    rc = write_array(a, path, 0, buf, what, len, bytes);
  else if (a->kind == DS_NPY_ZIP)
    rc = write_npy_zip(a, out, buf, what, len, bytes);
  else if (a->kind == DS_LMDB)
    rc = gen_lmdb(path, &a->data, buf, what, len, bytes);
  else
    rc = write_raw(a, path, buf, what, len, bytes);
  free(buf);
  return rc;
}

/* The one line saying what was written. */
static void
say_wrote(const struct gen_args *a, const char *what, uint64_t bytes)
{
  char sizes[768]; /* 32 sizes */

  if (a->kind == DS_IMAGES)
    printf("wrote %s to %s, seed %" PRIu64 ": %" PRIu64 " bytes\n", what,
           a->path, a->data.seed, bytes);
  else if (a->kind == DS_TOKENS)
    printf("wrote %s, seed %" PRIu64 ", to tokens %s; %" PRIu64 " bytes\n",
           what, a->data.seed, a->path, bytes);
  else
    printf("wrote %zu samples of %s, seed %" PRIu64 ", to %s %s: %s; "
           "%" PRIu64 " bytes\n", a->data.samples,
           synth_sizes(&a->data, sizes, sizeof sizes), a->data.seed,
           dataset_kind_name(a->kind), a->path, what, bytes);
}

static int
gen_main(int argc, char **argv)
{
  struct gen_args a = {0};
  struct gen_out out[SYNTH_MAX_FIELDS];
  char what[2048]; /* 32 arrays */
  uint64_t bytes = 0;
  size_t n, made = 0;
  int first, dir, status = 2;

  first = cli_options(&cli_gen, argc, argv, NULL, gen_option, &a);
  if (first < 0 || check_args(argc, argv, first, &a) < 0)
    goto out;
  status = 1;
  /* Past ulimit -f a write fails with EFBIG, and gen removes what it
     wrote, where SIGXFSZ would kill it first; a ^C or SIGTERM stops it
     as a failure does (a second one kills it). */
  signal(SIGXFSZ, SIG_IGN);
  cli_catch_signals();
  n = a.npaths > 0 ? a.npaths : 1;
  dir = a.kind == DS_NPY_DIR || a.kind == DS_IMAGES || a.kind == DS_LMDB ||
        a.kind == DS_WEBDATASET;
  for (made = 0; made < n; made++)
    if (gen_out_open(&out[made], a.npaths > 0 ? a.paths[made] : a.path,
                     dir) < 0) {
      made++; /* to close what it made */
      goto out;
    }
  if (generate(&a, out, what, sizeof what, &bytes) < 0 ||
      gen_out_place(out, n, a.force) < 0)
    goto out;
  say_wrote(&a, what, bytes);
  status = 0;
out:
  if (gen_out_close(out, made) < 0)
    status = 1;
  if (status == 1 && cli_interrupted)
    status = 128 + cli_interrupted;
  free(a.list);
  return status;
}

const struct cli_command cli_gen = {
  "gen",
  "forkload gen npy-dir|npy|raw PATH --samples N --sample-bytes B\n"
  "         [--seed S] [--header-bytes H] [--force]\n"
  "forkload gen npy-zip PATH,PATH... --samples N --sample-bytes B,B...\n"
  "         [--seed S] [--force]\n"
  "forkload gen images DIR --samples N [--classes K] [--seed S] [--force]\n"
  "forkload gen lmdb DIR --samples N --sample-bytes B [--seed S] [--force]\n"
  "forkload gen tokens PATH[,PATH...] --samples N --seq-len T [--seed S]\n"
  "         [--force]\n"
  "forkload gen webdataset DIR --samples N --shards K [--sample-bytes B]\n"
  "         [--seed S] [--force]",
  help, options, gen_main
};
