/*
 * --dataset SPEC: the kinds of file dataset the library reads, the strict
 * parsing of a SPEC naming one, and its opening through the library's
 * built-in datasets.  `forkload gen` names its kinds with the same words.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const kind_names[] = {
  [DS_NPY_DIR] = "npy-dir",
  [DS_NPY] = "npy",
  [DS_RAW] = "raw",
  [DS_NPY_ZIP] = "npy-zip",
  [DS_IMAGES] = "images",
  [DS_TOKENS] = "tokens",
  [DS_LMDB] = "lmdb",
  [DS_WEBDATASET] = "webdataset",
};

#define NKINDS (sizeof kind_names / sizeof kind_names[0])

int
dataset_kind(const char *name, size_t len)
{
  size_t k;

  for (k = DS_NPY_DIR; k < NKINDS; k++)
    if (strlen(kind_names[k]) == len && memcmp(name, kind_names[k], len) == 0)
      return (int)k;
  return -1;
}

const char *
dataset_kind_name(enum ds_kind kind)
{
  return kind == DS_SYNTHETIC ? "synthetic" : kind_names[kind];
}

/* Whether the colon-separated field at s is a whole number that fits;
   if so, *out is its value. */
static int
field_number(const char *s, size_t *out)
{
  uint64_t v;
  char *end;

  if (cli_scan_uint(s, &end, &v) != 0 || (*end != '\0' && *end != ':') ||
      v >= SIZE_MAX)
    return 0;
  *out = (size_t)v;
  return 1;
}

/*
 * raw:PATH:RECORD_BYTES[:HEADER_BYTES], from after "raw:".  PATH may hold
 * colons: the last field is a number, and so is the one before it when
 * HEADER_BYTES is given.  Returns the length of PATH, or 0 when s is
 * not of that form.
 */
static size_t
parse_raw(const char *s, struct dataset_spec *out)
{
  const char *last = strrchr(s, ':'), *before, *end;

  if (last == NULL || !field_number(last + 1, &out->header_bytes))
    return 0;
  before = memrchr(s, ':', (size_t)(last - s));
  if (before != NULL && before > s &&
      field_number(before + 1, &out->record_bytes)) {
    end = before;
  } else {
    out->record_bytes = out->header_bytes;
    out->header_bytes = 0;
    end = last;
  }
  return out->record_bytes > 0 ? (size_t)(end - s) : 0;
}

/* tokens:PATH[,PATH...]:SEQ_LEN and lmdb:PATH:MAX_BYTES, from after the
   kind: the last field a number above 0 into *n.  Returns the length of
   what comes before it (colons and all), or 0 when s is not of that
   form. */
static size_t
parse_last_number(const char *s, size_t *n)
{
  const char *last = strrchr(s, ':');

  if (last == NULL || last == s || !field_number(last + 1, n) || *n == 0)
    return 0;
  return (size_t)(last - s);
}

size_t
dataset_split(char *list, const char **paths)
{
  size_t n = 0;
  char *p = list, *comma;

  for (;;) {
    comma = strchr(p, ',');
    if (comma == p || *p == '\0' || n == SYNTH_MAX_FIELDS)
      return 0;
    paths[n++] = p;
    if (comma == NULL)
      return n;
    *comma = '\0';
    p = comma + 1;
  }
}

/*
 * webdataset:[SHARD[,SHARD...]:]EXT=MAX[,EXT=MAX...], from after the kind,
 * already copied to out->path: the extensions follow the last colon (a
 * shard may hold colons); without one, the shards are all --shard's.  0,
 * or -1 when it is not of that form.
 */
static int
parse_webdataset(struct dataset_spec *out)
{
  char *colon = strrchr(out->path, ':'), *list = out->path, *p, *eq, *end;
  const char *exts[SYNTH_MAX_FIELDS + 1];
  size_t n = 1, f;
  uint64_t v;

  if (colon != NULL) {
    *colon = '\0';
    list = colon + 1;
    for (p = out->path; *p != '\0'; p++)
      n += *p == ',';
    out->shards = calloc(n, sizeof(*out->shards));
    if (out->shards == NULL)
      return -1;
    for (p = out->path; p != NULL; p = end != NULL ? end + 1 : NULL) {
      end = strchr(p, ',');
      if (end != NULL)
        *end = '\0';
      if (*p == '\0')
        return -1;
      out->shards[out->nshards++] = p;
    }
  }
  out->nexts = dataset_split(list, exts);
  for (f = 0; f < out->nexts; f++) {
    /* exts[f] points into out->path, ours to write; glibc 2.28's
       headers under zig give strrchr a const char * for a const one. */
    eq = strrchr((char *)exts[f], '=');
    if (eq == NULL || eq == exts[f] || cli_scan_uint(eq + 1, &end, &v) != 0 ||
        *end != '\0' || v == 0 || v >= SIZE_MAX)
      return -1;
    *eq = '\0';
    out->exts[f] = exts[f];
    out->max_bytes[f] = (size_t)v;
  }
  return out->nexts > 0 ? 0 : -1;
}

int
dataset_parse(const char *spec, struct dataset_spec *out)
{
  const char *colon = strchr(spec, ':'), *rest = NULL;
  int kind = colon != NULL ? dataset_kind(spec, (size_t)(colon - spec)) : -1;
  size_t len = 0;

  *out = (struct dataset_spec){.kind = DS_SYNTHETIC};
  if (kind >= 0) {
    rest = colon + 1;
    len = kind == DS_RAW      ? parse_raw(rest, out)
          : kind == DS_TOKENS ? parse_last_number(rest, &out->seq_len)
          : kind == DS_LMDB   ? parse_last_number(rest, &out->lmdb_max)
                              : strlen(rest);
  }
  if (len == 0) {
    cli_error("--dataset: expected npy-dir:PATH, npy:PATH, "
              "npy-zip:PATH[,PATH...], "
              "raw:PATH:RECORD_BYTES[:HEADER_BYTES] (RECORD_BYTES > 0), "
              "images:DIR, tokens:PATH[,PATH...]:SEQ_LEN (SEQ_LEN > 0), "
              "lmdb:PATH:MAX_BYTES (MAX_BYTES > 0) or "
              "webdataset:SHARD[,SHARD...]:EXT=MAX[,...], got '%s'", spec);
    return -1;
  }
  out->path = strndup(rest, len);
  if (out->path == NULL) {
    cli_error("--dataset: %s", fl_strerror(FL_ENOMEM));
    return -1;
  }
  if ((kind == DS_NPY_ZIP || kind == DS_TOKENS) &&
      (out->npaths = dataset_split(out->path, out->paths)) == 0) {
    cli_error("--dataset: %s takes 1 to %d paths separated by commas, "
              "none of them empty, got '%s'", kind_names[kind],
              SYNTH_MAX_FIELDS, spec);
    dataset_spec_free(out);
    return -1;
  }
  if (kind == DS_WEBDATASET && parse_webdataset(out) < 0) {
    cli_error("--dataset: webdataset takes SHARD[,SHARD...]:EXT=MAX"
              "[,EXT=MAX...] (or EXT=MAX[,...] alone, with --shard), "
              "shards and extensions not empty, each MAX a number of bytes "
              "above 0, at most %d extensions, got '%s'",
              SYNTH_MAX_FIELDS, spec);
    dataset_spec_free(out);
    return -1;
  }
  out->kind = kind;
  out->spec = spec;
  return 0;
}

int
dataset_open(const struct dataset_spec *spec, fl_dataset *ds)
{
  int rc;

  switch (spec->kind) {
  case DS_NPY_DIR:
    rc = fl_dataset_npy_dir(ds, spec->path);
    break;
  case DS_NPY:
    rc = fl_dataset_npy_array(ds, spec->path);
    break;
  case DS_RAW:
    rc = fl_dataset_raw(ds, spec->path, spec->record_bytes,
                        spec->header_bytes);
    break;
  case DS_NPY_ZIP:
    rc = fl_dataset_npy_zip(ds, spec->paths, spec->npaths);
    break;
  case DS_IMAGES:
    rc = fl_dataset_image_folder(ds, spec->path, spec->io);
    break;
  case DS_TOKENS:
    rc = fl_dataset_tokens(ds, spec->paths, spec->npaths, spec->seq_len);
    break;
  case DS_LMDB:
    rc = fl_dataset_lmdb(ds, spec->path, spec->lmdb_max);
    break;
  default:
    rc = FL_EINVAL;
  }
  if (rc < 0)
    cli_error("%s", cli_loader_error(NULL, rc));
  return rc < 0 ? -1 : 0;
}

int
dataset_open_iterable(const struct dataset_spec *spec, fl_iterable *it)
{
  int rc = fl_dataset_webdataset(it, spec->shards, spec->nshards,
                                 spec->exts, spec->max_bytes, spec->nexts);

  if (rc < 0)
    cli_error("%s", cli_loader_error(NULL, rc));
  return rc < 0 ? -1 : 0;
}

void
dataset_spec_free(struct dataset_spec *spec)
{
  free(spec->shards);
  free(spec->path);
  *spec = (struct dataset_spec){.kind = DS_SYNTHETIC};
}
