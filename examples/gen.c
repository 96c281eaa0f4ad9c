/*
 * `forkload gen`: writes the synthetic dataset of `forkload run` to files
 * that the library's built-in datasets read (a directory of .npy files,
 * one .npy array, or raw records), so that `run --dataset ... --verify`
 * can check every byte the library reads back against its index.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

struct gen_args {
  enum ds_kind kind;
  const char *path;
  struct synth data;
  size_t header_bytes;
  int header_set, force;
};

/* What is written: the files' header, and which samples follow it. */
struct gen_file {
  const char *path;
  const char *head;
  size_t head_bytes;
  size_t first, count;
};

enum {
  OPT_GEN_SAMPLES = OPT_OWN,
  OPT_GEN_SAMPLE_BYTES,
  OPT_GEN_SEED,
  OPT_HEADER_BYTES,
  OPT_FORCE
};

/* gen takes none of the loader's options: it makes no loader. */
static const char help[] =
  "Writes the synthetic dataset of run, with the same --samples,\n"
  "--sample-bytes and --seed, to PATH: a directory of .npy files, one\n"
  "per sample (npy-dir), one .npy array (npy), or raw records (raw),\n"
  "which run --dataset reads and --verify checks.\n"
  "\n"
  "gen:\n"
  "  --samples N           samples to write (required)\n"
  "  --sample-bytes B      bytes per sample (required); arrays are of\n"
  "                        float32 when B is a multiple of 4, else bytes\n"
  "  --seed S              seed of the content (0)\n"
  "  --header-bytes H      raw: H bytes of zeros before the records (0)\n"
  "  --force               write over files, into a non-empty directory\n";

static const struct option options[] = {
  {"samples", required_argument, NULL, OPT_GEN_SAMPLES},
  {"sample-bytes", required_argument, NULL, OPT_GEN_SAMPLE_BYTES},
  {"seed", required_argument, NULL, OPT_GEN_SEED},
  {"header-bytes", required_argument, NULL, OPT_HEADER_BYTES},
  {"force", no_argument, NULL, OPT_FORCE},
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
    rc = cli_uint(c, arg, 1, SIZE_MAX, &v);
    a->data.sample_bytes = v;
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
  }
  return rc;
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
    cli_error("gen: expected npy-dir, npy or raw, then a PATH");
    return -1;
  }
  a->kind = kind;
  if (a->data.samples == 0 || a->data.sample_bytes == 0) {
    cli_error("gen: --samples and --sample-bytes are required");
    return -1;
  }
  if (a->header_set && a->kind != DS_RAW) {
    cli_error("--header-bytes: only raw files have a header of your own");
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

/* Writes f: its header, then its samples.  Without --force an existing
   file is refused.  Returns 0, or -1 having said why; a file gen made is
   then removed rather than left half-written (one it wrote over, which
   may be no regular file, is left). */
static int
write_file(const struct gen_args *a, const struct gen_file *f,
           unsigned char *buf)
{
  size_t i, sb = a->data.sample_bytes;
  FILE *out = fopen(f->path, "wx");
  int made = out != NULL, err = 0;

  if (out == NULL && errno == EEXIST && a->force)
    out = fopen(f->path, "w");
  if (out == NULL) {
    if (errno == EEXIST)
      cli_error("gen: %s exists (--force writes over it)", f->path);
    else
      cli_error("gen: %s: %s", f->path, strerror(errno));
    return -1;
  }
  if (fwrite(f->head, 1, f->head_bytes, out) != f->head_bytes)
    err = errno;
  for (i = f->first; err == 0 && i < f->first + f->count; i++) {
    synth_fill(&a->data, i, 0, buf);
    if (fwrite(buf, 1, sb, out) != sb)
      err = errno;
  }
  if (fclose(out) != 0 && err == 0)
    err = errno;
  if (err == 0)
    return 0;
  cli_error("gen: %s: cannot write: %s", f->path, strerror(err));
  if (made)
    unlink(f->path);
  return -1;
}

/* A file an earlier gen wrote for a sample this one does not have. */
static int
stale_sample(const char *name, size_t samples)
{
  uint64_t index;
  char *end;

  return cli_scan_uint(name, &end, &index) == 0 && end - name >= 8 &&
         strcmp(end, ".npy") == 0 && index >= samples;
}

/* Makes the directory, or takes an existing one that is empty.  With
   --force it takes any, and removes the files of an earlier gen past
   this one's samples, which a loader would otherwise read too. */
static int
prepare_dir(const struct gen_args *a)
{
  struct dirent *e;
  DIR *d;
  int rc = 0;

  if (mkdir(a->path, 0777) == 0)
    return 0;
  if (errno != EEXIST || (d = opendir(a->path)) == NULL) {
    cli_error("gen: %s: %s", a->path, strerror(errno));
    return -1;
  }
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (!a->force) {
      cli_error("gen: %s is not empty (--force writes into it)", a->path);
      rc = -1;
    } else if (stale_sample(e->d_name, a->data.samples) &&
               unlinkat(dirfd(d), e->d_name, 0) != 0) {
      cli_error("gen: %s/%s: %s", a->path, e->d_name, strerror(errno));
      rc = -1;
    }
  }
  closedir(d);
  return rc;
}

/* npy-dir: one file per sample, %08zu.npy, each a 1-D array. */
static int
write_npy_dir(const struct gen_args *a, unsigned char *buf, char *what,
              size_t len, uint64_t *bytes)
{
  char head[NPY_HEADER_MAX], name[PATH_MAX];
  struct gen_file f = {name, head, 0, 0, 1};
  size_t items, n = a->data.samples;
  const char *descr = npy_descr(a->data.sample_bytes, &items);

  if (prepare_dir(a) < 0)
    return -1;
  f.head_bytes = npy_header(head, descr, &items, 1);
  for (f.first = 0; f.first < n; f.first++) {
    if (snprintf(name, sizeof name, "%s/%08zu.npy", a->path, f.first) >=
        (int)sizeof name) {
      cli_error("gen: %s: %s", a->path, strerror(ENAMETOOLONG));
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

/* npy: one 2-D array, a row per sample. */
static int
write_npy(const struct gen_args *a, unsigned char *buf, char *what,
          size_t len, uint64_t *bytes)
{
  char head[NPY_HEADER_MAX];
  struct gen_file f = {a->path, head, 0, 0, a->data.samples};
  size_t shape[2] = {a->data.samples, 0};
  const char *descr = npy_descr(a->data.sample_bytes, &shape[1]);

  f.head_bytes = npy_header(head, descr, shape, 2);
  if (write_file(a, &f, buf) < 0)
    return -1;
  snprintf(what, len, "'%s' of shape (%zu, %zu)", descr, shape[0],
           shape[1]);
  *bytes = f.head_bytes + (uint64_t)f.count * a->data.sample_bytes;
  return 0;
}

/* raw: --header-bytes of zeros, then the records back to back. */
static int
write_raw(const struct gen_args *a, unsigned char *buf, char *what,
          size_t len, uint64_t *bytes)
{
  char *zeros = calloc(1, a->header_bytes + 1);
  struct gen_file f = {a->path, zeros, a->header_bytes, 0, a->data.samples};
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

static int
gen_main(int argc, char **argv)
{
  struct gen_args a = {0};
  unsigned char *buf = NULL;
  char what[256];
  uint64_t bytes = 0;
  int first, rc, status = 1;

  first = cli_options(&cli_gen, argc, argv, NULL, gen_option, &a);
  if (first < 0 || check_args(argc, argv, first, &a) < 0)
    return 2;
  if ((buf = malloc(a.data.sample_bytes)) == NULL) {
    cli_error("gen: %s", fl_strerror(FL_ENOMEM));
    goto out;
  }
  if (a.kind == DS_NPY_DIR)
    rc = write_npy_dir(&a, buf, what, sizeof what, &bytes);
  else if (a.kind == DS_NPY)
    rc = write_npy(&a, buf, what, sizeof what, &bytes);
  else
    rc = write_raw(&a, buf, what, sizeof what, &bytes);
  if (rc < 0)
    goto out;
  printf("wrote %zu samples of %zu bytes, seed %" PRIu64 ", to %s %s: %s; "
         "%" PRIu64 " bytes\n", a.data.samples, a.data.sample_bytes,
         a.data.seed, dataset_kind_name(a.kind), a.path, what, bytes);
  status = 0;
out:
  free(buf);
  return status;
}

const struct cli_command cli_gen = {
  "gen",
  "forkload gen npy-dir|npy|raw PATH --samples N --sample-bytes B\n"
  "         [--seed S] [--header-bytes H] [--force]",
  help, options, gen_main
};
