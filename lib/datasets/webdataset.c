/*
 * fl_dataset_webdataset: WebDataset tar shards as an iterable dataset.  A
 * sample is a run of consecutive members that share a key, as webdataset's
 * tar grouping makes it (base_plus_ext: the member's path up to the first
 * dot of its file name; the extension, lowercased, is the rest); each
 * requested extension is a field.  Shards go to ranks as split_by_node
 * (shard s to rank s % world_size), then to that rank's workers as
 * split_by_worker (its k-th shard to worker k % num_workers).  Each worker
 * reads its shards with libarchive, one after the other, straight into the
 * batch: a file, or the output of a pipe:COMMAND shard's command, tar or
 * any compression of it libarchive reads.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* glibc's headers name it from 2.32 (Debian 11's, 2.31, do not); the
   number is every architecture's since Linux 5.9, and an older kernel
   answers ENOSYS, where close-on-exec alone holds. */
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#ifdef HAVE_LIBARCHIVE
#include <archive.h>
#include <archive_entry.h>
#endif

#include "dataset.h"
#include "internal.h"

#define FN "fl_dataset_webdataset"
/* A shard named so is a command whose output is the shard, as
   webdataset's pipe: URLs. */
#define PIPE "pipe:"
#define PIPE_LEN 5
/*
 * The shell that runs it ($1) waits for it in the background, so that
 * SIGHUP, the death of the process that forked it (PR_SET_PDEATHSIG), runs
 * the trap at once and kills the whole group: every stage of a pipeline,
 * which would otherwise outlive a worker its loader SIGKILLed (a curl
 * waiting on the network).  Its stdin is then /dev/null.
 */
#define KEEPER "trap 'kill -KILL 0' HUP; eval \"$1\" & wait $!"
/* What libarchive is handed at a time, from a file or a command. */
#define BLOCK_BYTES (1 << 16)
/* What a command may write past its tar's end that is read and dropped. */
#define DRAIN_MAX (1 << 20)

#ifdef HAVE_LIBARCHIVE

/* Room for a path (a key, a member's name) that grows as needed. */
struct text {
  char *s;
  size_t len, cap;
};

static int
text_set(struct text *t, const char *s, size_t len)
{
  char *p;

  if (len + 1 > t->cap) {
    p = realloc(t->s, len + 1);
    if (p == NULL)
      return FL_ENOMEM;
    t->s = p;
    t->cap = len + 1;
  }
  memcpy(t->s, s, len);
  t->s[len] = '\0';
  t->len = len;
  return 0;
}

struct wds {
  struct fl__ds_base base;
  char **shards;
  size_t nshards, nexts;
  char **exts;
  size_t keyf;         /* the field __key__ fills, or nexts */
  size_t field_bytes[FL__MAX_FIELDS];
  /* This process's stream: its shards, and where it stands. */
  size_t *mine, nmine, at;
  struct archive *ar;
  const char *shard;   /* the one ar reads */
  size_t samples;      /* begun in it */
  /* A pipe: shard's command, its output and whether that ended. */
  pid_t pid;
  int fd, eof;
  unsigned char *buf;
  int member;          /* a member's header is read, its data not yet */
  struct text path;    /* that member's */
  size_t keylen;       /* its key: path up to keylen */
  const char *ext;     /* its extension, lowercased, within path */
  int64_t size;
  struct text key;     /* the sample being read */
};

/*
 * webdataset's base_plus_ext, the regular expression
 * ^((?:.*\/|)[^.]+)[.]([^/]*)$: the key runs to the first dot of the file
 * name; a file name that starts with a dot takes its folder, slash
 * included, as the key when that folder's name has no dot.  0 when the
 * path has no key (webdataset skips it).
 */
static int
base_plus_ext(const char *path, size_t *keylen)
{
  const char *name = strrchr(path, '/'), *dot, *folder;

  name = name != NULL ? name + 1 : path;
  dot = strchr(name, '.');
  if (dot == NULL)
    return 0;
  if (dot > name) {
    *keylen = (size_t)(dot - path);
    return 1;
  }
  if (name == path)
    return 0;
  for (folder = name - 1; folder > path && folder[-1] != '/'; folder--)
    if (folder[-1] == '.')
      return 0;
  *keylen = (size_t)(name - path);
  return 1;
}

/* Members webdataset's tar_file_iterator passes over: __meta__ files. */
static int
is_meta(const char *path)
{
  size_t len = strlen(path);
  const char *end;

  if (strchr(path, '/') == NULL && len >= 2 && strncmp(path, "__", 2) == 0 &&
      strcmp(path + len - 2, "__") == 0)
    return 1;
  if (strncmp(path, "__", 2) != 0)
    return 0;
  for (end = path + 2; *end != '\0' && *end != '/'; end++)
    if (end[0] == '_' && end[1] == '_' && (end[2] == '\0' || end[2] == '/'))
      return 1;
  return 0;
}

/*
 * The shard's command, ended: its pipe closed first, so that a writer gets
 * SIGPIPE (as past the tar's end, which webdataset allows too), and, when
 * kill_it, its whole group killed, every stage of a pipeline; then reaped.
 * Its status, or 0 when it was killed here or there is none.
 */
static int
command_end(struct wds *w, int kill_it)
{
  int status = 0;

  if (w->pid == 0)
    return 0;
  fl__fdtrack_close(w->fd);
  w->fd = -1;
  if (kill_it)
    kill(-w->pid, SIGKILL);
  while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
    ;
  w->pid = 0;
  return kill_it ? 0 : status;
}

/* A command's status as a failure ("exit 3", "killed by signal 9"), or 0
   when it is none.  The shell says a signal as 128 + its number; SIGPIPE
   is how a command learns that the tar was read to its end. */
static int
command_failed(int status, char *how, size_t len)
{
  int sig = WIFSIGNALED(status) ? WTERMSIG(status)
            : WEXITSTATUS(status) > 128 ? WEXITSTATUS(status) - 128
                                        : 0;

  if (sig == SIGPIPE || status == 0)
    return 0;
  if (sig != 0)
    snprintf(how, len, "killed by signal %d", sig);
  else
    snprintf(how, len, "exit %d", WEXITSTATUS(status));
  return 1;
}

static void
wds_close(void *ctx)
{
  struct wds *w = ctx;

  command_end(w, 1);
  if (w->ar != NULL)
    archive_read_free(w->ar);
  w->ar = NULL;
  w->member = 0;
}

/* How far the shard was read: samples begun, and bytes where libarchive
   still knows (not after a failed open). */
static void
progress(const struct wds *w, char *buf, size_t len)
{
  la_int64_t bytes = archive_filter_bytes(w->ar, -1);

  if (bytes >= 0)
    snprintf(buf, len, "sample %zu, %lld bytes in", w->samples,
             (long long)bytes);
  else
    snprintf(buf, len, "sample %zu", w->samples);
}

/*
 * The shard cannot be read on: what went wrong (fmt), how far it got, and
 * how its command ended, which is waited for when its output ended (it let
 * go of it) and killed when not.  The shard is closed.
 */
static int
shard_failed(struct wds *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
shard_failed(struct wds *w, const char *fmt, ...)
{
  char what[FL__REPLY_MSG_MAX], at[64], how[48];
  va_list ap;
  int failed;

  va_start(ap, fmt);
  fl__vformat(what, sizeof(what), fmt, ap);
  va_end(ap);
  progress(w, at, sizeof(at));
  failed = command_failed(command_end(w, !w->eof), how, sizeof(how));
  fl_worker_error("%s: %s (%s)%s%s", w->shard, what, at,
                  failed ? "; the command: " : "", failed ? how : "");
  wds_close(w);
  return FL_EDATASET;
}

/* libarchive says why (where: which sample). */
static int
archive_failed(struct wds *w, const char *where, const char *key)
{
  const char *why = archive_error_string(w->ar);

  return shard_failed(w, "%s%s: %s", where, key,
                      why != NULL ? why : "unknown libarchive error");
}

/* Out of memory in the worker: said, and the shard closed, since what was
   read of the sample is lost. */
static int
out_of_memory(struct wds *w)
{
  fl_worker_error("%s: out of memory", w->shard);
  wds_close(w);
  return FL_ENOMEM;
}

/*
 * What a command writes past its tar's end (the blocks' padding, after
 * the end marker libarchive stops at) is read and dropped, up to
 * DRAIN_MAX, so that the command ends as a writer read whole: curl, for
 * one, ignores SIGPIPE and takes a pipe closed under it for exit 23.
 */
static void
command_drain(struct wds *w)
{
  size_t left = DRAIN_MAX;
  ssize_t n;

  while (w->pid != 0 && !w->eof && left > 0) {
    n = read(w->fd, w->buf, left < BLOCK_BYTES ? left : BLOCK_BYTES);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    left -= (size_t)n;
  }
}

/* The tar ended: so must its command, and well (where: after which
   sample). */
static int
shard_end(struct wds *w, const char *where, const char *key)
{
  char how[48], at[64];
  int failed;

  command_drain(w);
  failed = command_failed(command_end(w, 0), how, sizeof(how));

  if (failed) {
    progress(w, at, sizeof(at));
    fl_worker_error("%s: %s%s: the tar ends, but the command failed: %s "
                    "(%s)", w->shard, where, key, how, at);
  }
  wds_close(w);
  return failed ? FL_EDATASET : 0;
}

/*
 * The next member that has a key, in this shard: 1, 0 at its end (the
 * shard is closed), <0 when the tar is truncated or corrupt (closed too:
 * nothing after it can be trusted).
 */
static int
next_member(struct wds *w, const char *where, const char *key)
{
  struct archive_entry *e;
  const char *p;
  char *c;
  int rc;

  for (;;) {
    rc = archive_read_next_header(w->ar, &e);
    if (rc == ARCHIVE_EOF)
      return shard_end(w, where, key);
    /* ARCHIVE_RETRY is a damaged header, which tarfile refuses too. */
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
      return archive_failed(w, where, key);
    p = archive_entry_pathname(e);
    if (p == NULL || archive_entry_filetype(e) != AE_IFREG || is_meta(p) ||
        !base_plus_ext(p, &w->keylen))
      continue;
    if (text_set(&w->path, p, strlen(p)) != 0)
      return out_of_memory(w);
    w->ext = w->path.s + w->keylen + 1;
    for (c = w->path.s + w->keylen + 1; *c != '\0'; c++)
      if (*c >= 'A' && *c <= 'Z')
        *c = (char)(*c - 'A' + 'a');
    w->size = archive_entry_size(e);
    w->member = 1;
    return 1;
  }
}

/*
 * The command's child: KEEPER, its output the pipe, in a group of its own
 * (command_end kills it whole), told of the death of the thread that
 * forked it where that is the process (PR_SET_PDEATHSIG fires when the
 * forking thread exits), with no fd of ours but 0, 1 and 2 (ours are
 * close-on-exec; close_range makes sure of the host's too where the kernel
 * has it), and with the signals a worker ignores for itself back to their
 * defaults.
 */
static void
command_child(const char *cmd, int out, pid_t parent, int main_thread)
{
  static const int dflt[] = {SIGINT, SIGPIPE, SIGXFSZ};
  sigset_t none;
  size_t i;

  for (i = 0; i < sizeof(dflt) / sizeof(dflt[0]); i++)
    signal(dflt[i], SIG_DFL);
  setpgid(0, 0);
  if (main_thread)
    prctl(PR_SET_PDEATHSIG, SIGHUP);
  if (getppid() != parent)
    _exit(127);
  if ((out == STDOUT_FILENO ? fcntl(out, F_SETFD, 0)
                            : dup2(out, STDOUT_FILENO)) < 0)
    _exit(127);
  syscall(SYS_close_range, 3, ~0u, 0);
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execl("/bin/sh", "sh", "-c", KEEPER, "sh", cmd, (char *)NULL);
  _exit(127);
}

/*
 * Starts a pipe: shard's command.  The fd lock is held from the pipe to
 * the fork and the close of its write end, so that no other fork (another
 * loader's worker) copies either end: the write end would keep the output
 * from ending, the read end a writer from its SIGPIPE.
 */
static int
command_start(struct wds *w, const char *cmd)
{
  pid_t parent = getpid(), pid = -1;
  int main_thread = (pid_t)syscall(SYS_gettid) == parent;
  int p[2], rc = 0;
  sigset_t all, old;

  fl__fdtrack_lock();
  if (pipe2(p, O_CLOEXEC) != 0) {
    rc = -errno;
    goto out;
  }
  if ((rc = fl__fdtrack_add(p[0])) == 0) {
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = fork();
    if (pid == 0)
      command_child(cmd, p[1], parent, main_thread);
    rc = pid < 0 ? -errno : 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  fl__close(p[1]);
  if (rc != 0) {
    fl__fdtrack_close(p[0]);
    goto out;
  }
  /* As the child does: kill(-pid) reaches it whichever runs first. */
  setpgid(pid, pid);
  w->pid = pid;
  w->fd = p[0];
  w->eof = 0;
out:
  fl__fdtrack_unlock();
  return rc;
}

/* libarchive's reads of the command's output, whose end is noted: the
   command has let go of it, and is ending. */
static la_ssize_t
command_read(struct archive *ar, void *ctx, const void **buf)
{
  struct wds *w = ctx;
  ssize_t n;

  do
    n = read(w->fd, w->buf, BLOCK_BYTES);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    archive_set_error(ar, errno, "cannot read the command's output: %s",
                      strerror(errno));
  w->eof = n == 0;
  *buf = w->buf;
  return n;
}

/*
 * The compressions libarchive decodes in process: webdataset's tarfile r:*
 * reads gzip, bzip2 and xz; zstd, lz4, lzip, lzma and compress come too.
 * Each is enabled only where libarchive was built with its library:
 * without it, libarchive would run an external program on the shard, as
 * it does for lrzip, lzop and grzip, which are left out for that reason.
 */
static void
filters(struct archive *ar)
{
  archive_read_support_filter_compress(ar);
  if (archive_zlib_version() != NULL)
    archive_read_support_filter_gzip(ar);
  if (archive_bzlib_version() != NULL)
    archive_read_support_filter_bzip2(ar);
  if (archive_liblzma_version() != NULL) {
    archive_read_support_filter_xz(ar);
    archive_read_support_filter_lzma(ar);
    archive_read_support_filter_lzip(ar);
  }
  if (archive_libzstd_version() != NULL)
    archive_read_support_filter_zstd(ar);
  if (archive_liblz4_version() != NULL)
    archive_read_support_filter_lz4(ar);
}

/* The next of this stream's shards, opened: 1, 0 when none is left. */
static int
next_shard(struct wds *w)
{
  int rc;

  if (w->at == w->nmine)
    return 0;
  w->shard = w->shards[w->mine[w->at++]];
  w->samples = 0;
  w->ar = archive_read_new();
  if (w->ar == NULL)
    return out_of_memory(w);
  archive_read_support_format_tar(w->ar);
  filters(w->ar);
  if (strncmp(w->shard, PIPE, PIPE_LEN) != 0) {
    rc = archive_read_open_filename(w->ar, w->shard, BLOCK_BYTES);
  } else {
    if (w->buf == NULL && (w->buf = malloc(BLOCK_BYTES)) == NULL)
      return out_of_memory(w);
    if ((rc = command_start(w, w->shard + PIPE_LEN)) == FL_ENOMEM)
      return out_of_memory(w);
    if (rc != 0) {
      fl_worker_error("%s: cannot run it: %s", w->shard, fl__strerror(-rc));
      wds_close(w);
      return FL_EDATASET;
    }
    rc = archive_read_open(w->ar, w, NULL, command_read, NULL);
  }
  if (rc != ARCHIVE_OK)
    return archive_failed(w, "cannot open it", "");
  return 1;
}

static int
read_member(struct wds *w, void *dst)
{
  unsigned char *p = dst;
  int64_t done = 0;
  la_ssize_t n;

  while (done < w->size) {
    n = archive_read_data(w->ar, p + done, (size_t)(w->size - done));
    if (n == 0)
      return shard_failed(w, "in %s: member %s.%s ends %lld bytes early: "
                          "the tar is cut short", w->key.s, w->key.s, w->ext,
                          (long long)(w->size - done));
    if (n < 0)
      return archive_failed(w, "in ", w->key.s);
    done += n;
  }
  return 0;
}

/* Which field the member is, or nexts when none. */
static size_t
field_of(const struct wds *w, const char *ext)
{
  size_t f;

  for (f = 0; f < w->nexts; f++)
    if (f != w->keyf && strcmp(w->exts[f], ext) == 0)
      return f;
  return w->nexts;
}

/*
 * One sample into dst (NULL: passed over, as skip does): 1, 0 at the end
 * of the stream, <0 with fl_worker_error saying why.  A sample in error
 * is read to its end, so that the stream goes on after it.
 */
static int
read_sample(struct wds *w, void *const *dst, size_t *nbytes)
{
  unsigned char seen[FL__MAX_FIELDS] = {0};
  size_t f, keyf = w->keyf;
  int rc, bad = 0;

  for (;;) {
    if (w->ar == NULL && (rc = next_shard(w)) <= 0)
      return rc;
    if (w->member || (rc = next_member(w, "before the first sample", "")) > 0)
      break;
    if (rc < 0)
      return rc;
  }
  if (text_set(&w->key, w->path.s, w->keylen) != 0)
    return out_of_memory(w);
  w->samples++;
  do {
    f = field_of(w, w->ext);
    w->member = 0;
    if (bad || f == w->nexts)
      continue;
    bad = seen[f] || (uint64_t)w->size > w->field_bytes[f];
    if (seen[f])
      fl_worker_error("%s: %s: a second member %s.%s", w->shard, w->key.s,
                      w->key.s, w->ext);
    else if (bad)
      fl_worker_error("%s: %s: member %s.%s is %lld bytes, more than its "
                      "max of %zu", w->shard, w->key.s, w->key.s, w->ext,
                      (long long)w->size, w->field_bytes[f]);
    else if (dst != NULL && (rc = read_member(w, dst[f])) != 0)
      return rc;
    seen[f] = 1;
    if (nbytes != NULL)
      nbytes[f] = (size_t)w->size;
  } while ((rc = next_member(w, "after ", w->key.s)) > 0 &&
           w->keylen == w->key.len &&
           memcmp(w->path.s, w->key.s, w->keylen) == 0);
  if (rc < 0)
    return rc;
  if (bad)
    return FL_EDATASET;
  for (f = 0; f < w->nexts; f++) {
    if (f != keyf && !seen[f]) {
      fl_worker_error("%s: %s: no member %s.%s", w->shard, w->key.s,
                      w->key.s, w->exts[f]);
      return FL_EDATASET;
    }
  }
  if (keyf == w->nexts)
    return 1;
  if (w->key.len > w->field_bytes[keyf]) {
    fl_worker_error("%s: %s: the key is %zu bytes, more than __key__'s max "
                    "of %zu", w->shard, w->key.s, w->key.len,
                    w->field_bytes[keyf]);
    return FL_EDATASET;
  }
  if (dst != NULL)
    memcpy(dst[keyf], w->key.s, w->key.len);
  if (nbytes != NULL)
    nbytes[keyf] = w->key.len;
  return 1;
}

static int
wds_next_fields(void *ctx, void *const *dst, size_t *nbytes)
{
  return read_sample(ctx, dst, nbytes);
}

/* Samples in error were none the first time either: not counted. */
static int
wds_skip(void *ctx, uint64_t n)
{
  uint64_t done = 0;
  int rc;

  while (done < n && (rc = read_sample(ctx, NULL, NULL)) != 0) {
    if (rc == FL_ENOMEM)
      return rc;
    done += rc > 0;
  }
  return 0;
}

/* Without workers, the rank comes from the environment, as webdataset's
   pytorch_worker_info takes it without torch.distributed. */
static unsigned
env_unsigned(const char *name, unsigned dflt)
{
  const char *v = getenv(name);
  char *end;
  unsigned long u;

  if (v == NULL || *v == '\0')
    return dflt;
  u = strtoul(v, &end, 10);
  return *end == '\0' && u <= 1u << 20 ? (unsigned)u : dflt;
}

static int
wds_open(void *ctx, const fl_worker_info *wi)
{
  struct wds *w = ctx;
  unsigned rank, world, id = 0, nw = 1;
  size_t s, k = 0;

  if (wi != NULL) {
    rank = wi->rank;
    world = wi->world_size;
    id = wi->id;
    nw = wi->num_workers;
  } else {
    world = env_unsigned("WORLD_SIZE", 1);
    rank = env_unsigned("RANK", 0);
  }
  wds_close(w);
  w->nmine = w->at = 0;
  for (s = 0; world > 0 && s < w->nshards; s++) {
    if (s % world != rank)
      continue;
    if (k++ % nw == id)
      w->mine[w->nmine++] = s;
  }
  return 0;
}

static void
wds_free(void *ctx)
{
  struct wds *w = ctx;
  size_t i;

  wds_close(w);
  for (i = 0; i < w->nshards; i++)
    free(w->shards[i]);
  for (i = 0; i < w->nexts; i++)
    free(w->exts[i]);
  free(w->shards);
  free(w->exts);
  free(w->mine);
  free(w->buf);
  free(w->path.s);
  free(w->key.s);
  free(w);
}

static int
wds_new(struct wds **out, const char *const *shards, size_t n,
        const char *const *exts, const size_t *max_bytes, size_t nexts)
{
  struct wds *w = calloc(1, sizeof(*w));
  size_t i;

  *out = w;
  if (w == NULL)
    return FL_ENOMEM;
  w->base.magic = FL__DS_MAGIC;
  w->base.free = wds_free;
  w->fd = -1;
  w->shards = calloc(n, sizeof(*w->shards));
  w->exts = calloc(nexts, sizeof(*w->exts));
  w->mine = calloc(n, sizeof(*w->mine));
  if (w->shards == NULL || w->exts == NULL || w->mine == NULL)
    return FL_ENOMEM;
  for (i = 0; i < n; i++, w->nshards++)
    if ((w->shards[i] = strdup(shards[i])) == NULL)
      return FL_ENOMEM;
  for (i = 0; i < nexts; i++, w->nexts++) {
    if ((w->exts[i] = strdup(exts[i])) == NULL)
      return FL_ENOMEM;
    w->field_bytes[i] = max_bytes[i];
  }
  for (w->keyf = 0; w->keyf < nexts; w->keyf++)
    if (strcmp(w->exts[w->keyf], "__key__") == 0)
      break;
  return 0;
}

static int
wds_make(fl_iterable *it, size_t size, const char *const *shards, size_t n,
         const char *const *exts, const size_t *max_bytes, size_t nexts)
{
  struct wds *w;
  int rc = wds_new(&w, shards, n, exts, max_bytes, nexts);

  if (rc != 0) {
    if (w != NULL)
      wds_free(w);
    return fl__error_set(rc, FN ": out of memory");
  }
  fl__struct_out(it, size,
                 &(fl_iterable){.ctx = w, .open = wds_open,
                                .close = wds_close, .skip = wds_skip,
                                .nfields = nexts,
                                .field_bytes = w->field_bytes,
                                .next_fields = wds_next_fields},
                 sizeof(*it));
  return 0;
}
#else
static int
wds_make(fl_iterable *it, size_t size, const char *const *shards, size_t n,
         const char *const *exts, const size_t *max_bytes, size_t nexts)
{
  (void)it, (void)size, (void)shards, (void)n, (void)exts, (void)max_bytes;
  (void)nexts;
  return fl__error_set(FL_ENOTSUP, FN ": this forkload was built without "
                       "libarchive: install libarchive-dev (sh "
                       "tools/setup.sh) and build it again");
}
#endif /* HAVE_LIBARCHIVE */

static int
args_check(const fl_iterable *it, size_t size, const char *const *shards,
           size_t n, const char *const *exts, const size_t *max_bytes,
           size_t nexts)
{
  size_t i, j;

  if (it == NULL || size < FL__SIZE_TO(fl_iterable, next_fields))
    return fl__error_set(FL_EINVAL, FN ": %s", it == NULL ? "it is NULL"
                         : "fl_iterable is too old to hold fields");
  if (shards == NULL || n == 0)
    return fl__error_set(FL_EINVAL, FN ": no shards");
  for (i = 0; i < n; i++)
    if (shards[i] == NULL)
      return fl__error_set(FL_EINVAL, FN ": shards[%zu] is NULL", i);
  if (exts == NULL || max_bytes == NULL || nexts == 0 ||
      nexts > FL__MAX_FIELDS)
    return fl__error_set(FL_EINVAL, FN ": %s", nexts > FL__MAX_FIELDS
                         ? "at most 32 extensions" : "no extensions");
  for (i = 0; i < nexts; i++) {
    if (exts[i] == NULL || exts[i][0] == '\0' || max_bytes[i] == 0)
      return fl__error_set(FL_EINVAL, FN ": extension %zu is %s", i,
                           exts[i] == NULL || exts[i][0] == '\0'
                               ? "empty" : "given a max of 0 bytes");
    /* Else no member would ever match it, and every sample would fail. */
    if (strpbrk(exts[i], "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != NULL)
      return fl__error_set(FL_EINVAL, FN ": extension \"%s\" has capitals: "
                           "members' extensions are matched lowercased, as "
                           "webdataset matches them", exts[i]);
    for (j = 0; j < i; j++)
      if (strcmp(exts[i], exts[j]) == 0)
        return fl__error_set(FL_EINVAL, FN ": extension \"%s\" is given "
                             "twice", exts[i]);
  }
  return 0;
}

int
fl_dataset_webdataset_sized(fl_iterable *it, size_t size,
                            const char *const *shards, size_t n,
                            const char *const *exts, const size_t *max_bytes,
                            size_t nexts)
{
  int rc = args_check(it, size, shards, n, exts, max_bytes, nexts);

  if (rc != 0)
    return rc;
  memset(it, 0, size);
  return wds_make(it, size, shards, n, exts, max_bytes, nexts);
}

