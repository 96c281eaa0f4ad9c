/*
 * `forkload gen webdataset DIR`: the synthetic dataset of run as WebDataset
 * tar shards (DIR/shard-00000.tar, ...), written with libarchive as ustar:
 * shard s holds a run of consecutive samples, sample i as the members
 * %08zu.bin (its synthetic content) and %08zu.cls (its label, i % 10, in
 * decimal), so that run --dataset webdataset: reads them back.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#ifdef HAVE_LIBARCHIVE
#include <archive.h>
#include <archive_entry.h>
#endif

#include "cli.h"

#ifdef HAVE_LIBARCHIVE
/* The shard's file, written by libarchive through write_out. */
struct out {
  int fd;
  int err; /* the first write's errno, or 0 */
};

/* A failed write is kept here and told to libarchive as done: once one
   of its writes fails, libarchive 3.6's archive_write_free leaks its
   output buffer.  The caller checks err after each member. */
static la_ssize_t
write_out(struct archive *ar, void *ctx, const void *buf, size_t n)
{
  struct out *o = ctx;
  size_t done = 0;
  ssize_t r;

  (void)ar;
  while (o->err == 0 && done < n) {
    r = write(o->fd, (const char *)buf + done, n - done);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      o->err = errno;
    else
      done += (size_t)r;
  }
  return (la_ssize_t)n;
}

static int
put(struct archive *ar, struct archive_entry *e, const char *name,
    const void *data, size_t len)
{
  archive_entry_clear(e);
  archive_entry_set_pathname(e, name);
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_perm(e, 0644);
  archive_entry_set_size(e, (la_int64_t)len);
  if (archive_write_header(ar, e) != ARCHIVE_OK)
    return -1;
  return archive_write_data(ar, data, len) == (la_ssize_t)len ? 0 : -1;
}

/* Shard path's samples first to end: 0, or -1 having said why not.  A
   signal stops it early: gen_out_place then puts nothing in place. */
static int
write_shard(const char *path, const struct synth *data, size_t first,
            size_t end, unsigned char *buf, uint64_t *bytes)
{
  struct archive *ar = archive_write_new();
  struct archive_entry *e = archive_entry_new();
  struct out o = {.fd = -1};
  char name[32], label[8];
  struct stat st;
  size_t i;
  int rc = -1;

  if (ar == NULL || e == NULL) {
    cli_error("gen: %s", fl_strerror(FL_ENOMEM));
    goto out;
  }
  if ((o.fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)) < 0) {
    cli_error("gen: %s: %s", path, strerror(errno));
    goto out;
  }
  if (archive_write_set_format_ustar(ar) != ARCHIVE_OK ||
      archive_write_open(ar, &o, NULL, write_out, NULL) != ARCHIVE_OK)
    goto fail;
  for (i = first; i < end && !cli_interrupted && o.err == 0; i++) {
    synth_fill(data, i, 0, buf);
    snprintf(name, sizeof name, "%08zu.bin", i);
    if (put(ar, e, name, buf, data->sample_bytes) < 0)
      goto fail;
    snprintf(label, sizeof label, "%zu", i % 10);
    snprintf(name, sizeof name, "%08zu.cls", i);
    if (put(ar, e, name, label, strlen(label)) < 0)
      goto fail;
  }
  if (archive_write_close(ar) != ARCHIVE_OK)
    goto fail;
  if (close(o.fd) != 0 && o.err == 0)
    o.err = errno;
  o.fd = -1;
  if (o.err != 0) {
    cli_error("gen: %s: cannot write it: %s", path, strerror(o.err));
    goto out;
  }
  rc = 0;
  goto out;
fail:
  cli_error("gen: %s: %s", path,
            o.err != 0                        ? strerror(o.err)
            : archive_error_string(ar) != NULL ? archive_error_string(ar)
                                               : "cannot write it");
out:
  if (ar != NULL)
    archive_write_free(ar);
  if (o.fd >= 0)
    close(o.fd);
  archive_entry_free(e);
  if (rc == 0 && stat(path, &st) == 0)
    *bytes += (uint64_t)st.st_size;
  return rc;
}

int
gen_webdataset(const char *dir, const struct synth *data, unsigned shards,
               unsigned char *buf, char *what, size_t len, uint64_t *bytes)
{
  char path[PATH_MAX];
  size_t n = data->samples;
  unsigned s;

  for (s = 0; s < shards; s++) {
    if (snprintf(path, sizeof path, "%s/shard-%05u.tar", dir, s) >=
        (int)sizeof path) {
      cli_error("gen: %s: %s", dir, strerror(ENAMETOOLONG));
      return -1;
    }
    if (write_shard(path, data, n * s / shards, n * (s + 1) / shards, buf,
                    bytes) < 0)
      return -1;
  }
  snprintf(what, len, "%u shards shard-00000.tar to shard-%05u.tar, "
           "members NNNNNNNN.bin and NNNNNNNN.cls", shards, shards - 1);
  return 0;
}
#else
int
gen_webdataset(const char *dir, const struct synth *data, unsigned shards,
               unsigned char *buf, char *what, size_t len, uint64_t *bytes)
{
  (void)dir, (void)data, (void)shards, (void)buf, (void)what;
  (void)len, (void)bytes;
  cli_error("gen: this forkload was built without libarchive: install "
            "libarchive-dev (sh tools/setup.sh) and build it again");
  return -1;
}
#endif
