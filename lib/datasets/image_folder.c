/*
 * fl_dataset_image_folder: torchvision's ImageFolder.  Classes are the
 * sorted names of root's subfolders (symlinks followed), labels their
 * positions; a class's samples are the files under it whose lower-cased
 * names end with an image extension, taken as torchvision takes them:
 * os.walk's folders sorted by their paths, each folder's files sorted, so
 * that index i is torchvision's samples[i].  A folder reached again
 * through a symlink (a cycle) is not walked twice, where os.walk would
 * loop.  Each sample is read into a buffer kept by the process and handed
 * to the image stage; two fields, the image and the label (int64).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../image/image.h"
#include "dataset.h"
#include "internal.h"

/* A file larger than this is not an image anyone trains on. */
#define FL__IMAGE_FILE_MAX (256u << 20)

struct folder {
  struct fl__ds_base base; /* first, for fl_dataset_close */
  struct fl__image_stage *stage;
  char *arena; /* every path and class name, NUL-terminated */
  size_t arena_len, arena_cap;
  size_t *path;    /* offsets of sample paths in arena */
  int64_t *label;
  size_t len, cap;
  size_t *cls; /* offsets of class names */
  size_t ncls, cls_cap;
  size_t field_bytes[2];
  unsigned char *buf; /* the file being decoded, kept for the next */
  size_t buf_cap;
};

/* One folder met while walking a class: its path and its files. */
struct walked {
  size_t path;   /* offset in the arena */
  size_t *files; /* offsets of the full paths of its image files */
  size_t n;
};

struct walk {
  struct folder *f;
  struct walked *dirs;
  size_t ndirs, cap;
  dev_t dev[64];
  ino_t ino[64];
  unsigned depth;
};

static void
folder_free(void *ctx)
{
  struct folder *f = ctx;

  fl__image_stage_free(f->stage);
  free(f->arena);
  free(f->path);
  free(f->label);
  free(f->cls);
  free(f->buf);
  free(f);
}

static int
nomem(const char *root)
{
  return fl__error_set(FL_ENOMEM, "fl_dataset_image_folder: %s: out of "
                       "memory for its list of images", root);
}

/* Appends a string to the arena: a, or (b set) the arena's string at
   offset a_off + "/" + b, a path made once, where it is kept. */
static int
arena_add(struct folder *f, const char *a, size_t a_off, const char *b,
          size_t *off)
{
  size_t alen = strlen(b ? f->arena + a_off : a);
  size_t n = alen + (b ? 1 + strlen(b) : 0) + 1;
  char *p;

  if (f->arena_len + n > f->arena_cap) {
    size_t cap = f->arena_cap ? f->arena_cap * 2 : 4096;

    while (cap < f->arena_len + n)
      cap *= 2;
    if ((p = realloc(f->arena, cap)) == NULL)
      return FL_ENOMEM;
    f->arena = p;
    f->arena_cap = cap;
  }
  *off = f->arena_len;
  p = f->arena + f->arena_len;
  if (b) { /* the arena may have moved: a is read from it only now */
    memcpy(p, f->arena + a_off, alen);
    p[alen] = '/';
    memcpy(p + alen + 1, b, n - alen - 1);
  } else {
    memcpy(p, a, n);
  }
  f->arena_len += n;
  return 0;
}

static int
grow(void **p, size_t *cap, size_t need, size_t each)
{
  void *q;
  size_t c;

  if (need <= *cap)
    return 0;
  c = *cap ? *cap * 2 : 64;
  while (c < need)
    c *= 2;
  if ((q = realloc(*p, c * each)) == NULL)
    return FL_ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

static int
by_name(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names of dir's entries, without "." and "..". */
static int
list(const char *dir, char ***names, size_t *n, const char *root)
{
  DIR *d;
  struct dirent *e;
  char **v = NULL;
  size_t cap = 0, k = 0;
  int rc = 0;

  *names = NULL;
  *n = 0;
  if ((d = opendir(dir)) == NULL)
    return fl__error_set(errno == ENOMEM ? FL_ENOMEM : FL_EINVAL,
                         "fl_dataset_image_folder: %s: %s", dir,
                         fl__strerror(errno));
  while ((errno = 0, e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (grow((void **)&v, &cap, k + 1, sizeof(*v)) != 0 ||
        (v[k] = strdup(e->d_name)) == NULL) {
      rc = nomem(root);
      break;
    }
    k++;
  }
  if (rc == 0 && errno != 0)
    rc = fl__error_set(FL_EINVAL, "fl_dataset_image_folder: %s: %s", dir,
                       fl__strerror(errno));
  closedir(d);
  if (rc != 0) {
    while (k > 0)
      free(v[--k]);
    free(v);
    return rc;
  }
  if (k > 1) /* qsort takes no NULL, even for nothing */
    qsort(v, k, sizeof(*v), by_name);
  *names = v;
  *n = k;
  return 0;
}

static void
names_free(char **v, size_t n)
{
  while (n > 0)
    free(v[--n]);
  free(v);
}

static int
is_dir(const char *path, struct stat *st)
{
  return stat(path, st) == 0 && S_ISDIR(st->st_mode);
}

/* os.walk(dir, followlinks=True), keeping each folder's image files; dir
   is the folder's path, at that offset in the arena. */
static int
walk(struct walk *w, size_t dir, const char *root)
{
  struct folder *f = w->f;
  struct walked *me;
  struct stat st;
  char **names;
  size_t n, i, self, fcap = 0;
  unsigned k;
  int rc;

  if (!is_dir(f->arena + dir, &st))
    return 0;
  for (k = 0; k < w->depth; k++)
    if (w->dev[k] == st.st_dev && w->ino[k] == st.st_ino)
      return 0; /* a symlink back up the tree */
  if (w->depth == sizeof(w->dev) / sizeof(w->dev[0]))
    return fl__error_set(FL_EINVAL, "fl_dataset_image_folder: %s: folders "
                         "nested deeper than 64", f->arena + dir);
  if ((rc = list(f->arena + dir, &names, &n, root)) != 0)
    return rc;
  if (grow((void **)&w->dirs, &w->cap, w->ndirs + 1, sizeof(*w->dirs)) != 0) {
    names_free(names, n);
    return nomem(root);
  }
  self = w->ndirs++;
  me = &w->dirs[self];
  memset(me, 0, sizeof(*me));
  me->path = dir;
  w->dev[w->depth] = st.st_dev;
  w->ino[w->depth] = st.st_ino;
  w->depth++;
  for (i = 0; i < n && rc == 0; i++) {
    size_t off;

    if (arena_add(f, NULL, dir, names[i], &off) != 0) {
      rc = nomem(root);
      break;
    }
    if (is_dir(f->arena + off, &st)) {
      rc = walk(w, off, root);
    } else if (fl__image_extension(names[i])) {
      me = &w->dirs[self]; /* walk may have moved it */
      if (grow((void **)&me->files, &fcap, me->n + 1, sizeof(size_t)) != 0)
        rc = nomem(root);
      else
        me->files[me->n++] = off;
    } else {
      f->arena_len = off;
    }
  }
  w->depth--;
  names_free(names, n);
  return rc;
}

static int
by_path(const void *a, const void *b, void *arena)
{
  return strcmp((const char *)arena + ((const struct walked *)a)->path,
                (const char *)arena + ((const struct walked *)b)->path);
}

/* Room for one more sample. */
static int
sample_room(struct folder *f)
{
  size_t cap = f->cap ? f->cap * 2 : 1024;
  void *p;

  if (f->len < f->cap)
    return 0;
  if ((p = realloc(f->path, cap * sizeof(*f->path))) == NULL)
    return FL_ENOMEM;
  f->path = p;
  if ((p = realloc(f->label, cap * sizeof(*f->label))) == NULL)
    return FL_ENOMEM;
  f->label = p;
  f->cap = cap;
  return 0;
}

/* One class: its folders in sorted order, their files already sorted. */
static int
add_class(struct folder *f, size_t dir, int64_t label, const char *root)
{
  struct walk w = {.f = f};
  size_t i, j;
  int rc;

  rc = walk(&w, dir, root);
  if (rc == 0) {
    qsort_r(w.dirs, w.ndirs, sizeof(*w.dirs), by_path, f->arena);
    for (i = 0; i < w.ndirs && rc == 0; i++)
      for (j = 0; j < w.dirs[i].n; j++) {
        if (sample_room(f) != 0) {
          rc = nomem(root);
          break;
        }
        f->path[f->len] = w.dirs[i].files[j];
        f->label[f->len++] = label;
      }
  }
  for (i = 0; i < w.ndirs; i++)
    free(w.dirs[i].files);
  free(w.dirs);
  return rc;
}

static int
scan(struct folder *f, const char *root)
{
  char **names = NULL, *missing = NULL;
  size_t n, i, before, off, top, mlen = 0;
  struct stat st;
  int rc;

  /* "root/" + "cat" is "root/cat", as os.path.join makes it. */
  if (strlen(root) > 1 && root[strlen(root) - 1] == '/') {
    char *trimmed = strdup(root);

    if (trimmed == NULL)
      return nomem(root);
    while (strlen(trimmed) > 1 && trimmed[strlen(trimmed) - 1] == '/')
      trimmed[strlen(trimmed) - 1] = '\0';
    rc = scan(f, trimmed);
    free(trimmed);
    return rc;
  }
  if (stat(root, &st) != 0)
    return fl__error_set(FL_EINVAL, "fl_dataset_image_folder: %s: %s", root,
                         fl__strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return fl__error_set(FL_EINVAL, "fl_dataset_image_folder: %s: not a "
                         "folder", root);
  if ((rc = list(root, &names, &n, root)) != 0)
    return rc;
  if (arena_add(f, root, 0, NULL, &top) != 0)
    rc = nomem(root);
  for (i = 0; i < n && rc == 0; i++) {
    if (arena_add(f, NULL, top, names[i], &off) != 0) {
      rc = nomem(root);
      break;
    }
    if (!is_dir(f->arena + off, &st)) {
      f->arena_len = off;
      continue;
    }
    if (grow((void **)&f->cls, &f->cls_cap, f->ncls + 1, sizeof(size_t))) {
      rc = nomem(root);
      break;
    }
    /* The class's name is its folder's path past "root/". */
    f->cls[f->ncls] = off + strlen(root) + 1;
    before = f->len;
    rc = add_class(f, off, (int64_t)f->ncls, root);
    f->ncls++;
    if (rc == 0 && f->len == before) {
      /* torchvision names every class without an image at once */
      size_t add = strlen(names[i]) + 3;
      char *m = realloc(missing, mlen + add);

      if (m == NULL) {
        rc = nomem(root);
      } else {
        missing = m;
        snprintf(missing + mlen, add, "%s%s", mlen ? ", " : "", names[i]);
        mlen += strlen(missing + mlen);
      }
    }
  }
  names_free(names, n);
  if (rc == 0 && f->ncls == 0)
    rc = fl__error_set(FL_EINVAL, "fl_dataset_image_folder: %s: no class "
                       "folder in it (ImageFolder wants ROOT/CLASS/IMAGE)",
                       root);
  else if (rc == 0 && missing != NULL)
    rc = fl__error_set(FL_EINVAL, "fl_dataset_image_folder: %s: no image "
                       "(.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp) in "
                       "the class folder%s %s", root,
                       strchr(missing, ',') ? "s" : "", missing);
  free(missing);
  return rc;
}

/* The whole file, into the buffer the process keeps. */
static int
slurp(struct folder *f, const char *path, size_t *n)
{
  struct stat st;
  size_t got = 0;
  int r;
  int fd, rc = FL_EDATASET;

  do
    /* O_NONBLOCK: a FIFO named x.jpg must not block the worker. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int e = errno;

    fl_worker_error("%s: %s", path, fl__strerror(e));
    return e == EMFILE ? FL_EMFILE : e == ENFILE ? FL_ENFILE : FL_EDATASET;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    fl_worker_error("%s: not a regular file", path);
    goto out;
  }
  if ((uint64_t)st.st_size > FL__IMAGE_FILE_MAX) {
    fl_worker_error("%s: %lld bytes, more than any image forkload reads "
                    "(256 MiB)", path, (long long)st.st_size);
    goto out;
  }
  if ((size_t)st.st_size > f->buf_cap) {
    void *b = realloc(f->buf, (size_t)st.st_size);

    if (b == NULL) {
      fl_worker_error("%s: out of memory for its %lld bytes", path,
                      (long long)st.st_size);
      goto out;
    }
    f->buf = b;
    f->buf_cap = (size_t)st.st_size;
  }
  if ((r = fl__pread_full(fd, f->buf, (size_t)st.st_size, 0, &got)) < 0 ||
      got < (size_t)st.st_size) {
    fl_worker_error("%s: %s", path, r < 0 ? fl__strerror((int)-r)
                                          : "it shrank while being read");
    goto out;
  }
  *n = got;
  rc = 0;
out:
  close(fd);
  return rc;
}

static int
folder_get_fields(void *ctx, size_t index, void *const *dst, size_t *nbytes)
{
  struct folder *f = ctx;
  const char *path;
  size_t n = 0;
  int rc;

  if (index >= f->len) {
    fl_worker_error("image folder: index %zu past its %zu images", index,
                    f->len);
    return FL_EINVAL;
  }
  path = f->arena + f->path[index];
  if ((rc = slurp(f, path, &n)) != 0)
    return rc;
  rc = fl__image_stage_run(f->stage, f->buf, n, fl_sample_seed(index), dst[0],
                           path);
  if (rc != 0)
    return rc;
  memcpy(dst[1], &f->label[index], sizeof(int64_t));
  nbytes[0] = f->field_bytes[0];
  nbytes[1] = sizeof(int64_t);
  return 0;
}

int
fl_dataset_image_folder_sized(fl_dataset *out, size_t size, const char *root,
                              const fl_image_options *io, size_t io_size)
{
  struct folder *f;
  int rc;

  rc = fl__dataset_out_check(out, size, "fl_dataset_image_folder");
  if (rc != 0)
    return rc;
  if (size < FL__SIZE_TO(fl_dataset, get_fields))
    return fl__error_set(FL_EINVAL, "fl_dataset_image_folder: fl_dataset is "
                         "%zu bytes here: too old to hold fields", size);
  if (root == NULL)
    return fl__error_set(FL_EINVAL, "fl_dataset_image_folder: root is NULL");
  if ((f = calloc(1, sizeof(*f))) == NULL)
    return nomem(root);
  f->base.magic = FL__DS_MAGIC;
  f->base.free = folder_free;
  if ((rc = fl__image_stage_new(&f->stage, io, io_size,
                                "fl_dataset_image_folder")) != 0 ||
      (rc = scan(f, root)) != 0) {
    folder_free(f);
    return rc;
  }
  f->field_bytes[0] = fl__image_stage_bytes(f->stage);
  f->field_bytes[1] = sizeof(int64_t);
  return fl__dataset_out(
      out, size,
      &(fl_dataset){.ctx = f, .len = f->len,
                    .sample_bytes = f->field_bytes[0] + f->field_bytes[1],
                    .nfields = 2, .field_bytes = f->field_bytes,
                    .get_fields = folder_get_fields});
}

static const struct folder *
folder_of(const fl_dataset *ds)
{
  const struct folder *f = ds ? ds->ctx : NULL;

  return f && f->base.magic == FL__DS_MAGIC && f->base.free == folder_free
             ? f
             : NULL;
}

const char *
fl_image_folder_sample(const fl_dataset *ds, size_t index, int64_t *label)
{
  const struct folder *f = folder_of(ds);

  if (f == NULL || index >= f->len)
    return NULL;
  if (label != NULL)
    *label = f->label[index];
  return f->arena + f->path[index];
}

const char *
fl_image_folder_class(const fl_dataset *ds, size_t label)
{
  const struct folder *f = folder_of(ds);

  return f == NULL || label >= f->ncls ? NULL : f->arena + f->cls[label];
}
