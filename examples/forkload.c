/*
 * forkload(1), the command-line demo of the library: main() picks the
 * subcommand; usage() gives the overview of them all, and cli_error() and
 * the small helpers below serve every one.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The subcommands, in the order the overview lists them. */
static const struct cli_command *const commands[] = {
  &cli_run, &cli_doctor, &cli_exhaust, &cli_soak, &cli_cleanup, &cli_gen
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

void
cli_print_usage(FILE *f, const char *lines, int first)
{
  size_t n;

  while (*lines != '\0') {
    n = strcspn(lines, "\n");
    fprintf(f, "%s%.*s\n", first ? "usage: " : "       ", (int)n, lines);
    first = 0;
    lines += n + (lines[n] == '\n');
  }
}

/* The overview: every subcommand's usage, and where their options are. */
void
usage(int status)
{
  FILE *f = status == 0 ? stdout : stderr;
  size_t i;

  for (i = 0; i < NCOMMANDS; i++)
    cli_print_usage(f, commands[i]->usage, i == 0);
  cli_print_usage(f, "forkload help | -h | --help | -V | --version", 0);
  fputs(
    "\n"
    "run loads a synthetic dataset, or files (--dataset), through forked\n"
    "workers and shared memory, as a training loop would, and reports how\n"
    "fast it went.  gen writes the synthetic dataset to files.\n"
    "doctor prints the budget of the loader the options describe: each\n"
    "limit, and how many batches can be held before it stops the loader.\n"
    "exhaust holds every batch until the loader runs out of fds or shared\n"
    "memory, reports the error, and checks that nothing is left behind;\n"
    "it stops first where that would take over half the free memory.\n"
    "soak runs random configurations, with injected faults, for a time and\n"
    "checks every batch and that nothing is left behind.\n"
    "cleanup removes the /dev/shm segments of forkload parents that died.\n"
    "\n"
    "'forkload SUBCOMMAND --help' (or -h) lists the options of SUBCOMMAND.\n"
    "\n"
    "Exit status: 0 on success, 1 when loading fails, 2 on bad options,\n"
    "128 + the signal when interrupted.  exhaust exits 0 when its loader\n"
    "left nothing behind, whatever error stopped it, and 1 if it did;\n"
    "soak exits 1 at its first violation, naming the configuration.\n",
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
cli_fail(char *why, size_t len, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return -1;
}

/* The loader's last error as its user reads it; fl_loader_error(NULL)
   holds why fl_loader_create failed. */
const char *
cli_loader_error(const fl_loader *l, int rc)
{
  const char *msg = fl_loader_error(l);

  return msg != NULL && *msg != '\0' ? msg : fl_strerror(rc);
}

void
cli_log(void *arg, const char *msg)
{
  const struct cli_log *g = arg;

  if (g->loader != NULL && strcmp(msg, fl_loader_error(g->loader)) == 0)
    return;
  if (g->pg != NULL)
    progress_clear(g->pg);
  cli_error("warning: %s", msg);
}

int
cli_kept(int rc)
{
  return (rc == FL_EMFILE || rc == FL_ENFILE || rc == FL_ENOSPC ||
          rc == FL_ENOMEM) &&
         !fl_error_is_final(rc);
}

/* The library's sentence: "batch SEQ (worker W): filling this batch
   (samples ...) killed its worker twice (SIG...); ...". */
int
cli_poisoned(const fl_loader *l, int rc, uint64_t *seq)
{
  const char *msg = fl_loader_error(l);
  unsigned long long v;
  int n = 0;

  if (rc != FL_EDATASET || msg == NULL ||
      strstr(msg, "killed its worker twice") == NULL ||
      sscanf(msg, "batch %llu (worker %*u)%n", &v, &n) != 1 || n == 0)
    return 0;
  *seq = v;
  return 1;
}

/* A second such error in a row is no lock failure: that batch would have
   come out in between. */
int
cli_pin_warning(struct cli_pin *w, const fl_loader *l, const fl_options *opt,
                int rc)
{
  int warn = opt->pin_memory && (rc == FL_ENOMEM || rc == FL_EPERM) &&
             !w->last;

  w->last = warn;
  if (warn && !w->said) {
    if (w->pg != NULL)
      progress_clear(w->pg);
    cli_error("warning: %s", cli_loader_error(l, rc));
    w->said = 1;
  }
  return warn;
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
  size_t i;

  if (argc < 2)
    usage(2);
  cmd = argv[1];
  for (i = 0; i < NCOMMANDS; i++)
    if (strcmp(cmd, commands[i]->name) == 0)
      return commands[i]->main(argc - 1, argv + 1);
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
