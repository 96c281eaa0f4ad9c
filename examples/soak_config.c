/*
 * The configurations of `forkload soak`: configuration K of seed S is
 * drawn from a generator seeded with (S, K) alone, so that `forkload soak
 * --seed S --config K` runs it again, the consumer's draws (which batches
 * it holds, where it cuts an epoch short) and the faults' seed included.
 * Everything is small: a configuration takes about a second, and its
 * memory a few hundred kilobytes.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

#define GOLDEN 0x9e3779b97f4a7c15ull
/* With kills or exits, a budget no configuration spends. */
#define RESTARTS 1000000

uint64_t
soak_rand(uint64_t *rng)
{
  *rng += GOLDEN;
  return synth_mix64(*rng);
}

unsigned
soak_below(uint64_t *rng, unsigned n)
{
  return (unsigned)(soak_rand(rng) % n);
}

/* Appends "name=P" (P in thousandths) to the spec. */
static void
add_fault(char *spec, size_t len, const char *name, unsigned permille)
{
  size_t used = strlen(spec);

  snprintf(spec + used, len - used, "%s=%u.%03u,", name, permille / 1000,
           permille % 1000);
}

/*
 * A quarter of the configurations run without faults.  The others draw
 * each kind by a coin, with a probability of up to a few percent a batch
 * for deaths (so that some batches are poisoned) and up to 30% for the
 * faults at the fd and shm limits, always injected, never real.  A stream
 * cannot be read twice: the library reports the samples of a batch
 * dropped at the fd limit as lost, so iterable runs get no emfile.
 */
static void
draw_faults(struct soak_config *c)
{
  static const struct {
    const char *name;
    unsigned max; /* permille */
  } kinds[] = {{"kill", 60}, {"exit", 40}, {"enospc", 300}, {"emfile", 300}};
  uint64_t *r = &c->rng;
  char *spec = c->faults;
  size_t k, used;
  int deaths = 0;

  spec[0] = '\0';
  c->opt.max_worker_restarts = soak_below(r, 2) ? 0 : RESTARTS;
  if (soak_below(r, 4) == 0)
    return;
  for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    if (!soak_below(r, 2) || (c->iterable && k == 3))
      continue;
    add_fault(spec, sizeof c->faults, kinds[k].name,
              1 + soak_below(r, kinds[k].max));
    deaths |= k < 2;
  }
  if (soak_below(r, 3) == 0) {
    add_fault(spec, sizeof c->faults, "delay", 1 + soak_below(r, 100));
    used = strlen(spec) - 1; /* the comma goes: the milliseconds follow */
    snprintf(spec + used, sizeof c->faults - used, ":%u,",
             1 + soak_below(r, 20));
  }
  used = strlen(spec);
  snprintf(spec + used, sizeof c->faults - used, "seed=%" PRIu64,
           soak_rand(r));
  if (deaths)
    c->opt.max_worker_restarts = RESTARTS;
}

/* Samples of one size, or (map-style) of 2 or 3 fields. */
static void
draw_sizes(struct soak_config *c)
{
  uint64_t *r = &c->rng;
  struct synth *d = &c->data;
  size_t f;

  if (c->iterable) {
    d->sample_bytes = 8 + soak_below(r, 249); /* its index first */
    return;
  }
  if (soak_below(r, 4) != 0) {
    d->sample_bytes = 1 + soak_below(r, 256);
    return;
  }
  d->nfields = 2 + soak_below(r, 2);
  for (f = 0; f < d->nfields; f++) {
    d->field_bytes[f] = 1 + soak_below(r, 64);
    d->sample_bytes += d->field_bytes[f];
  }
}

void
soak_config_draw(struct soak_config *c, uint64_t seed, uint64_t index)
{
  static const unsigned hold[] = {0, 10, 30, 60}, cut[] = {0, 0, 20, 50};
  fl_options *o = &c->opt;
  uint64_t *r = &c->rng;

  *c = (struct soak_config){0};
  c->seed = seed;
  c->index = index;
  c->rng = synth_mix64(seed ^ synth_mix64(index + GOLDEN));
  c->iterable = soak_below(r, 5) == 0;
  c->data.samples = soak_below(r, 4) == 0 ? 1 + soak_below(r, 40)
                                          : 40 + soak_below(r, 961);
  c->data.seed = soak_rand(r);
  draw_sizes(c);
  c->batched = !c->iterable && soak_below(r, 4) == 0;
  c->skip = c->iterable && soak_below(r, 2);
  fl_options_init(o);
  o->seed = c->data.seed;
  o->batch_size = 1 + soak_below(r, 32);
  o->num_workers = soak_below(r, 5);
  o->prefetch_factor = 1 + soak_below(r, 4);
  o->sharing = soak_below(r, 2) ? FL_SHARE_FILE_SYSTEM
                                : FL_SHARE_FILE_DESCRIPTOR;
  o->fd_in_dev_shm = o->sharing == FL_SHARE_FILE_DESCRIPTOR &&
                     soak_below(r, 3) == 0;
  o->in_order = soak_below(r, 2);
  o->persistent_workers = soak_below(r, 2);
  o->reuse_segments = soak_below(r, 3) != 0;
  o->shuffle = !c->iterable && soak_below(r, 2);
  o->shuffle_algorithm = o->shuffle && soak_below(r, 2)
                             ? FL_SHUFFLE_BIJECTION
                             : FL_SHUFFLE_TORCH;
  o->drop_last = !c->iterable && soak_below(r, 4) == 0;
  c->epochs = 1 + soak_below(r, 3);
  c->hold_pct = hold[soak_below(r, 4)];
  c->hold_max = 1 + soak_below(r, SOAK_HOLD_MAX);
  c->cut_pct = cut[soak_below(r, 4)];
  c->destroy_held = soak_below(r, 2);
  draw_faults(c);
}

const char *
soak_config_describe(const struct soak_config *c, char *buf, size_t len)
{
  const fl_options *o = &c->opt;
  char sizes[768];
  const struct {
    int on;
    const char *name;
  } flags[] = {
    {c->batched, "batched"},
    {c->skip, "skip"},
    {o->shuffle, "shuffle"},
    {o->shuffle_algorithm == FL_SHUFFLE_BIJECTION, "bijection"},
    {o->drop_last, "drop_last"},
    {o->persistent_workers, "persistent"},
    {!o->reuse_segments, "no_reuse"},
    {o->fd_in_dev_shm, "fd_in_dev_shm"},
    {c->destroy_held, "destroyed holding"}
  };
  size_t i, used;

  used = (size_t)snprintf(
      buf, len, "%s, %zu samples of %s, batch_size %zu, %u worker(s), "
      "prefetch %u, sharing %s, %s, seed %" PRIu64 ", %u epoch(s), "
      "holds %u%% up to %u, cuts %u%%",
      c->iterable ? "iterable" : "map-style", c->data.samples,
      synth_sizes(&c->data, sizes, sizeof sizes), o->batch_size,
      o->num_workers, o->prefetch_factor,
      o->sharing == FL_SHARE_FILE_SYSTEM ? "fs" : "fd",
      o->in_order ? "in order" : "out of order", o->seed, c->epochs,
      c->hold_pct, c->hold_max, c->cut_pct);
  for (i = 0; i < sizeof flags / sizeof flags[0] && used < len; i++)
    if (flags[i].on)
      used += (size_t)snprintf(buf + used, len - used, ", %s",
                               flags[i].name);
  if (used < len && o->max_worker_restarts != 0)
    used += (size_t)snprintf(buf + used, len - used,
                             ", max_worker_restarts %u",
                             o->max_worker_restarts);
  if (used < len)
    snprintf(buf + used, len - used, ", faults %s",
             c->faults[0] != '\0' ? c->faults : "none");
  return buf;
}
