/*
 * Shared-memory segments: one holds one batch.  A worker creates them (an
 * unnamed memfd under the fd strategy, a named POSIX shm object under the
 * file-system strategy), reserves their pages up front so that a full tmpfs
 * fails here with ENOSPC instead of raising SIGBUS on a later write, and
 * the parent attaches to them by fd or by name.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "internal.h"

#define FL__ALIGN(x, a) (((x) + (a) - 1) & ~((size_t)(a) - 1))

/* Sizes stay below SIZE_MAX / 4, so that sums of a few never wrap. */
#define FL__SIZE_LIMIT (SIZE_MAX / 4)

/* a * b + c, aligned to 64, or 0 past FL__SIZE_LIMIT. */
static size_t
span(size_t a, size_t b, size_t c)
{
  size_t r;

  if (__builtin_mul_overflow(a, b, &r) || r > FL__SIZE_LIMIT - c - 64)
    return 0;
  return FL__ALIGN(r + c, 64);
}

/*
 * A segment: the header, the indices, the sizes (nfields per sample),
 * then one array per field, each 64-byte aligned and followed by a guard
 * where the worker plants a canary.  Returns 0, or FL_ENOMEM when it
 * would be larger than this machine can address.
 */
int
fl__segment_layout(fl__layout *lo, size_t cap, size_t nfields,
                   const size_t *field_bytes)
{
  size_t at, len, f, page = (size_t)sysconf(_SC_PAGESIZE);

  memset(lo, 0, sizeof(*lo));
  if (nfields == 0 || nfields > FL__MAX_FIELDS)
    return FL_EINVAL;
  lo->cap = cap;
  lo->nfields = nfields;
  at = span(cap, sizeof(size_t), sizeof(struct fl__segment_header));
  lo->sizes_offset = sizeof(struct fl__segment_header) +
                     cap * sizeof(size_t);
  len = span(cap, nfields * sizeof(size_t), 0);
  if (at == 0 || (len == 0 && cap > 0))
    return FL_ENOMEM;
  at += len;
  for (f = 0; f < nfields; f++) {
    len = span(cap, field_bytes[f], FL__GUARD_BYTES);
    if (len == 0 || at > FL__SIZE_LIMIT - len)
      return FL_ENOMEM;
    lo->field_offset[f] = at;
    lo->field_bytes[f] = field_bytes[f];
    at += len;
  }
  lo->size = FL__ALIGN(at, page);
  return 0;
}

uint64_t
fl__grown_serial(uint64_t serial, unsigned shift)
{
  uint64_t v = fl__mix64(serial ^ 0x67726f776e000000ull ^
                         ((uint64_t)shift + 1) << 48);

  return v != 0 ? v : 1;
}

int
fl__segment_layout_scaled(fl__layout *lo, const fl__layout *base,
                          unsigned shift)
{
  size_t fb[FL__MAX_FIELDS], f;

  if (shift > FL__SHIFT_MAX)
    return FL_ENOMEM;
  for (f = 0; f < base->nfields; f++) {
    if (base->field_bytes[f] > (FL__SIZE_LIMIT >> shift))
      return FL_ENOMEM;
    fb[f] = base->field_bytes[f] << shift;
  }
  return fl__segment_layout(lo, base->cap, base->nfields, fb);
}

uint64_t
fl__random64(void)
{
  static uint64_t counter;
  struct timespec t;
  uint64_t v = 0;
  ssize_t n;

  do
    n = getrandom(&v, sizeof(v), GRND_NONBLOCK);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof(v)) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    v = fl__mix64((uint64_t)t.tv_nsec ^ (uint64_t)t.tv_sec << 32 ^
                  (uint64_t)getpid() << 16 ^ ++counter);
  }
  return v != 0 ? v : 1;
}

/* An error the next segment made in this process gives at its reservation
   (fault injection): it then fails as on a full /dev/shm, through the
   same path. */
static int fail_next;

void
fl__segment_fail_next(int code)
{
  fail_next = code;
}

/* posix_fallocate returns its error; it does not set errno. */
static int
reserve(int fd, size_t size)
{
  int rc;

  do
    rc = posix_fallocate(fd, 0, (off_t)size);
  while (rc == EINTR);
  if (rc == EINVAL || rc == EOPNOTSUPP)
    return 0; /* this file system cannot reserve: ftruncate alone */
  return -rc;
}

static void
explain_reserve(char *err, size_t errlen, const char *name, size_t size,
                int rc)
{
  struct statvfs vfs;

  if (name == NULL || rc != FL_ENOSPC || statvfs("/dev/shm", &vfs) != 0) {
    snprintf(err, errlen,
             "cannot reserve %zu bytes of shared memory for a batch: %s",
             size, fl__strerror(-rc));
    return;
  }
  snprintf(err, errlen,
           "/dev/shm is full: cannot reserve %zu bytes for a batch segment "
           "(/dev/shm holds %.1f MB, %.1f MB free)", size,
           (double)vfs.f_blocks * vfs.f_frsize / 1e6,
           (double)vfs.f_bavail * vfs.f_frsize / 1e6);
}

/*
 * mmap's EAGAIN (locked memory past RLIMIT_MEMLOCK under mlockall) is a
 * want of memory: said as EAGAIN it would read as fl_loader_poll's "no
 * batch yet", and the batch would be lost.
 */
static int
map_error(void)
{
  return errno == EAGAIN ? FL_ENOMEM : -errno;
}

int
fl__segment_create(fl__segment *seg, const char *name, size_t size,
                   char *err, size_t errlen)
{
  void *base = MAP_FAILED;
  int fd, rc, inject = fail_next;

  /* This segment's, whatever fails first: never a later batch's. */
  fail_next = 0;
  if (name == NULL)
    fd = memfd_create("forkload", MFD_CLOEXEC);
  else
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    rc = -errno;
    snprintf(err, errlen, "cannot create a shared-memory segment%s%s: %s",
             name ? " " : "", name ? name : "", fl__strerror(errno));
    return rc;
  }
  if (ftruncate(fd, (off_t)size) != 0) {
    rc = -errno;
    snprintf(err, errlen, "cannot size a %zu-byte segment: %s%s", size,
             fl__strerror(errno),
             errno == EFBIG ? " (RLIMIT_FSIZE, `ulimit -f`, is lower)" : "");
    goto fail;
  }
  rc = inject != 0 ? inject : reserve(fd, size);
  if (rc != 0) {
    explain_reserve(err, errlen, name, size, rc);
    goto fail;
  }
  base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    rc = map_error();
    snprintf(err, errlen, "cannot map a %zu-byte segment: %s", size,
             fl__strerror(errno));
    goto fail;
  }
  seg->base = base;
  seg->size = size;
  seg->fd = fd;
  return 0;

fail:
  fl__close(fd);
  if (name != NULL)
    shm_unlink(name);
  return rc;
}

/* Attempts at a name of our own before the worker gives up. */
#define FL__NAME_TRIES 8

/*
 * A named segment: if another process made the name first (a squatter,
 * since no two of ours can draw the same 64 bits), a new random serial
 * is drawn and the name tried again.  *serial says the name made.
 */
int
fl__segment_create_named(fl__segment *seg, pid_t owner, uint32_t token,
                         uint64_t *serial, size_t size, char *err,
                         size_t errlen)
{
  char name[FL__SEGMENT_NAME_MAX];
  int rc = -EEXIST, i;

  for (i = 0; i < FL__NAME_TRIES && rc == -EEXIST; i++) {
    if (i > 0)
      *serial = fl__random64();
    fl__segment_name(name, sizeof(name), owner, token, *serial);
    rc = fl__segment_create(seg, name, size, err, errlen);
  }
  if (rc == -EEXIST)
    snprintf(err, errlen, "cannot create a shared-memory segment: %d names "
             "of this loader's in /dev/shm were taken by another process "
             "first (the last %s)", FL__NAME_TRIES, name);
  return rc;
}

/*
 * Remove a name only if this process's user made it.  Looked at by path,
 * not opened: it is called at the fd limit too (a batch lost to EMFILE).
 */
void
fl__segment_unlink_own(const char *name)
{
  char path[sizeof("/dev/shm") + FL__SEGMENT_NAME_MAX];
  struct stat st;

  snprintf(path, sizeof(path), "/dev/shm%s", name);
  if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_uid == geteuid())
    shm_unlink(name);
}

static int
attach(fl__segment *seg, int fd, size_t size, int flags)
{
  struct stat st;
  void *base;

  if (fstat(fd, &st) != 0)
    return -errno;
  if (size == 0)
    size = (size_t)st.st_size; /* a segment of any class */
  if (size == 0 || (size_t)st.st_size < size)
    return FL_EPROTO;
  base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | flags, fd, 0);
  if (base == MAP_FAILED)
    return map_error();
  /* Workers forked later must not keep this batch's memory alive. */
  madvise(base, size, MADV_DONTFORK);
  seg->base = base;
  seg->size = size;
  return 0;
}

int
fl__segment_attach_fd(fl__segment *seg, int fd, size_t size)
{
  int rc = attach(seg, fd, size, 0);

  if (rc == 0)
    seg->fd = fd;
  return rc;
}

/*
 * A segment the parent lends a worker, whose pages exist already (another
 * worker filled it): mapped with its page tables filled in one call, not
 * a page fault per page as the worker writes the whole batch (a 19 MB
 * segment: about 8 ms of faults, 2 ms populated, here).
 */
int
fl__segment_attach_lent(fl__segment *seg, int fd, size_t size)
{
  int rc = attach(seg, fd, size, MAP_POPULATE);

  if (rc == 0)
    seg->fd = fd;
  return rc;
}

/*
 * Open a named segment and remove its name at once: from here on only the
 * mappings keep it, so nothing is left in /dev/shm whatever happens next.
 */
int
fl__segment_attach_name(fl__segment *seg, const char *name, size_t size)
{
  int fd, rc;

  fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  shm_unlink(name);
  rc = attach(seg, fd, size, 0);
  fl__close(fd);
  seg->fd = -1;
  return rc;
}

int
fl__segment_private(fl__segment *seg, size_t size)
{
  void *base;

  base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
              -1, 0);
  if (base == MAP_FAILED)
    return map_error();
  /* A worker forked later shares no page of it, to copy on our writes. */
  madvise(base, size, MADV_DONTFORK);
  seg->base = base;
  seg->size = size;
  seg->fd = -1;
  return 0;
}

void
fl__segment_close(fl__segment *seg)
{
  if (seg->base != NULL)
    munmap(seg->base, seg->size);
  if (seg->fd >= 0)
    fl__close(seg->fd);
  seg->base = NULL;
  seg->fd = -1;
}
