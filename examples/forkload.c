/*
 * forkload(1), the command-line demo of the library: main() picks the
 * subcommand, usage() and cli_error() speak for all of them.
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
    "       forkload help | -h | -V\n"
    "\n"
    "Loads a synthetic dataset through forked workers and shared memory,\n"
    "as a training loop would, and reports how fast it went.\n"
    "\n"
    "dataset:\n"
    "  --samples N           samples in the dataset (50000)\n"
    "  --sample-bytes B      bytes per sample (12288: 3x32x32 float32)\n"
    "  --delay-us U          sleep U us in the worker per sample (0)\n"
    "  --batched             fetch a whole batch per call; the delay is\n"
    "                        then slept once per batch\n"
    "  --indices S:E[:STEP]  load only indices S, S+STEP, ... below E\n"
    "loader:\n"
    "  --batch-size N        samples per batch (64)\n"
    "  --shuffle             shuffle every epoch\n"
    "  --seed N              seed of the shuffle and the workers (0)\n"
    "  --drop-last           drop the last batch when it is short\n"
    "  --workers N           worker processes; 0 loads in-process (2)\n"
    "  --prefetch N          batches in flight per worker (2)\n"
    "  --persistent          keep the workers between epochs\n"
    "  --out-of-order        hand out batches as they arrive\n"
    "  --pin-memory          mlock batch memory in the parent\n"
    "  --timeout-ms N        fail when a batch takes longer (0: never)\n"
    "  --sharing fd|fs       pass fds, or name segments in /dev/shm (fd)\n"
    "  --no-reuse            a new segment per batch, as PyTorch does\n"
    "  --show-workers        print each worker's id, pid and seed\n"
    "run:\n"
    "  --epochs N            epochs over the same loader (1)\n"
    "  --verify              check every sample against its index\n"
    "  --json                print the summary as one JSON object\n"
    "  --quiet               no progress line\n"
    "\n"
    "Exit status: 0 on success, 1 when loading fails, 2 on bad options,\n"
    "128 + the signal when interrupted.\n",
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

int
main(int argc, char **argv)
{
  const char *cmd;

  if (argc < 2)
    usage(2);
  cmd = argv[1];
  if (strcmp(cmd, "run") == 0)
    return run_main(argc - 1, argv + 1);
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
