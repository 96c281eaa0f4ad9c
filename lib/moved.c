/*
 * The lazy torch order's values moved ahead of its frontier, kept in the
 * parent so that an epoch's first swaps touch a few warm pages instead of
 * one new page of the shared table each: on a machine where a page's first
 * touch is dear (a VM backs memory lazily: 30 us a page here), that is
 * most of what the first batch waits for.  An open-addressing table of at
 * most half its slots, by position; when it is full, a move goes to the
 * shared table as before.  Its pages are touched when it is made, at
 * fl_loader_create, not in an epoch, and are not forked: a worker has no
 * use for them, and the parent's writes would copy each page it shared.
 */
#include "config.h"

#include <string.h>
#include <sys/mman.h>

#include "internal.h"

int
fl__moved_init(fl__moved *m, size_t slots)
{
  size_t bytes = 2 * slots * sizeof(size_t);
  void *p;

  *m = (fl__moved){0};
  p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
           -1, 0);
  if (p == MAP_FAILED)
    return FL_ENOMEM;
  if (madvise(p, bytes, MADV_DONTFORK) != 0) {
    munmap(p, bytes);
    return FL_ENOMEM;
  }
  /* Every page written now (the keys are zero already). */
  memset(p, 0, bytes);
  m->key = p;
  m->val = m->key + slots;
  m->slots = slots;
  return 0;
}

void
fl__moved_free(fl__moved *m)
{
  if (m->key != NULL)
    munmap(m->key, 2 * m->slots * sizeof(size_t));
  *m = (fl__moved){0};
}

void
fl__moved_clear(fl__moved *m)
{
  if (m->n > 0)
    memset(m->key, 0, m->slots * sizeof(*m->key));
  m->n = 0;
}

/* The slot of position p, or of the empty slot where it would go. */
static size_t
slot_of(const fl__moved *m, size_t p)
{
  size_t h = fl__mix64(p) & (m->slots - 1);

  while (m->key[h] != 0 && m->key[h] != p + 1)
    h = (h + 1) & (m->slots - 1);
  return h;
}

int
fl__moved_get(const fl__moved *m, size_t p, size_t *v)
{
  size_t h;

  if (m->n == 0)
    return 0;
  h = slot_of(m, p);
  if (m->key[h] == 0)
    return 0;
  *v = m->val[h];
  return 1;
}

int
fl__moved_put(fl__moved *m, size_t p, size_t v)
{
  size_t h;

  if (m->slots == 0)
    return -1;
  h = slot_of(m, p);
  if (m->key[h] == 0) {
    if (m->n >= m->slots / 2)
      return -1;
    m->key[h] = p + 1;
    m->n++;
  }
  m->val[h] = v;
  return 0;
}

/* Linear probing's deletion: later entries of the run move back into the
   hole, so that no search stops short of them. */
int
fl__moved_take(fl__moved *m, size_t p, size_t *v)
{
  size_t h, j, home, mask = m->slots - 1;

  if (m->n == 0)
    return 0;
  h = slot_of(m, p);
  if (m->key[h] == 0)
    return 0;
  *v = m->val[h];
  m->n--;
  for (j = (h + 1) & mask; m->key[j] != 0; j = (j + 1) & mask) {
    home = fl__mix64(m->key[j] - 1) & mask;
    /* Moves back unless its home lies cyclically in (h, j]. */
    if ((j > h && (home <= h || home > j)) ||
        (j < h && home <= h && home > j)) {
      m->key[h] = m->key[j];
      m->val[h] = m->val[j];
      h = j;
    }
  }
  m->key[h] = 0;
  return 1;
}
