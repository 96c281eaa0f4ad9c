/*
 * Fault injection, for testing a trainer's error handling: a spec such as
 * "kill=0.01,delay=0.1:50,seed=3" says how often each fault strikes.
 * Whether one strikes a batch is a function of the seed, the fault, the
 * batch's epoch and position and its try (FL__ATTEMPT: the times a fault
 * or a limit struck it), so that the same faults hit the same batches in
 * every run, and a batch struck draws anew when it is asked again.  Pure
 * functions: a worker calls them after the fork.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const names[FL__FAULT_KINDS] = {"kill", "exit", "enospc",
                                                   "emfile", "delay"};

static int
bad(const char *tok, size_t n, const char *why, char *err, size_t errlen)
{
  snprintf(err, errlen, "faults: \"%.*s\": %s", (int)n, tok, why);
  return FL_EINVAL;
}

/* The value from s to end as a string in buf (32 bytes), or -1. */
static int
value(const char *s, const char *end, char *buf)
{
  size_t n = (size_t)(end - s);

  if (n == 0 || n >= 32)
    return -1;
  memcpy(buf, s, n);
  buf[n] = '\0';
  errno = 0;
  return 0;
}

/* A probability, 0 to 1, ending at end. */
static int
probability(const char *s, const char *end, double *p)
{
  char buf[32], *stop;

  if (value(s, end, buf) != 0)
    return -1;
  *p = strtod(buf, &stop);
  return *stop != '\0' || errno != 0 || !(*p >= 0 && *p <= 1) ? -1 : 0;
}

/* A whole number up to max, ending at end. */
static int
number(const char *s, const char *end, unsigned long long max,
       unsigned long long *v)
{
  char buf[32], *stop;

  if (value(s, end, buf) != 0 || *s == '-' || *s == '+')
    return -1;
  *v = strtoull(buf, &stop, 10);
  return *stop != '\0' || errno != 0 || *v > max ? -1 : 0;
}

/* The fault kind named by the n bytes at s, or FL__FAULT_KINDS. */
static size_t
kind_of(const char *s, size_t n)
{
  size_t k;

  for (k = 0; k < FL__FAULT_KINDS; k++)
    if (strlen(names[k]) == n && memcmp(s, names[k], n) == 0)
      break;
  return k;
}

/* NAME@N, of n bytes: fault NAME strikes batch N on its first try, in
   every epoch, so that a test can aim at one batch; its redo is spared. */
static int
aimed(struct fl__faults *f, const char *tok, size_t n, char *err,
      size_t errlen)
{
  const char *at = memchr(tok, '@', n);
  unsigned long long v;
  size_t k;

  if (at == NULL)
    return bad(tok, n, "expected name=value or name@batch", err, errlen);
  k = kind_of(tok, (size_t)(at - tok));
  if (k == FL__FAULT_KINDS || k == FL__FAULT_DELAY)
    return bad(tok, n, "not one of kill, exit, enospc, emfile at a batch",
               err, errlen);
  if (number(at + 1, tok + n, UINT64_MAX - 1, &v) != 0)
    return bad(tok, n, "the batch is a whole number", err, errlen);
  if (f->n_at[k] == FL__FAULT_AT_MAX) {
    char why[48];

    snprintf(why, sizeof(why), "at most %d batches a fault",
             FL__FAULT_AT_MAX);
    return bad(tok, n, why, err, errlen);
  }
  f->at[k][f->n_at[k]++] = v;
  return 0;
}

/* One token, name=value, of n bytes. */
static int
token(struct fl__faults *f, const char *tok, size_t n, char *err,
      size_t errlen)
{
  const char *eq = memchr(tok, '=', n), *end = tok + n, *colon;
  unsigned long long v;
  size_t k, name_len;

  if (eq == NULL)
    return aimed(f, tok, n, err, errlen);
  name_len = (size_t)(eq - tok);
  if (name_len == 4 && memcmp(tok, "seed", 4) == 0) {
    if (number(eq + 1, end, UINT64_MAX, &v) != 0)
      return bad(tok, n, "the seed is a whole number", err, errlen);
    f->seed = v;
    return 0;
  }
  k = kind_of(tok, name_len);
  if (k == FL__FAULT_KINDS)
    return bad(tok, n, "not one of kill, exit, enospc, emfile, delay, seed",
               err, errlen);
  colon = k == FL__FAULT_DELAY ? memchr(eq + 1, ':', (size_t)(end - eq - 1))
                               : NULL;
  if (k == FL__FAULT_DELAY && colon == NULL)
    return bad(tok, n, "delay is P:MS, a probability and milliseconds", err,
               errlen);
  if (probability(eq + 1, colon != NULL ? colon : end, &f->p[k]) != 0)
    return bad(tok, n, "the probability is a number from 0 to 1", err,
               errlen);
  if (colon != NULL) {
    if (number(colon + 1, end, 600000, &v) != 0)
      return bad(tok, n, "the delay is 0 to 600000 milliseconds", err,
                 errlen);
    f->delay_ms = (unsigned)v;
  }
  return 0;
}

int
fl__faults_parse(struct fl__faults *f, const char *spec, char *err,
                 size_t errlen)
{
  const char *tok = spec, *comma;
  size_t k;
  int rc;

  memset(f, 0, sizeof(*f));
  if (spec == NULL || *spec == '\0')
    return 0;
  for (;;) {
    comma = strchr(tok, ',');
    rc = token(f, tok, comma != NULL ? (size_t)(comma - tok) : strlen(tok),
               err, errlen);
    if (rc != 0)
      return rc;
    if (comma == NULL)
      break;
    tok = comma + 1;
  }
  for (k = 0; k < FL__FAULT_KINDS; k++)
    f->on |= f->p[k] > 0 || f->n_at[k] > 0;
  return 0;
}

int
fl__fault(const struct fl__faults *f, int kind, uint64_t epoch, uint64_t seq,
          uint32_t attempt)
{
  uint64_t h;
  unsigned i;

  if (!f->on)
    return 0;
  if (attempt == 0)
    for (i = 0; i < f->n_at[kind]; i++)
      if (f->at[kind][i] == seq)
        return 1;
  if (f->p[kind] <= 0)
    return 0;
  h = fl__mix64(fl__epoch_seed(f->seed, epoch, 16 + (uint64_t)kind) ^
                fl__mix64(seq ^ (uint64_t)attempt << 48));
  /* 53 bits, a uniform number in [0, 1). */
  return (double)(h >> 11) * 0x1p-53 < f->p[kind];
}
