/*
 * The option parsing the subcommands share: whole numbers, one-line
 * messages for bad input, and the dataset and loader options that `run`,
 * `doctor` and `exhaust` take, so that one flag means one thing in all; the
 * making of the dataset they name; and the library's complaints about
 * those options told in the flags' names.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Room for the shared options and any subcommand's own. */
#define MAX_OPTIONS 48

static const struct option load_options[] = {
  {"samples", required_argument, NULL, OPT_SAMPLES},
  {"sample-bytes", required_argument, NULL, OPT_SAMPLE_BYTES},
  {"delay-us", required_argument, NULL, OPT_DELAY_US},
  {"batched", no_argument, NULL, OPT_BATCHED},
  {"indices", required_argument, NULL, OPT_INDICES},
  {"batch-size", required_argument, NULL, OPT_BATCH_SIZE},
  {"shuffle", no_argument, NULL, OPT_SHUFFLE},
  {"shuffle-algorithm", required_argument, NULL, OPT_SHUFFLE_ALGORITHM},
  {"seed", required_argument, NULL, OPT_SEED},
  {"drop-last", no_argument, NULL, OPT_DROP_LAST},
  {"workers", required_argument, NULL, OPT_WORKERS},
  {"prefetch", required_argument, NULL, OPT_PREFETCH},
  {"persistent", no_argument, NULL, OPT_PERSISTENT},
  {"out-of-order", no_argument, NULL, OPT_OUT_OF_ORDER},
  {"pin-memory", no_argument, NULL, OPT_PIN_MEMORY},
  {"timeout-ms", required_argument, NULL, OPT_TIMEOUT_MS},
  {"no-reuse", no_argument, NULL, OPT_NO_REUSE},
  {"fd-in-dev-shm", no_argument, NULL, OPT_FD_IN_DEV_SHM},
  {"show-workers", no_argument, NULL, OPT_SHOW_WORKERS},
  {"dataset", required_argument, NULL, OPT_DATASET},
  {"shard", required_argument, NULL, OPT_SHARD},
  {"sharing", required_argument, NULL, OPT_SHARING},
  /* exhaust's name for it once: kept, so that no command line breaks. */
  {"strategy", required_argument, NULL, OPT_STRATEGY},
  {"rank", required_argument, NULL, OPT_RANK},
  {"world-size", required_argument, NULL, OPT_WORLD_SIZE},
  {"shard-mode", required_argument, NULL, OPT_SHARD_MODE},
  {"max-worker-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
  {"faults", required_argument, NULL, OPT_FAULTS},
  {"image-size", required_argument, NULL, OPT_IMAGE_SIZE},
  {"crop", required_argument, NULL, OPT_CROP},
  {"resize", required_argument, NULL, OPT_RESIZE},
  {"hflip", required_argument, NULL, OPT_HFLIP},
  {"float", no_argument, NULL, OPT_FLOAT},
  {NULL, 0, NULL, 0}
};

/* The fields of fl_options and fl_dataset that the flags above set: what
   fl_loader_create says of a field is told of the flag the user typed. */
static const struct {
  const char *field, *flag;
} field_flags[] = {
  {"batch_size", "--batch-size"},
  {"num_workers", "--workers"},
  {"prefetch_factor", "--prefetch"},
  {"sample_bytes", "--sample-bytes"},
  {"len", "--samples"},
  {"timeout_ms", "--timeout-ms"},
  {"sharing", "--sharing"},
  {"indices", "--indices"},
  {"indices_len", "--indices"},
  {"seed", "--seed"},
  {"shuffle", "--shuffle"},
  {"shuffle_algorithm", "--shuffle-algorithm"},
  {"FL_SHUFFLE_BIJECTION", "--shuffle-algorithm bijection"},
  {"drop_last", "--drop-last"},
  {"persistent_workers", "--persistent"},
  {"in_order", "--out-of-order"},
  {"pin_memory", "--pin-memory"},
  {"reuse_segments", "--no-reuse"},
  {"fd_in_dev_shm", "--fd-in-dev-shm"},
  {"rank", "--rank"},
  {"world_size", "--world-size"},
  {"shard_mode", "--shard-mode"},
  {"max_worker_restarts", "--max-worker-restarts"},
  {"faults", "--faults"},
  /* The strategies, as the library's remedies name them. */
  {"FL_SHARE_FILE_SYSTEM", "--sharing fs"},
  {"FL_SHARE_FILE_DESCRIPTOR", "--sharing fd"}
};

/* What --help of run, doctor and exhaust says of the options above. */
static const char load_help[] =
  "dataset:\n"
  "  --dataset SPEC        read files, which then take the place of the\n"
  "                        next four options: npy-dir:DIR, npy:FILE,\n"
  "                        npy-zip:FILE,FILE... (a field per file),\n"
  "                        raw:FILE:RECORD_BYTES[:HEADER_BYTES],\n"
  "                        images:DIR (torchvision's ImageFolder),\n"
  "                        tokens:FILE[,FILE...]:SEQ_LEN (llm.c's shards),\n"
  "                        lmdb:PATH:MAX_BYTES (the values in key order)\n"
  "                        or webdataset:SHARD[,SHARD...]:EXT=MAX[,...]\n"
  "                        (tar shards, a stream: a field per EXT)\n"
  "  --shard SHARD         one more webdataset shard, taken whole: a path,\n"
  "                        or pipe:COMMAND, whose output is the shard (it\n"
  "                        may hold commas and colons); repeatable, and\n"
  "                        then webdataset:EXT=MAX[,...] may name none\n"
  "  --samples N           samples in the dataset (50000)\n"
  "  --sample-bytes B[,B...]\n"
  "                        bytes per sample (12288: 3x32x32 float32); a\n"
  "                        list of 2 to 32 makes samples of that many\n"
  "                        fields, each an array of its own in a batch\n"
  "  --delay-us U          sleep U us in the worker per sample (0)\n"
  "  --batched             fetch a whole batch per call; the delay is\n"
  "                        then slept once per batch\n"
  "  --indices S:E[:STEP]  load only indices S, S+STEP, ... below E\n"
  "images (with --dataset images:DIR):\n"
  "  --image-size N|HxW    the images made, N x N or H x W (224)\n"
  "  --crop random|center  RandomResizedCrop (training), or Resize then\n"
  "                        CenterCrop (evaluation) (random)\n"
  "  --resize N            center: the shorter side first resized to N\n"
  "                        (the height)\n"
  "  --hflip P             flip an image horizontally with probability P\n"
  "                        (0.5 with --crop random, else 0)\n"
  "  --float               float32, 3 x H x W, normalized with ImageNet's\n"
  "                        mean and std; not uint8, H x W x 3\n"
  "loader:\n"
  "  --sharing fd|fs       pass fds, or name segments in /dev/shm (run,\n"
  "                        doctor: fd; exhaust: no default)\n"
  "  --strategy fd|fs      an alias of --sharing\n"
  "  --batch-size N        samples per batch (64)\n"
  "  --shuffle             shuffle every epoch\n"
  "  --shuffle-algorithm torch|bijection\n"
  "                        torch.randperm's order, 8 bytes a sample, or a\n"
  "                        keyed bijection that keeps none (torch)\n"
  "  --seed N              seed of the shuffle, the workers and the\n"
  "                        synthetic content (0)\n"
  "  --drop-last           drop the last batch when it is short\n"
  "  --workers N           worker processes; 0 loads in-process (2)\n"
  "  --prefetch N          batches in flight per worker (2)\n"
  "  --persistent          keep the workers between epochs\n"
  "  --out-of-order        hand out batches as they arrive\n"
  "  --pin-memory          mlock batch memory in the parent\n"
  "  --timeout-ms N        fail when a batch takes longer (0: never)\n"
  "  --no-reuse            a new segment per batch, as PyTorch does\n"
  "  --fd-in-dev-shm       fd sharing makes its segments in /dev/shm,\n"
  "                        as PyTorch does, not with memfd_create\n"
  "  --show-workers        print each worker's id, pid and seed\n"
  "  --world-size W        load one share of W data-parallel ranks (1)\n"
  "  --rank R              the share of rank R, below W (0)\n"
  "  --shard-mode pad|trim|uneven\n"
  "                        equal shares padded by repeating the first\n"
  "                        indices, equal shares with the tail dropped,\n"
  "                        or shares that differ by one (pad)\n"
  "  --max-worker-restarts N\n"
  "                        respawn workers that die, N times at most over\n"
  "                        the run (0: a death ends it)\n"
  "  --faults SPEC         inject faults, e.g. kill=0.01,emfile=0.1,seed=3\n"
  "                        (kill, exit, enospc, emfile =P; delay=P:MS;\n"
  "                        seed=S); without it, FORKLOAD_FAULTS if set\n";

/* The table getopt_long reads: the shared options, when the subcommand
   takes them, then its own, then --help. */
static struct option table[MAX_OPTIONS];

static const char *
option_name(int val)
{
  const struct option *o;

  for (o = table; o->name != NULL; o++)
    if (o->val == val)
      return o->name;
  return NULL;
}

/* strtoull alone would take a sign or leading spaces: a digit must come
   first.  Returns 0, -1 when there is no number, -2 when it overflows. */
int
cli_scan_uint(const char *s, char **end, uint64_t *out)
{
  if (*s < '0' || *s > '9')
    return -1;
  errno = 0;
  *out = strtoull(s, end, 10);
  return errno == ERANGE ? -2 : 0;
}

int
cli_uint(int val, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
  char *end;
  int rc = cli_scan_uint(s, &end, out);

  if (rc == -1 || (rc == 0 && *end != '\0')) {
    cli_error("--%s: expected a %s integer, got '%s'", option_name(val),
              min > 0 ? "positive" : "non-negative", s);
    return -1;
  }
  if (rc == -2 || *out < min || *out > max) {
    cli_error("--%s: expected an integer from %" PRIu64 " to %" PRIu64
              ", got '%s'", option_name(val), min, max, s);
    return -1;
  }
  return 0;
}

int
cli_sample_bytes(int val, const char *s, struct synth *out)
{
  size_t sizes[SYNTH_MAX_FIELDS], n = 0, sum = 0;
  const char *p = s;
  uint64_t v;
  char *end;
  int rc;

  for (;;) {
    rc = cli_scan_uint(p, &end, &v);
    if (rc == -1 || (*end != ',' && *end != '\0') ||
        n == SYNTH_MAX_FIELDS) {
      cli_error("--%s: expected a positive integer, or a list of 2 to %d "
                "separated by commas, got '%s'", option_name(val),
                SYNTH_MAX_FIELDS, s);
      return -1;
    }
    if (rc == 0 && v == 0) {
      cli_error("--%s: each size must be at least 1, got '%s'",
                option_name(val), s);
      return -1;
    }
    if (rc == -2 || v > SIZE_MAX ||
        __builtin_add_overflow(sum, (size_t)v, &sum)) {
      cli_error("--%s: too large: the sizes must add up to %zu at most, "
                "got '%s'", option_name(val), SIZE_MAX, s);
      return -1;
    }
    sizes[n++] = (size_t)v;
    if (*end == '\0')
      break;
    p = end + 1;
  }
  /* One size is a sample of one field, as before there were fields. */
  out->nfields = n > 1 ? n : 0;
  memcpy(out->field_bytes, sizes, n * sizeof sizes[0]);
  out->sample_bytes = sum;
  return 0;
}

static int
cli_sharing(int val, const char *s, fl_sharing *out)
{
  if (strcmp(s, "fd") == 0)
    *out = FL_SHARE_FILE_DESCRIPTOR;
  else if (strcmp(s, "fs") == 0)
    *out = FL_SHARE_FILE_SYSTEM;
  else {
    cli_error("--%s: expected 'fd' or 'fs', got '%s'", option_name(val), s);
    return -1;
  }
  return 0;
}

/* The names --shard-mode takes, by fl_shard_mode value (0, 1, 2). */
static const char *const shard_modes[] = {"pad", "trim", "uneven"};
#define NSHARD_MODES (sizeof shard_modes / sizeof shard_modes[0])

const char *
cli_shard_mode_name(fl_shard_mode mode)
{
  return (size_t)mode < NSHARD_MODES ? shard_modes[mode] : "?";
}

/* The names --shuffle-algorithm takes, by fl_shuffle_algorithm value. */
static const char *const shuffle_algorithms[] = {"torch", "bijection"};

/* Which of n names (of two or three) s is, or a usage error listing them. */
static int
cli_choice(int val, const char *s, const char *const *names, size_t n,
           int *out)
{
  size_t i;

  for (i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = (int)i;
      return 0;
    }
  cli_error("--%s: expected '%s'%s%s%s '%s', got '%s'", option_name(val),
            names[0], n > 2 ? ", '" : "", n > 2 ? names[1] : "",
            n > 2 ? "' or" : " or", names[n - 1], s);
  return -1;
}

/* START:END[:STEP] gives START, START+STEP, ... while below END. */
static int
parse_span(const char *s, struct synth_span *sp)
{
  uint64_t first, last, step = 1;
  char *p;

  if (cli_scan_uint(s, &p, &first) != 0 || *p != ':' ||
      cli_scan_uint(p + 1, &p, &last) != 0 ||
      (*p == ':' && cli_scan_uint(p + 1, &p, &step) != 0) || *p != '\0' ||
      first >= last || step == 0) {
    cli_error("--indices: expected START:END[:STEP] with START < END and "
              "STEP > 0, got '%s'", s);
    return -1;
  }
  sp->first = first;
  sp->step = step;
  sp->count = (last - first - 1) / step + 1;
  return 0;
}

/* The defaults: CIFAR-10 in batches of 64 through 2 workers. */
static void
load_defaults(struct load_args *a)
{
  *a = (struct load_args){0};
  fl_options_init(&a->opt);
  a->opt.batch_size = 64;
  a->opt.num_workers = 2;
  a->data.samples = 50000;
  a->data.sample_bytes = 3 * 32 * 32 * sizeof(float);
  fl_image_options_init(&a->image);
  a->image.height = a->image.width = 224;
  a->image.crop = FL_CROP_RANDOM_RESIZED;
  a->image.hflip = -1; /* 0.5 for a random crop, unless given */
}

/* --image-size N or HxW. */
static int
image_size(const char *s, fl_image_options *io)
{
  uint64_t h, w;
  char *end;

  if (cli_scan_uint(s, &end, &h) != 0 || h == 0 || h > 16384)
    goto bad;
  w = h;
  if (*end == 'x' &&
      (cli_scan_uint(end + 1, &end, &w) != 0 || w == 0 || w > 16384))
    goto bad;
  if (*end != '\0')
    goto bad;
  io->height = (unsigned)h;
  io->width = (unsigned)w;
  return 0;
bad:
  cli_error("--image-size: expected N or HxW, each 1 to 16384, got '%s'", s);
  return -1;
}

/* --hflip P, a probability. */
static int
probability(const char *s, double *out)
{
  char *end;
  double p;

  errno = 0;
  p = strtod(s, &end);
  if (end == s || *end != '\0' || errno != 0 || !(p >= 0 && p <= 1)) {
    cli_error("--hflip: expected a probability from 0 to 1, got '%s'", s);
    return -1;
  }
  *out = p;
  return 0;
}

/* The image options, which only --dataset images: takes. */
static int
image_option(struct load_args *a, int c, const char *arg)
{
  uint64_t v;
  int rc = 0;

  a->image_only = c;
  switch (c) {
  case OPT_IMAGE_SIZE:
    return image_size(arg, &a->image);
  case OPT_CROP:
    if (strcmp(arg, "random") == 0)
      a->image.crop = FL_CROP_RANDOM_RESIZED;
    else if (strcmp(arg, "center") == 0)
      a->image.crop = FL_CROP_CENTER;
    else {
      cli_error("--crop: expected 'random' or 'center', got '%s'", arg);
      rc = -1;
    }
    return rc;
  case OPT_RESIZE:
    rc = cli_uint(c, arg, 1, 16384, &v);
    a->image.resize = (unsigned)v;
    return rc;
  case OPT_HFLIP:
    return probability(arg, &a->image.hflip);
  }
  a->image.chw_float = 1; /* OPT_FLOAT */
  return 0;
}

/* The field of o that option c sets when it takes a count that fits in
   an unsigned, or NULL.  Zero goes through: the library has the say on
   it (a world of 0, a rank not below the world size). */
static unsigned *
count_field(fl_options *o, int c)
{
  switch (c) {
  case OPT_WORKERS:
    return &o->num_workers;
  case OPT_PREFETCH:
    return &o->prefetch_factor;
  case OPT_TIMEOUT_MS:
    return &o->timeout_ms;
  case OPT_RANK:
    return &o->rank;
  case OPT_WORLD_SIZE:
    return &o->world_size;
  case OPT_MAX_RESTARTS:
    return &o->max_worker_restarts;
  }
  return NULL;
}

/* --shard: kept as given (argv's), for add_shards. */
static int
shard_arg(struct load_args *a, const char *arg)
{
  const char **grown;

  if (*arg == '\0') {
    cli_error("--shard: expected a path or pipe:COMMAND, got ''");
    return -1;
  }
  grown = realloc(a->shard_args, (a->nshard_args + 1) * sizeof(*grown));
  if (grown == NULL) {
    cli_error("--shard: %s", fl_strerror(FL_ENOMEM));
    return -1;
  }
  grown[a->nshard_args++] = arg;
  a->shard_args = grown;
  return 0;
}

/* Applies shared option c.  Returns 0, or -1 having said why not. */
static int
load_option(struct load_args *a, int c, const char *arg)
{
  unsigned *count = count_field(&a->opt, c);
  uint64_t v = 0;
  int rc = 0, i = 0;

  if (count != NULL) {
    rc = cli_uint(c, arg, 0, UINT_MAX, &v);
    *count = (unsigned)v;
    return rc;
  }

  if (c >= OPT_IMAGE_SIZE && c <= OPT_FLOAT)
    return image_option(a, c, arg);
  /* These shape the synthetic dataset: the files shape a --dataset. */
  if (c == OPT_SAMPLES || c == OPT_SAMPLE_BYTES || c == OPT_DELAY_US ||
      c == OPT_BATCHED)
    a->synth_only = c;
  switch (c) {
  case OPT_SAMPLES:
    rc = cli_uint(c, arg, 1, SIZE_MAX, &v);
    a->data.samples = v;
    break;
  case OPT_SAMPLE_BYTES:
    rc = cli_sample_bytes(c, arg, &a->data);
    break;
  case OPT_DELAY_US:
    rc = cli_uint(c, arg, 0, UINT_MAX, &v);
    a->data.delay_us = v;
    break;
  case OPT_BATCHED:
    a->batched = 1;
    break;
  case OPT_INDICES:
    rc = parse_span(arg, &a->span);
    a->indices = arg;
    break;
  /* Zero goes through where the library has the say on it. */
  case OPT_BATCH_SIZE:
    rc = cli_uint(c, arg, 0, SIZE_MAX, &v);
    a->opt.batch_size = v;
    break;
  case OPT_SHUFFLE:
    a->opt.shuffle = 1;
    break;
  case OPT_SEED:
    rc = cli_uint(c, arg, 0, UINT64_MAX, &v);
    a->opt.seed = v;
    a->data.seed = v;
    break;
  case OPT_DROP_LAST:
    a->opt.drop_last = 1;
    break;
  case OPT_PERSISTENT:
    a->opt.persistent_workers = 1;
    break;
  case OPT_OUT_OF_ORDER:
    a->opt.in_order = 0;
    break;
  case OPT_PIN_MEMORY:
    a->opt.pin_memory = 1;
    break;
  case OPT_NO_REUSE:
    a->opt.reuse_segments = 0;
    break;
  case OPT_FD_IN_DEV_SHM:
    a->opt.fd_in_dev_shm = 1;
    break;
  case OPT_SHOW_WORKERS:
    a->opt.worker_init = synth_worker_init;
    break;
  case OPT_DATASET:
    dataset_spec_free(&a->file);
    rc = dataset_parse(arg, &a->file);
    break;
  case OPT_SHARD:
    rc = shard_arg(a, arg);
    break;
  case OPT_SHARING:
  case OPT_STRATEGY:
    rc = cli_sharing(c, arg, &a->opt.sharing);
    a->sharing_set = 1;
    break;
  case OPT_SHARD_MODE:
    rc = cli_choice(c, arg, shard_modes, NSHARD_MODES, &i);
    a->opt.shard_mode = (fl_shard_mode)i;
    break;
  case OPT_SHUFFLE_ALGORITHM:
    rc = cli_choice(c, arg, shuffle_algorithms, 2, &i);
    a->opt.shuffle_algorithm = (fl_shuffle_algorithm)i;
    break;
  /* The library parses the spec, and names the token at fault. */
  case OPT_FAULTS:
    a->opt.faults = arg;
    break;
  }
  return rc;
}

/* Lays out the table: the shared options (if a), own, then --help. */
static void
build_table(const struct load_args *a, const struct option *own)
{
  static const struct option help = {"help", no_argument, NULL, 'h'};
  size_t n = 0;

  for (; a != NULL && load_options[n].name != NULL; n++)
    table[n] = load_options[n];
  for (; own->name != NULL && n < MAX_OPTIONS - 2; own++)
    table[n++] = *own;
  table[n++] = help;
  table[n] = (struct option){NULL, 0, NULL, 0};
}

/* cmd --help: its usage, its own options, then the shared ones if it
   takes them (a), which parsing so far may have allocated. */
static void
help(const struct cli_command *cmd, struct load_args *a)
{
  cli_print_usage(stdout, cmd->usage, 1);
  printf("\n%s", cmd->help);
  puts("  -h, --help            print this help");
  if (a != NULL) {
    fputs(load_help, stdout);
    load_args_free(a);
  }
  exit(0);
}

static void
bad_option(char **argv)
{
  const char *name = optopt != 0 ? option_name(optopt) : NULL;

  if (name != NULL)
    cli_error("--%s: takes no value", name);
  else if (optopt != 0)
    cli_error("unknown option '-%c'", optopt);
  else
    cli_error("unknown or ambiguous option '%s'", argv[optind - 1]);
}

int
cli_options(const struct cli_command *cmd, int argc, char **argv,
            struct load_args *a, cli_own_fn fn, void *ctx)
{
  int c, rc;

  if (a != NULL)
    load_defaults(a);
  build_table(a, cmd->options);
  opterr = 0; /* our own one-line messages, not getopt's */
  while ((c = getopt_long(argc, argv, ":h", table, NULL)) != -1) {
    if (c == 'h')
      help(cmd, a);
    if (c == ':') {
      cli_error("--%s: missing value", option_name(optopt));
      return -1;
    }
    if (c == '?') {
      bad_option(argv);
      return -1;
    }
    rc = c < OPT_OWN ? load_option(a, c, optarg) : fn(c, optarg, ctx);
    if (rc < 0)
      return -1;
  }
  return optind;
}

/* --shard's shards after those of --dataset webdataset:, which may then
   name none; whichever option came first. */
static int
add_shards(struct load_args *a)
{
  struct dataset_spec *f = &a->file;
  const char **all;

  if (f->kind != DS_WEBDATASET) {
    if (a->nshard_args == 0)
      return 0;
    cli_error("--shard: applies only with --dataset webdataset:EXT=MAX"
              "[,...]");
    return -1;
  }
  if (f->nshards + a->nshard_args == 0) {
    cli_error("--dataset: webdataset names no shard: give them before its "
              "extensions, or with --shard, got '%s'", f->spec);
    return -1;
  }
  all = realloc(f->shards, (f->nshards + a->nshard_args) * sizeof(*all));
  if (all == NULL) {
    cli_error("--shard: %s", fl_strerror(FL_ENOMEM));
    return -1;
  }
  if (a->nshard_args > 0) /* memcpy takes no NULL, even for nothing */
    memcpy(all + f->nshards, a->shard_args, a->nshard_args * sizeof(*all));
  f->shards = all;
  f->nshards += a->nshard_args;
  return 0;
}

/* On a usage error, what parsing allocated is freed here, for every caller. */
int
cli_parse(const struct cli_command *cmd, int argc, char **argv,
          struct load_args *a, cli_own_fn fn, void *ctx)
{
  int first = cli_options(cmd, argc, argv, a, fn, ctx);

  if (first < 0)
    goto fail;
  if (first < argc) {
    cli_error("%s: unexpected argument '%s'", cmd->name, argv[first]);
    goto fail;
  }
  if (a != NULL && a->file.kind != DS_SYNTHETIC && a->synth_only != 0) {
    cli_error("--%s: does not apply with --dataset, whose files say what "
              "the samples are", option_name(a->synth_only));
    goto fail;
  }
  /* A stream has no index to pick or shuffle by; said before any shard
     is opened. */
  if (a != NULL && a->file.kind == DS_WEBDATASET &&
      (a->indices != NULL || a->opt.shuffle)) {
    cli_error("--%s: a webdataset is a stream, read in shard order by each "
              "worker, with no index to %s by; name fewer shards instead",
              a->indices != NULL ? "indices" : "shuffle",
              a->indices != NULL ? "pick samples" : "shuffle");
    goto fail;
  }
  if (a != NULL && a->file.kind != DS_IMAGES && a->image_only != 0) {
    cli_error("--%s: applies only with --dataset images:DIR",
              option_name(a->image_only));
    goto fail;
  }
  if (a != NULL && add_shards(a) < 0)
    goto fail;
  return 0;

fail:
  if (a != NULL)
    load_args_free(a);
  return -1;
}

/* The synthetic dataset, or the one --dataset names, whose size is then
   what the library found in the files. */
/* An iterable's samples are not counted: its fields are its sizes. */
static int
open_iterable(struct load_args *a)
{
  size_t f;

  if (dataset_open_iterable(&a->file, &a->it) < 0)
    return -1;
  a->ds_open = a->iterable = 1;
  a->data.samples = 0;
  a->data.nfields = a->it.nfields;
  a->data.sample_bytes = 0;
  for (f = 0; f < a->it.nfields; f++) {
    a->data.field_bytes[f] = a->it.field_bytes[f];
    a->data.sample_bytes += a->it.field_bytes[f];
  }
  return 0;
}

static int
open_dataset(struct load_args *a)
{
  if (a->file.kind == DS_SYNTHETIC) {
    synth_dataset(&a->data, a->batched, &a->ds);
    return 0;
  }
  if (a->image.hflip < 0)
    a->image.hflip = a->image.crop == FL_CROP_RANDOM_RESIZED ? 0.5 : 0;
  a->file.io = &a->image;
  if (a->file.kind == DS_WEBDATASET)
    return open_iterable(a);
  if (dataset_open(&a->file, &a->ds) < 0)
    return -1;
  a->ds_open = 1;
  a->data.samples = a->ds.len;
  a->data.sample_bytes = a->ds.sample_bytes;
  a->data.nfields = a->ds.nfields;
  /* The library makes no more fields than field_bytes has room for. */
  if (a->ds.nfields > 0)
    memcpy(a->data.field_bytes, a->ds.field_bytes,
           a->ds.nfields * sizeof a->ds.field_bytes[0]);
  return 0;
}

int
load_dataset(struct load_args *a)
{
  struct synth_span *sp = &a->span;
  size_t k;

  if (open_dataset(a) < 0)
    return 1;
  if (a->indices == NULL) {
    *sp = (struct synth_span){0, 1, a->data.samples};
    return 0;
  }
  /* Checked before a wild range is built into an array. */
  if (sp->first + (sp->count - 1) * sp->step >= a->data.samples) {
    cli_error("--indices: %s goes past the %zu samples", a->indices,
              a->data.samples);
    return 2;
  }
  a->index_list = calloc(sp->count, sizeof *a->index_list);
  if (a->index_list == NULL) {
    cli_error("--indices: %s", fl_strerror(FL_ENOMEM));
    return 1;
  }
  for (k = 0; k < sp->count; k++)
    a->index_list[k] = sp->first + k * sp->step;
  a->opt.indices = a->index_list;
  a->opt.indices_len = sp->count;
  return 0;
}

const char *
load_samples(const struct load_args *a, char *buf, size_t len)
{
  char sizes[768];

  synth_sizes(&a->data, sizes, sizeof sizes);
  /* A stream's samples are counted as they come. */
  if (a->iterable)
    snprintf(buf, len, "streams of samples of %s", sizes);
  else
    snprintf(buf, len, "%zu samples of %s", a->data.samples, sizes);
  return buf;
}

int
load_create(struct load_args *a, fl_loader **l)
{
  return a->iterable ? fl_loader_create_iterable(l, &a->it, &a->opt)
                     : fl_loader_create(l, &a->ds, &a->opt);
}

void
load_args_free(struct load_args *a)
{
  free(a->index_list);
  a->index_list = NULL;
  if (a->ds_open && a->iterable)
    fl_iterable_close(&a->it);
  else if (a->ds_open)
    fl_dataset_close(&a->ds);
  a->ds_open = a->iterable = 0;
  dataset_spec_free(&a->file);
  free(a->shard_args);
  a->shard_args = NULL;
  a->nshard_args = 0;
}

/* A character of a C identifier: a field name is a whole word of these. */
static int
word_char(char c)
{
  return isalnum((unsigned char)c) || c == '_';
}

/* The flag for the field named by the n bytes at s, or NULL. */
static const char *
field_flag(const char *s, size_t n)
{
  size_t i;

  for (i = 0; i < sizeof field_flags / sizeof field_flags[0]; i++)
    if (strlen(field_flags[i].field) == n &&
        memcmp(s, field_flags[i].field, n) == 0)
      return field_flags[i].flag;
  return NULL;
}

/*
 * Whether the n bytes at word, a field's name, stand for the field.  An
 * identifier with an underscore always does; a name that is also a word of
 * English (len, seed, shuffle, sharing, indices, as in "with their indices
 * and sizes") only before " is ", "[" or a number, or first (see
 * put_flags).
 */
static int
names_field(const char *word, size_t n)
{
  const char *after = word + n;

  return memchr(word, '_', n) != NULL || strncmp(after, " is ", 4) == 0 ||
         *after == '[' ||
         (after[0] == ' ' && isdigit((unsigned char)after[1]));
}

/* Writes s to f with every whole word that names a field replaced by its
   flag (len becomes --samples; fl_loader_len and sample_bytes_x stay);
   first: s begins the message, where a field's name is the field. */
static void
put_flags(FILE *f, const char *s, int first)
{
  const char *flag;
  size_t n;

  while (*s != '\0') {
    for (n = 0; word_char(s[n]); n++)
      ;
    if (n == 0) {
      fputc(*s++, f);
      continue;
    }
    flag = field_flag(s, n);
    if (flag != NULL && (first || names_field(s, n)))
      fputs(flag, f);
    else
      fwrite(s, 1, n, f);
    s += n;
    first = 0;
  }
}

/*
 * Writes msg to f in the flags' names.  "[dataset: ]FIELD is VALUE[:
 * REASON]" becomes "--flag VALUE[: REASON]", as the user would have typed
 * it; "FIELD: ..." (a fault spec's token) "--flag: ...", the rest in the
 * spec's own words (its seed is not --seed); in any other message, and in
 * the reason, each field name that stands as a word for the field becomes
 * its flag.
 */
static void
put_message(FILE *f, const char *msg)
{
  const char *p = msg, *value, *flag;
  size_t n, len;

  if (strncmp(p, "dataset: ", 9) == 0)
    p += 9;
  for (n = 0; word_char(p[n]); n++)
    ;
  flag = field_flag(p, n);
  if (flag != NULL && strncmp(p + n, " is ", 4) == 0) {
    value = p + n + 4;
    len = strcspn(value, " :");
    if (len > 0 && (value[len] == '\0' || value[len] == ':')) {
      fprintf(f, "%s %.*s", flag, (int)len, value);
      put_flags(f, value + len, 0);
      return;
    }
  }
  if (flag != NULL && p[n] == ':') {
    fprintf(f, "%.*s%s%s", (int)(p - msg), msg, flag, p + n);
    return;
  }
  fwrite(msg, 1, (size_t)(p - msg), f); /* "dataset: ", if there */
  put_flags(f, p, 1);
}

int
cli_create_error(int rc)
{
  const char *msg = cli_loader_error(NULL, rc);
  char *text = NULL;
  size_t len;
  FILE *f = open_memstream(&text, &len);

  /* Out of memory, the library's own words are still worth saying. */
  if (f != NULL) {
    put_message(f, msg);
    if (fclose(f) == 0 && text != NULL)
      msg = text;
  }
  cli_error("%s", msg);
  free(text);
  /* The library checks the options, and that the prefetch window fits in
     memory, fds and /dev/shm, and the workers in processes: what it
     refuses is bad input. */
  return rc == FL_EINVAL || rc == FL_ENOMEM || rc == FL_ENOSPC ||
                 rc == FL_EMFILE || rc == FL_EAGAIN
             ? 2
             : 1;
}
