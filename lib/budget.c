/*
 * A loader's budget (fl_loader_budget): for each resource that the batches
 * a consumer holds use up, or that the loader needs whatever it holds, the
 * limit now, what is taken of it, what each held batch adds, and how many
 * batches can be held before the loader stops there.  `forkload doctor`
 * prints it, and `forkload exhaust` reads it to stop before memory runs
 * short.  The readings are limits.c's and the queues' size index_queue.c's:
 * this file only does the arithmetic, which tests/budget_test.c and
 * tests/doctor_test.sh hold to where exhaust really stops.
 */
#include "config.h"

#include <string.h>

#include "internal.h"

/* What the loader holds now: its segments' bytes, which become held
   batches as the consumer holds every one, and its workers' message
   queues (not their socket pairs, which are fds). */
struct loader_now {
  uint64_t seg_bytes, queues;
};

static void
loader_now(const fl_loader *l, struct loader_now *n)
{
  unsigned w;

  memset(n, 0, sizeof(*n));
  n->seg_bytes = l->stats.bytes_mapped;
  for (w = 0; w < l->opt.num_workers; w++)
    n->queues += l->workers[w].queue.recv >= 0 &&
                 !FL__INDEX_QUEUE_SOCKET(&l->workers[w].queue);
}

/* a - b, or 0 below. */
static uint64_t
less(uint64_t a, uint64_t b)
{
  return a > b ? a - b : 0;
}

/*
 * Adds an item.  room is what the held batches may take of the limit, of
 * which each takes per_batch; ahead is how many more the loader may hold
 * besides them when it stops.
 */
static void
add(fl_budget *b, const char *resource, uint64_t limit, uint64_t in_use,
    uint64_t per_batch, uint64_t room, uint64_t ahead)
{
  fl_budget_item *it = &b->item[b->n++];

  it->resource = resource;
  it->limit = limit;
  it->in_use = in_use;
  it->per_batch = per_batch;
  it->max_held = per_batch == 0 || limit == UINT64_MAX || room == UINT64_MAX
                     ? UINT64_MAX
                     : less(room / per_batch, ahead);
}

/*
 * In order, the batch due may be the one the limit stops while batches
 * that came after it wait in the reorder buffer, each with its segment:
 * at most prefetch_factor from each other worker (the factor in force,
 * capped at the epoch's batches per worker: admit.c).  As they arrive,
 * every batch received is handed out.
 */
static uint64_t
ahead_of_due(const fl_options *opt)
{
  if (!opt->in_order || opt->num_workers == 0)
    return 0;
  return (uint64_t)(opt->num_workers - 1) * opt->prefetch_factor;
}

static void
fill(const fl_loader *l, fl_budget *b)
{
  const fl_options *opt = &l->opt;
  unsigned nw = opt->num_workers;
  /* Batches of any size: each held batch is counted at the size class the
     batches of the last two rounds needed (the loader's own until one
     needed more, fl_worker_grow); a held batch's own segment, whatever its
     class, is in in_use. */
  uint64_t seg = l->classes[l->want_shift].size, ahead = ahead_of_due(opt),
           limit, used, locked;
  struct loader_now n;
  fl__room room;

  loader_now(l, &n);
  /* No fd is kept per held batch: the file-system strategy keeps none,
     and the fd strategy lets go of the held batches' when fds run short
     (batch.c), so the fd limit stops no holding. */
  fl__fds_now(&limit, &used);
  add(b, "fds", limit, used, 0, UINT64_MAX, 0);
  if (nw > 0 &&
      (opt->sharing == FL_SHARE_FILE_SYSTEM || opt->fd_in_dev_shm)) {
    fl__dev_shm_now(&limit, &used);
    add(b, "/dev/shm bytes", limit, used, seg,
        less(limit, used) + n.seg_bytes, ahead);
  }
  /* tmpfs pages are memory too: every segment counts here. */
  fl__room_memory(&room);
  limit = room.amount == UINT64_MAX ? UINT64_MAX : room.amount + n.seg_bytes;
  add(b, "memory bytes", limit, n.seg_bytes, seg, limit, ahead);
  if (opt->pin_memory && opt->pin == NULL) {
    fl__memlock_now(&limit, &locked);
    add(b, "memlock bytes", limit, locked, seg,
        less(limit, locked) + (locked < n.seg_bytes ? locked : n.seg_bytes),
        ahead);
  }
  if (nw == 0)
    return;
  /* Binds nothing: a worker past it reads from a socket pair, whose fds
     are in the fds' in_use. */
  add(b, "message queues", fl__index_queue_mq_limit(opt->prefetch_factor + 1),
      n.queues, 0, UINT64_MAX, 0);
  fl__processes_now(&limit, &used);
  add(b, "processes", limit, used, 0, UINT64_MAX, 0);
}

int
fl_loader_budget_sized(const fl_loader *l, fl_budget *out, size_t size)
{
  fl_budget b;
  size_t i;

  if (l == NULL || out == NULL || size < FL__BUDGET_SIZE_0_5)
    return FL_EINVAL;
  if (FL__FOREIGN(l))
    return fl__loader_foreign(l, "fl_loader_budget");
  memset(&b, 0, sizeof(b));
  fill(l, &b);
  for (i = 1; i < b.n; i++)
    if (b.item[i].max_held < b.item[b.binding].max_held)
      b.binding = i;
  fl__struct_out(out, size, &b, sizeof(b));
  return 0;
}
