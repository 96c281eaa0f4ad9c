/*
 * Worker restarts and fault injection (lib/worker.c, lib/faults.c), with
 * real processes killed for real: a worker that dies is respawned with the
 * same id, takes the tasks its predecessor had not answered, and the run
 * is the one without the death (in order, batch for batch, byte for byte
 * for samples drawn from fl_sample_seed; as they arrive, each batch once);
 * each death is blamed on its own batch, none filled twice; a batch that
 * kills its worker twice is a dataset error; a spent budget is
 * FL_EWORKER; a hang past timeout_ms is killed and respawned; a thousand
 * restarts leak nothing; the faults option strikes the same batches for
 * the same seed; a lend that fails leaves no stale record; the caller's
 * fork hooks bracket every fork, a respawn's included.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"

#define LEN 96
#define BS 4
#define BYTES 64

/* A run's batches: position, first index, count; a dataset error's code. */
struct seen {
  uint64_t seq;
  size_t first, count;
  int error;
};

struct run {
  struct seen b[512];
  size_t n;
};

/* What the log heard. */
struct log {
  char msg[64][512];
  size_t n;
};

static void
hear(void *arg, const char *msg)
{
  struct log *g = arg;

  if (g->n < 64)
    snprintf(g->msg[g->n], sizeof(g->msg[0]), "%s", msg);
  g->n++;
}

static void
setup(flt_case *c, struct log *g, unsigned restarts, int in_order)
{
  flt_case_init(c, LEN, BYTES);
  c->opt.batch_size = BS;
  c->opt.num_workers = 2;
  c->opt.prefetch_factor = 3;
  c->opt.persistent_workers = 1;
  c->opt.shuffle = 1;
  c->opt.seed = 11;
  c->opt.in_order = in_order;
  c->opt.timeout_ms = 20000;
  c->opt.max_worker_restarts = restarts;
  c->opt.log = g != NULL ? hear : NULL;
  c->opt.log_arg = g;
  c->opt.faults = "";
}

/* Epoch e into r: every batch checked, dataset errors recorded. */
static void
epoch(fl_loader *l, struct run *r)
{
  const unsigned char *data;
  struct seen *s;
  fl_batch *b;
  size_t i;
  int rc;

  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    assert_true(r->n < 512);
    s = &r->b[r->n++];
    if (rc < 0) {
      if (fl_error_is_final(rc))
        fail_msg("final error %d: %s", rc, fl_loader_error(l));
      /* A batch kept at the fd or shm limit comes later: not a place. */
      if (rc == FL_EMFILE || rc == FL_ENOSPC) {
        r->n--;
        continue;
      }
      /* Only a batch that killed its worker twice may fail here. */
      if (strstr(fl_loader_error(l), "killed its worker twice") == NULL)
        fail_msg("%d: %s", rc, fl_loader_error(l));
      s->error = rc;
      s->seq = UINT64_MAX;
      continue;
    }
    data = fl_batch_data(b);
    s->seq = fl_batch_seq(b);
    s->count = fl_batch_count(b);
    s->first = fl_batch_indices(b)[0];
    s->error = 0;
    for (i = 0; i < s->count; i++)
      assert_true(flt_sample_ok(data + i * BYTES, BYTES,
                                fl_batch_indices(b)[i]));
    fl_batch_release(b);
  }
}

/*
 * b is the run a without deaths: batch for batch, but where b has a
 * poisoned batch (one whose filling killed its worker twice: injected
 * kills may hit one batch twice, as a bad sample would), in its place.
 */
static void
assert_same_run(const struct run *a, const struct run *b)
{
  size_t i;

  assert_int_equal(a->n, b->n);
  for (i = 0; i < a->n; i++) {
    if (b->b[i].error == FL_EDATASET && a->b[i].error == 0)
      continue;
    if (a->b[i].seq != b->b[i].seq || a->b[i].first != b->b[i].first ||
        a->b[i].count != b->b[i].count || a->b[i].error != b->b[i].error)
      fail_msg("batch %zu: seq %llu from %zu, not seq %llu from %zu", i,
               (unsigned long long)b->b[i].seq, b->b[i].first,
               (unsigned long long)a->b[i].seq, a->b[i].first);
  }
}

/* Two epochs of c's loader, as a reference or with deaths. */
static void
two_epochs(flt_case *c, struct run *r)
{
  r->n = 0;
  flt_case_create(c);
  epoch(c->l, r);
  epoch(c->l, r);
}

/*
 * In order, under both strategies: a worker that SIGKILLs itself while
 * filling a batch is respawned and the run is the one without the death,
 * batch for batch; the log hears one sentence with the worker, the signal,
 * the batch, the new pid and the restarts left.
 */
static void
a_killed_worker_is_respawned_and_the_run_is_unchanged(void **state)
{
  static struct run ref, got;
  static struct log g;
  fl_stats st;
  flt_case c;
  int s;

  (void)state;
  for (s = 0; s < 2; s++) {
    setup(&c, NULL, 0, 1);
    c.opt.sharing = s ? FL_SHARE_FILE_SYSTEM : FL_SHARE_FILE_DESCRIPTOR;
    two_epochs(&c, &ref);
    flt_case_end(&c);
    memset(&g, 0, sizeof(g));
    setup(&c, &g, 3, 1);
    c.opt.sharing = s ? FL_SHARE_FILE_SYSTEM : FL_SHARE_FILE_DESCRIPTOR;
    c.d.kill_index = 37;
    c.d.kill_signal = SIGKILL;
    c.d.kill_times = 1;
    two_epochs(&c, &got);
    assert_same_run(&ref, &got);
    assert_int_equal(fl_loader_stats(c.l, &st), 0);
    assert_int_equal(st.worker_restarts, 1);
    assert_int_equal(g.n, 1);
    assert_non_null(strstr(g.msg[0], "was killed by signal 9"));
    assert_non_null(strstr(g.msg[0], "while filling batch"));
    assert_non_null(strstr(g.msg[0], "respawned as pid"));
    assert_non_null(strstr(g.msg[0], "2 restart(s) left"));
    flt_case_end(&c);
  }
}

/* The fork hooks' calls, and whether a fork is between them now. */
static struct {
  unsigned before, after;
  int open;
} hooks;

static void
hook_before(void *arg)
{
  assert_ptr_equal(arg, &hooks);
  assert_false(hooks.open);
  hooks.open = 1;
  hooks.before++;
}

static void
hook_after(void *arg)
{
  assert_ptr_equal(arg, &hooks);
  assert_true(hooks.open);
  hooks.open = 0;
  hooks.after++;
}

/* In the child: its copy of the flag says it was forked between them. */
static void
hooked_init(unsigned id, void *arg)
{
  (void)id;
  (void)arg;
  if (!hooks.open)
    _exit(9);
}

/*
 * fork_before and fork_after bracket each fork in the parent, the first
 * workers' in fl_loader_begin and a respawn's inside fl_loader_next alike
 * (an interpreter's lock is taken there); the child runs neither.
 */
static void
the_fork_hooks_bracket_every_fork_a_respawn_included(void **state)
{
  static struct run got;
  fl_stats st;
  flt_case c;

  (void)state;
  memset(&hooks, 0, sizeof(hooks));
  setup(&c, NULL, 3, 1);
  c.opt.fork_before = hook_before;
  c.opt.fork_after = hook_after;
  c.opt.fork_arg = &hooks;
  c.opt.worker_init = hooked_init;
  c.d.kill_index = 37;
  c.d.kill_signal = SIGKILL;
  c.d.kill_times = 1;
  two_epochs(&c, &got);
  assert_int_equal(got.n, 2 * (LEN / BS));
  assert_int_equal(fl_loader_stats(c.l, &st), 0);
  assert_int_equal(st.worker_restarts, 1);
  assert_int_equal(hooks.before, 3);
  assert_int_equal(hooks.after, 3);
  assert_false(hooks.open);
  flt_case_end(&c);
}

/*
 * Faults everywhere, three epochs: kills and exits before fills, dropped
 * fds and failed reservations (refetched), late replies.  In order the run
 * is the reference's; as they arrive, each batch comes once an epoch.
 */
static void
faults_of_every_kind_change_nothing_that_is_delivered(void **state)
{
  static struct run ref, got;
  unsigned char count[3][LEN / BS];
  fl_stats st;
  flt_case c;
  size_t i, e;
  int o;

  (void)state;
  for (o = 1; o >= 0; o--) {
    setup(&c, NULL, 0, o);
    flt_case_create(&c);
    for (ref.n = 0, e = 0; e < 3; e++)
      epoch(c.l, &ref);
    flt_case_end(&c);
    setup(&c, NULL, 1000, o);
    c.opt.faults =
        "kill=0.05,exit=0.03,emfile=0.2,enospc=0.2,delay=0.1:5,seed=9";
    c.opt.reuse_segments = 0; /* a new segment per batch: enospc strikes */
    flt_case_create(&c);
    for (got.n = 0, e = 0; e < 3; e++)
      epoch(c.l, &got);
    assert_int_equal(fl_loader_stats(c.l, &st), 0);
    assert_true(st.worker_restarts > 0);
    assert_true(st.faults_injected > st.worker_restarts);
    if (o) {
      assert_same_run(&ref, &got);
    } else {
      /* Each batch once an epoch (or a poisoned one in its stead). */
      memset(count, 0, sizeof(count));
      assert_int_equal(got.n, ref.n);
      for (i = 0; i < got.n; i++)
        if (got.b[i].error == 0)
          count[i / (LEN / BS)][got.b[i].seq]++;
      for (i = 0; i < sizeof(count); i++)
        assert_true(((unsigned char *)count)[i] <= 1);
    }
    flt_case_end(&c);
  }
}

/*
 * A batch whose filling kills its worker every time is tried twice, then
 * its place holds FL_EDATASET (not final) naming its first samples and the
 * signal; the epoch goes on with every other batch.
 */
static void
a_batch_that_kills_twice_is_a_dataset_error_and_the_epoch_goes_on(void **s)
{
  static struct run got;
  static struct log g;
  char idx[32];
  fl_stats st;
  flt_case c;
  fl_batch *b;
  size_t n = 0, errors = 0;
  int rc;

  (void)s;
  memset(&g, 0, sizeof(g));
  setup(&c, &g, 5, 1);
  c.opt.shuffle = 0;
  c.d.kill_index = 41;
  c.d.kill_signal = SIGKILL;
  flt_case_create(&c);
  assert_int_equal(fl_loader_begin(c.l), 0);
  while ((rc = fl_loader_next(c.l, &b)) != 0) {
    if (rc < 0) {
      assert_int_equal(rc, FL_EDATASET);
      assert_false(fl_error_is_final(rc));
      snprintf(idx, sizeof(idx), "samples 40, 41, 42, 43");
      assert_non_null(strstr(fl_loader_error(c.l), idx));
      assert_non_null(strstr(fl_loader_error(c.l), "batch 10"));
      assert_non_null(strstr(fl_loader_error(c.l), "killed its worker "
                                                   "twice (SIGKILL)"));
      errors++;
      continue;
    }
    assert_true(fl_batch_seq(b) != 10);
    fl_batch_release(b);
    n++;
  }
  assert_int_equal(errors, 1);
  assert_int_equal(n, LEN / BS - 1);
  assert_int_equal(fl_loader_stats(c.l, &st), 0);
  assert_int_equal(st.worker_restarts, 2);
  assert_int_equal(g.n, 2);
  (void)got;
  flt_case_end(&c);
}

/*
 * Faults aimed at batches (NAME@N): each strikes its batch on the first
 * try, in each epoch, and nowhere else; the redo is spared, so the run is
 * the reference's.  A malformed aim is refused naming its token.
 */
static void
faults_aimed_at_a_batch_strike_it_once_an_epoch(void **state)
{
  static struct run ref, got;
  fl_stats st;
  flt_case c;
  fl_loader *l;

  (void)state;
  setup(&c, NULL, 0, 1);
  two_epochs(&c, &ref);
  flt_case_end(&c);
  setup(&c, NULL, 4, 1);
  c.opt.faults = "kill@3,exit@10,emfile@1,enospc@0";
  two_epochs(&c, &got);
  assert_same_run(&ref, &got);
  assert_int_equal(fl_loader_stats(c.l, &st), 0);
  /* Each epoch: a kill and an exit, respawned; an fd dropped and a
     segment refused where batch 1 and batch 0 bring new ones. */
  assert_int_equal(st.worker_restarts, 4);
  assert_true(st.faults_injected >= 4);
  flt_case_end(&c);
  setup(&c, NULL, 0, 1);
  c.opt.faults = "delay@3";
  assert_int_equal(fl_loader_create(&l, &c.ds, &c.opt), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "\"delay@3\""));
  c.opt.faults = "kill@x";
  assert_int_equal(fl_loader_create(&l, &c.ds, &c.opt), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "whole number"));
  c.opt.faults = "kill";
  assert_int_equal(fl_loader_create(&l, &c.ds, &c.opt), FL_EINVAL);
  flt_case_end(&c);
}

/* Every batch kills its worker: two restarts go on batch 0, the next
   death finds the budget spent, FL_EWORKER, final, saying so. */
static void
a_spent_budget_is_a_dead_worker_as_before(void **state)
{
  flt_case c;
  fl_batch *b;
  int rc;

  (void)state;
  setup(&c, NULL, 2, 1);
  c.opt.faults = "exit=1";
  flt_case_create(&c);
  assert_int_equal(fl_loader_begin(c.l), 0);
  while ((rc = fl_loader_next(c.l, &b)) == FL_EDATASET)
    ;
  assert_int_equal(rc, FL_EWORKER);
  assert_true(fl_error_is_final(rc));
  assert_non_null(strstr(fl_loader_error(c.l), "exited unexpectedly with "
                                               "status 1"));
  assert_non_null(strstr(fl_loader_error(c.l), "the budget of 2 worker "
                                               "restarts is spent"));
  flt_case_end(&c);
}

/* A worker stuck in a get past timeout_ms is killed and respawned; the
   epoch completes, none lost. */
static void
a_hung_worker_is_killed_and_respawned_past_the_timeout(void **state)
{
  static struct run ref, got;
  static struct log g;
  fl_stats st;
  flt_case c;

  (void)state;
  setup(&c, NULL, 0, 1);
  flt_case_create(&c);
  ref.n = 0;
  epoch(c.l, &ref);
  flt_case_end(&c);
  memset(&g, 0, sizeof(g));
  setup(&c, &g, 2, 1);
  c.opt.timeout_ms = 300;
  c.d.slow_index = 13;
  c.d.slow_us = 60 * 1000000;
  c.d.slow_times = 1;
  flt_case_create(&c);
  got.n = 0;
  epoch(c.l, &got);
  assert_same_run(&ref, &got);
  assert_int_equal(fl_loader_stats(c.l, &st), 0);
  assert_int_equal(st.worker_restarts, 1);
  assert_non_null(strstr(g.msg[0], "SIGKILL"));
  flt_case_end(&c);
}

/*
 * A thousand restarts, under each strategy: afterwards the loader holds as
 * many fds, mapped bytes and segments, and /dev/shm as many of its names,
 * as after the first; a new process is granted the segments of the dead
 * (fd strategy), or the names the dead made are unlinked.
 */
static void
a_thousand_restarts_leak_nothing(void **state)
{
  fl_stats first, last;
  int fds, shm, s, have_first;
  struct run *r = malloc(sizeof(*r));
  flt_case c;

  (void)state;
  assert_non_null(r);
  for (s = 0; s < 2; s++) {
    setup(&c, NULL, 100000, 1);
    c.opt.sharing = s ? FL_SHARE_FILE_SYSTEM : FL_SHARE_FILE_DESCRIPTOR;
    c.opt.faults = "kill=0.4,seed=4";
    c.opt.shuffle = 0;
    flt_case_create(&c);
    have_first = 0;
    fds = shm = 0;
    do {
      r->n = 0;
      epoch(c.l, r);
      assert_int_equal(fl_loader_stats(c.l, &last), 0);
      if (!have_first && last.worker_restarts > 0) {
        first = last;
        fds = flt_fd_count();
        shm = flt_shm_count();
        have_first = 1;
      }
    } while (last.worker_restarts < 1000);
    if (last.fds != first.fds || (!s && last.segments != first.segments))
      fail_msg("%zu fds and %zu segments after %llu restarts, %zu and %zu "
               "after %llu", last.fds, last.segments,
               (unsigned long long)last.worker_restarts, first.fds,
               first.segments, (unsigned long long)first.worker_restarts);
    /*
     * Under the file-system strategy each worker keeps segments of its own
     * (none can be granted): a new one makes its own anew, so the count at
     * an epoch's end moves within the bound, as it does without restarts.
     */
    if (s)
      assert_true(last.segments <= 2 * (3 + 1));
    else
      assert_int_equal(last.bytes_mapped, first.bytes_mapped);
    assert_int_equal(flt_fd_count(), fds);
    assert_int_equal(flt_shm_count(), shm);
    flt_case_end(&c);
  }
  free(r);
}

/*
 * A worker that dies while the parent is in fl_loader_begin (an epoch cut
 * short, persistent workers), in fl_loader_destroy, or while a batch lost
 * at the fd limit is asked for again.
 */
static void
deaths_in_begin_destroy_and_refetch_are_handled(void **state)
{
  static struct run ref, got;
  static struct log g;
  flt_case c;
  fl_batch *b;
  int i;

  (void)state;
  /* begin: the cut epoch's tasks are stale; the new epoch is whole. */
  setup(&c, NULL, 3, 1);
  flt_case_create(&c);
  assert_int_equal(fl_loader_begin(c.l), 0);
  assert_int_equal(fl_loader_next(c.l, &b), 1);
  fl_batch_release(b);
  kill(c.l->workers[1].pid, SIGKILL);
  got.n = 0;
  epoch(c.l, &got);
  assert_int_equal(got.n, LEN / BS);
  flt_case_end(&c);
  /*
   * begin again, the dead worker caught filling batch 1 (its first sample
   * sleeps) and segments not reused: its slot is freed with the stale
   * tasks, and the restart's sentence still names the batch (read after
   * it was freed once, which AddressSanitizer caught).
   */
  memset(&g, 0, sizeof(g));
  setup(&c, &g, 3, 1);
  c.opt.shuffle = 0;
  c.opt.reuse_segments = 0;
  c.d.slow_index = BS;
  c.d.slow_us = 300000;
  c.d.slow_times = 1;
  flt_case_create(&c);
  assert_int_equal(fl_loader_begin(c.l), 0);
  assert_int_equal(fl_loader_next(c.l, &b), 1);
  fl_batch_release(b);
  /* Not before the worker sleeps in batch 1: until then its task could
     still be queued, not started, and no batch to blame. */
  for (i = 0; i < 200 && c.d.counters->slows == 0; i++)
    usleep(5000);
  assert_int_equal(c.d.counters->slows, 1);
  kill(c.l->workers[1].pid, SIGKILL);
  got.n = 0;
  epoch(c.l, &got);
  assert_int_equal(got.n, LEN / BS);
  assert_int_equal(g.n, 1);
  if (strstr(g.msg[0], "while filling batch 1;") == NULL)
    fail_msg("%s", g.msg[0]);
  /* destroy: a worker killed just before it; nothing is left. */
  assert_int_equal(fl_loader_begin(c.l), 0);
  kill(c.l->workers[0].pid, SIGKILL);
  flt_case_end(&c);
  /* refetch: every fd dropped half the time, and kills, in order. */
  setup(&c, NULL, 0, 1);
  two_epochs(&c, &ref);
  flt_case_end(&c);
  setup(&c, NULL, 1000, 1);
  c.opt.faults = "emfile=0.5,kill=0.1,seed=2";
  c.opt.reuse_segments = 0;
  two_epochs(&c, &got);
  assert_same_run(&ref, &got);
  flt_case_end(&c);
}

/*
 * Under the file-system strategy the parent's fds are taken at shm_open:
 * there the emfile fault strikes, each struck name removed and its batch
 * fetched again, so the run is the run without faults and nothing is left
 * in /dev/shm.  (It struck only fds received over the socket, so under
 * this strategy it never fired.)
 */
static void
emfile_strikes_the_open_of_a_name_under_the_file_system_strategy(void **s)
{
  static struct run ref, got;
  fl_stats st;
  flt_case c;

  (void)s;
  setup(&c, NULL, 0, 1);
  c.opt.sharing = FL_SHARE_FILE_SYSTEM;
  two_epochs(&c, &ref);
  flt_case_end(&c);
  setup(&c, NULL, 0, 1);
  c.opt.sharing = FL_SHARE_FILE_SYSTEM;
  c.opt.faults = "emfile=0.3,seed=4";
  c.opt.reuse_segments = 0; /* a new name per batch */
  two_epochs(&c, &got);
  assert_same_run(&ref, &got);
  assert_int_equal(fl_loader_stats(c.l, &st), 0);
  assert_true(st.faults_injected > 0);
  assert_int_equal(st.worker_restarts, 0);
  flt_case_end(&c);
}

/* Worker w's stream: 20 + 5w samples, each (w, position). */
struct stream {
  unsigned w, pos;
};

static int
s_open(void *ctx, const fl_worker_info *wi)
{
  struct stream *s = ctx;

  s->w = wi->id;
  s->pos = 0;
  return 0;
}

static int
s_next(void *ctx, void *dst, size_t *nbytes)
{
  struct stream *s = ctx;
  uint64_t v[2] = {s->w, s->pos};

  if (s->pos == 20 + 5 * s->w)
    return 0;
  s->pos++;
  memcpy(dst, v, sizeof(v));
  *nbytes = sizeof(v);
  return 1;
}

/* The whole epoch of an iterable loader with these faults: samples. */
static size_t
stream_epoch(const char *faults, uint64_t *out, fl_stats *st)
{
  struct stream s = {0, 0};
  fl_iterable it = {0};
  fl_options opt;
  fl_loader *l;
  fl_batch *b;
  size_t n = 0;
  int rc;

  it.ctx = &s;
  it.sample_bytes = 16;
  it.open = s_open;
  it.next = s_next;
  fl_options_init(&opt);
  opt.batch_size = 3;
  opt.num_workers = 3;
  opt.max_worker_restarts = 100;
  opt.faults = faults;
  opt.timeout_ms = 20000;
  assert_int_equal(fl_loader_create_iterable(&l, &it, &opt), 0);
  assert_int_equal(fl_loader_begin(l), 0);
  while ((rc = fl_loader_next(l, &b)) != 0) {
    /* A poisoned batch of a stream holds a place, and no samples: the
       stream had not moved on. */
    if (rc < 0 && strstr(fl_loader_error(l), "killed its worker twice"))
      continue;
    if (rc < 0)
      fail_msg("%d: %s", rc, fl_loader_error(l));
    memcpy(out + 2 * n, fl_batch_data(b), 16 * fl_batch_count(b));
    n += fl_batch_count(b);
    fl_batch_release(b);
  }
  assert_int_equal(fl_loader_stats(l, st), 0);
  fl_loader_destroy(l);
  return n;
}

/* Worker w's samples of a run, in the order they came: how many. */
static size_t
of_worker(const uint64_t *v, size_t n, uint64_t w, uint64_t *out)
{
  size_t i, k = 0;

  for (i = 0; i < n; i++)
    if (v[2 * i] == w)
      out[k++] = v[2 * i + 1];
  return k;
}

/*
 * An iterable's respawned worker reopens its stream and skips what its
 * predecessor answered: each worker's stream comes whole, in order, once,
 * as without deaths.  (A poisoned batch of a stream holds no samples and
 * the stream has not moved: its samples come in the worker's next batch,
 * so the interleaving across workers may differ, not any stream.)
 */
static void
a_respawned_stream_goes_on_where_it_stood(void **state)
{
  static uint64_t ref[2 * 128], got[2 * 128], a[128], b[128];
  flt_baseline base;
  fl_stats st;
  size_t n, k;
  uint64_t w;

  (void)state;
  flt_baseline_take(&base);
  n = stream_epoch("", ref, &st);
  assert_int_equal(n, 20 + 25 + 30);
  assert_int_equal(stream_epoch("kill=0.2,seed=5", got, &st), n);
  assert_true(st.worker_restarts > 0);
  for (w = 0; w < 3; w++) {
    k = of_worker(ref, n, w, a);
    assert_int_equal(k, 20 + 5 * w);
    assert_int_equal(of_worker(got, n, w, b), k);
    assert_memory_equal(a, b, k * sizeof(*a));
  }
  flt_assert_clean(&base);
}

/* Each bad token named; the environment's spec when the option is NULL;
   the same seed, the same faults: the same log, pids aside. */
static void
fault_specs_are_checked_and_a_seed_strikes_the_same_batches(void **state)
{
  static const char *const bad[] = {"kill=2", "bogus=0.1", "delay=0.5",
                                    "seed=x", "kill", "exit=-0.1",
                                    "kill=0.1,,seed=1"};
  static const char *const named[] = {"\"kill=2\"", "\"bogus=0.1\"",
                                      "\"delay=0.5\"", "\"seed=x\"",
                                      "\"kill\"", "\"exit=-0.1\"", "\"\""};
  static struct log g[2];
  static struct run r;
  fl_stats st[2];
  flt_baseline base;
  fl_loader *l;
  flt_case c;
  size_t i, k;
  char *p;

  (void)state;
  flt_baseline_take(&base);
  setup(&c, NULL, 0, 1);
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    c.opt.faults = bad[i];
    assert_int_equal(fl_loader_create(&l, &c.ds, &c.opt), FL_EINVAL);
    if (strstr(fl_loader_error(NULL), named[i]) == NULL)
      fail_msg("\"%s\" does not name %s", fl_loader_error(NULL), named[i]);
  }
  c.opt.faults = NULL;
  setenv("FORKLOAD_FAULTS", "kill=7", 1);
  assert_int_equal(fl_loader_create(&l, &c.ds, &c.opt), FL_EINVAL);
  assert_non_null(strstr(fl_loader_error(NULL), "kill=7"));
  unsetenv("FORKLOAD_FAULTS");
  flt_data_free(&c.d);
  for (k = 0; k < 2; k++) {
    memset(&g[k], 0, sizeof(g[k]));
    setup(&c, &g[k], 1000, 1);
    c.opt.faults = "kill=0.1,seed=77";
    flt_case_create(&c);
    r.n = 0;
    epoch(c.l, &r);
    assert_int_equal(fl_loader_stats(c.l, &st[k]), 0);
    flt_case_end(&c);
    /* The pids differ from run to run: keep up to the first. */
    for (i = 0; i < g[k].n && i < 64; i++)
      if ((p = strstr(g[k].msg[i], "(pid")) != NULL)
        *p = '\0';
  }
  assert_true(g[0].n > 0);
  assert_int_equal(g[0].n, g[1].n);
  assert_int_equal(st[0].faults_injected, st[1].faults_injected);
  for (i = 0; i < g[0].n && i < 64; i++)
    assert_string_equal(g[0].msg[i], g[1].msg[i]);
  flt_assert_clean(&base);
}

/*
 * Under both strategies, each death is blamed on the batch its worker was
 * filling: every restart is a kill the faults option injected, and no
 * batch is filled twice, so the samples fetched are those delivered.  A
 * worker that dies with granted fds unread leaves ECONNRESET on its
 * socket ahead of the replies it sent before: those must still be taken,
 * or the batch answered is blamed, filled again, and may be poisoned.
 */
static void
each_death_is_blamed_on_its_batch_and_no_batch_is_filled_twice(void **state)
{
  static struct run r;
  uint64_t delivered;
  fl_stats st;
  flt_case c;
  size_t i, e;
  int fs;

  (void)state;
  for (fs = 0; fs < 2; fs++) {
    setup(&c, NULL, 1000, 1);
    c.opt.sharing = fs ? FL_SHARE_FILE_SYSTEM : FL_SHARE_FILE_DESCRIPTOR;
    c.opt.faults = "kill=0.2,seed=13";
    flt_case_create(&c);
    for (r.n = 0, e = 0; e < 6; e++)
      epoch(c.l, &r);
    assert_int_equal(fl_loader_stats(c.l, &st), 0);
    for (delivered = 0, i = 0; i < r.n; i++)
      delivered += r.b[i].error == 0 ? r.b[i].count : 0;
    assert_true(st.worker_restarts >= 10);
    assert_int_equal(st.faults_injected, st.worker_restarts);
    assert_int_equal(c.d.counters->samples_fetched, delivered);
    flt_case_end(&c);
  }
}

/* A sample drawn from its seed, as a random augmentation would be. */
static int
get_random(void *ctx, size_t i, void *dst, size_t *nbytes)
{
  uint64_t x = fl_sample_seed(i), *p = dst;
  size_t k;

  (void)ctx;
  for (k = 0; k < BYTES / sizeof(*p); k++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[k] = x;
  }
  *nbytes = BYTES;
  return 0;
}

/* Two shuffled epochs, in order, each batch's bytes hashed into h; a
   poisoned batch's place is 0. */
static size_t
random_run(const char *faults, uint64_t *h, fl_stats *st)
{
  fl_dataset ds = {0};
  fl_options opt;
  fl_loader *l;
  fl_batch *b;
  const unsigned char *p;
  size_t n = 0, i;
  int rc, e;

  ds.len = LEN;
  ds.sample_bytes = BYTES;
  ds.get = get_random;
  fl_options_init(&opt);
  opt.batch_size = BS;
  opt.num_workers = 2;
  opt.prefetch_factor = 3;
  opt.shuffle = 1;
  opt.seed = 5;
  opt.max_worker_restarts = 1000;
  opt.faults = faults;
  assert_int_equal(fl_loader_create(&l, &ds, &opt), 0);
  for (e = 0; e < 2; e++) {
    assert_int_equal(fl_loader_begin(l), 0);
    while ((rc = fl_loader_next(l, &b)) != 0) {
      assert_true(n < 2 * LEN / BS);
      h[n] = 0;
      if (rc < 0) {
        assert_false(fl_error_is_final(rc));
        n++;
        continue;
      }
      p = fl_batch_data(b);
      h[n] = 1469598103934665603ull;
      for (i = 0; i < fl_batch_count(b) * BYTES; i++)
        h[n] = (h[n] ^ p[i]) * 1099511628211ull;
      n++;
      fl_batch_release(b);
    }
  }
  assert_int_equal(fl_loader_stats(l, st), 0);
  fl_loader_destroy(l);
  return n;
}

/*
 * In order, a run whose workers die is the run without deaths byte for
 * byte when the dataset draws its randomness per sample
 * (fl_sample_seed): a new process with the same seed draws the same.
 */
static void
deaths_change_no_byte_of_samples_drawn_from_their_seed(void **state)
{
  uint64_t ref[2 * LEN / BS], got[2 * LEN / BS];
  flt_baseline base;
  fl_stats st;
  size_t n, i, same = 0;

  (void)state;
  flt_baseline_take(&base);
  n = random_run("", ref, &st);
  assert_int_equal(random_run("kill=0.15,seed=3", got, &st), n);
  assert_true(st.worker_restarts > 0);
  for (i = 0; i < n; i++) {
    if (got[i] == 0)
      continue; /* poisoned: killed its worker twice */
    assert_true(got[i] == ref[i]);
    same++;
  }
  assert_true(same >= n - st.worker_restarts);
  flt_assert_clean(&base);
}

/*
 * Lends that fail in the worker (its mapping of the granted fd): each is
 * that batch's error, not final, and no later task names a segment the
 * worker no longer maps (once, FL_EPROTO).  Workers' attaches fail while
 * the shared count lasts.
 */
static volatile int *attach_failures;
static pid_t test_pid;

int __real_fl__segment_attach_lent(fl__segment *seg, int fd, size_t size);
int __wrap_fl__segment_attach_lent(fl__segment *seg, int fd, size_t size);

int
__wrap_fl__segment_attach_lent(fl__segment *seg, int fd, size_t size)
{
  if (getpid() != test_pid && attach_failures != NULL &&
      __atomic_sub_fetch(attach_failures, 1, __ATOMIC_SEQ_CST) >= 0)
    return FL_ENOMEM;
  return __real_fl__segment_attach_lent(seg, fd, size);
}

static void
failed_lends_leave_no_stale_record(void **state)
{
  flt_case c;
  fl_batch *b, *held[8];
  size_t e, nheld, good, bad;
  int rc;

  (void)state;
  test_pid = getpid();
  attach_failures = mmap(NULL, sizeof(*attach_failures),
                         PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                         -1, 0);
  assert_true(attach_failures != MAP_FAILED);
  setup(&c, NULL, 0, 1);
  c.opt.shuffle = 0;
  flt_case_create(&c);
  for (good = bad = 0, e = 0; e < 6; e++) {
    /* Failures in the first epochs, lends in every one. */
    *attach_failures = e < 3 ? 2 : 0;
    assert_int_equal(fl_loader_begin(c.l), 0);
    nheld = 0;
    while ((rc = fl_loader_next(c.l, &b)) != 0) {
      if (rc < 0) {
        assert_false(fl_error_is_final(rc));
        assert_true(rc != FL_EPROTO);
        bad++;
        continue;
      }
      good++;
      /* Hold a few, so that segments pile up at one worker and are lent. */
      held[nheld++] = b;
      if (nheld == (e % 3) + 2)
        while (nheld > 0)
          fl_batch_release(held[--nheld]);
    }
    while (nheld > 0)
      fl_batch_release(held[--nheld]);
  }
  assert_int_equal(good + bad, 6 * (LEN / BS));
  assert_true(good >= 6 * (LEN / BS) - 6);
  munmap((void *)attach_failures, sizeof(*attach_failures));
  attach_failures = NULL;
  flt_case_end(&c);
}

int
main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_killed_worker_is_respawned_and_the_run_is_unchanged),
      cmocka_unit_test(
          faults_of_every_kind_change_nothing_that_is_delivered),
      cmocka_unit_test(
          a_batch_that_kills_twice_is_a_dataset_error_and_the_epoch_goes_on),
      cmocka_unit_test(a_spent_budget_is_a_dead_worker_as_before),
      cmocka_unit_test(faults_aimed_at_a_batch_strike_it_once_an_epoch),
      cmocka_unit_test(
          a_hung_worker_is_killed_and_respawned_past_the_timeout),
      cmocka_unit_test(a_thousand_restarts_leak_nothing),
      cmocka_unit_test(deaths_in_begin_destroy_and_refetch_are_handled),
      cmocka_unit_test(
          emfile_strikes_the_open_of_a_name_under_the_file_system_strategy),
      cmocka_unit_test(a_respawned_stream_goes_on_where_it_stood),
      cmocka_unit_test(
          fault_specs_are_checked_and_a_seed_strikes_the_same_batches),
      cmocka_unit_test(
          each_death_is_blamed_on_its_batch_and_no_batch_is_filled_twice),
      cmocka_unit_test(
          deaths_change_no_byte_of_samples_drawn_from_their_seed),
      cmocka_unit_test(failed_lends_leave_no_stale_record),
      cmocka_unit_test(
          the_fork_hooks_bracket_every_fork_a_respawn_included),
  };

  flt_warm_up();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
