/*
 * `forkload exhaust`, the exhaustion study: hold every batch a loader hands
 * out, epoch after epoch, until a limit stops it (shared memory, memory,
 * vm.max_map_count; fds only where the rest of the process holds them:
 * the loader keeps none per held batch); show the error as a library user
 * sees it; after a batch was kept, check that releasing the batches lets
 * the loader go on; then destroy the loader and check that it left no
 * name in /dev/shm, no open fd and no process.
 * Before it holds anything it reads the loader's budget: where the first
 * limit would take more than half the free memory (or --max-bytes), it
 * stops there instead and says how to reach that limit safely.  With
 * --fill-fds N, once the loader runs, it takes every fd but N as a program
 * with many open files would, so that the fd limit meets the loader.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"

struct exhaust_args {
  struct load_args load;
  struct cli_log log; /* the library's warnings */
  size_t hold;       /* stop after this many batches; 0: never */
  uint64_t fd_limit; /* lower the soft RLIMIT_NOFILE to this; 0: keep it */
  uint64_t max_bytes; /* the memory guard's bound; 0: half the free memory */
  uint64_t fill_fds;  /* --fill-fds: the fds to leave free */
  int fill;           /* --fill-fds was given */
  int json;
};

/* What the study found. */
struct study {
  fl_batch **held;
  size_t nheld;
  unsigned epochs;     /* begun */
  fl_stats st;         /* when the holding stopped */
  int rc;              /* what stopped it; 0: --hold, or an interrupt */
  char error[1024];    /* fl_loader_error then */
  int recovered;       /* -1: not tried */
  char recovery[1200];
  struct rlimit limit;
  size_t fds_at_start;
  size_t left_names, left_fds, left_children;
  char names[1024], fds[1024], children[1024];
  int interrupted;     /* the signal that asked to stop, or 0 */
  struct cli_pin pin;  /* --pin-memory's warning, said once */
  fl_budget budget;    /* read before holding */
  const fl_budget_item *first; /* the limit that stops the loader first */
  uint64_t segment;    /* bytes a held batch keeps */
  uint64_t window;     /* segments the prefetch window keeps in flight */
  uint64_t ahead;      /* batches past max_held that may be held, in
                          order (budget_ahead) */
  uint64_t bound;      /* the guard's bound on segment bytes */
  size_t guard_held;   /* batches held at that bound */
  size_t cap;          /* holding stops there: the guard's, or --hold */
  int by_guard;        /* the holding stopped at the guard's cap */
  char guard[1024];    /* what the guard says, when it stopped it */
  int *filler;         /* --fill-fds: the fds taken, as another library's */
  size_t nfiller;
  size_t filled;       /* fds it took, for the report */
  size_t fds_free;     /* free fds counted once they were taken */
  int aborted;         /* --fill-fds could not take the fds */
};

enum {
  OPT_HOLD = OPT_OWN,
  OPT_FD_LIMIT,
  OPT_MAX_BYTES,
  OPT_FILL_FDS,
  OPT_JSON
};

/* exhaust's own options; the dataset's and the loader's are in
   options.c. */
static const char help[] =
  "Holds every batch the loader hands out, epoch after epoch, until a\n"
  "limit stops it: shared memory, memory or vm.max_map_count (the loader\n"
  "keeps no fd per held batch); reports the error, checks that the\n"
  "loader delivers again once the batches are released, and that\n"
  "destroying it leaves no name, fd or process.  Its workers are always\n"
  "persistent.  It exits 0 when nothing was left behind, whatever error\n"
  "stopped the holding, and 1 if something was.  Where the first limit\n"
  "(forkload doctor) would be reached only past half the free memory,\n"
  "the memory guard stops the holding there instead, and says how to\n"
  "reach that limit safely.\n"
  "\n"
  "exhaust:\n"
  "  --hold N|all          stop after N batches held (all)\n"
  "  --fd-limit N          lower the soft RLIMIT_NOFILE to N first\n"
  "  --max-bytes N         the memory guard's bound: segments of the held\n"
  "                        batches and the prefetch window stay within N\n"
  "                        bytes (half of MemAvailable, or of the memory\n"
  "                        cgroup's room)\n"
  "  --fill-fds N          once the loader runs, take every fd but N below\n"
  "                        the soft RLIMIT_NOFILE, as a program with many\n"
  "                        open files would, until the loader is destroyed\n"
  "  --json                print the result as one JSON object\n";

static const struct option options[] = {
  {"hold", required_argument, NULL, OPT_HOLD},
  {"fd-limit", required_argument, NULL, OPT_FD_LIMIT},
  {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
  {"fill-fds", required_argument, NULL, OPT_FILL_FDS},
  {"json", no_argument, NULL, OPT_JSON},
  {NULL, 0, NULL, 0}
};

static int
exhaust_option(int c, const char *arg, void *ctx)
{
  struct exhaust_args *a = ctx;
  uint64_t v = 0;
  int rc = 0;

  switch (c) {
  case OPT_HOLD:
    if (strcmp(arg, "all") != 0)
      rc = cli_uint(c, arg, 1, SIZE_MAX, &v);
    a->hold = v;
    break;
  case OPT_FD_LIMIT:
    rc = cli_uint(c, arg, 1, RLIM_INFINITY - 1, &v);
    a->fd_limit = v;
    break;
  case OPT_MAX_BYTES:
    rc = cli_uint(c, arg, 1, UINT64_MAX - 1, &v);
    a->max_bytes = v;
    break;
  case OPT_FILL_FDS:
    rc = cli_uint(c, arg, 0, RLIM_INFINITY - 1, &v);
    a->fill_fds = v;
    a->fill = 1;
    break;
  case OPT_JSON:
    a->json = 1;
    break;
  }
  return rc;
}

/*
 * The memory guard, from the budget read before holding: segments of the
 * held batches and of the prefetch window in flight stay within the bound,
 * --max-bytes or half the memory free now, whichever limit comes first.
 * Returns 0, or the exit status having said why it cannot hold a batch.
 */
static int
guard_plan(fl_loader *l, const struct exhaust_args *a, struct study *s)
{
  const fl_options *o = &a->load.opt;
  const fl_budget_item *mem;
  uint64_t most;
  int rc = fl_loader_budget(l, &s->budget);

  if (rc < 0) {
    cli_error("exhaust: cannot read the loader's budget: %s",
              cli_loader_error(l, rc));
    return 1;
  }
  s->first = budget_stopping(&s->budget);
  mem = budget_item(&s->budget, "memory bytes");
  s->segment = mem->per_batch;
  s->window = (uint64_t)budget_prefetch(&a->load, l) * o->num_workers;
  s->ahead = budget_ahead(&a->load, l);
  s->bound = a->max_bytes != 0 ? a->max_bytes : mem->limit / 2;
  most = s->bound / s->segment;
  if (most <= s->window) {
    cli_error("exhaust: a memory bound of %" PRIu64 " bytes%s leaves no "
              "room to hold a batch: the prefetch window's %" PRIu64
              " segments and each held batch take %" PRIu64 " bytes each",
              s->bound, a->max_bytes != 0 ? " (--max-bytes)" : "",
              s->window, s->segment);
    return 2;
  }
  s->guard_held =
      most - s->window > SIZE_MAX ? SIZE_MAX : most - s->window;
  s->cap = a->hold != 0 && a->hold < s->guard_held ? a->hold
                                                     : s->guard_held;
  return 0;
}

/* A study needs the limit, not the memory: the safe way holds this many
   batches at most, and half the guard's. */
#define SAFE_HELD 1000

/* How to reach the first limit with room to spare, into buf. */
static void
safely(const struct exhaust_args *a, const struct study *s, char *buf,
       size_t len)
{
  const fl_options *o = &a->load.opt;
  uint64_t target = s->guard_held / 2 > SAFE_HELD ? SAFE_HELD
                    : s->guard_held / 2 > 0       ? s->guard_held / 2
                                                  : 1,
           ahead = s->ahead, mib;

  /* No fd is kept per held batch (the loader lets go of them when fds
     run short): only /dev/shm can be made small enough. */
  buf[0] = '\0';
  if (o->sharing == FL_SHARE_FILE_SYSTEM || o->fd_in_dev_shm) {
    mib = ((target + ahead + s->window) * s->segment + (1u << 20) - 1) >> 20;
    snprintf(buf, len, "as root, a private /dev/shm of %" PRIu64 " MiB "
             "stops it at about %" PRIu64 " batches: unshare -m sh -c "
             "'mount -t tmpfs -o size=%" PRIu64 "m tmpfs /dev/shm && "
             "forkload exhaust ...'", mib, target, mib);
  }
}

/* What the guard says once it stopped the holding. */
static void
guard_say(const struct exhaust_args *a, struct study *s)
{
  char how[512];
  const fl_budget_item *f = s->first;

  safely(a, s, how, sizeof how);
  snprintf(s->guard, sizeof s->guard,
           "the memory guard stopped the holding at %zu batches, %" PRIu64
           " bytes of segments with the prefetch window's, under %s of %"
           PRIu64 " bytes: %s would stop the loader only after about %"
           PRIu64 " batches, %" PRIu64 " bytes%s%s",
           s->nheld, (s->nheld + s->window) * s->segment,
           a->max_bytes != 0 ? "--max-bytes" : "half the free memory",
           s->bound, f->resource, f->max_held, f->max_held * s->segment,
           how[0] != '\0' ? ". To get there safely: " : "", how);
}

/* Takes fds, each a copy of one of /dev/null, until the soft
   RLIMIT_NOFILE refuses one.  Returns 0, or -1 out of memory. */
static int
fill_take(struct study *s)
{
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

  while (fd >= 0) {
    if (cli_grow((void **)&s->filler, s->nfiller, sizeof *s->filler) < 0) {
      close(fd);
      return -1;
    }
    s->filler[s->nfiller++] = fd;
    fd = fcntl(s->filler[0], F_DUPFD_CLOEXEC, 0);
  }
  return 0;
}

/* The free fds below the soft RLIMIT_NOFILE, counted up to most + 1 by
   taking them all at once, then given back.  Returns the count, or -1 out
   of memory. */
static long long
fill_count(const struct study *s, size_t most)
{
  int *probe = malloc((most + 1) * sizeof *probe), fd;
  size_t n = 0, i;

  if (probe == NULL)
    return -1;
  while (n <= most) {
    fd = s->nfiller > 0 ? fcntl(s->filler[0], F_DUPFD_CLOEXEC, 0)
                        : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      break;
    probe[n++] = fd;
  }
  for (i = 0; i < n; i++)
    close(probe[i]);
  free(probe);
  return (long long)n;
}

/*
 * --fill-fds: takes every free fd but a->fill_fds, as a program holding
 * many files does, once the loader runs: it has made its own, and meets
 * the limit while it delivers.  Returns 0, or the exit status having said
 * why.
 */
static int
fill_fds(const struct exhaust_args *a, struct study *s)
{
  long long counted;
  size_t keep, i;

  if (fill_take(s) < 0) {
    cli_error("exhaust: --fill-fds: out of memory after taking %zu fds",
              s->nfiller);
    return 1;
  }
  if (errno != EMFILE) {
    cli_error("exhaust: --fill-fds: cannot take an fd (%s) after %zu: "
              "only RLIMIT_NOFILE may stop it", strerror(errno),
              s->nfiller);
    return 1;
  }
  if (s->nfiller < a->fill_fds) {
    cli_error("exhaust: --fill-fds %" PRIu64 ": only %zu fds were free "
              "below RLIMIT_NOFILE %llu once the loader ran; lower "
              "--fill-fds or raise --fd-limit", a->fill_fds, s->nfiller,
              (unsigned long long)s->limit.rlim_cur);
    return 2;
  }
  /* The last ones taken go back: the free fds are the highest numbers. */
  keep = s->nfiller - (size_t)a->fill_fds;
  for (i = keep; i < s->nfiller; i++)
    close(s->filler[i]);
  s->nfiller = s->filled = keep;
  if ((counted = fill_count(s, a->fill_fds)) < 0) {
    cli_error("exhaust: --fill-fds: out of memory to count the free fds");
    return 1;
  }
  s->fds_free = (size_t)counted;
  return 0;
}

static void
fill_release(struct study *s)
{
  while (s->nfiller > 0)
    close(s->filler[--s->nfiller]);
}

/* Holds batches until an error, --hold or an interrupt stops it; with
   --fill-fds, the fds are taken once the first epoch began, its workers
   running.  Returns 0, or the exit status when this program, not the
   loader, failed. */
static int
hold(fl_loader *l, const struct exhaust_args *a, struct study *s)
{
  fl_batch *b;
  int rc, failed = 0;

  rc = fl_loader_begin(l);
  s->epochs += rc == 0;
  if (rc == 0 && a->fill && (failed = fill_fds(a, s)) != 0) {
    s->aborted = 1; /* said why: there is no study to report */
    return failed;
  }
  while (rc >= 0 && s->nheld < s->cap && !cli_interrupted && !failed) {
    b = NULL;
    rc = fl_loader_next(l, &b);
    if (cli_pin_warning(&s->pin, l, &a->load.opt, rc)) {
      rc = 1; /* no error: the batch comes with the next call */
    } else if (rc == 0) {
      /* Held batches stay valid across epochs: go on holding. */
      rc = fl_loader_begin(l);
      s->epochs += rc == 0;
    } else if (rc > 0 &&
               cli_grow((void **)&s->held, s->nheld, sizeof *s->held) < 0) {
      fl_batch_release(b);
      cli_error("exhaust: out of memory to hold batch %zu", s->nheld + 1);
      failed = 1;
    } else if (rc > 0) {
      s->held[s->nheld++] = b;
    }
  }
  s->rc = rc < 0 ? rc : 0;
  s->by_guard = rc >= 0 && !cli_interrupted && !failed &&
                s->nheld == s->guard_held &&
                (a->hold == 0 || a->hold > s->guard_held);
  if (rc < 0)
    snprintf(s->error, sizeof s->error, "%s", cli_loader_error(l, rc));
  else if (cli_interrupted)
    snprintf(s->error, sizeof s->error, "none: interrupted with %zu "
             "batches held", s->nheld);
  else if (s->by_guard)
    snprintf(s->error, sizeof s->error, "none: the memory guard stopped "
             "the holding at %zu batches held", s->nheld);
  else
    snprintf(s->error, sizeof s->error, "none: %zu batches held",
             s->nheld);
  if (s->by_guard)
    guard_say(a, s);
  return failed;
}

/* Short of fds (the process's or the system's) or of /dev/shm, the
   loader keeps the batch it could not deliver (cli_kept): once the
   batches are released, and --fill-fds's fds given back, it must fetch it
   again. */
static void
recover(fl_loader *l, const fl_options *opt, struct study *s)
{
  fl_batch *b = NULL;
  char what[96];
  size_t i;
  int rc;

  for (i = 0; i < s->nheld; i++)
    fl_batch_release(s->held[i]);
  /* The other library's files closed too: fds free again. */
  fill_release(s);
  if (s->filled > 0)
    snprintf(what, sizeof what, "after releasing %zu batches and the %zu "
             "fds taken", s->nheld, s->filled);
  else
    snprintf(what, sizeof what, "after releasing %zu batches", s->nheld);
  rc = fl_loader_next(l, &b);
  if (cli_pin_warning(&s->pin, l, opt, rc))
    rc = fl_loader_next(l, &b);
  s->recovered = rc > 0;
  if (rc > 0)
    snprintf(s->recovery, sizeof s->recovery,
             "%s: fl_loader_next delivered batch %" PRIu64, what,
             fl_batch_seq(b));
  else if (rc == 0)
    snprintf(s->recovery, sizeof s->recovery,
             "%s: fl_loader_next ended the epoch instead of delivering the "
             "lost batch", what);
  else
    snprintf(s->recovery, sizeof s->recovery, "%s: %s (%d): %s", what,
             fl_err_name(rc), rc, cli_loader_error(l, rc));
  fl_batch_release(b);
}

/* Compares the census after destroy with the one before create.  Returns
   0 when nothing was left behind. */
static int
check(const struct census *before, struct study *s, int json)
{
  struct census after;
  int rc;

  s->left_children = census_children(1.0, s->children, sizeof s->children);
  rc = census_take(&after);
  if (rc < 0) {
    cli_error("exhaust: cannot take stock of fds and /dev/shm: %s",
              strerror(-rc));
    return -1;
  }
  s->left_names = census_new_names(before, &after, s->names,
                                   sizeof s->names);
  s->left_fds = census_new_fds(before, &after, s->fds, sizeof s->fds);
  census_free(&after);
  /* The JSON object has no room for the details: they go to stderr. */
  if (json && s->left_names)
    cli_error("left behind in /dev/shm: %s", s->names);
  if (json && s->left_fds)
    cli_error("left behind: %s", s->fds);
  if (json && s->left_children)
    cli_error("left behind: %s", s->children);
  return s->left_names || s->left_fds || s->left_children ? -1 : 0;
}

static const char *
backend(const fl_options *o)
{
  return o->sharing == FL_SHARE_FILE_DESCRIPTOR && !o->fd_in_dev_shm
             ? "memfd"
             : "/dev/shm";
}

static void
print_check(const char *label, size_t left, const char *what)
{
  if (left == 0)
    printf("%-12s ok\n", label);
  else
    printf("%-12s LEFT BEHIND: %s\n", label, what);
}

static void
print_text(const struct exhaust_args *a, const struct study *s)
{
  const fl_options *o = &a->load.opt;
  char sizes[768]; /* 32 sizes of 20 digits */

  printf("sharing      %s (%s)\n",
         o->sharing == FL_SHARE_FILE_SYSTEM ? "fs" : "fd", backend(o));
  printf("loader       %zu samples of %s, batch_size %zu, "
         "%u worker(s), prefetch %u%s\n", a->load.data.samples,
         synth_sizes(&a->load.data, sizes, sizeof sizes), o->batch_size,
         o->num_workers, o->prefetch_factor,
         o->reuse_segments ? "" : ", no_reuse");
  printf("fd limit     %llu (soft RLIMIT_NOFILE), %zu fds open before "
         "create\n", (unsigned long long)s->limit.rlim_cur,
         s->fds_at_start);
  if (a->fill)
    printf("filled       %zu fds taken once the loader ran, %zu left free "
           "(--fill-fds %" PRIu64 ")\n", s->filled, s->fds_free,
           a->fill_fds);
  if (s->first->max_held == UINT64_MAX)
    printf("budget       no limit binds\n");
  else
    printf("budget       %s binds first, after about %" PRIu64 " batches "
           "held (forkload doctor)\n", s->first->resource,
           s->first->max_held);
  printf("guard        stops at %zu batches held: %" PRIu64 " bytes with "
         "the prefetch window, %s\n", s->guard_held, s->bound,
         a->max_bytes != 0 ? "--max-bytes" : "half the free memory");
  printf("held         %zu batches in %u epoch(s)\n", s->nheld, s->epochs);
  printf("fds          %zu held by the loader\n", s->st.fds);
  printf("mapped       %zu bytes\n", s->st.bytes_mapped);
  printf("segments     %zu\n", s->st.segments);
  printf("restarts     %" PRIu64 " (faults injected: %" PRIu64 ")\n",
         s->st.worker_restarts, s->st.faults_injected);
  if (s->rc < 0)
    printf("error        %s (%d): %s\n", fl_err_name(s->rc), s->rc,
           s->error);
  else
    printf("error        %s\n", s->error);
  if (s->by_guard)
    printf("stopped      %s\n", s->guard);
  if (s->recovered >= 0)
    printf("recovery     %s\n", s->recovery);
  print_check("shm names", s->left_names, s->names);
  print_check("open fds", s->left_fds, s->fds);
  print_check("children", s->left_children, s->children);
}

static const char *
truth(int v)
{
  return v ? "true" : "false";
}

static void
print_json(const struct exhaust_args *a, const struct study *s)
{
  const fl_options *o = &a->load.opt;

  printf("{\"sharing\":\"%s\",\"backend\":\"%s\",\"batches_held\":%zu"
         ",\"fds\":%zu,\"bytes_mapped\":%zu,\"segments\":%zu"
         ",\"worker_restarts\":%" PRIu64 ",\"faults_injected\":%" PRIu64
         ",\"error_name\":",
         o->sharing == FL_SHARE_FILE_SYSTEM ? "fs" : "fd", backend(o),
         s->nheld, s->st.fds, s->st.bytes_mapped, s->st.segments,
         s->st.worker_restarts, s->st.faults_injected);
  cli_json_string(s->rc < 0 ? fl_err_name(s->rc) : NULL);
  printf(",\"error_code\":%d,\"error_message\":", s->rc);
  cli_json_string(s->rc < 0 ? s->error : NULL);
  printf(",\"recovered\":%s,\"shm_clean\":%s,\"fds_clean\":%s"
         ",\"children_clean\":%s,\"interrupted\":%s",
         s->recovered < 0 ? "null" : truth(s->recovered),
         truth(s->left_names == 0), truth(s->left_fds == 0),
         truth(s->left_children == 0), truth(s->interrupted));
  fputs(",\"binding\":", stdout);
  cli_json_string(s->first->max_held == UINT64_MAX ? NULL
                                                   : s->first->resource);
  fputs(",\"predicted_max_held\":", stdout);
  budget_json_number(s->first->max_held);
  printf(",\"memory_bound\":%" PRIu64 ",\"guard_max_held\":%zu"
         ",\"bytes_mapped_peak\":%zu,\"stopped_by_guard\":%s"
         ",\"guard_message\":", s->bound, s->guard_held,
         s->st.bytes_mapped_peak, truth(s->by_guard));
  cli_json_string(s->by_guard ? s->guard : NULL);
  printf(",\"fd_limit\":%llu", (unsigned long long)s->limit.rlim_cur);
  if (a->fill)
    printf(",\"fds_filled\":%zu,\"fds_free\":%zu", s->filled, s->fds_free);
  else
    fputs(",\"fds_filled\":null,\"fds_free\":null", stdout);
  puts("}");
}

static int
exhaust_main(int argc, char **argv)
{
  struct exhaust_args a = {0};
  struct study s = {.recovered = -1};
  struct census before = {0};
  fl_loader *l = NULL;
  int rc, status = 2; /* bad usage, until the options are found good */

  if (cli_parse(&cli_exhaust, argc, argv, &a.load, exhaust_option, &a) < 0)
    return 2;
  a.load.opt.log = cli_log;
  a.load.opt.log_arg = &a.log;
  /* There is no default: the study is of one strategy or the other. */
  if (!a.load.sharing_set) {
    cli_error("exhaust: --sharing fd|fs is required");
    goto out;
  }
  /* In-process loading shares nothing: it would only use up memory. */
  if (a.load.opt.num_workers == 0) {
    cli_error("exhaust: --workers 0 shares no memory: nothing to exhaust");
    goto out;
  }
  /* It holds batches of an order it can ask for again: a stream's end
     would stop it first.  Said before any shard is opened. */
  if (a.load.file.kind == DS_WEBDATASET) {
    cli_error("exhaust: %s is a stream; exhaust takes map-style datasets",
              a.load.file.spec);
    goto out;
  }
  /* Epochs must go on while their batches are held. */
  a.load.opt.persistent_workers = 1;
  if ((status = load_dataset(&a.load)) != 0)
    goto out;
  status = 1;
  if (census_warm_up("exhaust") < 0)
    goto out;
  if ((rc = census_take(&before)) < 0) {
    cli_error("exhaust: cannot take stock of fds and /dev/shm: %s",
              strerror(-rc));
    goto out;
  }
  s.fds_at_start = before.nfds;
  if (a.fd_limit != 0 && (rc = cli_fd_limit(a.fd_limit, s.fds_at_start))) {
    status = rc;
    goto out;
  }
  getrlimit(RLIMIT_NOFILE, &s.limit);
  cli_catch_signals();
  if ((rc = fl_loader_create(&l, &a.load.ds, &a.load.opt)) < 0) {
    status = cli_create_error(rc);
    goto out;
  }
  a.log.loader = l;
  if (fl_loader_len(l) == 0) {
    cli_error("exhaust: an epoch has no batch to hold (--drop-last with "
              "fewer samples than --batch-size)");
    status = 2;
    goto out;
  }
  if ((status = guard_plan(l, &a, &s)) != 0 ||
      ((status = hold(l, &a, &s)) != 0 && s.aborted))
    goto out;
  fl_loader_stats(l, &s.st);
  if (cli_kept(s.rc)) {
    recover(l, &a.load.opt, &s);
    if (!s.recovered)
      status = 1;
  }
  fl_loader_destroy(l);
  l = NULL;
  fill_release(&s);
  if (check(&before, &s, a.json) < 0)
    status = 1;
  s.interrupted = cli_interrupted; /* once: the report and status agree */
  if (a.json)
    print_json(&a, &s);
  else
    print_text(&a, &s);
  if (s.interrupted)
    status = 128 + s.interrupted;
out:
  fl_loader_destroy(l);
  fill_release(&s);
  census_free(&before);
  free(s.held);
  free(s.filler);
  load_args_free(&a.load);
  return status;
}

const struct cli_command cli_exhaust = {
  "exhaust", "forkload exhaust --sharing fd|fs [options]", help, options,
  exhaust_main
};
