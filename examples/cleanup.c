/*
 * `forkload cleanup`: removes the segments that forkload parents killed
 * while a batch was in transit left in /dev/shm.  fl_shm_sweep picks them:
 * only names of forkload's own form whose owner process is gone.  Names
 * made in another PID namespace sharing /dev/shm are left alone, since
 * their owner cannot be judged from here, and said so (fl_shm_foreign).
 */
#include "config.h"

#include <stdio.h>

#include "cli.h"

enum { OPT_DRY_RUN = OPT_OWN };

static const char help[] =
  "Removes the /dev/shm segments of forkload parents that died while a\n"
  "batch was in transit: names of forkload's form whose owner is gone.\n"
  "Names of another PID namespace (a container sharing /dev/shm) are\n"
  "left alone, and listed: their owner may be alive.\n"
  "\n"
  "cleanup:\n"
  "  --dry-run             only list what would be removed\n";

static const struct option options[] = {
  {"dry-run", no_argument, NULL, OPT_DRY_RUN},
  {NULL, 0, NULL, 0}
};

static int
cleanup_option(int c, const char *arg, void *ctx)
{
  (void)arg;
  if (c == OPT_DRY_RUN)
    *(int *)ctx = 1;
  return 0;
}

static void
on_segment(const char *name, long owner_pid, void *arg)
{
  printf("%s /dev/shm/%s (owner pid %ld is gone)\n",
         *(const int *)arg ? "would remove" : "removed", name, owner_pid);
}

static void
on_foreign(const char *name, long owner_pid, void *arg)
{
  (void)arg;
  printf("left alone /dev/shm/%s (owner pid %ld is in another PID "
         "namespace)\n", name, owner_pid);
}

static int
cleanup_main(int argc, char **argv)
{
  int dry_run = 0, n, foreign;

  if (cli_parse(&cli_cleanup, argc, argv, NULL, cleanup_option, &dry_run) <
      0)
    return 2;
  n = fl_shm_sweep(dry_run, on_segment, &dry_run);
  foreign = n < 0 ? n : fl_shm_foreign(on_foreign, NULL);
  if (foreign < 0) {
    cli_error("cleanup: cannot sweep /dev/shm: %s", fl_strerror(foreign));
    return 1;
  }
  printf("%d segment(s) %s\n", n, dry_run ? "would be removed" : "removed");
  if (foreign > 0)
    printf("%d name(s) of another PID namespace left alone\n", foreign);
  return 0;
}

const struct cli_command cli_cleanup = {
  "cleanup", "forkload cleanup [--dry-run]", help, options, cleanup_main
};
