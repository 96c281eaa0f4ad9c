/*
 * Messages that fit their buffer whatever they quote.  A sentence that
 * names a user's path or pipe: command can be longer than the buffer it
 * goes into (a worker's reply holds FL__REPLY_MSG_MAX bytes); cut at its
 * end, it would lose the part that says what went wrong.  Here the middle
 * of its longest words goes instead, behind "...", so that its start and
 * its end, the cause, arrive.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A word is not cut below this many bytes, "..." included. */
#define WORD_KEEP 24

/* A UTF-8 continuation byte: a cut there would split a character, and
   Python would refuse the whole message. */
static int
continues(char c)
{
  return ((unsigned char)c & 0xc0) == 0x80;
}

/*
 * s[at, at + len) of the n-byte string s becomes keep bytes (keep < len):
 * its head, "...", its tail, whole characters each.  Returns s's new
 * length.
 */
static size_t
cut(char *s, size_t n, size_t at, size_t len, size_t keep)
{
  size_t head = (keep - 3) / 2;
  char *h = s + at + head, *t = s + at + len - (keep - 3 - head);

  while (h > s + at && continues(*h))
    h--;
  while (t < s + at + len && continues(*t))
    t++;
  memcpy(h, "...", 3);
  memmove(h + 3, t, (size_t)(s + n - t) + 1);
  return n - (size_t)(t - h - 3);
}

/* The longest run of bytes without a space: its length, and *at. */
static size_t
longest_word(const char *s, size_t *at)
{
  size_t i = 0, start, best = 0;

  while (s[i] != '\0') {
    while (s[i] == ' ')
      i++;
    start = i;
    while (s[i] != '\0' && s[i] != ' ')
      i++;
    if (i - start > best) {
      best = i - start;
      *at = start;
    }
  }
  return best;
}

/* s (n bytes) down to max bytes: the longest words first (a path, a
   command's argument), then, where many short ones make it long, the
   message's own middle. */
static void
shorten(char *s, size_t n, size_t max)
{
  size_t at = 0, len, over;

  while (n > max && (len = longest_word(s, &at)) > WORD_KEEP) {
    over = n - max;
    n = cut(s, n, at, len,
            len > over + WORD_KEEP ? len - over : WORD_KEEP);
  }
  if (n > max && max > 3)
    cut(s, n, 0, n, max);
  else if (n > max)
    s[max] = '\0';
}

void
fl__vformat(char *dst, size_t size, const char *fmt, va_list ap)
{
  va_list again;
  char *all;
  int n;

  if (size == 0)
    return;
  va_copy(again, ap);
  n = vsnprintf(dst, size, fmt, ap);
  /* Too long for dst: formatted whole once more, and shortened. Out of
     memory, it stays cut at its end. */
  if (n > 0 && (size_t)n >= size &&
      (all = malloc((size_t)n + 1)) != NULL) {
    vsnprintf(all, (size_t)n + 1, fmt, again);
    shorten(all, (size_t)n, size - 1);
    memcpy(dst, all, strlen(all) + 1);
    free(all);
  }
  va_end(again);
}

void
fl__format(char *dst, size_t size, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  fl__vformat(dst, size, fmt, ap);
  va_end(ap);
}
