/*
 * `forkload gen lmdb DIR`: the synthetic samples as the values of an LMDB
 * environment in DIR, sample i under the key "%08zu" of i, so that key
 * order is index order and `run --dataset lmdb:DIR:B --verify` checks
 * every byte fl_dataset_lmdb reads back.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef HAVE_LMDB
#include <lmdb.h>
#endif

#include "cli.h"

#ifdef HAVE_LMDB
/* Keys of 8 digits sort as numbers only up to 10^8 samples. */
#define LMDB_MAX_SAMPLES 100000000u
/* Samples put per write transaction: bounds its dirty pages. */
#define LMDB_TXN_SAMPLES 4096

/* DIR made, or an existing one taken where no environment is in it yet;
   with --force, one that is goes first, so that none of its keys stays. */
static int
prepare(const char *dir, int force)
{
  static const char *const files[] = {"data.mdb", "lock.mdb"};
  char path[PATH_MAX];
  size_t i;

  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    cli_error("gen: %s: %s", dir, strerror(errno));
    return -1;
  }
  for (i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    if (!force && access(path, F_OK) == 0) {
      cli_error("gen: %s exists (--force writes over it)", path);
      return -1;
    }
    if (force && unlink(path) != 0 && errno != ENOENT) {
      cli_error("gen: %s: %s", path, strerror(errno));
      return -1;
    }
  }
  return 0;
}

/* Put the samples in key order, MDB_APPEND (no search), a transaction per
   LMDB_TXN_SAMPLES. */
static int
put_all(MDB_env *env, const struct synth *data, unsigned char *buf)
{
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  MDB_val k, v = {data->sample_bytes, buf};
  char key[16];
  size_t i;
  int rc = 0;

  for (i = 0; rc == 0 && i < data->samples; i++) {
    if (txn == NULL && ((rc = mdb_txn_begin(env, NULL, 0, &txn)) != 0 ||
                        (rc = mdb_dbi_open(txn, NULL, 0, &dbi)) != 0))
      break;
    k.mv_size = (size_t)snprintf(key, sizeof key, "%08zu", i);
    k.mv_data = key;
    synth_fill(data, i, 0, buf);
    rc = mdb_put(txn, dbi, &k, &v, MDB_APPEND);
    if (rc == 0 && ((i + 1) % LMDB_TXN_SAMPLES == 0 ||
                    i + 1 == data->samples)) {
      rc = mdb_txn_commit(txn);
      txn = NULL;
    }
  }
  if (txn != NULL)
    mdb_txn_abort(txn);
  return rc;
}

int
gen_lmdb(const char *dir, const struct synth *data, int force,
         unsigned char *buf, char *what, size_t len, uint64_t *bytes)
{
  char path[PATH_MAX];
  MDB_env *env = NULL;
  struct stat st;
  int rc, status = -1;

  if (data->samples > LMDB_MAX_SAMPLES) {
    cli_error("gen: lmdb: at most %u --samples: keys of 8 digits sort as "
              "numbers only up to there", LMDB_MAX_SAMPLES);
    return -1;
  }
  if (prepare(dir, force) < 0)
    return -1;
  /* Room for every value twice over, and a page or so each of
     overhead: the map is address space, the file grows as written. */
  if ((rc = mdb_env_create(&env)) != 0 ||
      (rc = mdb_env_set_mapsize(env, (data->sample_bytes + 4096) *
                                             data->samples * 2 +
                                         (64u << 20))) != 0 ||
      (rc = mdb_env_open(env, dir, MDB_NOSYNC, 0666)) != 0 ||
      (rc = put_all(env, data, buf)) != 0 ||
      (rc = mdb_env_sync(env, 1)) != 0) {
    cli_error("gen: %s: %s", dir, mdb_strerror(rc));
    goto out;
  }
  snprintf(path, sizeof path, "%s/data.mdb", dir);
  *bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
  snprintf(what, len, "%zu values under keys 00000000 to %08zu in "
           "data.mdb", data->samples, data->samples - 1);
  status = 0;
out:
  if (env != NULL)
    mdb_env_close(env);
  return status;
}
#else
int
gen_lmdb(const char *dir, const struct synth *data, int force,
         unsigned char *buf, char *what, size_t len, uint64_t *bytes)
{
  (void)data;
  (void)force;
  (void)buf;
  (void)what;
  (void)len;
  (void)bytes;
  cli_error("gen: lmdb: %s: this forkload was built without liblmdb: "
            "install liblmdb-dev (sh tools/setup.sh) and build it again",
            dir);
  return -1;
}
#endif
