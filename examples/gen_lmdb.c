/*
 * `forkload gen lmdb DIR`: the synthetic samples as the values of an LMDB
 * environment in DIR, sample i under the key "%08zu" of i, so that key
 * order is index order and `run --dataset lmdb:DIR:B --verify` checks
 * every byte fl_dataset_lmdb reads back.
 */
#include "config.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#ifdef HAVE_LMDB
#include <lmdb.h>
#endif

#include "cli.h"

#ifdef HAVE_LMDB
/* Keys of 8 digits sort as numbers only up to 10^8 samples. */
#define LMDB_MAX_SAMPLES 100000000u
/* Samples put per write transaction: bounds its dirty pages. */
#define LMDB_TXN_SAMPLES 4096

/* Put the samples in key order, MDB_APPEND (no search), a transaction per
   LMDB_TXN_SAMPLES.  A signal stops it early: gen_out_place then puts
   nothing in place. */
static int
put_all(MDB_env *env, const struct synth *data, unsigned char *buf)
{
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  MDB_val k, v = {data->sample_bytes, buf};
  char key[16];
  size_t i;
  int rc = 0;

  for (i = 0; rc == 0 && i < data->samples && !cli_interrupted; i++) {
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
gen_lmdb(const char *dir, const struct synth *data, unsigned char *buf,
         char *what, size_t len, uint64_t *bytes)
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
  /* Room for every value twice over, and a page or so each of
     overhead: the map is address space, the file grows as written. */
  if ((rc = mdb_env_create(&env)) != 0 ||
      (rc = mdb_env_set_mapsize(env, (data->sample_bytes + 4096) *
                                             data->samples * 2 +
                                         (64u << 20))) != 0 ||
      (rc = mdb_env_open(env, dir, MDB_NOSYNC, 0666)) != 0 ||
      (rc = put_all(env, data, buf)) != 0 ||
      (rc = mdb_env_sync(env, 1)) != 0) {
    cli_error("gen: %s: cannot write: %s", dir, mdb_strerror(rc));
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
gen_lmdb(const char *dir, const struct synth *data, unsigned char *buf,
         char *what, size_t len, uint64_t *bytes)
{
  (void)data;
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
