/*
 * Time, rates, and the live progress line that `forkload run` redraws on a
 * terminal while it loads.
 */
#include "config.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define BAR_WIDTH 20
#define REDRAW_SECONDS 0.1 /* ~10 Hz: faster only costs the consumer */

double
cli_now(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double
cli_rate(double amount, double seconds)
{
  return seconds > 0 ? amount / seconds : 0;
}

void
progress_init(struct progress *p, int wanted)
{
  p->on = wanted && isatty(STDERR_FILENO);
  p->shown = 0;
  p->start = cli_now();
  p->drawn = p->start;
}

void
progress_draw(struct progress *p, unsigned epoch, unsigned epochs,
              size_t done, size_t total, const struct tally *t)
{
  char bar[BAR_WIDTH + 1];
  double now, secs;
  size_t i, full;

  if (!p->on)
    return;
  now = cli_now();
  if (now - p->drawn < REDRAW_SECONDS && done != total)
    return;
  full = total > 0 ? done * BAR_WIDTH / total : BAR_WIDTH;
  for (i = 0; i < BAR_WIDTH; i++)
    bar[i] = i < full ? '#' : '.';
  bar[BAR_WIDTH] = '\0';
  secs = now - p->start;
  /* \033[K erases what a longer earlier line left. */
  fprintf(stderr,
          "\repoch %u/%u [%s] %zu/%zu  %.1f batches/s  %.1f MB/s\033[K",
          epoch, epochs, bar, done, total,
          cli_rate((double)t->batches, secs),
          cli_rate((double)t->bytes / 1e6, secs));
  p->drawn = now;
  p->shown = 1;
}

void
progress_clear(struct progress *p)
{
  if (p->shown)
    fputs("\r\033[K", stderr);
  p->shown = 0;
}
