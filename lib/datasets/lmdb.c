/*
 * fl_dataset_lmdb: an LMDB environment as a map-style dataset, sample i
 * being the value of the i-th key in key order, as PyTorch users read one
 * with python3-lmdb (one field of max_bytes; each value's size in
 * fl_batch_sizes, the rest of its room zeroed).
 *
 * LMDB has no lookup by position, so create walks the keys once and keeps
 * a sparse index: the bytes of every FL__LMDB_EVERY-th key (every 64th)
 * back to back, and their offsets.  A get puts a cursor on the indexed key
 * nearer its sample (MDB_SET_KEY) and steps MDB_NEXT or MDB_PREV the rest
 * of the way, 32 steps at most (63 in the last interval, which has no key
 * after it); where the sample is a few keys past the one the cursor is on
 * (a batch in key order: the next key), it steps from there.  For 10^7
 * keys of 8 bytes the index is 2.5 MB, where keeping every key and its
 * offset took 160 MB; the workers share it copy-on-write since nothing
 * writes it after create.  Storing only the count is not possible without
 * a rank lookup, which LMDB lacks.  Every 64th, measured with make bench's
 * random gets over a million keys: 1.2x slower than keeping every key
 * (every 32nd: within noise of that); on 2000 keys all in cache, 2.1x
 * (every 32nd: 1.7x), a fraction of a microsecond.
 *
 * An environment must not be used across fork(): each process opens its
 * own on its first get (a changed fl__fork_generation tells a worker),
 * read-only and without the lock file (MDB_NOLOCK: readers need no slot in
 * it, and a read-only filesystem or a read-only copy of a database works),
 * and keeps one read transaction and its cursor for its life.  The parent
 * opens one at create to walk the keys and closes it before returning; a
 * worker's goes with its exit, the caller's (num_workers 0) with
 * fl_dataset_close.
 *
 * Without the lock file nothing keeps a writer away: the database must not
 * change while it is read, as for any dataset.  What a get can see of a
 * change is its batch's FL_EDATASET, never a crash: a key count other than
 * the one create walked, an indexed key gone or another in its place, the
 * keys running out before a sample's.  Keys between indexed ones are not
 * kept, so a change that keeps the count and those is not seen.
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
  /* The sparse index: MARKS(n) + 1 offsets into marked, key
     j * FL__LMDB_EVERY being [mark[j], mark[j + 1]). */
  size_t *mark;
  unsigned char *marked;
  unsigned env_flags; /* MDB_NOSUBDIR for a file rather than a directory */
  char *path;
  /* The process's own environment, opened on its first get. */
  unsigned long gen; /* fl__fork_generation when env was opened */
  MDB_env *env;
  MDB_txn *txn;
  MDB_cursor *cur;
  MDB_dbi dbi;
  size_t at; /* the sample the cursor is on; n: none */
};

#define MARKS(n) (((n) + FL__LMDB_EVERY - 1) / FL__LMDB_EVERY)

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
  mdb_cursor_close(d->cur);
  mdb_txn_abort(d->txn);
  mdb_env_close(d->env);
  d->env = NULL;
  d->txn = NULL;
  d->cur = NULL;
}

/* This process's environment, read transaction and cursor, the first get
   after a fork (or ever).  The key count is checked: a database that
   changed since create is its batch's error, not wrong samples. */
static int
process_open(struct lmdb_ds *d)
{
  MDB_stat ms;
  int rc;

  /* Another process's environment, transaction and cursor (a worker
     forked after the caller read with num_workers 0) are left as they
     are: LMDB forbids touching them after fork(), even to close them. */
  d->env = NULL;
  d->txn = NULL;
  d->cur = NULL;
  d->at = d->n;
  rc = env_open(d->path, d->env_flags, &d->env, &d->txn, &d->dbi);
  if (rc != 0) {
    fl_worker_error("%s: cannot open the LMDB environment: %s", d->path,
                    rc > 0 ? fl__strerror(rc) : mdb_strerror(rc));
    return rc == EMFILE ? FL_EMFILE : rc == ENFILE ? FL_ENFILE : FL_EDATASET;
  }
  if ((rc = mdb_stat(d->txn, d->dbi, &ms)) != 0 ||
      (rc = mdb_cursor_open(d->txn, d->dbi, &d->cur)) != 0) {
    fl_worker_error("%s: cannot read its main database: %s", d->path,
                    mdb_strerror(rc));
    rc = FL_EDATASET;
    goto fail;
  }
  if (ms.ms_entries != d->n) {
    fl_worker_error("%s: holds %zu keys, not the %zu it held when the "
                    "dataset was opened: the database changed", d->path,
                    (size_t)ms.ms_entries, d->n);
    rc = FL_EDATASET;
    goto fail;
  }
  d->gen = fl__fork_generation;
  return 0;
fail:
  env_close(d);
  return rc;
}

/* Indexed key j: key j * FL__LMDB_EVERY as create saw it. */
static void
mark_key(const struct lmdb_ds *d, size_t j, MDB_val *k)
{
  k->mv_data = d->marked + d->mark[j];
  k->mv_size = d->mark[j + 1] - d->mark[j];
}

/*
 * Put the cursor on sample index, its key and value in k and v: from the
 * nearer indexed key, stepping MDB_NEXT or MDB_PREV (half the interval at
 * most, but forward only in the last), or from where the cursor is when
 * that is no more steps, counting the seek as one (it costs more).  An
 * indexed key stepped onto must be the one create saw there, or the keys
 * moved.
 */
static int
seek(struct lmdb_ds *d, size_t index, MDB_val *k, MDB_val *v)
{
  size_t j = index / FL__LMDB_EVERY, steps = index % FL__LMDB_EVERY, at;
  MDB_cursor_op op = MDB_NEXT;
  MDB_val m;
  char ks[96], ms[96];
  int rc;

  if (steps > FL__LMDB_EVERY / 2 && j + 1 < MARKS(d->n)) {
    j++;
    steps = FL__LMDB_EVERY - steps;
    op = MDB_PREV;
  }
  if (d->at < index && index - d->at <= steps + 1) {
    at = d->at;
    op = MDB_NEXT;
  } else {
    at = j * FL__LMDB_EVERY;
    mark_key(d, j, k);
    if ((rc = mdb_cursor_get(d->cur, k, v, MDB_SET_KEY)) != 0) {
      fl_worker_error("%s: key '%s' (sample %zu): %s%s", d->path,
                      key_str(k->mv_data, k->mv_size, ks, sizeof(ks)), at,
                      mdb_strerror(rc),
                      rc == MDB_NOTFOUND ? ": the database changed since "
                                           "the dataset was opened"
                                         : "");
      goto fail;
    }
  }
  while (at != index) {
    at = op == MDB_NEXT ? at + 1 : at - 1;
    if ((rc = mdb_cursor_get(d->cur, k, v, op)) != 0) {
      fl_worker_error("%s: sample %zu: %s%s", d->path, at, mdb_strerror(rc),
                      rc == MDB_NOTFOUND ? ": the keys run out before it: "
                                           "the database changed since the "
                                           "dataset was opened"
                                         : "");
      goto fail;
    }
    if (at % FL__LMDB_EVERY != 0)
      continue;
    mark_key(d, at / FL__LMDB_EVERY, &m);
    if (k->mv_size != m.mv_size || memcmp(k->mv_data, m.mv_data, m.mv_size)) {
      fl_worker_error("%s: sample %zu: key '%s' where '%s' was: the database "
                      "changed since the dataset was opened", d->path, at,
                      key_str(k->mv_data, k->mv_size, ks, sizeof(ks)),
                      key_str(m.mv_data, m.mv_size, ms, sizeof(ms)));
      goto fail;
    }
  }
  d->at = index;
  return 0;
fail:
  d->at = d->n; /* the cursor is nowhere known */
  return FL_EDATASET;
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
  if ((d->env == NULL || d->gen != fl__fork_generation) &&
      (rc = process_open(d)) != 0)
    return rc;
  if ((rc = seek(d, index, &k, &v)) != 0)
    return rc;
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
  free(d->mark);
  free(d->marked);
  free(d->path);
  free(d);
}

/* Walk the keys in order, keeping every FL__LMDB_EVERY-th; env is the
   parent's, open. */
static int
index_keys(struct lmdb_ds *d, MDB_txn *txn, MDB_dbi dbi)
{
  MDB_cursor *cur = NULL;
  MDB_val k, v;
  size_t used = 0, cap = 0, i = 0;
  void *grown;
  int rc, op = MDB_FIRST;

  d->mark = malloc((MARKS(d->n) + 1) * sizeof(*d->mark));
  if (d->mark == NULL)
    return fl__error_set(FL_ENOMEM, "%s: out of memory for the index of "
                         "its %zu keys", d->path, d->n);
  if ((rc = mdb_cursor_open(txn, dbi, &cur)) != 0)
    return fl__error_set(FL_EINVAL, "%s: cannot read the keys: %s", d->path,
                         mdb_strerror(rc));
  for (; i < d->n && (rc = mdb_cursor_get(cur, &k, &v, op)) == 0;
       op = MDB_NEXT, i++) {
    if (i % FL__LMDB_EVERY != 0)
      continue;
    if (used + k.mv_size > cap) {
      cap = (used + k.mv_size) * 2;
      if ((grown = realloc(d->marked, cap)) == NULL) {
        rc = fl__error_set(FL_ENOMEM, "%s: out of memory for the index of "
                           "its keys", d->path);
        goto out;
      }
      d->marked = grown;
    }
    d->mark[i / FL__LMDB_EVERY] = used;
    memcpy(d->marked + used, k.mv_data, k.mv_size);
    used += k.mv_size;
  }
  if (rc != 0 && rc != MDB_NOTFOUND) {
    rc = fl__error_set(FL_EINVAL, "%s: cannot read the keys: %s", d->path,
                       mdb_strerror(rc));
    goto out;
  }
  /* The snapshot mdb_stat counted: i is n. */
  d->n = i;
  d->mark[MARKS(i)] = used;
  /* What doubling left over goes back: the index lives as the dataset. */
  if (used > 0 && (grown = realloc(d->marked, used)) != NULL)
    d->marked = grown;
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

size_t
fl__lmdb_index_bytes(const fl_dataset *ds)
{
  const struct lmdb_ds *d = ds->ctx;

  return (MARKS(d->n) + 1) * sizeof(*d->mark) + d->mark[MARKS(d->n)];
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
