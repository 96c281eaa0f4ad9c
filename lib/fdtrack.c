/*
 * What a freshly forked process must let go of.  The parent records every
 * fd and shared mapping any loader in this process holds; a worker closes
 * and unmaps all of them except its own queue, socket and order, so that it
 * never keeps another loader's segments alive or its sockets open.  Every
 * fork in the process (the host's too, through pthread_atfork) happens with
 * the table's lock held, so a child reads a consistent table, and the fork
 * generation tells a loader that it is in a child of its maker.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

struct fl__map {
  void *addr;
  size_t len;
};

/* Recursive: spawn.c holds it across socketpair(), tracking, and fork(). */
static pthread_mutex_t track_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static unsigned char *tracked; /* tracked[fd] != 0: the parent holds fd */
static size_t tracked_cap;
static struct fl__map *maps;
static size_t nmaps, maps_cap;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* Forks this process is down from: 0 in the process that made a loader
   (as far as its loaders go), more in any child. */
volatile unsigned long fl__fork_generation;

int
fl__close(int fd)
{
  int saved = errno;
  int rc;

  /* Linux frees the fd even when close fails with EINTR: never retry. */
  rc = close(fd);
  errno = saved;
  return rc;
}

void
fl__fdtrack_lock(void)
{
  pthread_mutex_lock(&track_lock);
}

void
fl__fdtrack_unlock(void)
{
  pthread_mutex_unlock(&track_lock);
}

int
fl__fdtrack_add(int fd)
{
  unsigned char *grown;
  size_t cap;
  int rc = 0;

  if (fd < 0)
    return FL_EINVAL;
  pthread_mutex_lock(&track_lock);
  if ((size_t)fd >= tracked_cap) {
    cap = tracked_cap ? tracked_cap : 256;
    while (cap <= (size_t)fd)
      cap *= 2;
    grown = realloc(tracked, cap);
    if (grown == NULL) {
      rc = FL_ENOMEM;
      goto out;
    }
    memset(grown + tracked_cap, 0, cap - tracked_cap);
    tracked = grown;
    tracked_cap = cap;
  }
  tracked[fd] = 1;
out:
  pthread_mutex_unlock(&track_lock);
  return rc;
}

void
fl__fdtrack_del(int fd)
{
  pthread_mutex_lock(&track_lock);
  if (fd >= 0 && (size_t)fd < tracked_cap)
    tracked[fd] = 0;
  pthread_mutex_unlock(&track_lock);
}

/* Untracked and closed as one step: between the two, a fork in another
   thread would copy an fd its child no longer knows to close. */
void
fl__fdtrack_close(int fd)
{
  pthread_mutex_lock(&track_lock);
  fl__fdtrack_del(fd);
  fl__close(fd);
  pthread_mutex_unlock(&track_lock);
}

int
fl__fdtrack_map_add(void *addr, size_t len)
{
  struct fl__map *grown;
  size_t cap;
  int rc = 0;

  pthread_mutex_lock(&track_lock);
  if (nmaps == maps_cap) {
    cap = maps_cap ? maps_cap * 2 : 8;
    grown = realloc(maps, cap * sizeof(*maps));
    if (grown == NULL) {
      rc = FL_ENOMEM;
      goto out;
    }
    maps = grown;
    maps_cap = cap;
  }
  maps[nmaps].addr = addr;
  maps[nmaps].len = len;
  nmaps++;
out:
  pthread_mutex_unlock(&track_lock);
  return rc;
}

void
fl__fdtrack_map_del(void *addr)
{
  size_t i;

  pthread_mutex_lock(&track_lock);
  for (i = 0; i < nmaps; i++) {
    if (maps[i].addr == addr) {
      maps[i] = maps[--nmaps];
      break;
    }
  }
  pthread_mutex_unlock(&track_lock);
}

static void
reinit_lock(void)
{
  pthread_mutexattr_t attr;

  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&track_lock, &attr);
  pthread_mutexattr_destroy(&attr);
}

static void
before_fork(void)
{
  pthread_mutex_lock(&track_lock);
}

static void
after_fork_parent(void)
{
  pthread_mutex_unlock(&track_lock);
}

/* The lock's owner was a thread of the parent: it is made anew. */
static void
after_fork_child(void)
{
  reinit_lock();
  fl__fork_generation++;
}

static void
register_atfork(void)
{
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

void
fl__fdtrack_init(void)
{
  pthread_once(&atfork_once, register_atfork);
}

/* In a new worker, with the table as the forking thread left it. */
void
fl__fdtrack_child_drop(const int *keep, size_t nkeep,
                       const void *const *keep_maps, size_t nkeep_maps)
{
  size_t fd, i, k;
  int kept;

  for (fd = 0; fd < tracked_cap; fd++) {
    if (!tracked[fd])
      continue;
    kept = 0;
    for (i = 0; i < nkeep; i++)
      kept |= keep[i] == (int)fd;
    if (!kept) {
      fl__close((int)fd);
      tracked[fd] = 0;
    }
  }
  for (i = 0; i < nmaps; i++) {
    for (k = 0; k < nkeep_maps && maps[i].addr != keep_maps[k]; k++)
      ;
    if (k == nkeep_maps)
      munmap(maps[i].addr, maps[i].len);
  }
  /* Whether or not the fork handler ran (it is registered by the first
     loader), the lock's owner was a thread of the parent. */
  reinit_lock();
}
