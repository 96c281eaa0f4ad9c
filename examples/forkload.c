/*
 * forkload(1), the command-line demo of the library: main() picks the
 * subcommand; usage(), cli_error() and the small helpers below serve all
 * of them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void
usage(int status)
{
  FILE *f = status == 0 ? stdout : stderr;

  fputs(
    "usage: forkload run [options]\n"
    "       forkload exhaust --sharing fd|fs [options]\n"
    "       forkload cleanup [--dry-run]\n"
    "       forkload gen npy-dir|npy|raw PATH --samples N --sample-bytes B\n"
    "                [--seed S] [--header-bytes H] [--force]\n"
    "       forkload help | -h | -V\n"
    "\n"
    "run loads a synthetic dataset, or files (--dataset), through forked\n"
    "workers and shared memory, as a training loop would, and reports how\n"
    "fast it went.  gen writes the synthetic dataset to files.\n"
    "exhaust holds every batch until the loader runs out of fds or shared\n"
    "memory, reports the error, and checks that nothing is left behind.\n"
    "cleanup removes the /dev/shm segments of forkload parents that died.\n"
    "\n"
    "dataset (run, exhaust):\n"
    "  --dataset SPEC        read files, which then take the place of the\n"
    "                        next four options: npy-dir:DIR, npy:FILE or\n"
    "                        raw:FILE:RECORD_BYTES[:HEADER_BYTES]\n"
    "  --samples N           samples in the dataset (50000)\n"
    "  --sample-bytes B      bytes per sample (12288: 3x32x32 float32)\n"
    "  --delay-us U          sleep U us in the worker per sample (0)\n"
    "  --batched             fetch a whole batch per call; the delay is\n"
    "                        then slept once per batch\n"
    "  --indices S:E[:STEP]  load only indices S, S+STEP, ... below E\n"
    "loader (run, exhaust):\n"
    "  --sharing fd|fs       pass fds, or name segments in /dev/shm (fd;\n"
    "                        exhaust: required)\n"
    "  --strategy fd|fs      the same as --sharing\n"
    "  --batch-size N        samples per batch (64)\n"
    "  --shuffle             shuffle every epoch\n"
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
    "run:\n"
    "  --epochs N            epochs over the same loader (1)\n"
    "  --verify              check every sample against its index (with\n"
    "                        --dataset: files that gen wrote, same --seed)\n"
    "  --json                print the summary as one JSON object\n"
    "  --quiet               no progress line\n"
    "exhaust (workers are always persistent):\n"
    "  --hold N|all          stop after N batches held (all)\n"
    "  --fd-limit N          lower the soft RLIMIT_NOFILE to N first\n"
    "  --json                print the result as one JSON object\n"
    "cleanup:\n"
    "  --dry-run             only list what would be removed\n"
    "gen (the content of run's synthetic dataset with the same options):\n"
    "  --samples N           samples to write (required)\n"
    "  --sample-bytes B      bytes per sample (required); arrays are of\n"
    "                        float32 when B is a multiple of 4, else bytes\n"
    "  --seed S              seed of the content (0)\n"
    "  --header-bytes H      raw: H bytes of zeros before the records (0)\n"
    "  --force               write over files, into a non-empty directory\n"
    "\n"
    "Exit status: 0 on success, 1 when loading fails, 2 on bad options,\n"
    "128 + the signal when interrupted.  exhaust exits 0 when its loader\n"
    "left nothing behind, whatever error stopped it, and 1 if it did.\n",
    f);
  exit(status);
}

void
cli_error(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  fputs("forkload: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* The loader's last error as its user reads it; fl_loader_error(NULL)
   holds why fl_loader_create failed. */
const char *
cli_loader_error(const fl_loader *l, int rc)
{
  const char *msg = fl_loader_error(l);

  return msg != NULL && *msg != '\0' ? msg : fl_strerror(rc);
}

int
cli_grow(void **v, size_t n, size_t size)
{
  void *p;

  if (n & (n - 1)) /* room is made when n reaches a power of two */
    return 0;
  p = realloc(*v, (n ? 2 * n : 1) * size);
  if (p == NULL)
    return -1;
  *v = p;
  return 0;
}

void
cli_json_string(const char *s)
{
  if (s == NULL) {
    fputs("null", stdout);
    return;
  }
  putchar('"');
  for (; *s != '\0'; s++) {
    if (*s == '"' || *s == '\\')
      printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      printf("\\u%04x", (unsigned char)*s);
    else
      putchar(*s);
  }
  putchar('"');
}

int
main(int argc, char **argv)
{
  const char *cmd;

  if (argc < 2)
    usage(2);
  cmd = argv[1];
  if (strcmp(cmd, "run") == 0)
    return run_main(argc - 1, argv + 1);
  if (strcmp(cmd, "exhaust") == 0)
    return exhaust_main(argc - 1, argv + 1);
  if (strcmp(cmd, "cleanup") == 0)
    return cleanup_main(argc - 1, argv + 1);
  if (strcmp(cmd, "gen") == 0)
    return gen_main(argc - 1, argv + 1);
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "-h") == 0 ||
      strcmp(cmd, "--help") == 0)
    usage(0);
  if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
    printf("forkload %d.%d.%d\n", FL_VERSION_MAJOR, FL_VERSION_MINOR,
           FL_VERSION_PATCH);
    return 0;
  }
  cli_error("unknown command '%s' (try 'forkload help')", cmd);
  return 2;
}
