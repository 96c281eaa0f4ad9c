/*
 * The NPY header parser: numpy's magic, version and length prefix, then the
 * Python dict literal that names the dtype, the order and the shape.  The
 * bytes come from files nobody vouches for, so every read is bounded by an
 * explicit end pointer (no NUL is assumed anywhere), every size product is
 * checked for overflow, and anything unexpected is an error with a reason.
 * Nothing here touches the rest of the library: the fuzzer compiles this
 * file alone.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "dataset.h"

static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* A cursor over the header text: [p, end), never read at or past end. */
struct cur {
  const char *p, *end;
  char *err;
  size_t errlen;
};

static int
fail(struct cur *c, const char *fmt, const char *arg)
{
  snprintf(c->err, c->errlen, fmt, arg);
  return FL_EINVAL;
}

static void
skip_space(struct cur *c)
{
  while (c->p < c->end &&
         (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
    c->p++;
}

/* Skip blanks, then consume ch if it comes next. */
static int
eat(struct cur *c, char ch)
{
  skip_space(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return 1;
  }
  return 0;
}

/* The next character for a message: "end of header" when there is none. */
static const char *
what_next(const struct cur *c, char *buf)
{
  unsigned char ch;

  if (c->p >= c->end)
    return "the end of the header";
  ch = (unsigned char)*c->p;
  if (ch >= 0x20 && ch < 0x7f)
    snprintf(buf, 8, "'%c'", ch);
  else
    snprintf(buf, 8, "0x%02x", ch);
  return buf;
}

static int
expected(struct cur *c, const char *what)
{
  char buf[8], msg[96];

  snprintf(msg, sizeof(msg), "expected %s but found %s", what,
           what_next(c, buf));
  return fail(c, "NPY header is not a valid dict: %s", msg);
}

/*
 * A Python string literal in ' or " quotes, without escapes (numpy never
 * writes any in these fields).  *s and *n delimit its text in the header.
 */
static int
string(struct cur *c, const char **s, size_t *n)
{
  char q;
  const char *start;

  skip_space(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
    return expected(c, "a quoted string");
  q = *c->p++;
  start = c->p;
  while (c->p < c->end && *c->p != q) {
    if (*c->p == '\\' || *c->p == '\n')
      return fail(c, "NPY header is not a valid dict: %s",
                  "a string holds an escape or a newline");
    c->p++;
  }
  if (c->p >= c->end)
    return fail(c, "NPY header is not a valid dict: %s",
                "a string is not closed");
  *s = start;
  *n = (size_t)(c->p - start);
  c->p++;
  return 0;
}

static int
is_word_char(char ch)
{
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch >= '0' && ch <= '9') || ch == '_';
}

/* A Python bool: True or False as a whole word. */
static int
boolean(struct cur *c, int *v)
{
  size_t left;

  skip_space(c);
  left = (size_t)(c->end - c->p);
  if (left >= 4 && memcmp(c->p, "True", 4) == 0 &&
      (left == 4 || !is_word_char(c->p[4]))) {
    c->p += 4;
    *v = 1;
    return 0;
  }
  if (left >= 5 && memcmp(c->p, "False", 5) == 0 &&
      (left == 5 || !is_word_char(c->p[5]))) {
    c->p += 5;
    *v = 0;
    return 0;
  }
  return expected(c, "True or False");
}

/* A non-negative decimal that fits size_t; Python 2's numpy wrote 10L. */
static int
dimension(struct cur *c, size_t *v)
{
  size_t x = 0, d;
  int digits = 0;

  skip_space(c);
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
    d = (size_t)(*c->p - '0');
    if (x > (SIZE_MAX - d) / 10)
      return fail(c, "NPY header: %s",
                  "a dimension of the shape does not fit in size_t");
    x = x * 10 + d;
    digits++;
    c->p++;
  }
  if (digits == 0)
    return expected(c, "a non-negative integer in the shape");
  if (c->p < c->end && (*c->p == 'L' || *c->p == 'l'))
    c->p++;
  *v = x;
  return 0;
}

/*
 * (), (3,), (2, 3) or (2, 3,): up to FL__NPY_MAX_DIMS dimensions.  Python
 * reads (3) as the integer 3, not a tuple, and numpy refuses it: so do we.
 */
static int
shape(struct cur *c, struct fl__npy *h)
{
  int rc, comma = 0;

  if (!eat(c, '('))
    return expected(c, "'(' to open the shape");
  h->ndim = 0;
  while (!eat(c, ')')) {
    if (h->ndim == FL__NPY_MAX_DIMS)
      return fail(c, "NPY header: %s",
                  "the shape has more than 64 dimensions");
    rc = dimension(c, &h->shape[h->ndim]);
    if (rc != 0)
      return rc;
    h->ndim++;
    comma = eat(c, ',');
    if (!comma && !eat(c, ')'))
      return expected(c, "',' or ')' in the shape");
    if (!comma)
      break;
  }
  if (h->ndim == 1 && !comma)
    return fail(c, "NPY header: %s", "the shape is an integer in "
                "parentheses, not a tuple (a 1-d shape is written (n,))");
  return 0;
}

/* Item sizes numpy has for each kind this library accepts. */
static int
size_ok(char kind, size_t n)
{
  switch (kind) {
  case 'b':
    return n == 1;
  case 'i':
  case 'u':
    return n == 1 || n == 2 || n == 4 || n == 8;
  case 'f':
    return n == 2 || n == 4 || n == 8 || n == 12 || n == 16;
  case 'c':
    return n == 8 || n == 16 || n == 24 || n == 32;
  default:
    return 0;
  }
}

static int
native_order(void)
{
  const uint16_t one = 1;

  return *(const unsigned char *)&one == 1 ? '<' : '>';
}

/*
 * A dtype string such as '<f4', '>i8' or '|u1': a byte order, a kind and
 * an item size.  Objects, strings, raw bytes, dates and anything else are
 * refused by name, since a sample is handed out as the bytes stored.
 */
static int
descr(struct cur *c, struct fl__npy *h, const char *s, size_t n)
{
  char text[sizeof(h->descr)];
  size_t i = 0, size = 0;

  if (n >= sizeof(text))
    n = sizeof(text) - 1;
  memcpy(text, s, n);
  text[n] = '\0';
  for (i = 0; i < n; i++) {
    if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] >= 0x7f)
      text[i] = '?';
  }
  memcpy(h->descr, text, n + 1);
  i = 0;
  h->order = '=';
  if (i < n && strchr("<>|=", s[i]) != NULL)
    h->order = s[i++];
  if (i >= n)
    return fail(c, "NPY header: dtype '%s' has no kind", text);
  h->kind = s[i++];
  switch (h->kind) {
  case 'O':
    return fail(c, "NPY header: dtype '%s' holds Python objects, which "
                "are not supported (only numbers and booleans are)", text);
  case 'S':
  case 'U':
  case 'a':
    return fail(c, "NPY header: dtype '%s' holds strings, which are not "
                "supported (only numbers and booleans are)", text);
  case 'V':
    return fail(c, "NPY header: dtype '%s' is raw void data, which is not "
                "supported (only numbers and booleans are)", text);
  case 'M':
  case 'm':
    return fail(c, "NPY header: dtype '%s' is a date or time, which is not "
                "supported (only numbers and booleans are)", text);
  default:
    break;
  }
  if (i >= n)
    return fail(c, "NPY header: dtype '%s' has no item size", text);
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9' || size > 1000)
      return fail(c, "NPY header: dtype '%s' is unknown", text);
    size = size * 10 + (size_t)(s[i] - '0');
  }
  if (!size_ok(h->kind, size))
    return fail(c, "NPY header: dtype '%s' is unknown (the kinds "
                "supported are b, i, u, f and c with numpy's sizes)", text);
  h->item_bytes = size;
  /* '|' means "not applicable": numpy reads it as native order too. */
  if (h->order == '=' || h->order == '|')
    h->order = (char)native_order();
  if (size == 1)
    h->order = '|';
  return 0;
}

enum { KEY_DESCR = 1, KEY_FORTRAN = 2, KEY_SHAPE = 4 };

static int
key_value(struct cur *c, struct fl__npy *h, unsigned *seen)
{
  const char *k, *v;
  size_t kn, vn;
  unsigned key;
  char name[40];
  int rc, fortran = 0;

  rc = string(c, &k, &kn);
  if (rc != 0)
    return rc;
  if (kn == 5 && memcmp(k, "descr", 5) == 0)
    key = KEY_DESCR;
  else if (kn == 13 && memcmp(k, "fortran_order", 13) == 0)
    key = KEY_FORTRAN;
  else if (kn == 5 && memcmp(k, "shape", 5) == 0)
    key = KEY_SHAPE;
  else {
    snprintf(name, sizeof(name), "%.*s", kn > 32 ? 32 : (int)kn, k);
    for (size_t i = 0; name[i] != '\0'; i++) {
      if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] >= 0x7f)
        name[i] = '?';
    }
    return fail(c, "NPY header: unknown key '%s' (numpy writes only "
                "'descr', 'fortran_order' and 'shape')", name);
  }
  if (*seen & key)
    return fail(c, "NPY header: key '%s' appears twice",
                key == KEY_DESCR ? "descr"
                : key == KEY_SHAPE ? "shape" : "fortran_order");
  *seen |= key;
  if (!eat(c, ':'))
    return expected(c, "':' after a key");
  switch (key) {
  case KEY_DESCR:
    skip_space(c);
    if (c->p < c->end && (*c->p == '[' || *c->p == '{'))
      return fail(c, "NPY header: %s", "the dtype is structured (it has "
                  "named fields), which is not supported");
    rc = string(c, &v, &vn);
    return rc != 0 ? rc : descr(c, h, v, vn);
  case KEY_FORTRAN:
    rc = boolean(c, &fortran);
    if (rc == 0 && fortran)
      return fail(c, "NPY header: %s", "Fortran order is not supported "
                  "(save a C-ordered array: np.ascontiguousarray)");
    return rc;
  default:
    return shape(c, h);
  }
}

static uint32_t
le(const unsigned char *p, int n)
{
  uint32_t v = 0;

  while (n-- > 0)
    v = v << 8 | p[n];
  return v;
}

/*
 * The magic, the version and the header length: where the data starts.
 * len may be all of the file or just its first bytes.
 */
int
fl__npy_header_bytes(const void *buf, size_t len, size_t *total, char *err,
                     size_t errlen)
{
  const unsigned char *b = buf;
  size_t prefix, hlen;

  if (buf == NULL || total == NULL || err == NULL || errlen == 0)
    return FL_EINVAL;
  if (len < sizeof(magic) || memcmp(b, magic, sizeof(magic)) != 0) {
    snprintf(err, errlen, "not an NPY file (it does not start with the "
             "magic \\x93NUMPY)");
    return FL_EINVAL;
  }
  if (len < 8) {
    snprintf(err, errlen, "NPY file is truncated: it ends inside its "
             "version field");
    return FL_EINVAL;
  }
  if (b[6] < 1 || b[6] > 3 || b[7] != 0) {
    snprintf(err, errlen, "NPY version %u.%u is not supported (1.0, 2.0 "
             "and 3.0 are)", b[6], b[7]);
    return FL_EINVAL;
  }
  prefix = b[6] == 1 ? 10 : 12;
  if (len < prefix) {
    snprintf(err, errlen, "NPY file is truncated: it ends inside its "
             "header length field");
    return FL_EINVAL;
  }
  hlen = le(b + 8, (int)prefix - 8);
  if (hlen > FL__NPY_HEADER_MAX) {
    snprintf(err, errlen, "NPY header length %zu is implausible (more "
             "than %d bytes)", hlen, FL__NPY_HEADER_MAX);
    return FL_EINVAL;
  }
  *total = prefix + hlen;
  return 0;
}

int
fl__npy_parse(const void *buf, size_t len, struct fl__npy *out, char *err,
              size_t errlen)
{
  struct cur c;
  struct fl__npy h;
  unsigned seen = 0;
  size_t total, prefix, count = 1, i;
  int rc;

  rc = fl__npy_header_bytes(buf, len, &total, err, errlen);
  if (rc != 0)
    return rc;
  if (out == NULL)
    return FL_EINVAL;
  if (total > len) {
    snprintf(err, errlen, "NPY header length runs past the end of the "
             "file: the header ends at byte %zu of %zu", total, len);
    return FL_EINVAL;
  }
  memset(&h, 0, sizeof(h));
  prefix = ((const unsigned char *)buf)[6] == 1 ? 10 : 12;
  c.p = (const char *)buf + prefix;
  c.end = (const char *)buf + total;
  c.err = err;
  c.errlen = errlen;
  if (!eat(&c, '{'))
    return expected(&c, "'{' to open the dict");
  while (!eat(&c, '}')) {
    rc = key_value(&c, &h, &seen);
    if (rc != 0)
      return rc;
    if (eat(&c, '}'))
      break;
    if (!eat(&c, ','))
      return expected(&c, "',' or '}' after a value");
  }
  skip_space(&c);
  if (c.p != c.end)
    return expected(&c, "only blanks after the dict");
  if (seen != (KEY_DESCR | KEY_FORTRAN | KEY_SHAPE))
    return fail(&c, "NPY header: the dict lacks the key '%s'",
                !(seen & KEY_DESCR) ? "descr"
                : !(seen & KEY_SHAPE) ? "shape" : "fortran_order");
  for (i = 0; i < h.ndim; i++) {
    if (h.shape[i] == 0)
      count = 0;
  }
  for (i = 0; count != 0 && i < h.ndim; i++) {
    if (count > SIZE_MAX / h.shape[i])
      return fail(&c, "NPY header: %s", "the shape's product overflows");
    count *= h.shape[i];
  }
  if (count > (SIZE_MAX - total) / h.item_bytes)
    return fail(&c, "NPY header: %s", "the data size overflows");
  h.data_offset = total;
  h.data_bytes = count * h.item_bytes;
  *out = h;
  return 0;
}

void
fl__npy_shape_str(const struct fl__npy *h, char *buf, size_t len)
{
  size_t i, at = 0;
  int n;

  if (buf == NULL || len == 0)
    return;
  buf[0] = '\0';
  n = snprintf(buf, len, "(");
  for (i = 0; n >= 0 && i < h->ndim; i++) {
    at += (size_t)n;
    if (at >= len)
      return;
    n = snprintf(buf + at, len - at, i == 0 ? "%zu" : ", %zu", h->shape[i]);
  }
  if (n < 0)
    return;
  at += (size_t)n;
  if (at < len)
    snprintf(buf + at, len - at, h->ndim == 1 ? ",)" : ")");
}

int
fl__npy_check_size(const struct fl__npy *h, uint64_t file_bytes, char *err,
                   size_t errlen)
{
  char s[64];
  uint64_t have;

  if (file_bytes == h->data_offset + (uint64_t)h->data_bytes)
    return 0;
  have = file_bytes > h->data_offset ? file_bytes - h->data_offset : 0;
  fl__npy_shape_str(h, s, sizeof(s));
  snprintf(err, errlen, "NPY header says shape %s of '%s' but the file "
           "holds %llu bytes of data, not %zu", s, h->descr,
           (unsigned long long)have, h->data_bytes);
  return FL_EINVAL;
}

/* Same dtype (byte order included) and shape. */
int
fl__npy_same(const struct fl__npy *a, const struct fl__npy *b)
{
  return a->order == b->order && a->kind == b->kind &&
         a->item_bytes == b->item_bytes && a->ndim == b->ndim &&
         memcmp(a->shape, b->shape, a->ndim * sizeof(a->shape[0])) == 0;
}
