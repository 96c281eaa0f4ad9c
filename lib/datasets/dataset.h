/*
 * Private to the built-in datasets: what every one of their contexts starts
 * with, so that fl_dataset_close can free any of them, and the mapped
 * region of fixed-size samples that fl_dataset_raw and fl_dataset_npy_array
 * share (raw.c).
 */
#ifndef FL_DATASET_H
#define FL_DATASET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "forkload.h"

#define FL__DS_MAGIC 0x666c6473u /* "flds" */

struct fl__ds_base {
  uint32_t magic;
  void (*free)(void *ctx);
};

/*
 * Map path read-only whole, before any loader forks, so that every worker
 * shares the same pages.  An empty file, or one that is not a regular file,
 * is an error naming it (fl__error_set).
 */
int fl__open_regular(const char *path, int *fd, struct stat *st);
int fl__map_file(const char *path, void **map, size_t *size);
/* pread until n bytes or the end of the file, EINTR retried: 0 and *got,
   or -errno. */
int fl__pread_full(int fd, void *buf, size_t n, off_t off, size_t *got);

/*
 * Fill out with a dataset of len samples of sample_bytes each, the first at
 * map + offset.  It owns the mapping from the call on, failure included.
 */
int fl__region_dataset(fl_dataset *out, const char *path, void *map,
                       size_t map_bytes, size_t offset, size_t sample_bytes,
                       size_t len);

/* raw.c: a builder of datasets checks the caller's struct (and zeroes it)
   first, then fills a whole one and copies out what the caller's holds. */
int fl__dataset_out_check(fl_dataset *out, size_t size, const char *fn);
int fl__dataset_out(fl_dataset *out, size_t size, const fl_dataset *ds);

/* raw.c: copy the samples `indices` names out of a region of len
   samples of sb bytes, a memcpy per run; FL_EINVAL for an index past it. */
int fl__copy_runs(const unsigned char *data, size_t len, size_t sb,
                  const size_t *indices, size_t n, unsigned char *out,
                  const char *path);

/* npy_header.c: the NPY format's header, parsed as untrusted bytes. */
#define FL__NPY_MAX_DIMS 64         /* numpy 2's NPY_MAXDIMS */
#define FL__NPY_HEADER_MAX (1 << 20) /* numpy itself refuses past 10000 */

struct fl__npy {
  char descr[24];      /* as written, for messages */
  char order;          /* '<' or '>' ('=' resolved); '|' for 1-byte items */
  char kind;           /* 'b', 'i', 'u', 'f' or 'c' */
  size_t item_bytes;
  size_t ndim;
  size_t shape[FL__NPY_MAX_DIMS];
  size_t data_offset;  /* the header's end, where the data starts */
  size_t data_bytes;   /* item_bytes x the product of shape */
};

int fl__npy_header_bytes(const void *buf, size_t len, size_t *total,
                         char *err, size_t errlen);
int fl__npy_parse(const void *buf, size_t len, struct fl__npy *out,
                  char *err, size_t errlen);
int fl__npy_check_size(const struct fl__npy *h, uint64_t file_bytes,
                       char *err, size_t errlen);
int fl__npy_same(const struct fl__npy *a, const struct fl__npy *b);
void fl__npy_shape_str(const struct fl__npy *h, char *buf, size_t len);

/* npy.c: map a .npy array whose first axis is the samples. */
int fl__npy_map_array(const char *path, void **map, size_t *bytes,
                      struct fl__npy *h);

/* tokens.c: an llm.c token shard's header, of the file_bytes mapped at
   head, as untrusted bytes: 0 and the windows of seq_len + 1 tokens
   (seq_len > 0) it holds, or FL_EINVAL with why in err. */
#define FL__TOKENS_HEADER 1024 /* 256 int32 */
int fl__tokens_check(const void *head, size_t file_bytes, size_t seq_len,
                     size_t *windows, char *err, size_t errlen);

/* lmdb.c: its sparse index keeps every FL__LMDB_EVERY-th key; the bytes
   it takes, for tests/lmdb_test.c to hold to its bound. */
#define FL__LMDB_EVERY 64
size_t fl__lmdb_index_bytes(const fl_dataset *ds);

#endif /* FL_DATASET_H */
