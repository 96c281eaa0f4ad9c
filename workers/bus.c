/*
 * A worker's last word on SIGBUS: before the signal kills it, note the
 * address that faulted and the file mapped there (or that the signal was
 * sent, not a fault), where the parent reads them, so that its report
 * says what happened (a mapped dataset file that shrank, say) instead of
 * guessing.  Runs in a signal handler: /proc is
 * read with read(2) and parsed by hand.
 */
#include "config.h"

#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

static struct fl__bus_note *note;

/* A hex number at *p, which moves past it. */
static uint64_t
hex(const char **p)
{
  uint64_t v = 0;
  int d;

  for (;; (*p)++) {
    if (**p >= '0' && **p <= '9')
      d = **p - '0';
    else if (**p >= 'a' && **p <= 'f')
      d = **p - 'a' + 10;
    else
      return v;
    v = v << 4 | (uint64_t)d;
  }
}

/* Past n fields of a /proc/self/maps line and the spaces after them. */
static const char *
skip_fields(const char *p, int n)
{
  for (; n > 0; n--) {
    while (*p != '\0' && *p != ' ')
      p++;
    while (*p == ' ')
      p++;
  }
  return p;
}

static void
on_bus(int sig, siginfo_t *si, void *ctx)
{
  uint64_t addr = (uint64_t)(uintptr_t)si->si_addr, start, end;
  struct fl__lines lr;
  char line[512];
  const char *p;

  (void)ctx;
  note->addr = addr != 0 ? addr : 1;
  note->si_code = si->si_code;
  note->path[0] = '\0';
  if (fl__lines_open(&lr, "/proc/self/maps") == 0) {
    while (fl__lines_next(&lr, line, sizeof(line))) {
      p = line;
      start = hex(&p);
      if (*p++ != '-')
        continue;
      end = hex(&p);
      if (addr < start || addr >= end)
        continue;
      p = skip_fields(p, 5);
      strncpy(note->path, p, sizeof(note->path) - 1);
      note->path[sizeof(note->path) - 1] = '\0';
      break;
    }
    fl__close(lr.fd);
  }
  /* The action is the default again (SA_RESETHAND): once the handler
     returns, this kills, whether the signal was a fault or sent. */
  raise(sig);
}

void
fl__bus_watch(struct fl__bus_note *n)
{
  struct sigaction sa;

  note = n;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_bus;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, NULL);
}
