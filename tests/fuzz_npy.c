/*
 * libFuzzer target for the NPY header parser, built by `make fuzz` from
 * this file and lib/datasets/npy_header.c alone.  libFuzzer hands over exactly size bytes
 * on the heap, so AddressSanitizer sees any read past them; UBSan sees any
 * overflow.  Whatever the bytes, the parser must return 0 with a header
 * that adds up, or FL_EINVAL with a reason.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct fl__npy h;
  char err[256], shape[64];
  size_t total, i, count = 1;
  int rc;

  err[0] = '\0';
  rc = fl__npy_header_bytes(data, size, &total, err, sizeof(err));
  if (rc != 0 && (rc != FL_EINVAL || err[0] == '\0'))
    abort();
  err[0] = '\0';
  rc = fl__npy_parse(data, size, &h, err, sizeof(err));
  if (rc != 0) {
    if (rc != FL_EINVAL || err[0] == '\0')
      abort();
    return 0;
  }
  /* Accepted: the header lies within the bytes and its sizes agree. */
  if (h.data_offset > size || h.ndim > FL__NPY_MAX_DIMS ||
      h.item_bytes == 0 || h.item_bytes > 32 || !fl__npy_same(&h, &h))
    abort();
  for (i = 0; i < h.ndim; i++)
    count *= h.shape[i]; /* unsigned: may wrap only before a 0 */
  if (count * h.item_bytes != h.data_bytes)
    abort();
  fl__npy_shape_str(&h, shape, sizeof(shape));
  if (memchr(shape, '\0', sizeof(shape)) == NULL)
    abort();
  rc = fl__npy_check_size(&h, size, err, sizeof(err));
  if (rc != 0 && rc != FL_EINVAL)
    abort();
  return 0;
}
