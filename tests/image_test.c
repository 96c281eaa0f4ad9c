/*
 * fl_dataset_image_folder and the image stage against torchvision: the
 * folder's classes, samples and labels in ImageFolder's order, every kind
 * of JPEG and PNG, and of WebP, TIFF, BMP, PPM and PGM forkload decodes,
 * decoded to PIL's bytes, crops and evaluation transforms
 * to torchvision's pixels (exact, or close where a JPEG is decoded at a
 * reduced DCT scale), ToTensor + Normalize to its floats, random crops and
 * flips as functions of (seed, epoch, index), and every bad file a
 * sentence that names it, at its batch only.  The fixtures and golden
 * files are committed (tools/golden_images.py wrote them), so no Python is
 * needed; files made per case go to a fresh folder under /tmp, removed at
 * its end.  Without libjpeg-turbo or libspng the program checks that the
 * dataset says FL_ENOTSUP, naming what to install, and skips the rest;
 * without libwebp or libtiff (configure --without-webp, --without-tiff)
 * each file of that format is checked to be its batch's error naming the
 * package, and the rest runs.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"
#include "image/decode.h"
#include "image/image.h"

#if defined(HAVE_LIBJPEG) && defined(HAVE_SPNG)
#define DECODERS 1
#else
#define DECODERS 0
#endif

/* What a file of a format this build has no library for is told, at its
   batch; WHY_WEBP(w) and WHY_TIFF(w): w where it has one, that where not. */
#define NOT_BUILT(lib, pkg)                                                  \
  "this forkload was built without " lib " (not supported by this "        \
  "build): apt-get install " pkg " and build it again"
#ifdef HAVE_WEBP
#define WHY_WEBP(w) w
#else
#define WHY_WEBP(w) NOT_BUILT("libwebp", "libwebp-dev")
#endif
#ifdef HAVE_TIFF
#define WHY_TIFF(w) w
#else
#define WHY_TIFF(w) NOT_BUILT("libtiff", "libtiff-dev")
#endif

/* NULL where this build decodes the file named (its extension says its
   format in the fixtures), else what its error must say. */
static const char *
not_built(const char *name)
{
  const char *e = strrchr(name, '.');

  if (e != NULL && strcasecmp(e, ".webp") == 0)
    return WHY_WEBP(NULL);
  if (e != NULL && (strcasecmp(e, ".tif") == 0 || strcasecmp(e, ".tiff") == 0))
    return WHY_TIFF(NULL);
  return NULL;
}

/* --- files ---------------------------------------------------------- */

/* snprintf that must not truncate: paths and names are built with it. */
static void pathf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
pathf(char *buf, size_t len, const char *fmt, ...)
{
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(buf, len, fmt, ap);
  va_end(ap);
  assert_true(n >= 0 && (size_t)n < len);
}

/* A committed file: srcdir/tests/REL (make check runs from the build
   tree and says where the sources are). */
static void
src_path(char *buf, size_t len, const char *rel)
{
  const char *dir = getenv("srcdir");

  pathf(buf, len, "%s/tests/%s", dir != NULL ? dir : ".", rel);
}

static unsigned char *
read_all(const char *path, size_t *n)
{
  unsigned char *buf;
  FILE *f = fopen(path, "rb");
  long len;

  if (f == NULL)
    fail_msg("cannot open %s: %s", path, strerror(errno));
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  len = ftell(f);
  assert_true(len >= 0);
  rewind(f);
  buf = malloc((size_t)len + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return buf;
}

static unsigned char *
read_src(const char *rel, size_t *n)
{
  char path[PATH_MAX];

  src_path(path, sizeof(path), rel);
  return read_all(path, n);
}

static void
write_file(const char *path, const void *buf, size_t n)
{
  FILE *f = fopen(path, "wb");

  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/* copy_src's n: all of the file, or its first half. */
#define ALL SIZE_MAX
#define HALF (SIZE_MAX - 1)

/* dir/name holds the first n bytes of a committed file. */
static void
copy_src(const char *dir, const char *name, const char *rel, size_t n)
{
  char path[PATH_MAX];
  size_t len;
  unsigned char *b = read_src(rel, &len);

  if (n == HALF)
    n = len / 2;
  pathf(path, sizeof(path), "%s/%s", dir, name);
  write_file(path, b, n < len ? n : len);
  free(b);
}

/* The case's folder under /tmp, for the teardown of a case that failed
   before removing it. */
static char case_dir[64];

/* A fresh folder under /tmp (one per case), and one inside it. */
static void
dir_make(char *dir, size_t len)
{
  pathf(dir, len, "/tmp/fl-image-XXXXXX");
  assert_non_null(mkdtemp(dir));
  pathf(case_dir, sizeof(case_dir), "%s", dir);
}

static void
sub_make(char *out, size_t len, const char *dir, const char *name)
{
  pathf(out, len, "%s/%s", dir, name);
  assert_int_equal(mkdir(out, 0755), 0);
}

/* Everything under dir, symlinks as themselves, then dir. */
static void
dir_remove(const char *dir)
{
  assert_int_equal(flt_rm_tree(dir), 0);
  case_dir[0] = '\0';
}

/* After every case: what a failed one left in /tmp goes. */
static int
teardown(void **state)
{
  (void)state;
  if (case_dir[0] != '\0')
    flt_rm_tree(case_dir);
  case_dir[0] = '\0';
  return 0;
}

/* --- images and the stage ------------------------------------------- */

/* An image's size from its header: PNG's IHDR or JPEG's SOF. */
static void
image_size(const unsigned char *b, size_t n, unsigned *w, unsigned *h)
{
  size_t i = 2;

  if (n >= 24 && b[0] == 0x89) {
    *w = (unsigned)b[16] << 24 | b[17] << 16 | b[18] << 8 | b[19];
    *h = (unsigned)b[20] << 24 | b[21] << 16 | b[22] << 8 | b[23];
    return;
  }
  while (i + 9 < n) {
    unsigned m = b[i + 1], len = (unsigned)b[i + 2] << 8 | b[i + 3];

    assert_int_equal(b[i], 0xff);
    if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
      *h = (unsigned)b[i + 5] << 8 | b[i + 6];
      *w = (unsigned)b[i + 7] << 8 | b[i + 8];
      return;
    }
    i += 2 + len;
  }
  fail_msg("no SOF marker");
}

/* Where a JPEG's SOF keeps its height and width, to lie about them. */
static size_t
sof_at(const unsigned char *b, size_t n)
{
  size_t i = 2;

  while (i + 9 < n) {
    unsigned m = b[i + 1];

    if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc)
      return i + 5;
    i += 2 + ((unsigned)b[i + 2] << 8 | b[i + 3]);
  }
  fail_msg("no SOF marker");
  return 0;
}

static int
is_jpeg(const unsigned char *b, size_t n)
{
  return n >= 2 && b[0] == 0xff && b[1] == 0xd8;
}

/*
 * The DCT scale the stage picks for a box of bw x bh source pixels
 * resized to vw x vh (lib/image/stage.c's plan): the smallest n/8 at
 * which the box keeps twice the output on each side; 8 is none.  Where
 * it is 8 the output must be torchvision's to the byte.
 */
static unsigned
dct_scale(unsigned w, unsigned h, double bw, double bh, unsigned vw,
          unsigned vh)
{
  unsigned num;

  for (num = 1; num < 8; num++) {
    unsigned sw = (w * num + 7) / 8, sh = (h * num + 7) / 8;

    if (bw * sw / w >= 2.0 * vw && bh * sh / h >= 2.0 * vh)
      return num;
  }
  return 8;
}

/* Resize(size)'s output for a w x h image, as torchvision computes it. */
static void
resized(unsigned w, unsigned h, unsigned size, unsigned *vw, unsigned *vh)
{
  unsigned shorter = w < h ? w : h, longer = w < h ? h : w;
  unsigned scaled = (unsigned)((double)size * longer / shorter);

  *vw = w <= h ? size : scaled;
  *vh = w <= h ? scaled : size;
}

static void
options(fl_image_options *io, unsigned h, unsigned w)
{
  fl_image_options_init(io);
  io->height = h;
  io->width = w;
}

static struct fl__image_stage *
stage_of(const fl_image_options *io)
{
  struct fl__image_stage *st = NULL;

  if (fl__image_stage_new(&st, io, sizeof(*io), "image_test") != 0)
    fail_msg("%s", fl_loader_error(NULL));
  return st;
}

/* An image read whole: H x W, center mode with the shorter side. */
static struct fl__image_stage *
identity_stage(unsigned w, unsigned h)
{
  fl_image_options io;

  options(&io, h, w);
  io.resize = w < h ? w : h;
  return stage_of(&io);
}

/* Mean absolute difference and PSNR (dB) of two n-byte images. */
static void
compare(const unsigned char *a, const unsigned char *b, size_t n,
        double *mad, double *psnr)
{
  double sad = 0, sse = 0;
  size_t i;

  for (i = 0; i < n; i++) {
    double d = (double)a[i] - b[i];

    sad += fabs(d);
    sse += d * d;
  }
  *mad = sad / n;
  *psnr = sse == 0 ? INFINITY : 10 * log10(255.0 * 255.0 * n / sse);
}

/* img (h x w x 3) mirrored left to right, into out. */
static void
mirror(unsigned char *out, const unsigned char *img, unsigned w, unsigned h)
{
  unsigned x, y;

  for (y = 0; y < h; y++)
    for (x = 0; x < w; x++)
      memcpy(out + ((size_t)y * w + x) * 3,
             img + ((size_t)y * w + (w - 1 - x)) * 3, 3);
}

/* The first differing byte, for a failure that says where. */
static void
assert_same_pixels(const unsigned char *got, const unsigned char *want,
                   unsigned w, unsigned h, const char *what)
{
  size_t i, n = (size_t)w * h * 3;

  for (i = 0; i < n; i++)
    if (got[i] != want[i])
      fail_msg("%s: pixel (%zu, %zu) channel %zu is %u, not %u", what,
               i / 3 % w, i / 3 / w, i % 3, got[i], want[i]);
}

/* --- golden lists ---------------------------------------------------- */

struct decoded {
  char name[64], source[16];
  unsigned w, h;
};

/* A golden file of the source tree, open for reading. */
static FILE *
golden_open(const char *rel)
{
  char path[PATH_MAX];
  FILE *f;

  src_path(path, sizeof(path), rel);
  if ((f = fopen(path, "r")) == NULL)
    fail_msg("cannot open %s", path);
  return f;
}

/* Its next line that is not a comment, into line; 0 at its end. */
static int
golden_line(FILE *f, char *line, int len)
{
  while (fgets(line, len, f) != NULL)
    if (line[0] != '#')
      return 1;
  return 0;
}

/* tests/golden/image_decode.txt; returns how many. */
static size_t
decoded_list(struct decoded *d, size_t cap)
{
  FILE *f = golden_open("golden/image_decode.txt");
  char line[256];
  size_t n = 0;

  while (golden_line(f, line, sizeof(line))) {
    assert_true(n < cap);
    assert_int_equal(sscanf(line, "%63s %u %u %15s", d[n].name, &d[n].w,
                            &d[n].h, d[n].source),
                     4);
    n++;
  }
  fclose(f);
  assert_true(n >= 15);
  return n;
}

static unsigned char *
decoded_pixels(const struct decoded *d)
{
  char rel[128];
  size_t n;
  unsigned char *p;

  pathf(rel, sizeof(rel), "golden/image_pixels/%s.rgb", d->name);
  p = read_src(rel, &n);
  assert_int_equal(n, (size_t)d->w * d->h * 3);
  return p;
}

/* One line of tests/golden/image_transforms.txt. */
struct xform {
  int center; /* 0: F.resized_crop at the box, then the flip */
  char file[64];
  unsigned top, left, bh, bw, resize, h, w;
  int flip, chw_float;
  size_t off;
};

static size_t
xform_list(struct xform *x, size_t cap)
{
  FILE *f = golden_open("golden/image_transforms.txt");
  char line[256];
  size_t n = 0;

  while (golden_line(f, line, sizeof(line))) {
    struct xform *t = &x[n];

    assert_true(n < cap);
    memset(t, 0, sizeof(*t));
    if (strncmp(line, "crop ", 5) == 0) {
      assert_int_equal(sscanf(line + 5, "%63s %u %u %u %u %u %u %d %d %zu",
                              t->file, &t->top, &t->left, &t->bh, &t->bw,
                              &t->h, &t->w, &t->flip, &t->chw_float,
                              &t->off),
                       10);
    } else {
      t->center = 1;
      assert_int_equal(sscanf(line, "center %63s %u %u %u %d %zu", t->file,
                              &t->resize, &t->h, &t->w, &t->chw_float,
                              &t->off),
                       6);
    }
    n++;
  }
  fclose(f);
  assert_true(n >= 20);
  return n;
}

/* The image a golden line starts from, and the stage that makes it. */
static struct fl__image_stage *
xform_stage(const struct xform *t)
{
  fl_image_options io;
  struct fl__image_stage *st;

  options(&io, t->h, t->w);
  io.chw_float = t->chw_float;
  io.resize = t->resize;
  st = stage_of(&io);
  if (!t->center)
    fl__image_stage_force(st, t->top, t->left, t->bh, t->bw, t->flip);
  return st;
}

/* Whether the stage decodes this line's JPEG at a reduced scale. */
static int
xform_scaled(const struct xform *t, const unsigned char *img, size_t n)
{
  unsigned w, h, vw, vh;

  if (!is_jpeg(img, n))
    return 0;
  image_size(img, n, &w, &h);
  if (!t->center)
    return dct_scale(w, h, t->bw, t->bh, t->w, t->h) < 8;
  resized(w, h, t->resize, &vw, &vh);
  if ((w < h ? w : h) == t->resize)
    return 0; /* torchvision leaves it as it is */
  return dct_scale(w, h, w, h, vw, vh) < 8;
}

static void
xform_describe(const struct xform *t, char *buf, size_t len)
{
  if (t->center)
    pathf(buf, len, "%s Resize(%u) CenterCrop(%u, %u)%s", t->file,
             t->resize, t->h, t->w, t->chw_float ? " float" : "");
  else
    pathf(buf, len, "%s box %u,%u %ux%u to %ux%u%s%s", t->file, t->top,
             t->left, t->bh, t->bw, t->h, t->w, t->flip ? " flipped" : "",
             t->chw_float ? " float" : "");
}

/* --- an image folder of the case's own ------------------------------- */

/* Loads every batch of an epoch (batch_size 1 or more, in order) into
   out: sample i's image at out + i * image_bytes. */
static void
load_epoch(fl_loader *l, unsigned char *out, size_t image_bytes,
           size_t len)
{
  fl_batch *b;
  size_t i, seen = 0;
  int rc;

  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) == 1) {
    assert_int_equal(fl_batch_stride(b, 0), image_bytes);
    for (i = 0; i < fl_batch_count(b); i++, seen++) {
      assert_int_equal(fl_batch_indices(b)[i], seen);
      memcpy(out + seen * image_bytes,
             (const unsigned char *)fl_batch_field(b, 0) + i * image_bytes,
             image_bytes);
    }
    fl_batch_release(b);
  }
  if (rc != 0)
    fail_msg("%s", fl_loader_error(l));
  assert_int_equal(seen, len);
}

/* ===================================================================== */

/* The committed tree: classes and samples as ImageFolder lists them. */
static void
folder_order_and_labels_are_image_folders(void **state)
{
  char root[PATH_MAX], path[PATH_MAX], line[PATH_MAX], *sp;
  const char *got;
  size_t classes = 0, samples = 0, i;
  flt_baseline base;
  fl_image_options io;
  fl_dataset ds, slash;
  int64_t label;
  FILE *f;

  (void)state;
  flt_baseline_take(&base);
  src_path(root, sizeof(root), "images/tree");
  options(&io, 6, 8);
  if (fl_dataset_image_folder(&ds, root, &io) != 0)
    fail_msg("%s", fl_loader_error(NULL));
  src_path(path, sizeof(path), "golden/image_folder.txt");
  f = fopen(path, "r");
  assert_non_null(f);
  while (fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, "class ", 6) == 0) {
      sp = strchr(line + 6, ' ');
      assert_non_null(sp);
      assert_int_equal(strtoul(line + 6, NULL, 10), classes);
      got = fl_image_folder_class(&ds, classes);
      if (got == NULL || strcmp(got, sp + 1) != 0)
        fail_msg("class %zu is %s, not %s", classes, got ? got : "NULL",
                 sp + 1);
      classes++;
    } else if (strncmp(line, "sample ", 7) == 0) {
      sp = strrchr(line, ' ');
      *sp = '\0';
      pathf(path, sizeof(path), "%s/%s", root, line + 7);
      got = fl_image_folder_sample(&ds, samples, &label);
      if (got == NULL || strcmp(got, path) != 0)
        fail_msg("sample %zu is %s, not %s", samples, got ? got : "NULL",
                 path);
      assert_int_equal(label, strtol(sp + 1, NULL, 10));
      samples++;
    }
  }
  fclose(f);
  assert_true(classes >= 4 && samples >= 20);
  assert_null(fl_image_folder_class(&ds, classes));
  assert_null(fl_image_folder_sample(&ds, samples, &label));
  assert_int_equal(ds.len, samples);
  /* The label pointer is optional. */
  assert_non_null(fl_image_folder_sample(&ds, 0, NULL));
  assert_int_equal(ds.nfields, 2);
  assert_int_equal(ds.field_bytes[0], 6 * 8 * 3);
  assert_int_equal(ds.field_bytes[1], sizeof(int64_t));
  assert_int_equal(ds.sample_bytes, 6 * 8 * 3 + sizeof(int64_t));
  /* "tree/" names the same files, as os.path.join("tree/", "cat") is
     "tree/cat". */
  pathf(path, sizeof(path), "%s/", root);
  if (fl_dataset_image_folder(&slash, path, &io) != 0)
    fail_msg("%s", fl_loader_error(NULL));
  assert_int_equal(slash.len, ds.len);
  for (i = 0; i < ds.len; i++)
    assert_string_equal(fl_image_folder_sample(&slash, i, NULL),
                        fl_image_folder_sample(&ds, i, NULL));
  fl_dataset_close(&slash);
  fl_dataset_close(&ds);
  assert_null(ds.ctx);
  flt_assert_clean(&base);
}

/*
 * The same tree through two workers: every file, of each of
 * torchvision's extensions (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff
 * .webp, in any case), loads with its label (the tree's images are 8 x 6,
 * output as they are).
 */
static void
folder_through_workers_decodes_every_extension_with_its_label(void **state)
{
  static const char *const exts[] = {".jpg", ".jpeg", ".png", ".ppm",
                                     ".bmp", ".pgm",  ".tif", ".tiff",
                                     ".webp"};
  char root[PATH_MAX];
  const char *path, *ext;
  flt_baseline base;
  fl_image_options io;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  int64_t label;
  size_t i = 0, k, seen[9] = {0};
  int rc;

  (void)state;
  flt_baseline_take(&base);
  src_path(root, sizeof(root), "images/tree");
  options(&io, 6, 8);
  io.resize = 6;
  assert_int_equal(fl_dataset_image_folder(&ds, root, &io), 0);
  fl_options_init(&opt);
  opt.num_workers = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    path = fl_image_folder_sample(&ds, i, &label);
    assert_non_null(path);
    ext = strrchr(path, '.');
    for (k = 0; k < 9 && strcasecmp(ext, exts[k]) != 0; k++)
      ;
    assert_true(k < 9);
    seen[k]++;
    i++;
    if (not_built(path) != NULL) {
      assert_int_equal(rc, FL_EDATASET);
      if (strstr(fl_loader_error(l), path) == NULL ||
          strstr(fl_loader_error(l), not_built(path)) == NULL)
        fail_msg("%s", fl_loader_error(l));
      continue;
    }
    if (rc != 1)
      fail_msg("%s: %s", path, fl_loader_error(l));
    assert_int_equal(fl_batch_indices(b)[0], i - 1);
    assert_memory_equal(fl_batch_field(b, 1), &label, sizeof(label));
    fl_batch_release(b);
  }
  assert_int_equal(i, ds.len);
  for (k = 0; k < 9; k++)
    if (seen[k] == 0)
      fail_msg("no %s file loaded", exts[k]);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  flt_assert_clean(&base);
}

/* A symlink back up the tree (os.walk would loop) is not walked again. */
static void
folder_symlink_cycle_is_walked_once(void **state)
{
  char dir[64], cls[PATH_MAX], sub[PATH_MAX], path[PATH_MAX];
  flt_baseline base;
  fl_image_options io;
  fl_dataset ds;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  sub_make(cls, sizeof(cls), dir, "c");
  sub_make(sub, sizeof(sub), cls, "sub");
  copy_src(cls, "a.jpg", "images/decode/jpeg_444.jpg", ALL);
  copy_src(sub, "b.png", "images/decode/png_rgb.png", ALL);
  pathf(path, sizeof(path), "%s/up", sub);
  assert_int_equal(symlink("..", path), 0);
  pathf(path, sizeof(path), "%s/self", cls);
  assert_int_equal(symlink(".", path), 0);
  options(&io, 8, 8);
  if (fl_dataset_image_folder(&ds, dir, &io) != 0)
    fail_msg("%s", fl_loader_error(NULL));
  assert_int_equal(ds.len, 2);
  pathf(path, sizeof(path), "%s/a.jpg", cls);
  assert_string_equal(fl_image_folder_sample(&ds, 0, NULL), path);
  pathf(path, sizeof(path), "%s/b.png", sub);
  assert_string_equal(fl_image_folder_sample(&ds, 1, NULL), path);
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/*
 * The 37 x 29 decode fixtures in one class, through two workers, read
 * whole (Resize to the shorter side and CenterCrop to the image are
 * torchvision's identity): PIL's bytes, label 0.
 */
static void
decoded_through_two_workers_are_pils_bytes(void **state)
{
  struct decoded d[64];
  char dir[64], cls[PATH_MAX], rel[128];
  const char *path, *name;
  unsigned char *want;
  flt_baseline base;
  fl_image_options io;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  size_t n = decoded_list(d, 64), i, k, copied = 0, seen = 0;
  int64_t zero = 0;
  int rc;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  sub_make(cls, sizeof(cls), dir, "c");
  for (i = 0; i < n; i++)
    if (d[i].w == 37 && d[i].h == 29 && not_built(d[i].name) == NULL) {
      pathf(rel, sizeof(rel), "images/decode/%s", d[i].name);
      copy_src(cls, d[i].name, rel, ALL);
      copied++;
    }
  assert_true(copied >= 10);
  options(&io, 29, 37);
  io.resize = 29;
  assert_int_equal(fl_dataset_image_folder(&ds, dir, &io), 0);
  assert_int_equal(ds.len, copied);
  fl_options_init(&opt);
  opt.num_workers = 2;
  opt.batch_size = 3;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) == 1) {
    for (k = 0; k < fl_batch_count(b); k++, seen++) {
      path = fl_image_folder_sample(&ds, fl_batch_indices(b)[k], NULL);
      name = strrchr(path, '/') + 1;
      for (i = 0; i < n && strcmp(d[i].name, name) != 0; i++)
        ;
      assert_true(i < n);
      want = decoded_pixels(&d[i]);
      assert_same_pixels((const unsigned char *)fl_batch_field(b, 0) +
                             k * fl_batch_stride(b, 0),
                         want, 37, 29, name);
      assert_memory_equal((const unsigned char *)fl_batch_field(b, 1) +
                              k * fl_batch_stride(b, 1),
                          &zero, sizeof(zero));
      free(want);
    }
    fl_batch_release(b);
  }
  if (rc != 0)
    fail_msg("%s", fl_loader_error(l));
  assert_int_equal(seen, copied);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* Every decode fixture through the stage, read whole: PIL's bytes (the
   16-bit grey one: the high bytes, where PIL clips); JPEG, PNG, WebP
   (lossy, lossless, with alpha), TIFF (uncompressed, LZW, deflate, grey,
   palette, RGBA), BMP (24 and 32-bit, 1, 4 and 8-bit palettes, grey) and
   PPM and PGM (maxval 255 and 100, comments in the header). */
static void
every_decode_fixture_is_pils_bytes(void **state)
{
  struct decoded d[64];
  size_t n = decoded_list(d, 64), i, len;
  char rel[128];

  (void)state;
  for (i = 0; i < n; i++) {
    struct fl__image_stage *st = identity_stage(d[i].w, d[i].h);
    unsigned char *img, *want = decoded_pixels(&d[i]), *got;
    unsigned w, h;

    pathf(rel, sizeof(rel), "images/decode/%s", d[i].name);
    img = read_src(rel, &len);
    w = d[i].w;
    h = d[i].h;
    if (is_jpeg(img, len) || img[0] == 0x89)
      image_size(img, len, &w, &h);
    assert_int_equal(w, d[i].w);
    assert_int_equal(h, d[i].h);
    got = malloc(fl__image_stage_bytes(st));
    assert_non_null(got);
    assert_int_equal(fl__image_stage_bytes(st), (size_t)w * h * 3);
    if (not_built(d[i].name) != NULL) {
      assert_int_equal(fl__image_stage_run(st, img, len, 0, got, d[i].name),
                       FL_EDATASET);
      assert_non_null(strstr(fl__worker_error_text(), not_built(d[i].name)));
      print_message("# %-24s not built: %s\n", d[i].name,
                    fl__worker_error_text());
      free(got);
      free(want);
      free(img);
      fl__image_stage_free(st);
      continue;
    }
    if (fl__image_stage_run(st, img, len, 0, got, d[i].name) != 0)
      fail_msg("%s", fl__worker_error_text());
    assert_same_pixels(got, want, w, h, d[i].name);
    /* The stage's scratch, kept, gives the same image again. */
    memset(got, 0, (size_t)w * h * 3);
    assert_int_equal(fl__image_stage_run(st, img, len, 0, got, d[i].name),
                     0);
    assert_same_pixels(got, want, w, h, d[i].name);
    print_message("# %-24s %ux%u (%s): equal\n", d[i].name, w, h,
                  d[i].source);
    free(got);
    free(want);
    free(img);
    fl__image_stage_free(st);
  }
}

/*
 * Every transform of the golden list, in uint8 (the float ones are the
 * next case's): torchvision's bytes wherever the JPEG is decoded at full
 * scale (every PNG, and boxes with less than about twice the output on a
 * side); where a smaller DCT scale serves a box several times the output,
 * close: on these images (smooth, with noise of sigma 4) the mean absolute
 * difference is 0.24 to 1.60 and the PSNR 53 to 39 dB, the worst at the
 * largest reductions (a whole 500 x 333 image to 32 x 32, Resize(64) of a
 * 400 x 350 one); the bounds leave headroom for other libjpeg-turbos.
 */
static void
transforms_are_torchvisions_pixels(void **state)
{
  static struct xform x[256];
  size_t n = xform_list(x, 256), i, len, blen, exact = 0, near = 0;
  unsigned char *blob = read_src("golden/image_transforms.bin", &blen);
  double mad, psnr, worst_mad = 0, worst_psnr = INFINITY;
  char rel[128], what[160];

  (void)state;
  for (i = 0; i < n; i++) {
    const struct xform *t = &x[i];
    struct fl__image_stage *st;
    size_t bytes = (size_t)t->h * t->w * 3;
    unsigned char *img, *got;
    int scaled;

    if (t->chw_float || not_built(t->file) != NULL)
      continue;
    st = xform_stage(t);
    pathf(rel, sizeof(rel), "images/%s", t->file);
    img = read_src(rel, &len);
    scaled = xform_scaled(t, img, len);
    assert_true(t->off + bytes <= blen);
    got = malloc(bytes);
    assert_non_null(got);
    xform_describe(t, what, sizeof(what));
    if (fl__image_stage_run(st, img, len, 0, got, t->file) != 0)
      fail_msg("%s: %s", what, fl__worker_error_text());
    compare(got, blob + t->off, bytes, &mad, &psnr);
    print_message("# %-52s MAD %.3f PSNR %5.1f dB%s\n", what, mad, psnr,
                  scaled ? " (reduced DCT scale)" : "");
    if (!scaled) {
      assert_same_pixels(got, blob + t->off, t->w, t->h, what);
      exact++;
    } else {
      if (mad > worst_mad)
        worst_mad = mad;
      if (psnr < worst_psnr)
        worst_psnr = psnr;
      if (!(mad < 2 && psnr > 36))
        fail_msg("%s: MAD %.3f, PSNR %.1f dB", what, mad, psnr);
      near++;
    }
    free(got);
    free(img);
    fl__image_stage_free(st);
  }
  print_message("# %zu exact, %zu at a reduced DCT scale: worst MAD %.3f, "
                "PSNR %.1f dB\n", exact, near, worst_mad, worst_psnr);
  assert_true(exact >= 45);
  assert_true(near >= 6);
  free(blob);
}

/* A JPEG decode of the region asked for (x1 0: the whole image) into a
   buffer of the scaled image's size, made by the plan. */
struct crop_sink {
  struct fl__region want, got;
  unsigned w, h; /* the scaled image's */
  unsigned char *px;
};

static int
crop_plan(void *arg, unsigned w, unsigned h, int may_scale,
          struct fl__region *p, char *err)
{
  struct crop_sink *c = arg;

  (void)may_scale;
  (void)err;
  c->w = (w * c->want.scale_num + 7) / 8;
  c->h = (h * c->want.scale_num + 7) / 8;
  c->got = c->want;
  if (c->got.x1 == 0) {
    c->got.x1 = c->w;
    c->got.y1 = c->h;
  }
  *p = c->got;
  c->px = calloc((size_t)c->w * c->h, 3);
  assert_non_null(c->px);
  return 0;
}

static void
crop_row(void *arg, unsigned y, const unsigned char *rgb, unsigned x0)
{
  struct crop_sink *c = arg;

  memcpy(c->px + ((size_t)y * c->w + x0) * 3, rgb,
         (size_t)(c->got.x1 - x0) * 3);
}

/*
 * The columns a crop decodes are widened only where the edge of what is
 * decoded would upsample its chroma otherwise than a whole decode does:
 * random crops of every JPEG fixture (4:2:0, of odd size too, 4:2:2,
 * 4:4:4, progressive, the crop images, colour noise whose every chroma
 * sample differs from its neighbours) at DCT scales 8/8, 4/8, 2/8 and 1/8
 * are the whole decode's pixels.
 */
static void
jpeg_crops_decode_as_the_whole_image_does(void **state)
{
  static const char *const files[] = {
      "crop/a.jpg", "crop/b.jpg", "crop/d.jpg", "decode/jpeg_420.jpg",
      "decode/jpeg_420_odd.jpg", "decode/jpeg_422.jpg",
      "decode/jpeg_444.jpg", "decode/jpeg_progressive.jpg"};
  static const unsigned scales[] = {8, 4, 2, 1};
  struct fl__jpeg *j = NULL;
  struct crop_sink whole, crop;
  struct fl__sink ws = {&whole, crop_plan, crop_row};
  struct fl__sink cs = {&crop, crop_plan, crop_row};
  uint64_t x = 0x9e3779b97f4a7c15ull;
  char rel[64], err[256];
  unsigned char *img;
  size_t f, len, y, row;
  unsigned sc, k, a, b;

  (void)state;
  for (f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
    snprintf(rel, sizeof(rel), "images/%s", files[f]);
    img = read_src(rel, &len);
    for (sc = 0; sc < 4; sc++) {
      memset(&whole, 0, sizeof(whole));
      whole.want.scale_num = scales[sc];
      assert_int_equal(fl__jpeg_decode(&j, img, len, &ws, err), 0);
      for (k = 0; k < 150; k++) {
        memset(&crop, 0, sizeof(crop));
        crop.want.scale_num = scales[sc];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        a = (unsigned)(x >> 33) % whole.w;
        b = (unsigned)(x >> 45) % whole.w;
        crop.want.x0 = a < b ? a : b;
        crop.want.x1 = (a < b ? b : a) + 1;
        a = (unsigned)(x >> 17) % whole.h;
        b = (unsigned)(x >> 5) % whole.h;
        crop.want.y0 = a < b ? a : b;
        crop.want.y1 = (a < b ? b : a) + 1;
        assert_int_equal(fl__jpeg_decode(&j, img, len, &cs, err), 0);
        row = (size_t)(crop.want.x1 - crop.want.x0) * 3;
        for (y = crop.want.y0; y < crop.want.y1; y++)
          if (memcmp(crop.px + (y * crop.w + crop.want.x0) * 3,
                     whole.px + (y * whole.w + crop.want.x0) * 3, row) != 0)
            fail_msg("%s at %u/8: crop x %u-%u y %u-%u differs at row %zu",
                     files[f], scales[sc], crop.want.x0, crop.want.x1,
                     crop.want.y0, crop.want.y1, y);
        free(crop.px);
      }
      free(whole.px);
    }
    free(img);
  }
  fl__jpeg_free(j);
}

/* Each kernel path this CPU has (FL_IMAGE_SIMD) gives the portable C
   path's bytes: random crops of every decode fixture and of the crop
   images, flipped and not, uint8 and float, at output widths that leave
   each vector loop a tail, and CenterCrop's padding, into aligned
   memory as a batch's; at one size a std (subnormal) whose quotients the
   AVX2 float write cannot compute with FMA, so that it gathers them from
   the table instead.  Each path takes every horizontal pass it has: a row
   at a time, with AVX2's shuffles (avx2, avx512) or VBMI's permutes
   (avx512vbmi), and blocks where a chunk of output columns reads more
   pixels than its vectors hold (7 x 5 of a whole image); at 60 x 96,
   c.png's chunks of 8 columns span more than 16 pixels, so that the AVX2
   row path reads its second vector. */
static void
every_simd_path_gives_the_same_bytes(void **state)
{
  static const char *const files[] = {
      "crop/a.jpg", "crop/b.jpg", "crop/c.png", "decode/jpeg_420.jpg",
      "decode/jpeg_420_odd.jpg", "decode/jpeg_422.jpg",
      "decode/jpeg_444.jpg", "decode/jpeg_cmyk.jpg", "decode/jpeg_gray.jpg",
      "decode/jpeg_progressive.jpg", "decode/png_rgb.png",
      "decode/png_interlaced.png", "decode/png_palette.png",
      "formats/wide.png"};
  static const unsigned sizes[][2] = {{224, 224}, {37, 100}, {7, 5},
                                      {64, 17}, {300, 301}, {60, 96}};
  static const char *const paths[5] = {"c", "sse4.1", "avx2", "avx512",
                                       "avx512vbmi"};
  /* The horizontal passes, and those each path has (bit h: passes[h]). */
  static const char *const passes[3] = {"blocks", "avx2", "vbmi"};
  static const unsigned has[5] = {1, 1, 3, 3, 5};
  struct fl__image_stage *st[5];
  uint64_t seed;
  const char *old = getenv("FL_IMAGE_SIMD");
  char saved[32] = "", what[160];
  size_t f, z, m, p, h, len, bytes, ran = 0, tried = 0, went[5][3] = {{0}};
  unsigned char *img, *want, *got;
  void *mem[2] = {NULL, NULL};

  (void)state;
  if (old != NULL)
    snprintf(saved, sizeof(saved), "%s", old);
  for (f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
    pathf(what, sizeof(what), "images/%s", files[f]);
    img = read_src(what, &len);
    for (z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++)
      for (m = 0; m < 4; m++) {
        fl_image_options io;

        options(&io, sizes[z][0], sizes[z][1]);
        io.chw_float = (int)(m & 1);
        if (z == 1)
          io.std[2] = 1e-39f;
        if (m & 2) {
          io.crop = FL_CROP_RANDOM_RESIZED;
          io.hflip = 0.5;
        } else {
          io.resize = sizes[z][0] + 9; /* and padding where it is short */
        }
        bytes = (size_t)io.height * io.width * 3 *
                (io.chw_float ? sizeof(float) : 1);
        /* Aligned as a batch's samples are, so that the float write
           takes its non-temporal stores where it has them (224 x 224). */
        assert_int_equal(posix_memalign(&mem[0], 4096, bytes), 0);
        assert_int_equal(posix_memalign(&mem[1], 4096, bytes), 0);
        want = mem[0];
        got = mem[1];
        for (p = 0; p < 5; p++) {
          setenv("FL_IMAGE_SIMD", paths[p], 1);
          st[p] = stage_of(&io);
          tried++;
          if (strcmp(fl__image_stage_kernels(st[p]), paths[p]) != 0) {
            fl__image_stage_free(st[p]); /* this CPU has not got it */
            st[p] = NULL;
          }
        }
        assert_non_null(st[0]);
        for (seed = 0; seed < 4; seed++)
          for (p = 0; p < 5; p++) {
            if (st[p] == NULL)
              continue;
            if (fl__image_stage_run(st[p], img, len, seed, p ? got : want,
                                    files[f]) != 0)
              fail_msg("%s: %s", files[f], fl__worker_error_text());
            for (h = 0; h < 3; h++)
              went[p][h] += strcmp(fl__image_stage_horizontal(st[p]),
                                   passes[h]) == 0;
            if (p > 0 && memcmp(got, want, bytes) != 0)
              fail_msg("%s %ux%u mode %zu seed %llu: %s differs from c",
                       files[f], io.height, io.width, m,
                       (unsigned long long)seed, paths[p]);
          }
        for (p = 0; p < 5; p++) {
          ran += st[p] != NULL;
          fl__image_stage_free(st[p]);
        }
        free(want);
        free(got);
      }
    free(img);
  }
  if (old != NULL)
    setenv("FL_IMAGE_SIMD", saved, 1);
  else
    unsetenv("FL_IMAGE_SIMD");
  print_message("# %zu of %zu stages ran their path\n", ran, tried);
  assert_true(ran > tried / 3);
  for (p = 0; p < 5; p++) {
    print_message("# %s: %zu images on blocks, %zu by AVX2's rows, %zu by "
                  "VBMI's\n", paths[p], went[p][0], went[p][1], went[p][2]);
    if (went[p][0] + went[p][1] + went[p][2] == 0)
      continue; /* this CPU has not got it */
    for (h = 0; h < 3; h++)
      if ((went[p][h] > 0) != ((has[p] >> h) & 1))
        fail_msg("%s took %zu images by %s", paths[p], went[p][h],
                 passes[h]);
  }
}

/* ToTensor + Normalize(ImageNet): torchvision's float32 values. */
static void
float_chw_is_torchvisions_normalized_tensor(void **state)
{
  static struct xform x[256];
  size_t n = xform_list(x, 256), i, k, len, blen, cases = 0;
  unsigned char *blob = read_src("golden/image_transforms.bin", &blen);
  char rel[128], what[160];

  (void)state;
  for (i = 0; i < n; i++) {
    const struct xform *t = &x[i];
    size_t count = (size_t)3 * t->h * t->w;
    struct fl__image_stage *st;
    float *got, *want;
    unsigned char *img;
    double worst = 0;

    if (!t->chw_float)
      continue;
    st = xform_stage(t);
    assert_int_equal(fl__image_stage_bytes(st), count * sizeof(float));
    pathf(rel, sizeof(rel), "images/%s", t->file);
    img = read_src(rel, &len);
    assert_false(xform_scaled(t, img, len));
    got = malloc(count * sizeof(float));
    want = malloc(count * sizeof(float));
    assert_true(got != NULL && want != NULL);
    assert_true(t->off + count * sizeof(float) <= blen);
    memcpy(want, blob + t->off, count * sizeof(float));
    xform_describe(t, what, sizeof(what));
    if (fl__image_stage_run(st, img, len, 0, got, t->file) != 0)
      fail_msg("%s: %s", what, fl__worker_error_text());
    for (k = 0; k < count; k++) {
      double d = fabs((double)got[k] - want[k]);

      if (d > worst)
        worst = d;
      if (d > 1e-6)
        fail_msg("%s: value %zu (channel %zu) is %.9g, not %.9g", what, k,
                 k / (t->h * t->w), got[k], want[k]);
    }
    print_message("# %-52s largest difference %.3g\n", what, worst);
    free(got);
    free(want);
    free(img);
    fl__image_stage_free(st);
    cases++;
  }
  assert_true(cases >= 2);
  free(blob);
}

/*
 * RandomResizedCrop draws from (seed, epoch, index) alone: the same
 * images whatever the number of workers (0, 1, 3), new ones next epoch,
 * and different crops of copies of one image.
 */
static void
random_crops_follow_seed_epoch_and_index(void **state)
{
  enum { N = 6, H = 24, W = 24, BYTES = H * W * 3 };
  static const unsigned workers[] = {0, 1, 3};
  static unsigned char out[3][2][N * BYTES];
  char dir[64], cls[PATH_MAX], name[32];
  flt_baseline base;
  fl_image_options io;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  size_t i, j, w;
  int e;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  sub_make(cls, sizeof(cls), dir, "c");
  for (i = 0; i < N; i++) {
    pathf(name, sizeof(name), "copy%zu.jpg", i);
    copy_src(cls, name, "images/crop/a.jpg", ALL);
  }
  options(&io, H, W);
  io.crop = FL_CROP_RANDOM_RESIZED;
  io.hflip = 0.5;
  assert_int_equal(fl_dataset_image_folder(&ds, dir, &io), 0);
  for (w = 0; w < 3; w++) {
    fl_options_init(&opt);
    opt.num_workers = workers[w];
    opt.batch_size = 2;
    opt.seed = 1234;
    assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
    for (e = 0; e < 2; e++)
      load_epoch(l, out[w][e], BYTES, N);
    fl_loader_destroy(l);
  }
  for (w = 1; w < 3; w++)
    for (e = 0; e < 2; e++)
      assert_memory_equal(out[w][e], out[0][e], N * BYTES);
  for (i = 0; i < N; i++) {
    assert_memory_not_equal(out[0][0] + i * BYTES, out[0][1] + i * BYTES,
                            BYTES);
    for (j = 0; j < i; j++)
      assert_memory_not_equal(out[0][0] + i * BYTES, out[0][0] + j * BYTES,
                              BYTES);
  }
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/*
 * A random crop of scale 1 and the image's own ratio is the whole image:
 * with hflip 0 it is PIL's bytes, with hflip 1 every one is their mirror,
 * with hflip 0.5 each is one of the two, and both occur.
 */
static void
hflip_mirrors_whole_images_at_its_probability(void **state)
{
  enum { N = 16, W = 37, H = 29, BYTES = W * H * 3 };
  static const double p[] = {0, 1, 0.5};
  static unsigned char out[N * BYTES], mirrored[BYTES];
  struct decoded d = {"jpeg_444.jpg", "pil", W, H};
  char dir[64], cls[PATH_MAX], name[32];
  unsigned char *want = decoded_pixels(&d);
  flt_baseline base;
  fl_image_options io;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  size_t i, k, flips;

  (void)state;
  flt_baseline_take(&base);
  mirror(mirrored, want, W, H);
  dir_make(dir, sizeof(dir));
  sub_make(cls, sizeof(cls), dir, "c");
  for (i = 0; i < N; i++) {
    pathf(name, sizeof(name), "%02zu.jpg", i);
    copy_src(cls, name, "images/decode/jpeg_444.jpg", ALL);
  }
  for (k = 0; k < 3; k++) {
    options(&io, H, W);
    io.crop = FL_CROP_RANDOM_RESIZED;
    io.scale_min = io.scale_max = 1;
    io.ratio_min = io.ratio_max = (double)W / H;
    io.hflip = p[k];
    assert_int_equal(fl_dataset_image_folder(&ds, dir, &io), 0);
    fl_options_init(&opt);
    opt.batch_size = 4;
    opt.num_workers = 2;
    opt.seed = 7;
    assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
    load_epoch(l, out, BYTES, N);
    for (i = 0, flips = 0; i < N; i++) {
      const unsigned char *o = out + i * BYTES;
      int flipped = memcmp(o, mirrored, BYTES) == 0;

      if (!flipped)
        assert_same_pixels(o, want, W, H, "not flipped");
      flips += (size_t)flipped;
    }
    print_message("# hflip %.1f: %zu of %d flipped\n", p[k], flips, N);
    if (p[k] == 0)
      assert_int_equal(flips, 0);
    else if (p[k] == 1)
      assert_int_equal(flips, N);
    else
      assert_true(flips > 0 && flips < N);
    fl_loader_destroy(l);
    fl_dataset_close(&ds);
  }
  free(want);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* The fixtures of the formats other than JPEG and PNG this build decodes
   (37 x 29, WebP, TIFF, BMP, PPM, PGM); returns how many. */
static size_t
other_formats(struct decoded *d, size_t cap)
{
  struct decoded all[64];
  size_t n = decoded_list(all, 64), i, k = 0;

  for (i = 0; i < n; i++)
    if (strncmp(all[i].name, "jpeg_", 5) != 0 &&
        strncmp(all[i].name, "png_", 4) != 0 &&
        not_built(all[i].name) == NULL) {
      assert_true(k < cap);
      assert_true(all[i].w == 37 && all[i].h == 29);
      d[k++] = all[i];
    }
  return k;
}

/*
 * RandomResizedCrop (with the flip) of each other format's file draws the
 * crop a PPM of PIL's pixels of it draws, and makes the same image: the
 * decoder hands the stage PIL's pixels under every crop.  Then through
 * fl_dataset_image_folder and two workers, a random crop of scale 1 and
 * the image's own ratio: PIL's pixels or their mirror.
 */
static void
other_formats_random_crops_are_those_of_pils_pixels(void **state)
{
  enum { W = 37, H = 29, BYTES = W * H * 3 };
  static unsigned char out[64 * BYTES], mirrored[BYTES];
  struct decoded d[64];
  char dir[64], cls[PATH_MAX], rel[128];
  size_t n = other_formats(d, 64), i, len, twin_len, k, flips = 0;
  unsigned char *want, *img, *twin, got[2][12 * 16 * 4 * 3];
  struct fl__image_stage *st;
  flt_baseline base;
  fl_image_options io;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  uint64_t seed;
  int hdr;

  (void)state;
  flt_baseline_take(&base);
  assert_true(n >= 10); /* BMP and PNM: 10, WebP 4, TIFF 7 */
  options(&io, 12, 16);
  io.crop = FL_CROP_RANDOM_RESIZED;
  io.hflip = 0.5;
  io.chw_float = 1;
  st = stage_of(&io);
  twin = malloc(64 + BYTES);
  assert_non_null(twin);
  for (i = 0; i < n; i++) {
    want = decoded_pixels(&d[i]);
    hdr = snprintf((char *)twin, 64, "P6\n%u %u\n255\n", W, H);
    memcpy(twin + hdr, want, BYTES);
    twin_len = (size_t)hdr + BYTES;
    pathf(rel, sizeof(rel), "images/decode/%s", d[i].name);
    img = read_src(rel, &len);
    for (seed = 1; seed <= 8; seed++) {
      if (fl__image_stage_run(st, img, len, seed * 977, got[0],
                              d[i].name) != 0)
        fail_msg("%s", fl__worker_error_text());
      assert_int_equal(fl__image_stage_run(st, twin, twin_len, seed * 977,
                                           got[1], "twin.ppm"),
                       0);
      if (memcmp(got[0], got[1], sizeof(got[0])) != 0)
        fail_msg("%s: seed %llu: not the crop of PIL's pixels", d[i].name,
                 (unsigned long long)seed);
    }
    free(img);
    free(want);
  }
  fl__image_stage_free(st);
  free(twin);

  dir_make(dir, sizeof(dir));
  sub_make(cls, sizeof(cls), dir, "c");
  for (i = 0; i < n; i++) {
    pathf(rel, sizeof(rel), "images/decode/%s", d[i].name);
    copy_src(cls, d[i].name, rel, ALL);
  }
  options(&io, H, W);
  io.crop = FL_CROP_RANDOM_RESIZED;
  io.scale_min = io.scale_max = 1;
  io.ratio_min = io.ratio_max = (double)W / H;
  io.hflip = 0.5;
  assert_int_equal(fl_dataset_image_folder(&ds, dir, &io), 0);
  assert_int_equal(ds.len, n);
  fl_options_init(&opt);
  opt.batch_size = 2;
  opt.num_workers = 2;
  opt.seed = 11;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  load_epoch(l, out, BYTES, n);
  for (k = 0; k < n; k++) {
    const char *path = fl_image_folder_sample(&ds, k, NULL);
    const char *name = strrchr(path, '/') + 1;

    for (i = 0; i < n && strcmp(d[i].name, name) != 0; i++)
      ;
    assert_true(i < n);
    want = decoded_pixels(&d[i]);
    mirror(mirrored, want, W, H);
    if (memcmp(out + k * BYTES, mirrored, BYTES) == 0)
      flips++;
    else
      assert_same_pixels(out + k * BYTES, want, W, H, name);
    free(want);
  }
  print_message("# %zu files, %zu flipped\n", n, flips);
  assert_true(flips > 0 && flips < n);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* A bad file of a folder, and the words its batch's error must hold. */
struct bad {
  const char *name, *from; /* from: a committed file; NULL: made here */
  size_t cut;              /* its first bytes only, ALL or HALF */
  const char *why;         /* NULL: a good image */
};

static const struct bad bads[] = {
    {"00_good.jpg", "images/decode/jpeg_444.jpg", ALL, NULL},
    {"01_half.jpg", "images/crop/a.jpg", HALF,
     "truncated JPEG: the data ends before the image does"},
    {"02_half.png", "images/crop/c.png", HALF, "truncated PNG"},
    {"03_text.jpg", NULL, 0, "not an image (no JPEG, PNG, WebP, TIFF, BMP "
                             "or PNM signature)"},
    {"04_empty.jpg", NULL, 0, "the file is empty"},
    {"05_bmp.bmp", "images/formats/tiny.bmp", ALL, NULL},
    {"06_gif.jpg", "images/formats/tiny.gif", ALL,
     "a GIF image, which forkload does not decode"},
    {"07_webp.webp", "images/formats/tiny.webp", ALL, WHY_WEBP(NULL)},
    {"08_tiff.tif", "images/formats/tiny.tif", ALL, WHY_TIFF(NULL)},
    {"09_ppm.ppm", "images/formats/tiny.ppm", ALL, NULL},
    {"10_huge.jpg", NULL, 0, "60000 x 60000 pixels, more than max_pixels"},
    {"11_good.png", "images/decode/png_interlaced.png", ALL, NULL},
    {"12_header_only.jpg", "images/decode/jpeg_420.jpg", 200, "JPEG"},
    {"13_signature.png", "images/decode/png_rgb.png", 12, "PNG"},
    /* Each other format cut short, in its header or its pixels. */
    {"14_half.webp", "images/decode/webp_lossy.webp", HALF,
     WHY_WEBP("truncated WebP: not enough data")},
    {"15_header_only.webp", "images/decode/webp_lossless_alpha.webp", 30,
     WHY_WEBP("WebP")},
    {"16_half.tif", "images/decode/tiff_lzw.tif", HALF, WHY_TIFF("bad TIFF")},
    {"17_header_only.tif", "images/decode/tiff_raw.tif", 6, WHY_TIFF("bad TIFF")},
    {"18_half.bmp", "images/decode/bmp_24.bmp", HALF,
     "truncated BMP: its 37 x 29 pixels need 3248 bytes from offset 54"},
    {"19_header_only.bmp", "images/decode/bmp_palette.bmp", 40,
     "truncated BMP: the data ends in its header"},
    {"20_half.ppm", "images/decode/ppm_p6.ppm", HALF,
     "truncated PNM: 1603 bytes of samples, too few for 37 x 29 pixels"},
    {"21_header_only.pgm", "images/decode/pgm_p5.pgm", 7,
     "truncated PNM: the data ends in its header"},
    /* Variants refused, each saying why. */
    {"22_ascii.ppm", "images/formats/p3_ascii.ppm", ALL,
     "a plain (ASCII) PNM (P3), and forkload decodes only binary PGM (P5) "
     "and PPM (P6)"},
    {"23_16bit.pgm", "images/formats/p5_16bit.pgm", ALL,
     "a PNM of 16-bit samples (maxval 65535)"},
    {"24_rle.bmp", "images/formats/rle8.bmp", ALL,
     "an RLE-compressed BMP, which forkload does not decode"},
    /* Bombs of every format, refused from their headers. */
    {"25_bomb.bmp", "images/formats/bomb.bmp", ALL,
     "60000 x 60000 pixels, more than max_pixels"},
    {"26_bomb.ppm", "images/formats/bomb.ppm", ALL,
     "60000 x 60000 pixels, more than max_pixels"},
    {"27_bomb.tif", "images/formats/bomb.tif", ALL,
     WHY_TIFF("60000 x 60000 pixels, more than max_pixels")},
    {"28_bomb.webp", "images/formats/bomb.webp", ALL,
     WHY_WEBP("16383 x 16383 pixels, more than max_pixels")},
    {"29_good.webp", "images/decode/webp_lossless_alpha.webp", ALL,
     WHY_WEBP(NULL)},
    /* Uncompressed, its directory first: cut in its pixels. */
    {"30_half_raw.tif", "images/decode/tiff_raw.tif", HALF,
     WHY_TIFF("bad TIFF")},
};

enum { NBAD = sizeof(bads) / sizeof(bads[0]) };

/* A JPEG whose SOF says 60000 x 60000: its data is a 37 x 29 image's. */
static unsigned char *
huge_jpeg(size_t *n)
{
  unsigned char *b = read_src("images/decode/jpeg_444.jpg", n);
  size_t at = sof_at(b, *n);

  b[at] = b[at + 2] = 60000 >> 8;
  b[at + 1] = b[at + 3] = 60000 & 0xff;
  return b;
}

static void
bad_files_write(const char *cls)
{
  char path[PATH_MAX];
  unsigned char *b;
  size_t i, n;

  for (i = 0; i < NBAD; i++) {
    pathf(path, sizeof(path), "%s/%s", cls, bads[i].name);
    if (bads[i].from != NULL) {
      copy_src(cls, bads[i].name, bads[i].from, bads[i].cut);
    } else if (strstr(bads[i].name, "huge") != NULL) {
      b = huge_jpeg(&n);
      write_file(path, b, n);
      free(b);
    } else if (strstr(bads[i].name, "text") != NULL) {
      write_file(path, "just some text, named like a JPEG\n", 34);
    } else {
      write_file(path, "", 0);
    }
  }
}

/*
 * A folder of good and bad files through two workers, a file per batch:
 * each bad one is FL_EDATASET at its own batch, not final, its error
 * naming the file and what is wrong; the good ones before and after load.
 */
static void
bad_files_are_their_batchs_error_naming_file_and_problem(void **state)
{
  char dir[64], cls[PATH_MAX], path[PATH_MAX];
  flt_baseline base;
  fl_image_options io;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;
  size_t i = 0;
  int rc;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  sub_make(cls, sizeof(cls), dir, "c");
  bad_files_write(cls);
  options(&io, 16, 16);
  assert_int_equal(fl_dataset_image_folder(&ds, dir, &io), 0);
  assert_int_equal(ds.len, NBAD);
  fl_options_init(&opt);
  opt.num_workers = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    assert_true(i < NBAD);
    pathf(path, sizeof(path), "%s/%s", cls, bads[i].name);
    if (bads[i].why == NULL) {
      if (rc != 1)
        fail_msg("%s: %s", path, fl_loader_error(l));
      assert_int_equal(fl_batch_indices(b)[0], i);
      fl_batch_release(b);
    } else {
      if (rc != FL_EDATASET)
        fail_msg("%s: %s (%s)", path, fl_strerror(rc),
                 rc == 1 ? "loaded" : fl_loader_error(l));
      assert_int_equal(fl_error_is_final(rc), 0);
      print_message("# %s\n", fl_loader_error(l));
      if (strstr(fl_loader_error(l), path) == NULL ||
          strstr(fl_loader_error(l), bads[i].why) == NULL)
        fail_msg("error \"%s\" should name %s and say \"%s\"",
                 fl_loader_error(l), path, bads[i].why);
    }
    i++;
  }
  assert_int_equal(i, NBAD);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* A folder 4 KiB deep: the builder's error and the workers' (a file that
   is no image, then one gone) end with their cause, the path shortened in
   its middle. */
static void
errors_quoting_a_4_kib_path_end_with_their_cause(void **state)
{
  char dir[64], *deep, path[PATH_MAX], msg[FL__ERRMSG_MAX];
  flt_baseline base;
  fl_image_options io;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  FILE *f;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  deep = flt_long_dir(dir);
  options(&io, 16, 16);
  pathf(path, sizeof(path), "%s/missing", deep);
  assert_int_equal(fl_dataset_image_folder(&ds, path, &io), FL_EINVAL);
  flt_assert_ends_with(fl_loader_error(NULL),
                       "/missing: No such file or directory");
  pathf(path, sizeof(path), "%s/c", deep);
  assert_int_equal(mkdir(path, 0755), 0);
  pathf(path, sizeof(path), "%s/c/a.jpg", deep);
  assert_non_null(f = fopen(path, "w"));
  fputs("no image", f);
  fclose(f);
  assert_int_equal(fl_dataset_image_folder(&ds, deep, &io), 0);
  fl_options_init(&opt);
  opt.num_workers = 1;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(flt_epoch_error(l, msg, sizeof(msg)), FL_EDATASET);
  flt_assert_ends_with(msg, "/c/a.jpg: not an image (no JPEG, PNG, WebP, "
                       "TIFF, BMP or PNM signature)");
  assert_int_equal(unlink(path), 0);
  assert_int_equal(flt_epoch_error(l, msg, sizeof(msg)), FL_EDATASET);
  flt_assert_ends_with(msg, "/c/a.jpg: No such file or directory");
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  free(deep);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* Refused from its header: no pixel of 3.6 gigapixels is allocated or
   decoded, under a random crop as under the center one, whatever the
   format (a WebP says 16383 x 16383, its largest). */
static void
bomb_of_every_format_is_refused_from_its_header_at_once(void **state)
{
  static const char *const files[] = {
      NULL, "images/formats/bomb.bmp", "images/formats/bomb.ppm",
      "images/formats/bomb.tif", "images/formats/bomb.webp"};
  fl_image_options io;
  struct fl__image_stage *st;
  unsigned char out[16 * 16 * 3];
  unsigned char *b;
  size_t n, i;
  double t0;
  int k;

  (void)state;
  for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    const char *name = files[i] ? files[i] : "bomb.jpg";

    b = files[i] ? read_src(files[i], &n) : huge_jpeg(&n);
    for (k = 0; k < 2; k++) {
      options(&io, 16, 16);
      io.crop = k ? FL_CROP_RANDOM_RESIZED : FL_CROP_CENTER;
      st = stage_of(&io);
      fl__worker_error_clear();
      t0 = flt_now();
      assert_int_equal(fl__image_stage_run(st, b, n, 1, out, name),
                       FL_EDATASET);
      assert_true(flt_now() - t0 < 0.5);
      assert_non_null(strstr(fl__worker_error_text(), name));
      if (not_built(name) == NULL)
        assert_non_null(strstr(fl__worker_error_text(), "max_pixels"));
      else
        assert_non_null(strstr(fl__worker_error_text(), not_built(name)));
      fl__image_stage_free(st);
    }
    free(b);
  }
}

/* max_pixels: an image of more is refused, one of exactly that loads. */
static void
max_pixels_refuses_larger_images(void **state)
{
  static const char *const files[] = {
      "images/decode/jpeg_444.jpg",    "images/decode/png_rgb.png",
      "images/decode/webp_lossy.webp", "images/decode/tiff_lzw.tif",
      "images/decode/bmp_24.bmp",      "images/decode/ppm_p6.ppm",
      "images/decode/pgm_p5.pgm"};
  unsigned char out[8 * 8 * 3], *b;
  fl_image_options io;
  struct fl__image_stage *st;
  size_t i, n;

  (void)state;
  for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    if (not_built(files[i]) != NULL)
      continue;
    b = read_src(files[i], &n);
    options(&io, 8, 8);
    io.max_pixels = 37 * 29 - 1;
    st = stage_of(&io);
    fl__worker_error_clear();
    assert_int_equal(fl__image_stage_run(st, b, n, 0, out, files[i]),
                     FL_EDATASET);
    assert_non_null(strstr(fl__worker_error_text(), files[i]));
    assert_non_null(strstr(fl__worker_error_text(),
                           "37 x 29 pixels, more than max_pixels (1072)"));
    fl__image_stage_free(st);
    io.max_pixels = 37 * 29;
    st = stage_of(&io);
    assert_int_equal(fl__image_stage_run(st, b, n, 0, out, files[i]), 0);
    fl__image_stage_free(st);
    free(b);
  }
}

static void assert_error(const char *a, const char *b);

/* A dataset of encoded images, as a database or a tar would give them:
   field 0 a file's bytes, field 1 its number; sample 2 is not an image. */
#define ENCODED_MAX 65536
static const char *const encoded_files[] = {
    "images/crop/a.jpg", "images/crop/c.png", NULL, "images/crop/b.jpg"};

static int
encoded_get_fields(void *ctx, size_t index, void *const *dst, size_t *nbytes)
{
  unsigned char *b;
  int64_t k = (int64_t)index;
  size_t n;

  (void)ctx;
  if (encoded_files[index] == NULL) {
    memcpy(dst[0], "not an image", 12);
    nbytes[0] = 12;
  } else {
    b = read_src(encoded_files[index], &n);
    assert_true(n <= nbytes[0]);
    memcpy(dst[0], b, n);
    nbytes[0] = n;
    free(b);
  }
  memcpy(dst[1], &k, sizeof(k));
  nbytes[1] = sizeof(k);
  return 0;
}

/* fl_dataset_decode_images over it: each image as the stage makes it from
   the file, through two workers, the other field as it was, the bad
   sample its batch's error naming it; and its arguments checked. */
static void
decode_images_composes_with_any_dataset_of_encoded_images(void **state)
{
  static const size_t in_bytes[2] = {ENCODED_MAX, sizeof(int64_t)};
  fl_dataset in = {.len = 4, .nfields = 2, .field_bytes = in_bytes,
                   .get_fields = encoded_get_fields}, ds, none = {.len = 1};
  unsigned char want[24 * 32 * 3], *b;
  const unsigned char *got;
  struct fl__image_stage *st;
  fl_image_options io;
  flt_baseline base;
  fl_options opt;
  fl_loader *l;
  fl_batch *bt;
  size_t n, seen = 0;
  int64_t k;
  int rc;

  (void)state;
  flt_baseline_take(&base);
  options(&io, 24, 32);
  io.resize = 40;
  assert_int_equal(fl_dataset_decode_images(&ds, &in, 0, &io), 0);
  assert_int_equal(ds.nfields, 2);
  assert_int_equal(ds.field_bytes[0], sizeof(want));
  assert_int_equal(ds.field_bytes[1], sizeof(int64_t));
  fl_options_init(&opt);
  opt.num_workers = 2;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  st = stage_of(&io);
  while ((rc = fl_loader_next(l, &bt)) != 0) {
    if (seen == 2) { /* batch_size 1: the bad sample's batch */
      assert_int_equal(rc, FL_EDATASET);
      assert_non_null(strstr(fl_loader_error(l), "sample 2, field 0"));
      assert_non_null(strstr(fl_loader_error(l), "not an image"));
      seen++;
      continue;
    }
    assert_int_equal(rc, 1);
    b = read_src(encoded_files[seen], &n);
    assert_int_equal(fl__image_stage_run(st, b, n, 0, want, "want"), 0);
    free(b);
    got = fl_batch_field(bt, 0);
    assert_memory_equal(got, want, sizeof(want));
    memcpy(&k, fl_batch_field(bt, 1), sizeof(k));
    assert_int_equal(k, (int64_t)seen);
    assert_int_equal(fl_batch_sizes(bt)[0], sizeof(want));
    fl_batch_release(bt);
    seen++;
  }
  assert_int_equal(seen, 4);
  fl__image_stage_free(st);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  assert_int_equal(fl_dataset_decode_images(&ds, &in, 2, &io), FL_EINVAL);
  assert_error("field 2, and in has 2", NULL);
  assert_int_equal(fl_dataset_decode_images(&ds, &none, 0, &io), FL_EINVAL);
  assert_error("in has no get", NULL);
  assert_int_equal(fl_dataset_decode_images(&ds, NULL, 0, &io), FL_EINVAL);
  assert_null(ds.ctx);
  flt_assert_clean(&base);
}

/* The same files as a stream, as a tar's members come: one at a time
   from open, over after the last. */
static size_t stream_next;

static int
stream_open(void *ctx, const fl_worker_info *w)
{
  (void)ctx;
  (void)w;
  stream_next = 0;
  return 0;
}

static int
stream_next_fields(void *ctx, void *const *dst, size_t *nbytes)
{
  if (stream_next == 4)
    return 0;
  return encoded_get_fields(ctx, stream_next++, dst, nbytes) == 0 ? 1 : -1;
}

/* fl_iterable_decode_images: each image as the stage makes it, in the
   stream's order, the bad member its batch's error and the stream going
   on; its arguments checked. */
static void
iterable_decode_images_decodes_a_stream_of_encoded_images(void **state)
{
  static const size_t in_bytes[2] = {ENCODED_MAX, sizeof(int64_t)};
  fl_iterable in = {.open = stream_open, .nfields = 2,
                    .field_bytes = in_bytes,
                    .next_fields = stream_next_fields}, it;
  unsigned char want[24 * 32 * 3], *b;
  struct fl__image_stage *st;
  fl_image_options io;
  flt_baseline base;
  fl_options opt;
  fl_loader *l;
  fl_batch *bt;
  size_t n, seen = 0;
  int64_t k;
  int rc;

  (void)state;
  flt_baseline_take(&base);
  options(&io, 24, 32);
  io.resize = 40;
  assert_int_equal(fl_iterable_decode_images(&it, &in, 0, &io), 0);
  assert_int_equal(it.nfields, 2);
  assert_int_equal(it.field_bytes[0], sizeof(want));
  fl_options_init(&opt);
  opt.num_workers = 1; /* one stream: each member once */
  assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  st = stage_of(&io);
  while ((rc = fl_loader_next(l, &bt)) != 0) {
    if (seen == 2) {
      assert_int_equal(rc, FL_EDATASET);
      assert_non_null(strstr(fl_loader_error(l), "stream sample 2, field 0"));
      seen++;
      continue;
    }
    assert_int_equal(rc, 1);
    b = read_src(encoded_files[seen], &n);
    assert_int_equal(fl__image_stage_run(st, b, n, 0, want, "want"), 0);
    free(b);
    assert_memory_equal(fl_batch_field(bt, 0), want, sizeof(want));
    memcpy(&k, fl_batch_field(bt, 1), sizeof(k));
    assert_int_equal(k, (int64_t)seen);
    fl_batch_release(bt);
    seen++;
  }
  assert_int_equal(seen, 4);
  fl__image_stage_free(st);
  fl_loader_destroy(l);
  fl_iterable_close(&it);
  assert_int_equal(fl_iterable_decode_images(&it, &in, 2, &io), FL_EINVAL);
  assert_error("field 2, and in has 2", NULL);
  assert_int_equal(fl_iterable_decode_images(&it, NULL, 0, &io), FL_EINVAL);
  flt_assert_clean(&base);
}

/* A FIFO named like an image is its batch's error, through a worker that
   must not block opening it; the image beside it loads. */
static void
fifo_named_like_an_image_is_its_batchs_error(void **state)
{
  char dir[PATH_MAX], cls[PATH_MAX], fifo[PATH_MAX];
  fl_image_options io;
  flt_baseline base;
  fl_options opt;
  fl_dataset ds;
  fl_loader *l;
  fl_batch *b;

  (void)state;
  flt_baseline_take(&base);
  dir_make(dir, sizeof(dir));
  sub_make(cls, sizeof(cls), dir, "c");
  copy_src(cls, "a.jpg", "images/decode/jpeg_444.jpg", ALL);
  pathf(fifo, sizeof(fifo), "%s/b.jpg", cls);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  options(&io, 8, 8);
  assert_int_equal(fl_dataset_image_folder(&ds, dir, &io), 0);
  assert_int_equal(ds.len, 2);
  fl_options_init(&opt);
  opt.num_workers = 1;
  opt.timeout_ms = 10000; /* a worker blocked in open() is a failure */
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  assert_int_equal(fl_loader_next(l, &b), 1);
  fl_batch_release(b);
  assert_int_equal(fl_loader_next(l, &b), FL_EDATASET);
  assert_non_null(strstr(fl_loader_error(l), "b.jpg: not a regular file"));
  assert_int_equal(fl_loader_next(l, &b), 0);
  fl_loader_destroy(l);
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* A forced box outside the image is that image's error, not a read past
   its rows. */
static void
forced_box_outside_the_image_is_refused(void **state)
{
  unsigned char out[8 * 8 * 3], *b;
  fl_image_options io;
  struct fl__image_stage *st;
  size_t n;

  (void)state;
  b = read_src("images/decode/png_rgb.png", &n);
  options(&io, 8, 8);
  st = stage_of(&io);
  fl__image_stage_force(st, 20, 30, 10, 7, 0); /* last row 29: outside */
  assert_int_equal(fl__image_stage_run(st, b, n, 0, out, "p.png"),
                   FL_EDATASET);
  assert_non_null(strstr(fl__worker_error_text(), "outside the image"));
  fl__image_stage_force(st, 19, 30, 10, 7, 0); /* the corner: inside */
  assert_int_equal(fl__image_stage_run(st, b, n, 0, out, "p.png"), 0);
  fl__image_stage_free(st);
  free(b);
}

/* A 262144 x 1 image under Resize(16384) would be 2^32 pixels long: its
   batch's error, where the float's conversion used to overflow into a
   wrong crop.  A random crop of it loads. */
static void
resize_past_2_31_pixels_is_refused(void **state)
{
  unsigned char out[8 * 8 * 3], *b;
  fl_image_options io;
  struct fl__image_stage *st;
  size_t n;

  (void)state;
  b = read_src("images/formats/wide.png", &n);
  options(&io, 8, 8);
  io.resize = 16384;
  st = stage_of(&io);
  fl__worker_error_clear();
  assert_int_equal(fl__image_stage_run(st, b, n, 0, out, "wide.png"),
                   FL_EDATASET);
  assert_non_null(strstr(fl__worker_error_text(), "wide.png"));
  assert_non_null(strstr(fl__worker_error_text(), "2^31"));
  fl__image_stage_free(st);
  io.crop = FL_CROP_RANDOM_RESIZED;
  st = stage_of(&io);
  assert_int_equal(fl__image_stage_run(st, b, n, 0, out, "wide.png"), 0);
  fl__image_stage_free(st);
  free(b);
}

/* The error of the last dataset call says all of these. */
static void
assert_error(const char *a, const char *b)
{
  const char *e = fl_loader_error(NULL);

  assert_non_null(e);
  if (strstr(e, a) == NULL || (b != NULL && strstr(e, b) == NULL))
    fail_msg("error \"%s\" should say \"%s\" and \"%s\"", e, a,
             b ? b : "");
}

static void
folder_refuses_missing_file_empty_and_classless_roots(void **state)
{
  char dir[64], path[PATH_MAX], cls[PATH_MAX];
  flt_baseline base;
  fl_image_options io;
  fl_dataset ds;

  (void)state;
  flt_baseline_take(&base);
  options(&io, 8, 8);
  assert_int_equal(fl_dataset_image_folder(&ds, NULL, &io), FL_EINVAL);
  assert_error("fl_dataset_image_folder", "root is NULL");
  dir_make(dir, sizeof(dir));
  pathf(path, sizeof(path), "%s/absent", dir);
  assert_int_equal(fl_dataset_image_folder(&ds, path, &io), FL_EINVAL);
  assert_error(path, strerror(ENOENT));
  assert_null(ds.ctx);
  assert_int_equal(fl_dataset_image_folder(&ds, dir, &io), FL_EINVAL);
  assert_error(dir, "no class folder");
  /* Only files, images among them: still no class. */
  copy_src(dir, "a.jpg", "images/decode/jpeg_444.jpg", ALL);
  write_file(path, "x", 1);
  assert_int_equal(fl_dataset_image_folder(&ds, dir, &io), FL_EINVAL);
  assert_error(dir, "no class folder");
  /* A file as the root. */
  assert_int_equal(fl_dataset_image_folder(&ds, path, &io), FL_EINVAL);
  assert_error(path, "not a folder");
  /* Classes without images are all named, the good one is not. */
  sub_make(cls, sizeof(cls), dir, "good");
  copy_src(cls, "a.jpg", "images/decode/jpeg_444.jpg", ALL);
  sub_make(cls, sizeof(cls), dir, "notes_only");
  write_file(strcat(cls, "/readme.txt"), "x", 1);
  sub_make(cls, sizeof(cls), dir, "vacant");
  assert_int_equal(fl_dataset_image_folder(&ds, dir, &io), FL_EINVAL);
  assert_error("no image (.jpg", "class folders notes_only, vacant");
  assert_null(strstr(fl_loader_error(NULL), "good"));
  assert_null(ds.ctx);
  /* One of them gets an image, deep down: the other is named alone. */
  sub_make(cls, sizeof(cls), dir, "vacant/deep");
  copy_src(cls, "b.png", "images/decode/png_rgb.png", ALL);
  assert_int_equal(fl_dataset_image_folder(&ds, dir, &io), FL_EINVAL);
  assert_error("the class folder notes_only", NULL);
  pathf(cls, sizeof(cls), "%s/notes_only/readme.txt", dir);
  assert_int_equal(unlink(cls), 0);
  pathf(cls, sizeof(cls), "%s/notes_only", dir);
  assert_int_equal(rmdir(cls), 0);
  assert_int_equal(fl_dataset_image_folder(&ds, dir, &io), 0);
  assert_int_equal(ds.len, 2);
  assert_string_equal(fl_image_folder_class(&ds, 1), "vacant");
  fl_dataset_close(&ds);
  assert_int_equal(fl_dataset_image_folder(NULL, dir, &io), FL_EINVAL);
  dir_remove(dir);
  flt_assert_clean(&base);
}

static void
bad_options_are_einval_saying_which(void **state)
{
  static const struct {
    const char *field, *why;
  } cases[] = {
      {"height", "height and width must be 1 to 16384"},
      {"width", "height and width must be 1 to 16384"},
      {"big", "height and width must be 1 to 16384"},
      {"crop", "crop must be FL_CROP_CENTER or FL_CROP_RANDOM_RESIZED"},
      {"resize", "resize must be at most 16384"},
      {"scale", "0 < scale_min <= scale_max"},
      {"scale0", "0 < scale_min <= scale_max"},
      {"ratio", "0 < ratio_min <= ratio_max"},
      {"hflip", "hflip is a probability"},
      {"hflipnan", "hflip is a probability"},
      {"chw", "chw_float must be 0 or 1"},
      {"std", "std non-zero"},
      {"mean", "mean and std must be finite"},
      {"max_pixels", "max_pixels must be at least 1"},
  };
  char root[PATH_MAX];
  fl_image_options io;
  fl_dataset ds;
  size_t i;

  (void)state;
  src_path(root, sizeof(root), "images/tree");
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const char *f = cases[i].field;

    options(&io, 8, 8);
    if (strcmp(f, "height") == 0)
      io.height = 0;
    else if (strcmp(f, "width") == 0)
      io.width = 0;
    else if (strcmp(f, "big") == 0)
      io.width = 16385;
    else if (strcmp(f, "crop") == 0)
      io.crop = (fl_crop)7;
    else if (strcmp(f, "resize") == 0)
      io.resize = 16385;
    else if (strcmp(f, "scale") == 0)
      io.scale_min = 1.5; /* more than scale_max */
    else if (strcmp(f, "scale0") == 0)
      io.scale_min = 0;
    else if (strcmp(f, "ratio") == 0)
      io.ratio_min = -1;
    else if (strcmp(f, "hflip") == 0)
      io.hflip = 2;
    else if (strcmp(f, "hflipnan") == 0)
      io.hflip = NAN;
    else if (strcmp(f, "chw") == 0)
      io.chw_float = 2;
    else if (strcmp(f, "std") == 0)
      io.std[1] = 0;
    else if (strcmp(f, "mean") == 0)
      io.mean[2] = INFINITY;
    else
      io.max_pixels = 0;
    ds.ctx = &ds;
    assert_int_equal(fl_dataset_image_folder(&ds, root, &io), FL_EINVAL);
    print_message("# %-10s %s\n", f, fl_loader_error(NULL));
    assert_error("fl_dataset_image_folder: fl_image_options: ",
                 cases[i].why);
    assert_null(ds.ctx);
  }
  assert_int_equal(fl_dataset_image_folder(&ds, root, NULL), FL_EINVAL);
  assert_error("fl_dataset_image_folder", "io is NULL");
}

/* Whether /proc/cpuinfo's first flags line names flag. */
static int
cpuinfo_has(const char *flag)
{
  char line[8192], *p;
  size_t n = strlen(flag);
  FILE *f = fopen("/proc/cpuinfo", "r");
  int found = 0;

  assert_non_null(f);
  while (fgets(line, sizeof(line), f) != NULL)
    if (strncmp(line, "flags", 5) == 0) {
      for (p = strstr(line, flag); p != NULL; p = strstr(p + 1, flag))
        if ((p == line || p[-1] == ' ') &&
            (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
          found = 1;
      break;
    }
  fclose(f);
  return found;
}

/* With FL_IMAGE_SIMD unset, the kernels are the best the CPU runs by
   /proc/cpuinfo's flags (which the kernel clears where it does not save
   the registers' state): the choice reads the CPU itself, not a
   compiler's runtime, which zig's answers no to every extension. */
static void
the_best_kernels_are_those_proc_cpuinfo_names(void **state)
{
  const char *old = getenv("FL_IMAGE_SIMD"), *want = "c";
  char saved[32] = "";
  struct fl__image_stage *st;
  fl_image_options io;

  (void)state;
#if defined(__x86_64__) || defined(__i386__)
  if (cpuinfo_has("sse4_1"))
    want = "sse4.1";
  if (cpuinfo_has("avx2"))
    want = "avx2";
  if (cpuinfo_has("avx2") && cpuinfo_has("avx512f") && cpuinfo_has("avx512bw"))
    want = cpuinfo_has("avx512vbmi") ? "avx512vbmi" : "avx512";
#endif
  if (old != NULL)
    snprintf(saved, sizeof(saved), "%s", old);
  unsetenv("FL_IMAGE_SIMD");
  options(&io, 8, 8);
  st = stage_of(&io);
  print_message("# /proc/cpuinfo: %s; chosen: %s\n", want,
                fl__image_stage_kernels(st));
  assert_string_equal(fl__image_stage_kernels(st), want);
  fl__image_stage_free(st);
  if (old != NULL)
    setenv("FL_IMAGE_SIMD", saved, 1);
}

/* FL_IMAGE_SIMD naming no kernels is FL_EINVAL saying so when the
   dataset is made (a typo is not the C path in silence); set but empty,
   it is as if unset. */
static void
simd_name_outside_the_list_is_einval_saying_so(void **state)
{
  const char *old = getenv("FL_IMAGE_SIMD"), *best;
  char saved[32] = "", root[PATH_MAX];
  struct fl__image_stage *st;
  fl_image_options io;
  fl_dataset ds;

  (void)state;
  if (old != NULL)
    snprintf(saved, sizeof(saved), "%s", old);
  src_path(root, sizeof(root), "images/tree");
  options(&io, 8, 8);
  unsetenv("FL_IMAGE_SIMD");
  st = stage_of(&io);
  best = fl__image_stage_kernels(st);
  fl__image_stage_free(st);
  setenv("FL_IMAGE_SIMD", "", 1);
  st = stage_of(&io);
  assert_string_equal(fl__image_stage_kernels(st), best);
  fl__image_stage_free(st);
  setenv("FL_IMAGE_SIMD", "avx3", 1);
  ds.ctx = &ds;
  assert_int_equal(fl_dataset_image_folder(&ds, root, &io), FL_EINVAL);
  print_message("# %s\n", fl_loader_error(NULL));
  assert_error("fl_dataset_image_folder: FL_IMAGE_SIMD=avx3 is none of c, ",
               "avx512vbmi");
  assert_null(ds.ctx);
  if (old != NULL)
    setenv("FL_IMAGE_SIMD", saved, 1);
  else
    unsetenv("FL_IMAGE_SIMD");
}

/* Closing frees all (AddressSanitizer's leak check says so in CI); the
   folder's accessors answer NULL for any other dataset. */
static void
close_frees_and_accessors_refuse_other_datasets(void **state)
{
  static const char dict[] =
      "{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }";
  char dir[64], path[PATH_MAX], root[PATH_MAX];
  unsigned char data[128 + 4];
  flt_baseline base;
  fl_image_options io;
  fl_dataset ds, npy;
  int64_t label = -5;

  (void)state;
  flt_baseline_take(&base);
  src_path(root, sizeof(root), "images/tree");
  options(&io, 8, 8);
  assert_int_equal(fl_dataset_image_folder(&ds, root, &io), 0);
  /* An NPY array of 4 uint8 samples, as numpy writes it: the header
     padded with blanks to 128 bytes, ending in a newline. */
  dir_make(dir, sizeof(dir));
  pathf(path, sizeof(path), "%s/a.npy", dir);
  memset(data, ' ', 128);
  memcpy(data, "\x93NUMPY\1\0\x76\0", 10); /* 118 bytes follow */
  memcpy(data + 10, dict, strlen(dict));
  data[127] = '\n';
  memset(data + 128, 9, 4);
  write_file(path, data, sizeof(data));
  if (fl_dataset_npy_array(&npy, path) != 0)
    fail_msg("%s", fl_loader_error(NULL));
  assert_null(fl_image_folder_sample(&npy, 0, &label));
  assert_int_equal(label, -5);
  assert_null(fl_image_folder_class(&npy, 0));
  assert_null(fl_image_folder_sample(NULL, 0, NULL));
  assert_null(fl_image_folder_class(NULL, 0));
  fl_dataset_close(&npy);
  fl_dataset_close(&ds);
  assert_null(ds.ctx);
  assert_null(fl_image_folder_sample(&ds, 0, NULL));
  fl_dataset_close(&ds);
  dir_remove(dir);
  flt_assert_clean(&base);
}

/* Without a decoder: FL_ENOTSUP naming what to install, then a skip. */
static void
without_decoders(void)
{
  char root[PATH_MAX];
  fl_image_options io;
  fl_dataset ds;
  const char *e;
  int rc;

  src_path(root, sizeof(root), "images/tree");
  options(&io, 8, 8);
  rc = fl_dataset_image_folder(&ds, root, &io);
  e = fl_loader_error(NULL);
  if (rc != FL_ENOTSUP || e == NULL || strstr(e, "built without") == NULL ||
      (strstr(e, "libjpeg") == NULL && strstr(e, "libspng") == NULL)) {
    printf("1..1\nnot ok 1 - without a decoder: %s, \"%s\"\n",
           fl_err_name(rc), e ? e : "");
    exit(1);
  }
  flt_skip_all("this forkload has no image decoders (%s)", e);
}

/* Every case removes, at its end, the folder it made. */
#define CASE(f) cmocka_unit_test_teardown(f, teardown)

int
main(void)
{
  const struct CMUnitTest tests[] = {
      CASE(folder_order_and_labels_are_image_folders),
      CASE(folder_through_workers_decodes_every_extension_with_its_label),
      CASE(folder_symlink_cycle_is_walked_once),
      CASE(decoded_through_two_workers_are_pils_bytes),
      CASE(every_decode_fixture_is_pils_bytes),
      CASE(transforms_are_torchvisions_pixels),
      CASE(float_chw_is_torchvisions_normalized_tensor),
      CASE(every_simd_path_gives_the_same_bytes),
      CASE(jpeg_crops_decode_as_the_whole_image_does),
      CASE(random_crops_follow_seed_epoch_and_index),
      CASE(hflip_mirrors_whole_images_at_its_probability),
      CASE(other_formats_random_crops_are_those_of_pils_pixels),
      CASE(bad_files_are_their_batchs_error_naming_file_and_problem),
      CASE(errors_quoting_a_4_kib_path_end_with_their_cause),
      CASE(bomb_of_every_format_is_refused_from_its_header_at_once),
      CASE(max_pixels_refuses_larger_images),
      CASE(forced_box_outside_the_image_is_refused),
      CASE(resize_past_2_31_pixels_is_refused),
      CASE(decode_images_composes_with_any_dataset_of_encoded_images),
      CASE(iterable_decode_images_decodes_a_stream_of_encoded_images),
      CASE(fifo_named_like_an_image_is_its_batchs_error),
      CASE(folder_refuses_missing_file_empty_and_classless_roots),
      CASE(bad_options_are_einval_saying_which),
      CASE(the_best_kernels_are_those_proc_cpuinfo_names),
      CASE(simd_name_outside_the_list_is_einval_saying_so),
      CASE(close_frees_and_accessors_refuse_other_datasets),
  };

  if (!DECODERS)
    without_decoders();
  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
