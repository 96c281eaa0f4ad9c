/*
 * What a worker knows about itself (fl_get_worker_info), the batch being
 * filled (its epoch, and fl_sample_seed), and the message a dataset leaves
 * for its failing get (fl_worker_error).
 */
#include "config.h"

#include <stdarg.h>

#include "internal.h"

static fl_worker_info info;
static int in_worker;
/* Per thread: with num_workers 0, loaders in several threads fetch inline. */
static __thread char error_text[FL__REPLY_MSG_MAX];
static __thread uint64_t sample_key; /* of the batch being filled */

const fl_worker_info *
fl_get_worker_info(void)
{
  return in_worker ? &info : NULL;
}

void
fl__worker_info_set(const fl_worker_info *i)
{
  info = *i;
  in_worker = 1;
}

void
fl__fill_context(uint64_t seed, uint64_t epoch, uint64_t run)
{
  info.epoch = epoch;
  info.run = run;
  sample_key = fl__epoch_seed(seed, epoch, 3);
}

/*
 * A function of (seed, epoch, index) alone: whichever worker fills the
 * sample, first time or after a resume, draws the same numbers from it.
 */
uint64_t
fl_sample_seed(size_t index)
{
  return fl__mix64(sample_key ^ fl__mix64(index));
}

void
fl_worker_error(const char *fmt, ...)
{
  va_list ap;

  if (fmt == NULL)
    return;
  va_start(ap, fmt);
  fl__vformat(error_text, sizeof(error_text), fmt, ap);
  va_end(ap);
}

void
fl__worker_error_clear(void)
{
  error_text[0] = '\0';
}

const char *
fl__worker_error_text(void)
{
  return error_text;
}
