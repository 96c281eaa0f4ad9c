/*
 * The header of a version 1.0 .npy file, as numpy.save writes it, for
 * `forkload gen`: the magic, the version, the length of the dict as a
 * little-endian u16, and the dict padded with spaces and ended by a
 * newline so that the data starts at a multiple of 64.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"

#define PREAMBLE 10 /* "\x93NUMPY", major, minor, the u16 length */
#define ALIGN 64

size_t
npy_header(char *buf, const char *descr, const size_t *shape, int ndim)
{
  char dims[2 * 24]; /* two numbers of up to 20 digits, ", " and "," */
  size_t len, total;
  int i, used = 0;

  /* A 1-tuple needs its trailing comma: (B,). */
  for (i = 0; i < ndim; i++)
    used += snprintf(dims + used, sizeof dims - (size_t)used, "%s%zu%s",
                     i > 0 ? " " : "", shape[i],
                     i + 1 < ndim || ndim == 1 ? "," : "");
  len = (size_t)snprintf(buf + PREAMBLE, NPY_HEADER_MAX - PREAMBLE,
                         "{'descr': '%s', 'fortran_order': False, "
                         "'shape': (%s), }", descr, dims);
  total = (PREAMBLE + len + 1 + ALIGN - 1) / ALIGN * ALIGN;
  memset(buf + PREAMBLE + len, ' ', total - PREAMBLE - len - 1);
  buf[total - 1] = '\n';
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)((total - PREAMBLE) & 0xff);
  buf[9] = (char)((total - PREAMBLE) >> 8);
  return total;
}
