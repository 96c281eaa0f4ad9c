/*
 * Test helpers: see common.h.
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"

static int
count_dir(const char *path, const char *prefix)
{
  DIR *d = opendir(path);
  struct dirent *e;
  int n = 0;

  if (d == NULL)
    return -1;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    if (prefix == NULL || strncmp(e->d_name, prefix, strlen(prefix)) == 0)
      n++;
  }
  closedir(d);
  return n;
}

int
flt_fd_count(void)
{
  return count_dir("/proc/self/fd", NULL) - 1; /* opendir's own fd */
}

int
flt_shm_count(void)
{
  char prefix[64];

  /* Only this process's names: tests run in parallel under make -j. */
  snprintf(prefix, sizeof(prefix), "forkload.%ld.", (long)getpid());
  return count_dir("/dev/shm", prefix);
}

int
flt_child_count(void)
{
  DIR *d = opendir("/proc");
  struct dirent *e;
  char path[300], buf[512], *p;
  long ppid;
  FILE *f;
  int n = 0;

  if (d == NULL)
    return -1;
  while ((e = readdir(d)) != NULL) {
    if (!isdigit((unsigned char)e->d_name[0]))
      continue;
    snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
    f = fopen(path, "r");
    if (f == NULL)
      continue;
    if (fgets(buf, sizeof(buf), f) != NULL &&
        (p = strrchr(buf, ')')) != NULL &&
        sscanf(p + 2, "%*c %ld", &ppid) == 1 && ppid == (long)getpid())
      n++;
    fclose(f);
  }
  closedir(d);
  return n;
}

void
flt_baseline_take(flt_baseline *b)
{
  b->fds = flt_fd_count();
  b->shm = flt_shm_count();
  b->children = flt_child_count();
}

static void
wait_children(const flt_baseline *b)
{
  struct timespec pause = {0, 10 * 1000 * 1000};
  int i;

  for (i = 0; i < 200 && flt_child_count() != b->children; i++)
    nanosleep(&pause, NULL);
}

void
flt_assert_clean(const flt_baseline *b)
{
  wait_children(b);
  assert_int_equal(flt_child_count(), b->children);
  assert_int_equal(flt_shm_count(), b->shm);
  assert_int_equal(flt_fd_count(), b->fds);
}

int
flt_in_child(int (*fn)(void *arg, char *why, size_t len), void *arg,
             char *why, size_t len)
{
  ssize_t got;
  pid_t pid;
  int p[2], status;

  why[0] = '\0';
  assert_int_equal(pipe(p), 0);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    status = fn(arg, why, len);
    if (write(p[1], why, strlen(why)) < 0)
      status = 9;
    _exit(status);
  }
  close(p[1]);
  got = read(p[0], why, len - 1);
  why[got > 0 ? got : 0] = '\0';
  close(p[0]);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int
flt_private_dev_shm(const char *opts, char *why, size_t len)
{
  if (unshare(CLONE_NEWNS) != 0) {
    snprintf(why, len, "unshare(CLONE_NEWNS): %s", strerror(errno));
    return -1;
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("tmpfs", "/dev/shm", "tmpfs", 0, opts) != 0) {
    snprintf(why, len, "mounting a tmpfs over /dev/shm: %s",
             strerror(errno));
    return -1;
  }
  return 0;
}

static char tree[64];

void
flt_tree_put(const char *path, const char *text)
{
  char full[512], *slash;
  FILE *f;

  snprintf(full, sizeof(full), "%s%s", tree, path);
  for (slash = full + strlen(tree) + 1; (slash = strchr(slash, '/'));
       slash++) {
    *slash = '\0';
    mkdir(full, 0755);
    *slash = '/';
  }
  f = fopen(full, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

int
flt_tree_setup(void **state)
{
  (void)state;
  snprintf(tree, sizeof(tree), "/tmp/forkload-tree.XXXXXX");
  if (mkdtemp(tree) == NULL)
    return -1;
  fl__limits_root = tree;
  flt_tree_put("/proc/meminfo", "MemTotal:       24683656 kB\n"
                                "MemFree:         1000000 kB\n"
                                "MemAvailable:    8000000 kB\n");
  return 0;
}

int
flt_tree_teardown(void **state)
{
  char cmd[128];

  (void)state;
  fl__limits_root = "";
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tree);
  return system(cmd) == 0 ? 0 : -1;
}

static int
remove_one(const char *path, const struct stat *st, int flag,
           struct FTW *ftw)
{
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

int
flt_rm_tree(const char *dir)
{
  return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *
flt_long_dir(const char *parent)
{
  static const char part[] = "/a-rather-long-folder-name-00";
  size_t at = strlen(parent), want = 4096 - FLT_LONG_ROOM, i;
  char *p = malloc(4096);

  assert_non_null(p);
  assert_true(at + sizeof(part) < want);
  memcpy(p, parent, at + 1);
  for (i = 0; at + sizeof(part) <= want; i++) {
    snprintf(p + at, 4096 - at, "%.*s%02zu", (int)sizeof(part) - 3, part,
             i % 100);
    at += sizeof(part) - 1;
    assert_int_equal(mkdir(p, 0700), 0);
  }
  return p;
}

void
flt_assert_ends_with(const char *msg, const char *end)
{
  size_t n = strlen(msg), e = strlen(end);

  if (n < e || strcmp(msg + n - e, end) != 0)
    fail_msg("a message of %zu bytes, \"...%s\", does not end with "
             "\"%s\"", n, msg + (n > 160 ? n - 160 : 0), end);
}

int
flt_left_behind(const flt_baseline *b, char *why, size_t len)
{
  wait_children(b);
  if (flt_child_count() == b->children && flt_fd_count() == b->fds &&
      flt_shm_count() == b->shm)
    return 0;
  snprintf(why, len, "left behind: %d children, %d fds, %d names",
           flt_child_count() - b->children, flt_fd_count() - b->fds,
           flt_shm_count() - b->shm);
  return 1;
}

int
flt_epoch_in_order(fl_loader *l, size_t sample_bytes, size_t *n)
{
  fl_batch *b;
  size_t i;
  int rc = fl_loader_begin(l);

  for (*n = 0; rc == 0 && (rc = fl_loader_next(l, &b)) == 1; ++*n) {
    rc = fl_batch_seq(b) == *n ? 0 : FL_EPROTO;
    for (i = 0; rc == 0 && i < fl_batch_count(b); i++)
      if (!flt_sample_ok((const char *)fl_batch_data(b) + i * sample_bytes,
                         sample_bytes, fl_batch_indices(b)[i]))
        rc = FL_EPROTO;
    fl_batch_release(b);
  }
  return rc;
}

int
flt_epoch_error(fl_loader *l, char *buf, size_t len)
{
  fl_batch *b;
  int rc, first = 0;

  buf[0] = '\0';
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    if (rc > 0) {
      fl_batch_release(b);
    } else {
      if (first == 0) {
        first = rc;
        snprintf(buf, len, "%s", fl_loader_error(l));
      }
      if (fl_error_is_final(rc))
        break;
    }
  }
  return first;
}

void
flt_skip_all(const char *fmt, ...)
{
  char why[512];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  printf("1..0 # SKIP %s\n", why);
  fprintf(stderr, "skipped: %s\n", why);
  exit(77);
}

static uint64_t
mix(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static unsigned char
byte_of(size_t i, size_t k)
{
  return (unsigned char)(mix(i * 131 + k / 8) >> (8 * (k % 8)));
}

int
flt_sample_ok(const void *p, size_t sample_bytes, size_t i)
{
  const unsigned char *s = p;
  uint64_t head;
  size_t k;

  memcpy(&head, s, sizeof(head));
  if (head != i)
    return 0;
  for (k = sizeof(head); k < sample_bytes; k++) {
    if (s[k] != byte_of(i, k))
      return 0;
  }
  return 1;
}

static int
get(void *ctx, size_t i, void *dst, size_t *nbytes)
{
  flt_data *d = ctx;
  unsigned char *s = dst;
  uint64_t head = i;
  size_t k;

  __atomic_add_fetch(&d->counters->samples_fetched, 1, __ATOMIC_SEQ_CST);
  if (fl_get_worker_info() != NULL)
    __atomic_add_fetch(&d->counters->info_seen, 1, __ATOMIC_SEQ_CST);
  else
    __atomic_add_fetch(&d->counters->info_missing, 1, __ATOMIC_SEQ_CST);
  if ((long)i == d->kill_index &&
      (d->kill_times == 0 || __atomic_fetch_add(&d->counters->kills, 1,
                                                __ATOMIC_SEQ_CST) <
                                 d->kill_times)) {
    if (d->kill_signal == 0)
      _exit(3);
    raise(d->kill_signal);
  }
  if ((long)i == d->slow_index &&
      (d->slow_times == 0 || __atomic_fetch_add(&d->counters->slows, 1,
                                                __ATOMIC_SEQ_CST) <
                                 d->slow_times))
    usleep(d->slow_us);
  if ((long)i == d->fail_index) {
    fl_worker_error("index %zu is poisoned", i);
    return 5;
  }
  memcpy(s, &head, sizeof(head));
  for (k = sizeof(head); k < d->sample_bytes; k++)
    s[k] = byte_of(i, k);
  *nbytes = d->sample_bytes;
  return 0;
}

static int
get_batch(void *ctx, const size_t *indices, size_t n, void *dst,
          size_t *nbytes)
{
  flt_data *d = ctx;
  size_t i;
  int rc;

  __atomic_add_fetch(&d->counters->batch_calls, 1, __ATOMIC_SEQ_CST);
  for (i = 0; i < n; i++) {
    rc = get(ctx, indices[i], (unsigned char *)dst + i * d->sample_bytes,
             &nbytes[i]);
    if (rc != 0)
      return rc;
  }
  return 0;
}

void
flt_data_batched(fl_dataset *ds)
{
  ds->get = NULL;
  ds->get_batch = get_batch;
}

void
flt_data_init(flt_data *d, fl_dataset *ds, size_t len, size_t sample_bytes)
{
  memset(d, 0, sizeof(*d));
  d->len = len;
  d->sample_bytes = sample_bytes;
  d->fail_index = d->kill_index = d->slow_index = -1;
  d->counters = mmap(NULL, sizeof(*d->counters), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(d->counters != MAP_FAILED);
  memset(ds, 0, sizeof(*ds));
  ds->ctx = d;
  ds->len = len;
  ds->sample_bytes = sample_bytes;
  ds->get = get;
}

void
flt_data_free(flt_data *d)
{
  munmap((void *)d->counters, sizeof(*d->counters));
}

void
flt_worker_init(unsigned id, void *arg)
{
  flt_data *d = arg;
  const fl_worker_info *w = fl_get_worker_info();

  if (id >= 64)
    return;
  __atomic_add_fetch(&d->counters->init_calls[id], 1, __ATOMIC_SEQ_CST);
  d->counters->init_seed[id] = w != NULL ? w->seed : 0;
  d->counters->init_pid[id] = getpid();
}

void
flt_case_init(flt_case *c, size_t len, size_t sample_bytes)
{
  flt_baseline_take(&c->base);
  flt_data_init(&c->d, &c->ds, len, sample_bytes);
  fl_options_init(&c->opt);
  c->l = NULL;
}

void
flt_case_create(flt_case *c)
{
  assert_int_equal(fl_loader_create(&c->l, &c->ds, &c->opt), 0);
}

void
flt_case_start(flt_case *c)
{
  flt_case_create(c);
  assert_int_equal(fl_loader_begin(c->l), 0);
}

void
flt_case_end(flt_case *c)
{
  fl_loader_destroy(c->l);
  flt_data_free(&c->d);
  flt_assert_clean(&c->base);
}

size_t
flt_drain(fl_loader *l, int end)
{
  fl_batch *b;
  size_t n;
  int rc;

  for (n = 0; (rc = fl_loader_next(l, &b)) == 1; n++)
    fl_batch_release(b);
  if (rc != end)
    fail_msg("fl_loader_next returned %d, not %d: %s", rc, end,
             fl_loader_error(l));
  return n;
}

void
flt_warm_up(void)
{
  fl_dataset ds;
  fl_loader *l = NULL;
  flt_data d;

  flt_data_init(&d, &ds, 1, 8);
  if (fl_loader_create(&l, &ds, NULL) == 0)
    fl_loader_destroy(l);
  flt_data_free(&d);
}

double
flt_now(void)
{
  struct timespec t;

  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static struct rlimit saved_nofile;

void
flt_fd_limit_save(void)
{
  getrlimit(RLIMIT_NOFILE, &saved_nofile);
}

/* Fd numbers, not counts, meet the limit: go by the highest in use. */
void
flt_fd_limit_lower(int headroom)
{
  struct rlimit low = saved_nofile;
  int fd, top = 0;

  for (fd = 0; fd < 65536; fd++) {
    if (fcntl(fd, F_GETFD) != -1)
      top = fd + 1;
  }
  low.rlim_cur = (rlim_t)(top + headroom);
  setrlimit(RLIMIT_NOFILE, &low);
}

/* The lowest limit below which `free` fd numbers are unused. */
void
flt_fd_limit_leave(int free)
{
  struct rlimit low = saved_nofile;
  int fd, unused = 0;

  for (fd = 0; fd < 65536 && unused < free; fd++) {
    if (fcntl(fd, F_GETFD) == -1)
      unused++;
  }
  low.rlim_cur = (rlim_t)fd;
  setrlimit(RLIMIT_NOFILE, &low);
}

void
flt_fd_limit_restore(void)
{
  setrlimit(RLIMIT_NOFILE, &saved_nofile);
}

int
flt_fd_limit_teardown(void **state)
{
  (void)state;
  flt_fd_limit_restore();
  return 0;
}

static struct rlimit saved_msgqueue;
static int msgqueue_lowered;

void
flt_msgqueue_limit_lower(rlim_t bytes)
{
  struct rlimit low;

  if (!msgqueue_lowered)
    assert_int_equal(getrlimit(RLIMIT_MSGQUEUE, &saved_msgqueue), 0);
  msgqueue_lowered = 1;
  low = saved_msgqueue;
  low.rlim_cur = bytes;
  assert_int_equal(setrlimit(RLIMIT_MSGQUEUE, &low), 0);
}

void
flt_msgqueue_limit_restore(void)
{
  if (msgqueue_lowered)
    setrlimit(RLIMIT_MSGQUEUE, &saved_msgqueue);
  msgqueue_lowered = 0;
}

int
flt_msgqueue_limit_teardown(void **state)
{
  (void)state;
  flt_msgqueue_limit_restore();
  return 0;
}
