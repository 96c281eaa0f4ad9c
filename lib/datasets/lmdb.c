/*
 * fl_dataset_lmdb: an LMDB environment as a map-style dataset, sample i
 * being the value of the i-th key in key order, as PyTorch users read one
 * with python3-lmdb (one field of max_bytes; each value's size in
 * fl_batch_sizes, the rest of its room zeroed).
 *
 * LMDB has no lookup by position, so the keys are read once at create
 * into an arena (the keys back to back, and n + 1 offsets into it), and a
 * get is an mdb_get by key.  That costs the keys' bytes plus 8 per key:
 * 160 MB for 10^7 keys of 8 bytes, which the workers share copy-on-write
 * since nothing writes it after create.  A sparse index (every 64th key,
 * then cursor steps) would take a 64th of that but cost up to 63 steps a
 * sample; storing only the count is not possible without a rank lookup.
 *
 * An environment must not be used across fork(): each process opens its
 * own on its first get (a changed fl__fork_generation tells a worker),
 * read-only and without the lock file (MDB_NOLOCK: readers need no slot in it, and a
 * read-only filesystem or a read-only copy of a database works), and keeps
 * one read transaction for its life: the database must not change while
 * it is read, as for any dataset.  The parent opens one at create to walk
 * the keys and closes it before returning; a worker's goes with its exit,
 * the caller's (num_workers 0) with fl_dataset_close.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef HAVE_LMDB
#include <lmdb.h>
#endif

#include "dataset.h"
#include "internal.h"

#ifdef HAVE_LMDB
struct lmdb_ds {
  struct fl__ds_base base;
  size_t n, max_bytes;
  size_t *key;       /* n + 1 offsets into keys: key i is [key[i], key[i+1]) */
  unsigned char *keys;
  unsigned env_flags; /* MDB_NOSUBDIR for a file rather than a directory */
  char *path;
  /* The process's own environment, opened on its first get. */
  unsigned long gen; /* fl__fork_generation when env was opened */
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
};

/* A key for a message: printable bytes as they are, others as \xNN. */
static const char *
key_str(const unsigned char *k, size_t n, char *buf, size_t len)
{
  size_t i, at = 0;

  for (i = 0; i < n && at + 8 < len; i++)
    at += (size_t)snprintf(buf + at, len - at,
                           k[i] >= 0x20 && k[i] < 0x7f && k[i] != '\\'
                               ? "%c"
                               : "\\x%02x",
                           k[i]);
  snprintf(buf + at, len - at, "%s", i < n ? "..." : "");
  return buf;
}

/* Open path read-only with a read transaction on its main database. */
static int
env_open(const char *path, unsigned flags, MDB_env **env, MDB_txn **txn,
         MDB_dbi *dbi)
{
  int rc;

  *env = NULL;
  *txn = NULL;
  if ((rc = mdb_env_create(env)) != 0)
    return rc;
  /* MDB_NORDAHEAD: samples are read at random, as python3-lmdb users
     open with readahead=False. */
  if ((rc = mdb_env_open(*env, path,
                         flags | MDB_RDONLY | MDB_NOLOCK | MDB_NORDAHEAD,
                         0)) != 0 ||
      (rc = mdb_txn_begin(*env, NULL, MDB_RDONLY, txn)) != 0 ||
      (rc = mdb_dbi_open(*txn, NULL, 0, dbi)) != 0) {
    if (*txn != NULL)
      mdb_txn_abort(*txn);
    mdb_env_close(*env);
    *env = NULL;
    *txn = NULL;
  }
  return rc;
}

static void
env_close(struct lmdb_ds *d)
{
  if (d->env == NULL)
    return;
  mdb_txn_abort(d->txn);
  mdb_env_close(d->env);
  d->env = NULL;
  d->txn = NULL;
}

static int
lmdb_get(void *ctx, size_t index, void *dst, size_t *nbytes)
{
  struct lmdb_ds *d = ctx;
  MDB_val k, v;
  char ks[96];
  int rc;

  if (index >= d->n) {
    fl_worker_error("%s: index %zu past its %zu keys", d->path, index, d->n);
    return FL_EINVAL;
  }
  if (d->env == NULL || d->gen != fl__fork_generation) {
    /* Another process's environment (a worker forked after the caller
       read with num_workers 0) is left as it is: LMDB forbids touching
       it after fork(), even to close it. */
    d->env = NULL;
    rc = env_open(d->path, d->env_flags, &d->env, &d->txn, &d->dbi);
    if (rc != 0) {
      fl_worker_error("%s: cannot open the LMDB environment: %s", d->path,
                      rc > 0 ? fl__strerror(rc) : mdb_strerror(rc));
      return rc == EMFILE ? FL_EMFILE : rc == ENFILE ? FL_ENFILE
                                                     : FL_EDATASET;
    }
    d->gen = fl__fork_generation;
  }
  k.mv_data = d->keys + d->key[index];
  k.mv_size = d->key[index + 1] - d->key[index];
  rc = mdb_get(d->txn, d->dbi, &k, &v);
  if (rc != 0) {
    fl_worker_error("%s: key '%s' (sample %zu): %s%s", d->path,
                    key_str(k.mv_data, k.mv_size, ks, sizeof(ks)), index,
                    mdb_strerror(rc),
                    rc == MDB_NOTFOUND ? ": the database changed since the "
                                         "dataset was opened"
                                       : "");
    return FL_EDATASET;
  }
  if (v.mv_size > d->max_bytes) {
    fl_worker_error("%s: key '%s' (sample %zu) holds %zu bytes, more than "
                    "max_bytes %zu", d->path,
                    key_str(k.mv_data, k.mv_size, ks, sizeof(ks)), index,
                    v.mv_size, d->max_bytes);
    return FL_EDATASET;
  }
  memcpy(dst, v.mv_data, v.mv_size);
  /* Zero the rest: a padded batch is the same bytes whoever filled it. */
  memset((unsigned char *)dst + v.mv_size, 0, d->max_bytes - v.mv_size);
  *nbytes = v.mv_size;
  return 0;
}

static void
lmdb_free(void *ctx)
{
  struct lmdb_ds *d = ctx;

  if (d->env != NULL && d->gen == fl__fork_generation)
    env_close(d);
  free(d->key);
  free(d->keys);
  free(d->path);
  free(d);
}

/* Walk the keys in order into the arena; env is the parent's, open. */
static int
index_keys(struct lmdb_ds *d, MDB_txn *txn, MDB_dbi dbi)
{
  MDB_cursor *cur = NULL;
  MDB_val k, v;
  size_t used = 0, cap = 0, i = 0;
  void *grown;
  int rc, op = MDB_FIRST;

  d->key = malloc((d->n + 1) * sizeof(*d->key));
  if (d->key == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory for %zu keys",
                         d->path, d->n);
  if ((rc = mdb_cursor_open(txn, dbi, &cur)) != 0)
    return fl__error_set(FL_EINVAL, "%s: cannot read the keys: %s", d->path,
                         mdb_strerror(rc));
  for (; i < d->n && (rc = mdb_cursor_get(cur, &k, &v, op)) == 0;
       op = MDB_NEXT, i++) {
    if (used + k.mv_size > cap) {
      cap = (used + k.mv_size) * 2;
      if ((grown = realloc(d->keys, cap)) == NULL) {
        rc = fl__error_set(FL_ENOMEM, "%s: out of memory for its keys",
                           d->path);
        goto out;
      }
      d->keys = grown;
    }
    d->key[i] = used;
    memcpy(d->keys + used, k.mv_data, k.mv_size);
    used += k.mv_size;
  }
  if (rc != 0 && rc != MDB_NOTFOUND) {
    rc = fl__error_set(FL_EINVAL, "%s: cannot read the keys: %s", d->path,
                       mdb_strerror(rc));
    goto out;
  }
  /* The snapshot mdb_stat counted: i is n. */
  d->n = i;
  d->key[i] = used;
  rc = 0;
out:
  mdb_cursor_close(cur);
  return rc;
}

static int
lmdb_open(struct lmdb_ds *d, const char *path)
{
  struct stat st;
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  MDB_stat ms;
  int rc;

  if (stat(path, &st) != 0)
    return fl__error_set(FL_EINVAL, "%s: cannot open: %s", path,
                         fl__strerror(errno));
  /* A directory holding data.mdb, or the data file itself, as
     python3-lmdb's subdir=False writes it. */
  d->env_flags = S_ISDIR(st.st_mode) ? 0 : MDB_NOSUBDIR;
  rc = env_open(path, d->env_flags, &env, &txn, &dbi);
  if (rc != 0)
    return fl__error_set(FL_EINVAL, "%s: %s: %s", path,
                         rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH ||
                                 rc == ENOENT
                             ? "not an LMDB environment"
                             : "cannot open the LMDB environment",
                         mdb_strerror(rc));
  if ((rc = mdb_stat(txn, dbi, &ms)) != 0) {
    rc = fl__error_set(FL_EINVAL, "%s: cannot read its main database: %s",
                       path, mdb_strerror(rc));
    goto out;
  }
  d->n = ms.ms_entries;
  if (d->n > 0 && (rc = index_keys(d, txn, dbi)) != 0)
    goto out;
  if (d->n == 0)
    rc = fl__error_set(FL_EINVAL, "%s: the LMDB database holds no key",
                       path);
out:
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return rc;
}

static int
lmdb_create(fl_dataset *out, size_t size, const char *path,
            size_t max_bytes)
{
  struct lmdb_ds *d = calloc(1, sizeof(*d));
  int rc;

  if (d == NULL || (d->path = strdup(path)) == NULL) {
    free(d);
    return fl__error_set(FL_ENOMEM, "%s: out of memory", path);
  }
  d->base.magic = FL__DS_MAGIC;
  d->base.free = lmdb_free;
  d->max_bytes = max_bytes;
  if ((rc = lmdb_open(d, path)) != 0) {
    lmdb_free(d);
    return rc;
  }
  return fl__dataset_out(out, size,
                         &(fl_dataset){.ctx = d, .len = d->n,
                                       .sample_bytes = max_bytes,
                                       .get = lmdb_get});
}
#else
static int
lmdb_create(fl_dataset *out, size_t size, const char *path,
            size_t max_bytes)
{
  (void)out;
  (void)size;
  (void)max_bytes;
  return fl__error_set(FL_ENOTSUP, "fl_dataset_lmdb: %s: this forkload was "
                       "built without liblmdb: install liblmdb-dev (sh "
                       "tools/setup.sh) and build it again", path);
}
#endif /* HAVE_LMDB */

int
fl_dataset_lmdb_sized(fl_dataset *out, size_t size, const char *path,
                      size_t max_bytes)
{
  int rc;

  rc = fl__dataset_out_check(out, size, "fl_dataset_lmdb");
  if (rc != 0)
    return rc;
  fl__fdtrack_init(); /* forks from now on bump fl__fork_generation */
  if (path == NULL)
    return fl__error_set(FL_EINVAL, "fl_dataset_lmdb: path is NULL");
  if (max_bytes == 0)
    return fl__error_set(FL_EINVAL, "fl_dataset_lmdb: %s: max_bytes is 0: "
                         "a sample needs room for at least one byte", path);
  return lmdb_create(out, size, path, max_bytes);
}
