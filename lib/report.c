/*
 * What a loader reports: the sentence for its last error, the sticky
 * failure every later call returns, its warnings (fl_options.log), its
 * stats counters, and the clock they use.  The files of the data path
 * (batch.c, dispatch.c, receive.c, worker.c) record into these, and
 * loader.c reads them; nothing here calls up into them.
 */
#include "config.h"

#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

double
fl__now(void)
{
  struct timespec t;

  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void
fl__log(const fl_loader *l, const char *fmt, ...)
{
  char msg[FL__ERRMSG_MAX];
  va_list ap;

  if (l->opt.log == NULL || l->foreign)
    return;
  va_start(ap, fmt);
  fl__vformat(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  l->opt.log(l->opt.log_arg, msg);
}

/* Why the last fl_loader_create* or fl_dataset_* call of this thread
   failed: there is no loader to carry the message. */
static __thread char create_error[FL__ERRMSG_MAX];

int
fl__error_set(int code, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  fl__vformat(create_error, sizeof(create_error), fmt, ap);
  va_end(ap);
  return code;
}

void
fl__error_clear(void)
{
  create_error[0] = '\0';
}

static int
vset_error(fl_loader *l, int code, const char *fmt, va_list ap)
{
  fl__vformat(l->err, sizeof(l->err), fmt, ap);
  return code;
}

int
fl__loader_set_error(fl_loader *l, int code, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vset_error(l, code, fmt, ap);
  va_end(ap);
  return code;
}

/*
 * An error the loader cannot recover from: every later call returns it.
 * A code that elsewhere means "go on" (ENOMEM, say) becomes FL_EFATAL, so
 * that fl_error_is_final never tells a caller to retry a dead loader; the
 * sentence keeps the cause.
 */
int
fl__loader_fail(fl_loader *l, int code, const char *fmt, ...)
{
  va_list ap;

  if (l->fatal)
    return l->fatal;
  if (!fl_error_is_final(code))
    code = FL_EFATAL;
  va_start(ap, fmt);
  vset_error(l, code, fmt, ap);
  va_end(ap);
  l->fatal = code;
  return code;
}

/*
 * A call in a child of the process that made the loader (a helper the host
 * forked, a system() that runs atexit handlers): the workers, their queues
 * and the event loop are the maker's, and nothing this copy does may reach
 * them.
 */
int
fl__loader_foreign(const fl_loader *l, const char *fn)
{
  return fl__loader_set_error(
      (fl_loader *)l, FL_ESTATE,
      "%s: this process (pid %ld) is not the process that made the loader "
      "(pid %ld) but a child of it: only the maker may use it. "
      "fl_loader_destroy here frees this copy and leaves the maker's "
      "workers alone",
      fn, (long)getpid(), (long)l->owner);
}

void
fl__stats_fds(fl_loader *l, int delta)
{
  l->stats.fds += delta;
  if (l->stats.fds > l->stats.fds_peak)
    l->stats.fds_peak = l->stats.fds;
}

void
fl__stats_segments(fl_loader *l, int delta_segments, long delta_bytes,
                   int delta_fds)
{
  fl_stats *s = &l->stats;

  s->segments += delta_segments;
  s->bytes_mapped += delta_bytes;
  if (s->segments > s->segments_peak)
    s->segments_peak = s->segments;
  if (s->bytes_mapped > s->bytes_mapped_peak)
    s->bytes_mapped_peak = s->bytes_mapped;
  fl__stats_fds(l, delta_fds);
}

const char *
fl_loader_error(const fl_loader *l)
{
  if (l == NULL)
    return create_error;
  return l->err;
}

int
fl_loader_stats_sized(const fl_loader *l, fl_stats *out, size_t size)
{
  fl_stats st;

  if (l == NULL || out == NULL || size < FL__STATS_SIZE_0_1)
    return FL_EINVAL;
  if (FL__FOREIGN(l))
    return fl__loader_foreign(l, "fl_loader_stats");
  st = l->stats;
  st.reorder_depth = l->reorder.depth;
  st.reorder_peak = l->reorder.peak;
  fl__struct_out(out, size, &st, sizeof(st));
  return 0;
}
