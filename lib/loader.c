/*
 * The loader's life: create, begin an epoch, hand out batches, destroy.
 * fl_loader_next drives the parent's private libuv loop until the reorder
 * buffer can hand out the next batch; with num_workers 0 it fills the batch
 * itself, in the calling process.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static uint32_t
make_token(void)
{
  static uint64_t counter;
  uint32_t token;

  if (getrandom(&token, sizeof(token), GRND_NONBLOCK) == sizeof(token))
    return token;
  return (uint32_t)fl__mix64((uint64_t)fl__now() * 1000000000u ^
                             (uint64_t)getpid() << 32 ^ ++counter);
}

/*
 * The loop's own fds (epoll, its signal pipe, its async eventfd), read from
 * libuv 1.x's loop fields, which are stable within the major version: the
 * stats count them, and workers must not keep them.
 */
static size_t
loop_fds(uv_loop_t *loop, int *fds)
{
  int all[5], i, j, n = 0;

  all[0] = uv_backend_fd(loop);
  all[1] = loop->signal_pipefd[0];
  all[2] = loop->signal_pipefd[1];
  all[3] = loop->async_io_watcher.fd;
  all[4] = loop->async_wfd;
  for (i = 0; i < 5; i++) {
    for (j = 0; j < n && fds[j] != all[i]; j++)
      ;
    if (all[i] >= 0 && j == n)
      fds[n++] = all[i];
  }
  return (size_t)n;
}

static void
on_timer(uv_timer_t *t)
{
  fl_loader *l = t->data;

  l->timed_out = 1;
}

/*
 * In a child of the loader's maker, the event loop's epoll instance is the
 * maker's too: closing a handle would take the maker's watchers out of it.
 * Its fd is pointed at a new instance of this process's own first.  If that
 * cannot be had, the loop is let go of without libuv: its fds are closed
 * and its small allocations left.
 */
static void
detach_loop(fl_loader *l)
{
  int fd = uv_backend_fd(&l->loop), ep, fds[5];
  size_t i, n;

  ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep >= 0 && dup3(ep, fd, O_CLOEXEC) >= 0) {
    fl__close(ep);
    return;
  }
  if (ep >= 0)
    fl__close(ep);
  n = loop_fds(&l->loop, fds);
  for (i = 0; i < n; i++)
    fl__fdtrack_close(fds[i]);
  for (i = 0; l->workers != NULL && i < l->opt.num_workers; i++)
    l->workers[i].sock_poll = l->workers[i].pid_poll = NULL;
  l->loop_ready = 0;
}

/*
 * Everything create may have made; safe on a partly made loader.  In a
 * child of the loader's maker (foreign), only this process's copy goes:
 * the workers, their queues and the names in /dev/shm stay the maker's.
 */
static void
release_all(fl_loader *l)
{
  size_t i, n;
  unsigned w;
  int fds[5];

  if (l->foreign && l->loop_ready)
    detach_loop(l);
  if (l->workers != NULL && (l->loop_ready || l->foreign))
    fl__workers_stop(l);
  if (l->iterable && !l->foreign)
    fl__stream_close(l, &l->stream);
  for (i = 0; i < l->nslots; i++) {
    if (l->slots[i] != NULL)
      fl__slot_drop(l, l->slots[i]);
  }
  for (w = 0; l->workers != NULL && w < l->opt.num_workers; w++) {
    fl__index_queue_close(&l->workers[w].queue);
    free(l->workers[w].backlog);
  }
  if (l->loop_ready) {
    uv_close((uv_handle_t *)&l->timer, NULL);
    uv_run(&l->loop, UV_RUN_DEFAULT);
    n = loop_fds(&l->loop, fds);
    fl__fdtrack_lock();
    for (i = 0; i < n; i++)
      fl__fdtrack_del(fds[i]);
    uv_loop_close(&l->loop);
    fl__fdtrack_unlock();
  }
  if (l->order != NULL) {
    fl__fdtrack_map_del(l->order);
    munmap(l->order, l->order_bytes);
  }
  if (l->notes != NULL) {
    fl__fdtrack_map_del(l->notes);
    munmap(l->notes, l->opt.num_workers * sizeof(*l->notes));
  }
  fl__reorder_free(&l->reorder);
  fl__resume_clear(l);
  free(l->workers);
  free(l->slots);
  free(l->spare);
  free(l->classes);
  fl__sampler_free(&l->sampler);
  free(l);
}

static int
create_workers(fl_loader *l, const fl__plan *p)
{
  unsigned i, n = l->opt.num_workers;
  fl__worker *w;
  int rc;

  l->workers = calloc(n, sizeof(*l->workers));
  if (l->workers == NULL)
    return FL_ENOMEM;
  /* All of them first: a failure below frees every worker, and an fd of
     0 left by calloc is the caller's stdin, not a queue. */
  for (i = 0; i < n; i++) {
    w = &l->workers[i];
    w->id = i;
    w->queue.recv = w->queue.send = w->sock = w->pidfd = -1;
    w->loader = l;
  }
  for (i = 0; i < n; i++) {
    w = &l->workers[i];
    /* Never grown on the hot path: the plan says what it must hold. */
    w->backlog_cap = (unsigned)p->backlog;
    w->backlog = calloc(w->backlog_cap, sizeof(*w->backlog));
    if (w->backlog == NULL)
      return FL_ENOMEM;
    /* Made and tracked under the lock: no worker another thread forks
       meanwhile keeps it. */
    fl__fdtrack_lock();
    rc = fl__index_queue_create(&w->queue, l->token, i,
                                l->opt.prefetch_factor + 1, l->err,
                                sizeof(l->err));
    if (rc == 0)
      fl__fdtrack_add(w->queue.recv);
    if (rc == 0 && FL__INDEX_QUEUE_SOCKET(&w->queue))
      fl__fdtrack_add(w->queue.send);
    fl__fdtrack_unlock();
    if (rc != 0)
      return rc;
    fl__stats_fds(l, FL__INDEX_QUEUE_SOCKET(&w->queue) ? 2 : 1);
  }
  return 0;
}

static int
create(fl_loader *l, const fl_dataset *ds, const fl_options *opt,
       const fl__plan *p)
{
  size_t nfds, i;
  int fds[5];
  size_t *custom = NULL;
  int rc;

  l->ds = *ds;
  l->opt = *opt;
  /* What the window was planned for: dispatch, the queues and the budget
     read the factor in force from here. */
  l->opt.prefetch_factor = p->prefetch;
  l->stream = (struct fl__stream)FL__STREAM_INIT;
  l->owner = getpid();
  l->fork_gen = fl__fork_generation;
  l->token = make_token();
  if (opt->indices != NULL) {
    custom = malloc((p->n ? p->n : 1) * sizeof(*custom));
    if (custom == NULL)
      return FL_ENOMEM;
    memcpy(custom, opt->indices, p->n * sizeof(*custom));
    l->opt.indices = custom;
  }
  l->sampler.base = l->sampler.m = p->n;
  l->sampler.len = ds->len;
  l->sampler.custom = custom;
  l->sampler.fn = opt->sampler;
  l->sampler.fn_ctx = opt->sampler_ctx;
  l->sampler.shuffle = opt->shuffle;
  l->sampler.algorithm = opt->shuffle_algorithm;
  l->sampler.seed = opt->seed;
  l->sampler.batch_size = opt->batch_size;
  l->sampler.drop_last = opt->drop_last;
  l->sampler.rank = opt->rank;
  l->sampler.world = opt->world_size;
  l->sampler.mode = opt->shard_mode;
  /* Without it (out of memory), moves go to the shared order. */
  if (p->moved_slots > 0)
    (void)fl__moved_init(&l->sampler.moved, p->moved_slots);
  /* Until the first begin, the batches of a whole order's share. */
  l->sampler.n = fl__shard_len(opt->shard_mode, p->n, opt->world_size,
                               opt->rank);
  l->nbatches = fl__sampler_batches(&l->sampler);
  l->layout = p->layout;
  /* The caller's array may go once create returns: the layout has it. */
  if (ds->nfields > 0)
    l->ds.field_bytes = l->it.field_bytes = l->layout.field_bytes;
  l->window = p->window;
  /* The size classes a batch larger than its segment may take. */
  l->classes = calloc(FL__SHIFT_MAX + 1, sizeof(*l->classes));
  if (l->classes == NULL)
    return FL_ENOMEM;
  l->classes[0] = l->layout;
  while (l->max_shift < FL__SHIFT_MAX &&
         fl__segment_layout_scaled(&l->classes[l->max_shift + 1],
                                   &l->layout, l->max_shift + 1) == 0)
    l->max_shift++;
  /*
   * Shared, and made before any fork: every worker reads the same order.
   * It and the loop's fds are made and tracked under the lock, so that no
   * worker of another loader, forked in another thread, keeps them.
   */
  fl__fdtrack_lock();
  l->order = mmap(NULL, p->order_bytes, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (l->order != MAP_FAILED) {
    l->order_bytes = p->order_bytes;
    rc = fl__fdtrack_map_add(l->order, l->order_bytes);
  } else {
    l->order = NULL;
    rc = FL_ENOMEM;
  }
  /* One note per worker, for the parent to read when one dies of SIGBUS. */
  if (rc == 0 && opt->num_workers > 0) {
    l->notes = mmap(NULL, opt->num_workers * sizeof(*l->notes),
                    PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (l->notes == MAP_FAILED) {
      l->notes = NULL;
      rc = FL_ENOMEM;
    } else {
      rc = fl__fdtrack_map_add(l->notes,
                               opt->num_workers * sizeof(*l->notes));
    }
  }
  if (rc == 0 && (rc = uv_loop_init(&l->loop)) != 0)
    snprintf(l->err, sizeof(l->err), "cannot start the event loop: %s",
             uv_strerror(rc));
  l->loop_ready = rc == 0;
  nfds = l->loop_ready ? loop_fds(&l->loop, fds) : 0;
  for (i = 0; i < nfds; i++)
    fl__fdtrack_add(fds[i]);
  fl__fdtrack_unlock();
  if (rc == 0)
    rc = fl__reorder_init(&l->reorder, l->window, opt->in_order);
  if (rc != 0)
    return rc;
  fl__stats_fds(l, (int)nfds);
  uv_timer_init(&l->loop, &l->timer);
  l->timer.data = l;
  if (opt->num_workers > 0)
    return create_workers(l, p);
  return 0;
}

/*
 * Both kinds of dataset (it is NULL for a map-style one), read from the
 * caller's structs of the sizes given, over the defaults.
 */
static int
create_loader(fl_loader **out, const fl_dataset *ds_in, size_t ds_size,
              const fl_iterable *it_in, size_t it_size,
              const fl_options *opt_in, size_t opt_size)
{
  char err[FL__ERRMSG_MAX];
  struct fl__faults faults;
  fl_dataset ds = {0};
  fl_iterable it = {0};
  fl_options opt;
  fl__plan plan;
  fl_loader *l;
  int rc = 0, iterable = it_in != NULL, swept;

  fl__options_defaults(&opt);
  if (iterable)
    rc = fl__struct_in(&it, sizeof(it), it_in, it_size,
                       FL__ITERABLE_SIZE_0_1, "fl_iterable", err,
                       sizeof(err));
  else
    rc = fl__struct_in(&ds, sizeof(ds), ds_in, ds_size,
                       FL__DATASET_SIZE_0_1, "fl_dataset", err, sizeof(err));
  if (rc == 0 && opt_in != NULL)
    rc = fl__struct_in(&opt, sizeof(opt), opt_in, opt_size,
                       FL__OPTIONS_SIZE_0_1, "fl_options", err, sizeof(err));
  if (rc == 0 && iterable)
    rc = fl__iterable_check(&it, err, sizeof(err));
  /* Its fields are checked, laid out and copied as a dataset's. */
  if (iterable) {
    ds.ctx = it.ctx;
    ds.sample_bytes = it.sample_bytes;
    ds.nfields = it.nfields;
    ds.field_bytes = it.field_bytes;
  }
  /* Nothing is reserved before the options and the memory are checked. */
  if (rc == 0)
    rc = fl__options_check(&ds, &opt, iterable, err, sizeof(err));
  ds.sample_bytes = rc == 0 ? fl__sample_bytes(&ds) : ds.sample_bytes;
  /* The spec is the caller's (or the environment's): parsed, not kept. */
  if (rc == 0)
    rc = fl__faults_parse(&faults,
                          opt.faults != NULL ? opt.faults
                                             : getenv("FORKLOAD_FAULTS"),
                          err, sizeof(err));
  opt.faults = NULL;
  if (rc == 0)
    rc = fl__plan_make(&plan, &ds, &opt, iterable, err, sizeof(err));
  if (rc == 0)
    rc = fl__plan_admit(&plan, &ds, &opt, iterable, err, sizeof(err));
  if (rc != 0)
    return fl__error_set(rc, "%s", err);
  /* Every fork from here on holds the fork table's lock, the host's too. */
  fl__fdtrack_init();
  /* What loaders killed mid-transfer left behind (their owners are gone). */
  swept = fl_shm_sweep(0, NULL, NULL);
  l = calloc(1, sizeof(*l));
  if (l == NULL)
    return fl__error_set(FL_ENOMEM, "out of memory");
  l->it = it;
  l->iterable = iterable;
  l->faults = faults;
  rc = create(l, &ds, &opt, &plan);
  if (rc != 0) {
    if (l->err[0] == '\0')
      snprintf(l->err, sizeof(l->err), "cannot create the loader: %s",
               fl_strerror(rc));
    fl__error_set(rc, "%s", l->err);
    release_all(l);
    return rc;
  }
  if (swept > 0)
    fl__log(l, "removed %d segment name(s) from /dev/shm left by loaders "
            "whose process is gone", swept);
  *out = l;
  return 0;
}

int
fl_loader_create_sized(fl_loader **out, const fl_dataset *ds, size_t ds_size,
                       const fl_options *opt, size_t opt_size)
{
  fl__error_clear();
  if (out != NULL)
    *out = NULL;
  if (out == NULL || ds == NULL)
    return fl__error_set(FL_EINVAL, "fl_loader_create: %s is NULL",
                         out == NULL ? "out" : "ds");
  return create_loader(out, ds, ds_size, NULL, 0, opt, opt_size);
}

int
fl_loader_create_iterable_sized(fl_loader **out, const fl_iterable *it,
                                size_t it_size, const fl_options *opt,
                                size_t opt_size)
{
  fl__error_clear();
  if (out != NULL)
    *out = NULL;
  if (out == NULL || it == NULL)
    return fl__error_set(FL_EINVAL, "fl_loader_create_iterable: %s is NULL",
                         out == NULL ? "out" : "it");
  return create_loader(out, NULL, 0, it, it_size, opt, opt_size);
}

size_t
fl_loader_len(const fl_loader *l)
{
  return l != NULL ? l->nbatches : 0;
}

/*
 * Run the loop once, waiting at most until the earlier of deadline (the
 * loader's timeout_ms) and until (fl_loader_poll's wait_ms); 0: none.
 * Returns 0; FL_ETIMEDOUT once deadline has passed (it wins a tie); or
 * FL_EAGAIN once until has, after a run that takes in what has arrived
 * without waiting.
 */
static int
wait_once(fl_loader *l, double deadline, double until)
{
  double t0 = fl__now(), end = deadline, left;

  if (until > 0 && (end == 0 || until < end))
    end = until;
  if (end > 0) {
    left = end - t0;
    if (left <= 0 && end == deadline)
      return FL_ETIMEDOUT;
    if (left <= 0) {
      uv_run(&l->loop, UV_RUN_NOWAIT);
      return FL_EAGAIN;
    }
    l->timed_out = 0;
    /* libuv times a timer from the loop's cached clock, which is as old
       as the loop's last run: after a training step longer than the
       timeout it would fire at once. */
    uv_update_time(&l->loop);
    uv_timer_start(&l->timer, on_timer, (uint64_t)(left * 1000) + 1, 0);
  }
  uv_run(&l->loop, UV_RUN_ONCE);
  if (end > 0)
    uv_timer_stop(&l->timer);
  l->stats.wait_seconds += fl__now() - t0;
  if (end == 0 || !l->timed_out)
    return 0;
  return end == deadline ? FL_ETIMEDOUT : FL_EAGAIN;
}

/*
 * Throw away what an unfinished epoch left, so the next starts clean; with
 * stop (or workers forked per epoch), by stopping every worker.  Persistent
 * workers fill every task they were sent first, as PyTorch's do before its
 * _ResumeIteration: what a batch does besides being one (the worker's
 * random state, a dataset's own) is then done as there.
 */
static int
abandon_epoch(fl_loader *l, int stop)
{
  double deadline = l->opt.timeout_ms ? fl__now() + l->opt.timeout_ms / 1e3 : 0;
  unsigned i, busy;
  size_t s;
  int rc;

  l->in_epoch = 0;
  if (stop || !l->opt.persistent_workers) {
    fl__workers_stop(l);
    fl__reorder_reset(&l->reorder);
    return 0;
  }
  for (s = 0; s < l->nslots; s++) {
    if (l->slots[s] != NULL && (l->slots[s]->state == FL__SLOT_READY ||
                                l->slots[s]->state == FL__SLOT_REFETCH)) {
      l->workers[l->slots[s]->worker].assigned--;
      fl__slot_recycle(l, l->slots[s]);
    }
  }
  fl__reorder_reset(&l->reorder);
  /* The tasks sent, and those waiting for room in a queue, answer; their
     replies are discarded. */
  for (;;) {
    for (i = busy = 0; i < l->opt.num_workers; i++) {
      rc = fl__dispatch_flush(l, i);
      if (rc != 0)
        return rc;
      busy += l->workers[i].sent + l->workers[i].backlog_len;
    }
    if (busy == 0 || l->fatal)
      return l->fatal;
    if (wait_once(l, deadline, 0) != FL_ETIMEDOUT)
      continue;
    if (fl__workers_kill_hung(l) > 0)
      deadline = fl__now() + l->opt.timeout_ms / 1e3;
    else
      return fl__loader_set_error(l, FL_ETIMEDOUT,
                                  "the workers did not finish the last "
                                  "epoch's batches in %u ms",
                                  l->opt.timeout_ms);
  }
}

/* The batch kept unpinned for the next call goes with an epoch cut short:
   with workers, abandon_epoch takes it back with the rest. */
static void
drop_unpinned(fl_loader *l)
{
  if (l->unpinned != NULL && l->opt.num_workers == 0)
    fl__slot_recycle(l, l->unpinned);
  l->unpinned = NULL;
}

/*
 * The epoch's order and this rank's share of it, and where it starts: at
 * its first batch, or where a loaded state of this epoch left it (then the
 * state is used up).  The cycle of workers restarts at worker 0 each
 * epoch, as in PyTorch, or where the resumed stream of batches stood.
 */
static int
place_epoch(fl_loader *l)
{
  struct fl__place *p = &l->resume.place;
  int resume = l->resume.armed && p->epoch == l->epoch;
  unsigned w, nw = l->opt.num_workers;
  uint64_t first = 0, next;
  size_t start = 0, i, n;
  int rc = 0;

  if (!resume)
    fl__resume_clear(l);
  l->resume.armed = 0;
  l->resume.itodo = 0;
  l->plain = l->delivered = l->next_send = 0;
  l->rr = resume && l->iterable && nw > 0 ? p->w_next : 0;
  l->last_worker = nw > 0 ? (l->rr + nw - 1) % nw : 0;
  l->stream.skip = resume && l->iterable ? p->pos[0] : 0;
  for (w = 0; w < nw; w++)
    l->workers[w].skip = l->workers[w].consumed = l->workers[w].answered =
        resume && l->iterable ? p->pos[w] : 0;
  fl__reorder_reset(&l->reorder);
  if (l->iterable)
    return 0;
  rc = fl__sampler_fill(&l->sampler, l->order, l->epoch, l->err,
                        sizeof(l->err));
  if (rc == 0 && resume)
    fl__resume_start(l, l->sampler.m, &start, &first);
  if (rc == 0)
    fl__sampler_shard(&l->sampler, l->order, start);
  if (rc != 0) {
    fl__resume_clear(l);
    return rc;
  }
  l->nbatches = fl__sampler_batches(&l->sampler);
  if (!resume)
    return 0;
  /* Another world begins the rest of the list afresh; the same one goes
     on where its batches stood (fewer, with drop_last turned on). */
  next = p->world == l->opt.world_size ? p->next : first;
  first = first < l->nbatches ? first : l->nbatches;
  next = next < l->nbatches ? next : l->nbatches;
  for (i = n = 0; p->world == l->opt.world_size && i < p->ntodo; i++)
    if (p->todo[i] < next)
      p->todo[n++] = p->todo[i];
  p->ntodo = n;
  l->plain = next > first ? next : first;
  l->delivered = l->next_send = l->plain - n;
  l->reorder.next_seq = l->plain;
  return 0;
}

int
fl_loader_begin(fl_loader *l)
{
  unsigned i;
  int rc;

  if (l == NULL)
    return FL_EINVAL;
  if (FL__FOREIGN(l))
    return fl__loader_foreign(l, "fl_loader_begin");
  if (l->fatal)
    return l->fatal;
  drop_unpinned(l);
  if (l->in_epoch && !l->epoch_over && l->opt.num_workers > 0) {
    rc = abandon_epoch(l, 0);
    if (rc != 0)
      return rc;
  }
  /* No worker reads the order now: any task of the last epoch is done. */
  l->in_epoch = 0;
  l->epoch = l->next_epoch;
  rc = place_epoch(l);
  if (rc != 0)
    return rc;
  l->next_epoch = l->epoch + 1;
  l->run++;
  l->epoch_over = 0;
  l->in_epoch = 1;
  if (l->opt.num_workers == 0)
    return 0;
  l->active = l->opt.num_workers;
  for (i = 0; i < l->opt.num_workers; i++)
    l->workers[i].ended = 0;
  for (i = 0; i < l->opt.num_workers; i++) {
    if (l->workers[i].pid != 0)
      continue;
    /* Persistent workers are seeded once, for the loader's life. */
    if (i == 0)
      l->base_seed = fl__epoch_seed(l->opt.seed, l->epoch, 2);
    rc = fl__worker_spawn(l, i);
    if (rc != 0) {
      l->in_epoch = 0;
      fl__workers_stop(l);
      return rc;
    }
  }
  rc = fl__dispatch_fill(l);
  return rc;
}

int
fl_loader_set_epoch(fl_loader *l, uint64_t epoch)
{
  if (l == NULL)
    return FL_EINVAL;
  if (FL__FOREIGN(l))
    return fl__loader_foreign(l, "fl_loader_set_epoch");
  if (l->fatal)
    return l->fatal;
  l->next_epoch = epoch;
  return 0;
}

/*
 * Ends the epoch, as a begin would, and stops every worker: a batch the
 * caller holds keeps its mapping, and at its release goes to the pool or
 * is unmapped, as one of any worker that ended.
 */
int
fl_loader_stop(fl_loader *l)
{
  if (l == NULL)
    return FL_EINVAL;
  if (FL__FOREIGN(l))
    return fl__loader_foreign(l, "fl_loader_stop");
  drop_unpinned(l);
  /* A stream read here is closed, as each worker's is when it stops. */
  if (l->iterable)
    fl__stream_close(l, &l->stream);
  abandon_epoch(l, 1);
  /* The stats' figure is otherwise set as tasks are sent: none are now. */
  l->stats.in_flight = 0;
  return l->fatal;
}

uint64_t
fl_loader_epoch(const fl_loader *l)
{
  if (l == NULL)
    return 0;
  return l->run > 0 ? l->epoch : l->next_epoch;
}

/* The epoch's last batch is out: non-persistent workers are done. */
static int
end_epoch(fl_loader *l)
{
  l->epoch_over = 1;
  if (l->opt.num_workers > 0 && !l->opt.persistent_workers)
    fl__workers_stop(l);
  return 0;
}

/* Batch b leaves the window (handed out, or an end of stream): refill. */
static int
settle(fl_loader *l, fl_batch *b)
{
  int rc;

  l->delivered++;
  if (l->workers == NULL)
    return 0;
  l->workers[b->worker].assigned--;
  rc = fl__dispatch_fill(l);
  if (rc != 0)
    fl__slot_recycle(l, b);
  return rc;
}

/*
 * A good batch in a segment pin_memory could not lock: say so, with the
 * limit or what the hook returned, and keep the batch for the next call,
 * so that nothing is lost.
 */
static int
report_unpinned(fl_loader *l, fl_batch *b)
{
  struct rlimit rl;
  char who[32] = "made in this process";
  int rc = b->pin_error;

  b->pin_error = 0;
  l->unpinned = b;
  getrlimit(RLIMIT_MEMLOCK, &rl);
  if (l->opt.num_workers > 0)
    snprintf(who, sizeof(who), "worker %u", b->worker);
  if (l->opt.pin != NULL)
    fl__loader_set_error(
        l, rc,
        "batch %llu (%s): pin_memory's pin hook returned %d for its "
        "%zu-byte segment. The batch is whole: the next call hands it out, "
        "unpinned",
        (unsigned long long)b->seq, who, b->pin_hook_rc, b->seg.size);
  else
    fl__loader_set_error(
        l, rc,
        "batch %llu (%s): pin_memory cannot lock its %zu-byte segment in "
        "memory (RLIMIT_MEMLOCK %llu bytes): raise `ulimit -l` or turn "
        "pin_memory off. The batch is whole: the next call hands it out, "
        "unpinned",
        (unsigned long long)b->seq, who, b->seg.size,
        (unsigned long long)rl.rlim_cur);
  return rc;
}

static int
hand_out(fl_loader *l, fl_batch *b, fl_batch **out)
{
  char maps[192] = "";
  int rc;

  l->fd_short = 0;
  if (b->pin_error != 0 && b->status == 0)
    return report_unpinned(l, b);
  if ((rc = settle(l, b)) != 0)
    return rc;
  l->stats.batches_delivered++;
  fl__slot_needed(l, b);
  if (l->iterable && l->workers != NULL) {
    l->workers[b->worker].consumed += b->count;
    l->last_worker = b->worker;
  }
  if (b->status != 0) {
    rc = b->status;
    /* Past vm.max_map_count, where the batch could not be kept (a lent
       segment a worker could not map, a stream's batch): the batches
       held are why. */
    if (b->at_maps)
      snprintf(maps, sizeof(maps), ", while holding %zu batches, each a "
               "mapping here and in the worker that made it; raise "
               "vm.max_map_count (sysctl, as root) or hold fewer batches",
               l->stats.batches_held);
    fl__loader_set_error(l, rc, "batch %llu (worker %u): %s%s",
                         (unsigned long long)b->seq, b->worker, b->msg,
                         maps);
    fl__slot_recycle(l, b);
    return rc;
  }
  fl__slot_hold(l, b);
  *out = b;
  return 1;
}

/* The kept batch due first: in order the next, else the earliest. */
static const fl_batch *
due_lost(fl_loader *l)
{
  const fl_batch *first = NULL, *b;
  size_t s;

  for (s = 0; s < l->nslots; s++) {
    b = l->slots[s];
    if (b == NULL || b->state != FL__SLOT_REFETCH)
      continue;
    if (l->opt.in_order && b->seq == l->reorder.next_seq)
      return b;
    if (first == NULL || b->seq < first->seq)
      first = b;
  }
  return first;
}

/*
 * The batch kept for a refetch that stands in the way, or NULL: in order,
 * the one due next; as they arrive, the first of them when nothing else is
 * on its way.  Waiting would not help: the consumer must release first.
 */
static const fl_batch *
blocking_lost(fl_loader *l)
{
  const fl_batch *b = due_lost(l);
  unsigned i, busy = 0;

  if (b == NULL || (l->opt.in_order && b->seq == l->reorder.next_seq))
    return b;
  for (i = 0; i < l->opt.num_workers; i++)
    busy += l->workers[i].sent + l->workers[i].backlog_len;
  return busy == 0 ? b : NULL;
}

/*
 * Every batch of the epoch is out: for a map-style dataset, as many as the
 * sampler made; for an iterable one, every stream is over and every task
 * answered.
 */
static int
epoch_done(const fl_loader *l)
{
  if (l->iterable)
    return l->opt.num_workers > 0 && l->active == 0 &&
           l->delivered == l->next_send;
  return l->delivered == l->nbatches;
}

/* num_workers 0: fill the next batch here, in the calling process. */
static int
next_inline(fl_loader *l, fl_batch **out)
{
  fl_batch *b = l->inline_free;
  char why[FL__REPLY_MSG_MAX];
  fl__fill_ctx c;
  size_t offset, count;
  double t0 = fl__now();
  int rc, end = 0;

  /* A segment larger than the batches lately need goes (fl__slot_needed):
     a new one of the loader's layout takes its place. */
  if (b != NULL && b->shift > l->want_shift) {
    l->inline_free = b->next_free;
    fl__slot_drop(l, b);
    b = NULL;
  }
  if (b != NULL) {
    l->inline_free = b->next_free;
  } else {
    rc = fl__slot_new(l, 0, &b);
    if (rc != 0)
      return fl__loader_set_error(l, rc, "out of memory for a batch");
    rc = fl__room_for_segment(l->layout.size, why, sizeof(why));
    if (rc != 0) {
      fl__slot_drop(l, b);
      return fl__loader_set_error(l, rc, "batch %llu: %s; this loader "
                                  "holds %zu batches: release some and call "
                                  "fl_loader_next again",
                                  (unsigned long long)l->delivered, why,
                                  l->stats.batches_held);
    }
    fl__fdtrack_lock();
    rc = fl__segment_private(&b->seg, l->layout.size);
    fl__fdtrack_unlock();
    if (rc != 0) {
      fl__slot_drop(l, b);
      return fl__loader_set_error(l, rc, "cannot map %zu bytes for a batch",
                                  l->layout.size);
    }
    fl__stats_segments(l, 1, (long)l->layout.size, 0);
    b->shift = 0;
    fl__slot_view(l, b);
    fl__slot_pin(l, b);
  }
  b->seq = l->iterable ? l->delivered : fl__dispatch_seq(l, 1);
  b->msg[0] = '\0';
  fl__fill_ctx_init(&c, l, FL__MAKE_PRIVATE, &b->seg, b->shift, 0, 0);
  c.seq = b->seq;
  c.own = b;
  if (l->iterable) {
    b->status = fl__stream_fill(l, &l->stream, &c, 0, l->run, l->epoch,
                                b->seq, &count, &end, b->msg,
                                sizeof(b->msg));
  } else {
    fl__sampler_batch(&l->sampler, l->order, b->seq, &offset, &count);
    b->status = fl__fill(l, &c, 0, l->run, l->epoch, b->seq, offset, count,
                         b->msg, sizeof(b->msg));
  }
  if (c.fresh) {
    /* fl_worker_grow gave the batch a larger segment, and let go of the
       old one (whose address the new one may have taken), unpinned
       first (fl__fill_replace). */
    fl__stats_segments(l, 0, (long)c.seg.size - (long)b->seg.size, 0);
    b->seg = c.seg;
    b->shift = c.shift;
    fl__slot_view(l, b);
    fl__slot_pin(l, b);
  }
  b->count = count;
  l->stats.wait_seconds += fl__now() - t0;
  if (end) {
    fl__slot_recycle(l, b);
    return end_epoch(l);
  }
  return hand_out(l, b, out);
}

/*
 * fl_loader_next, or with poll set fl_loader_poll: then the wait for the
 * workers ends wait_ms after the call, with FL_EAGAIN and the epoch as it
 * was.
 */
static int
take(fl_loader *l, fl_batch **out, int poll, unsigned wait_ms)
{
  const char *fn = poll ? "fl_loader_poll" : "fl_loader_next";
  const fl_batch *lost;
  double deadline, until;
  fl_batch *b;
  int rc, looked = 0;

  if (out != NULL)
    *out = NULL;
  if (l == NULL || out == NULL)
    return FL_EINVAL;
  if (FL__FOREIGN(l))
    return fl__loader_foreign(l, fn);
  if (l->fatal)
    return l->fatal;
  if (!l->in_epoch)
    return fl__loader_set_error(l, FL_ESTATE,
                                "no epoch is under way: %s needs a "
                                "successful fl_loader_begin first", fn);
  if (l->epoch_over)
    return 0;
  if (l->unpinned != NULL) {
    b = l->unpinned;
    l->unpinned = NULL;
    return hand_out(l, b, out);
  }
  if (l->opt.num_workers == 0 && l->iterable)
    return next_inline(l, out);
  if (epoch_done(l))
    return end_epoch(l);
  if (l->opt.num_workers == 0)
    return next_inline(l, out);
  deadline = l->opt.timeout_ms ? fl__now() + l->opt.timeout_ms / 1e3 : 0;
  until = poll ? fl__now() + wait_ms / 1e3 : 0;
  /* Batches lost for want of fds or shm: ask again, once per call; short
     of fds, only the one due, for which room was made. */
  if (l->nrefetch > 0 &&
      (rc = fl__dispatch_refetch(l, 0, l->fd_short ? due_lost(l) : NULL)) <
          0)
    return rc;
  for (;;) {
    b = fl__reorder_pop(&l->reorder);
    if (b != NULL && b->end) {
      /* A stream's end holds its place in the order, then goes. */
      if ((rc = settle(l, b)) != 0)
        return rc;
      fl__slot_recycle(l, b);
      continue;
    }
    if (b != NULL)
      return hand_out(l, b, out);
    if (epoch_done(l))
      return end_epoch(l);
    if (l->nrefetch > 0 && (lost = blocking_lost(l)) != NULL) {
      /* Into a segment we hold, it needs no new fd or shm: go on now. */
      if ((rc = fl__dispatch_refetch(l, 1, NULL)) < 0)
        return rc;
      if (rc > 0)
        continue;
      /*
       * Short of fds, the loader lets go of those of the segments whose
       * batches the consumer holds: it reads their mappings, and the fds
       * only served to lend the segments once released.  Then every kept
       * batch is asked for again.
       */
      if (lost->orphaned && lost->status == FL_EMFILE &&
          fl__slot_close_held_fds(l) > 0) {
        if ((rc = fl__dispatch_refetch(l, 0, NULL)) < 0)
          return rc;
        continue;
      }
      /*
       * Holding nothing, the consumer cannot release what stands in the
       * way; holding no fd (at the fd limit), its releases would free
       * none: the loader lets go of an fd of its own instead, asks for
       * the batch due alone, and waits for it.  Each turn frees one, so
       * this ends, with the batch or with nothing left to let go of.
       */
      if (lost->orphaned &&
          (l->stats.batches_held == 0 || lost->status == FL_EMFILE) &&
          fl__dispatch_make_room(l, lost)) {
        l->fd_short = 1;
        if ((rc = fl__dispatch_refetch(l, 0, lost)) < 0)
          return rc;
        continue;
      }
      return fl__receive_lost_error(l, lost);
    }
    /*
     * In order, one worker owes the next batch of a map-style dataset:
     * read its socket first, so that a batch already there costs one
     * recvmsg and no epoll_wait.
     */
    if (l->opt.in_order && !l->iterable &&
        (rc = fl__worker_read(l, (unsigned)(l->reorder.next_seq %
                                            l->opt.num_workers))) != 0) {
      if (rc < 0)
        return rc;
      continue;
    }
    rc = wait_once(l, deadline, until);
    if (rc == FL_ETIMEDOUT) {
      /* With restarts to spare, a hung worker is killed and respawned. */
      if (fl__workers_kill_hung(l) > 0) {
        deadline = fl__now() + l->opt.timeout_ms / 1e3;
        continue;
      }
      return fl__loader_set_error(l, FL_ETIMEDOUT,
                                  "no batch from the workers in %u ms "
                                  "(timeout_ms)",
                                  l->opt.timeout_ms);
    }
    if (l->fatal)
      return l->fatal;
    if (rc == FL_EAGAIN) {
      /* The wait is over: once what its last run took in is looked at. */
      if (looked)
        return fl__loader_set_error(l, FL_EAGAIN,
                                    "no batch within %u ms (wait_ms of "
                                    "fl_loader_poll); the epoch goes on",
                                    wait_ms);
      looked = 1;
    }
  }
}

int
fl_loader_next(fl_loader *l, fl_batch **out)
{
  return take(l, out, 0, 0);
}

int
fl_loader_poll(fl_loader *l, fl_batch **out, unsigned wait_ms)
{
  return take(l, out, 1, wait_ms);
}

void
fl_loader_destroy(fl_loader *l)
{
  if (l == NULL)
    return;
  l->in_epoch = 0;
  l->foreign = FL__FOREIGN(l);
  release_all(l);
}
