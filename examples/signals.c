/*
 * A first ^C or SIGTERM only asks a subcommand to stop, so that it still
 * reports what it did and destroys its loader, leaving no names in
 * /dev/shm; a second one kills.
 */
#include "config.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

volatile sig_atomic_t cli_interrupted;
static pid_t parent;

static void
on_signal(int sig)
{
  /* A worker inherits this: there the default action (SA_RESETHAND
     restored it) is what the library expects. */
  if (getpid() != parent) {
    raise(sig);
    return;
  }
  cli_interrupted = sig;
}

void
cli_catch_signals(void)
{
  struct sigaction sa;

  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  parent = getpid();
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

const char *
cli_signal_name(int sig)
{
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}
