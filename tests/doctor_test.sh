#!/bin/sh
# TAP test of `forkload doctor` and of the budget against `forkload
# exhaust`: doctor's table and JSON; where the binding item's max_held
# says the loader stops, exhaust stops within 2 batches past it, at a small
# /dev/shm (--sharing fs, and fd with --fd-in-dev-shm, in a private tmpfs:
# root only); under either strategy no fd limit stops it (no held batch
# keeps an fd: the fd strategy lets go of theirs when fds run short), and
# exhaust holds four times the fds left with no error; the memory guard
# stops exhaust within --max-bytes, and exhaust with no limiting option
# within half the free memory, in a 1 GiB memory cgroup (root; skipped
# elsewhere, where it would hold half the machine's free memory).  Which
# limit binds first is read from the budget, never assumed: the fd limit
# (256 to 1048576) binds no holding, and a memory cgroup or a container's
# /dev/shm of 64 MB may each come first: the loader must stop where the
# budget says.  exhaust --fill-fds N takes every fd but N once the loader
# runs, as the study's "rest of the process holds the fds" rows do: with
# one left the fd strategy still holds until its guard, with none either
# strategy stops at FL_EMFILE naming the limit in force, the batch kept.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
bin=$top_builddir/examples/forkload
scratch_dir
time_limit 120
# Segments are files: no run here may reserve more than this per segment.
ulimit -f 4000000

echo "1..23"

# forkload ARGS...: runs the binary, output in $tmp/out and $tmp/err.
forkload() {
  $limit "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
}

# field NAME [FILE]: the value of NAME in the JSON object in FILE ($tmp/out).
field() {
  sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" "${2:-$tmp/out}"
}

# binding_max [FILE]: the binding item's max_held in doctor's JSON.
binding_max() {
  f=${1:-$tmp/out}
  b=$(field binding "$f")
  tr '{' '\n' <"$f" | grep "\"resource\":$b" |
    sed -n 's/.*"max_held":\([^,}]*\).*/\1/p'
}

# item RESOURCE LIMIT IN_USE PER_BATCH MAX_HELD: the pattern of an item of
# doctor's JSON; $fig matches any figure, null too.
fig='[0-9a-z]*'
item() {
  printf '"resource":"%s","limit":%s,"in_use":%s,"per_batch":%s,%s}' \
    "$1" "$2" "$3" "$4" "\"max_held\":$5"
}

check() {
  if [ "$1" = 0 ]; then
    ok "$2"
  else
    not_ok "$2"
    diag "$(cat "$tmp/out" "$tmp/err" 2>/dev/null)"
  fi
}

# --- doctor ---------------------------------------------------------------

forkload doctor --sharing fd --fd-limit 64 &&
  grep -Eq '^resource +limit +in use +per held batch +batches you can hold$' \
    "$tmp/out" &&
  grep -Eq '^fds +64 +[0-9]+ +0 +none$' "$tmp/out" &&
  grep -Eq '^memory bytes +[0-9]+ +0 +[0-9]+ +[0-9]+  <- binds first$' \
    "$tmp/out" &&
  grep -Eq '^message queues +[0-9]+ +2 +0 +none$' "$tmp/out" &&
  grep -Eq '^processes +([0-9]+|none) +[0-9]+ +0 +none$' "$tmp/out" &&
  grep -Eq '^binds first  memory bytes, after [0-9]+ batches held \(in order, up to 2 more\)$' \
    "$tmp/out" &&
  grep -q '^remedy .*release batches sooner' "$tmp/out"
check $? "doctor prints the budget as a table, what binds first and the remedy"

forkload doctor --json --sharing fd --fd-limit 64
rc=$?
any=$(item '[^"]*' "$fig" "$fig" "$fig" "$fig")
items=$(tr '{' '\n' <"$tmp/out" | grep -c "$any")
[ "$rc" = 0 ] && [ "$(wc -l <"$tmp/out")" = 1 ] &&
  [ "$(field binding)" = '"memory bytes"' ] && [ "$items" = 4 ] &&
  grep -q "$(item fds 64 "$fig" 0 null)" "$tmp/out" &&
  grep -q "$(item processes "$fig" "$fig" 0 null)" "$tmp/out" &&
  { ! command -v python3 >/dev/null 2>&1 ||
    python3 -c 'import json, sys; json.load(sys.stdin)' <"$tmp/out"; }
check $? "doctor --json: one object, binding and items, null for none"

forkload doctor --json --sharing fs &&
  grep -q "$(item fds "$fig" "$fig" 0 null)" "$tmp/out" &&
  grep -q '"resource":"/dev/shm bytes"' "$tmp/out" &&
  [ "$(field binding)" != '"fds"' ]
check $? "doctor --sharing fs: no fd per held batch, /dev/shm charged"

forkload doctor --fd-limit 3
[ $? = 2 ] && grep -q '^forkload: --fd-limit: 3 leaves no room' "$tmp/err"
check $? "doctor --fd-limit too low is bad usage"

# Workers past RLIMIT_MSGQUEUE read socket pairs: no queue binds, and
# doctor says what they cost, not how to get queues back.
if command -v prlimit >/dev/null 2>&1; then
  $limit prlimit --msgqueue=0 "$bin" doctor --workers 3 >"$tmp/out" \
    2>"$tmp/err" &&
    grep -Eq '^message queues +0 +0 +0 +none$' "$tmp/out" &&
    grep -q '^queues       3 of 3 worker(s) read their tasks from a socket pair, .*none is refused, each keeps one fd more' \
      "$tmp/out" &&
    ! grep -q '^binds first  message queues' "$tmp/out"
  check $? "doctor past RLIMIT_MSGQUEUE: socket pairs, an fd more each"
else
  skip "doctor past RLIMIT_MSGQUEUE: socket pairs, an fd more each" \
    "no prlimit(1)"
fi
forkload doctor --workers 3 && ! grep -q '^queues ' "$tmp/out"
check $? "doctor with a queue for every worker says nothing of them"

# A prefetch_factor past the epoch: the factor in force, and as many ahead.
forkload doctor --samples 40 --batch-size 4 --workers 2 \
  --prefetch 1000000 &&
  grep -q "prefetch 5 (of 1000000: the epoch's 10 batches)" "$tmp/out" &&
  grep -Eq '^binds first  .*\(in order, up to 5 more\)$' "$tmp/out"
check $? "doctor --prefetch past the epoch: the factor in force"

# --- the prediction against the real stop ---------------------------------

# within PREDICTED REAL: the real stop is the prediction, or at most 2 past
# it (the batches that came ahead of the one due, in order).
within() {
  [ -n "$1" ] && [ -n "$2" ] && [ "$2" -ge "$1" ] && [ "$2" -le $(($1 + 2)) ]
}

# budget_stop: exhaust's JSON in $tmp/out stopped where its own budget
# says: at the memory guard where that comes first (its guard_max_held at
# most 2 past the binding limit's max_held, or no limit binds), or else
# before the guard, within 2 batches of the binding limit, with that
# limit's error, and the kept batch delivered once the held ones were
# released.
budget_stop() {
  held=$(field batches_held) guard=$(field guard_max_held)
  predicted=$(field predicted_max_held)
  if [ "$(field stopped_by_guard)" = true ]; then
    [ "$held" = "$guard" ] && [ "$(field error_name)" = null ] &&
      { [ "$predicted" = null ] || [ "$guard" -le $((predicted + 2)) ]; }
    return
  fi
  case $(field binding) in
  '"/dev/shm bytes"') error='"FL_ENOSPC"' ;;
  *) return 1 ;;
  esac
  [ "$(field error_name)" = "$error" ] && [ "$(field recovered)" = true ] &&
    within "$predicted" "$held" && [ "$held" -lt "$guard" ]
}

# fd_hold LIMIT OPTIONS...: at fd limit LIMIT, doctor's fds item binds at
# no count, and exhaust holds four times LIMIT batches (of 8 samples of
# 1 KiB: 12 KiB segments) with no error, the loader's fds within LIMIT.
fd_hold() {
  lim=$1
  shift
  forkload doctor --json --fd-limit "$lim" "$@" && cp "$tmp/out" "$tmp/doc"
  forkload exhaust --json --fd-limit "$lim" --hold $((4 * lim)) \
    --batch-size 8 --sample-bytes 1024 "$@"
  rc=$?
  echo "# fd limit $lim, $*: held $(field batches_held), $(field fds) fds" \
    >>"$tmp/err"
  [ "$rc" = 0 ] && grep -q "$(item fds "$lim" "$fig" 0 null)" "$tmp/doc" &&
    [ "$(field binding "$tmp/doc")" != '"fds"' ] &&
    [ "$(field error_name)" = null ] &&
    [ "$(field batches_held)" = $((4 * lim)) ] &&
    [ "$(field fds)" -le "$lim" ] &&
    [ "$(field shm_clean) $(field fds_clean) $(field children_clean)" = \
      "true true true" ]
}

for lim in 64 256; do
  fd_hold "$lim" --sharing fd
  check $? "--sharing fd, fd limit $lim: no fd per held batch, exhaust \
holds $((4 * lim))"
  fd_hold "$lim" --sharing fd --fd-in-dev-shm
  check $? "--sharing fd --fd-in-dev-shm, fd limit $lim: holds $((4 * lim))"
done

# Segments of 8 samples, so that the guard's 20 MB comes before a
# container's /dev/shm of 64 MB; where a smaller one binds first, it stops
# there instead, as the budget says, and still past 64.
small="--sharing fs --fd-limit 64 --batch-size 8"
# shellcheck disable=SC2086
forkload doctor --json $small && cp "$tmp/out" "$tmp/doc"
# shellcheck disable=SC2086
forkload exhaust --json $small --max-bytes 20000000
[ $? = 0 ] &&
  grep -q "$(item fds 64 "$fig" 0 null)" "$tmp/doc" &&
  budget_stop && [ "$(field batches_held)" -gt 64 ]
check $? "--sharing fs: no fd limit stops it (past 64 under --fd-limit 64)"

# shm_stop SIZE OPTIONS...: doctor and exhaust in a private tmpfs of SIZE
# over /dev/shm; the outputs in $tmp/doc and $tmp/out.
shm_stop() {
  size=$1
  shift
  $limit unshare -m sh -c '
    mount -t tmpfs -o "size=$1" forkload-test /dev/shm || exit 1
    bin=$2 tmp=$3
    shift 3
    "$bin" doctor --json "$@" >"$tmp/doc" 2>"$tmp/err" &&
      "$bin" exhaust --json "$@" >"$tmp/out" 2>>"$tmp/err"' \
    sh "$size" "$bin" "$tmp" "$@"
}

if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  skip "--sharing fs, /dev/shm of 16 MB: within 2 batches" \
    "needs root and unshare -m for a private /dev/shm"
  skip "--sharing fd --fd-in-dev-shm, /dev/shm of 16 MB: within 2 batches" \
    "needs root and unshare -m for a private /dev/shm"
else
  for mode in "--sharing fs" "--sharing fd --fd-in-dev-shm"; do
    # shellcheck disable=SC2086
    shm_stop 16m $mode
    rc=$?
    predicted=$(binding_max "$tmp/doc") real=$(field batches_held)
    [ "$rc" = 0 ] && [ "$(field binding "$tmp/doc")" = '"/dev/shm bytes"' ] &&
      [ "$(field error_name)" = '"FL_ENOSPC"' ] &&
      within "$predicted" "$real"
    rc=$?
    echo "# /dev/shm 16 MB, $mode: predicted $predicted, held $real" \
      >>"$tmp/err"
    check $rc "$mode, /dev/shm of 16 MB: exhaust stops within 2 batches of \
doctor's max_held"
  done
fi

# --- the rest of the process holding the fds: --fill-fds --------------------

# The limit in force, whatever it is (256 to 1048576): the expectations
# are derived from it.
nofile=$(ulimit -S -n)
tiny="--batch-size 8 --sample-bytes 1024"

# filled LEFT: exhaust's JSON says it left LEFT fds free below the limit in
# force, counted by taking them, having taken all the others but its own
# and the loader's (fewer than 64), and nothing was left behind.
filled() {
  [ "$(field fd_limit)" = "$nofile" ] && [ "$(field fds_free)" = "$1" ] &&
    [ "$(field fds_filled)" -le $((nofile - $1)) ] &&
    [ "$(field fds_filled)" -ge $((nofile - $1 - 64)) ] &&
    [ "$(field shm_clean) $(field fds_clean) $(field children_clean)" = \
      "true true true" ]
}

# shellcheck disable=SC2086
forkload exhaust --json --sharing fd --fill-fds 1 $tiny --max-bytes 20000000
rc=$?
echo "# --fill-fds 1 under $nofile: took $(field fds_filled), held" \
  "$(field batches_held) with $(field fds) fds" >>"$tmp/err"
[ "$rc" = 0 ] && filled 1 && [ "$(field stopped_by_guard)" = true ] &&
  [ "$(field error_name)" = null ] &&
  [ "$(field batches_held)" = "$(field guard_max_held)" ] &&
  [ "$(field batches_held)" -gt 64 ]
check $? "--sharing fd --fill-fds 1: one fd left, the loader holds until \
its memory guard"

for sharing in fd fs; do
  # shellcheck disable=SC2086
  forkload exhaust --json --sharing $sharing --fill-fds 0 $tiny \
    --max-bytes 20000000
  [ $? = 0 ] && filled 0 && [ "$(field batches_held)" = 0 ] &&
    [ "$(field error_name)" = '"FL_EMFILE"' ] &&
    grep -q "open-file limit (RLIMIT_NOFILE $nofile)" "$tmp/out" &&
    grep -q 'close files' "$tmp/out" && [ "$(field recovered)" = true ]
  check $? "--sharing $sharing --fill-fds 0: the rest of the process holds \
every fd, FL_EMFILE names the limit, the batch comes once they are closed"
done

# shellcheck disable=SC2086
forkload exhaust --sharing fd --fill-fds "$nofile" $tiny --hold 5
[ $? = 2 ] && grep -q "^forkload: exhaust: --fill-fds $nofile: only [0-9]* \
fds were free below RLIMIT_NOFILE $nofile" "$tmp/err"
check $? "--fill-fds above the fds free is bad usage"

# --- the memory guard -----------------------------------------------------

# With memfd segments, /dev/shm takes none and no held batch keeps an fd:
# memory is the limit the guard names, and no --fd-limit reaches it
# sooner, so the guard proposes none.
forkload exhaust --json --sharing fd --max-bytes 50000000
rc=$?
binding=$(field binding | tr -d '"') predicted=$(field predicted_max_held)
held=$(field batches_held)
[ "$rc" = 0 ] && [ "$(field stopped_by_guard)" = true ] &&
  [ "$(field error_name)" = null ] &&
  [ "$binding" = "memory bytes" ] &&
  [ "$(field memory_bound)" = 50000000 ] &&
  [ "$(field bytes_mapped_peak)" -le 50000000 ] &&
  [ "$held" = "$(field guard_max_held)" ] &&
  grep -q "\"guard_message\":\"the memory guard stopped the holding at $held \
batches" "$tmp/out" &&
  grep -q "$binding would stop the loader only after about $predicted \
batches" "$tmp/out" &&
  ! grep -q 'To get there safely' "$tmp/out" &&
  [ "$(field shm_clean) $(field fds_clean) $(field children_clean)" = \
    "true true true" ]
rc=$?
echo "# $binding binds after $predicted; the guard stopped it at $held" \
  >>"$tmp/err"
check $rc "exhaust --max-bytes: the guard stops it within the bound and \
says which limit it would reach"

# Under --sharing fs a held batch keeps no fd: memory or /dev/shm binds
# first, whichever has less room where the test runs.  A guard of 10 MB
# comes first even in a container's /dev/shm of 64 MB.
forkload exhaust --sharing fs --max-bytes 10000000 &&
  grep -Eq '^budget +(memory|/dev/shm) bytes binds first, after about [0-9]+' \
    "$tmp/out" &&
  grep -q '^stopped  *the memory guard stopped the holding .*private' \
    "$tmp/out" &&
  grep -q "/dev/shm of [0-9]* MiB stops it at about [0-9]* batches: unshare" \
    "$tmp/out"
check $? "exhaust's text report: the budget, and how to reach /dev/shm's \
limit safely"

forkload exhaust --sharing fd --max-bytes 1000000
[ $? = 2 ] && grep -q '^forkload: exhaust: a memory bound of 1000000 bytes' \
  "$tmp/err" && grep -q '(--max-bytes) leaves no room' "$tmp/err"
check $? "exhaust --max-bytes below the prefetch window is bad usage"

# make_cgroup BYTES: $cg, a new memory cgroup of that limit under this
# shell's own (cgroup v1 or v2), or empty where none can be made.
make_cgroup() {
  cg=
  v1=$(sed -n \
    's/^[0-9]*:\([^:]*,\)\{0,1\}memory\(,[^:]*\)\{0,1\}:\(.*\)/\3/p' \
    /proc/self/cgroup)
  if [ -n "$v1" ]; then
    dir=/sys/fs/cgroup/memory${v1%/}/forkload-doctor-test.$$
    file=memory.limit_in_bytes
  else
    v2=$(sed -n 's/^0:://p' /proc/self/cgroup)
    dir=/sys/fs/cgroup${v2%/}/forkload-doctor-test.$$ file=memory.max
  fi
  mkdir "$dir" 2>/dev/null || return 0
  if echo "$1" >"$dir/$file" 2>/dev/null; then
    cg=$dir
    trap 'rmdir "$cg" 2>/dev/null; rm -rf "$tmp"' EXIT
  else
    rmdir "$dir"
  fi
}

make_cgroup 1073741824
for sharing in fd fs; do
  # The study's dangerous run: no --hold, --fd-limit or --max-bytes.  On
  # the whole machine it would hold half the free memory: not in make
  # check (it was run by hand once: 12.2 GB, 30 s).
  if [ -z "$cg" ]; then
    skip "exhaust --sharing $sharing, no limiting option: ends within its \
memory bound" "needs root to make a 1 GiB memory cgroup"
    continue
  fi
  # With the soft fd limit raised to the hard one, the guard ends it
  # unless a limit it cannot raise binds first: a hard `ulimit -n 256`, or
  # a container's small /dev/shm under --sharing fs.  Then the loader stops
  # there, as the budget says, and within the bound all the same.
  where="in a 1 GiB memory cgroup"
  room=1073741824
  $limit sh -c 'echo $$ >"$1/cgroup.procs" &&
    { ulimit -S -n "$(ulimit -H -n)" 2>/dev/null; true; } &&
    exec "$2" exhaust --json --sharing "$3"' \
    sh "$cg" "$bin" "$sharing" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  bound=$(field memory_bound) peak=$(field bytes_mapped_peak)
  [ "$rc" = 0 ] && budget_stop &&
    [ "$peak" -gt 0 ] && [ "$peak" -le "$bound" ] &&
    [ "$bound" -le $((room / 2 + room / 20)) ]
  rc=$?
  echo "# $where: held $(field batches_held), $peak bytes at most," \
    "bound $bound, $(field binding) binds after" \
    "$(field predicted_max_held)" >>"$tmp/err"
  check $rc "exhaust --sharing $sharing, no limiting option, $where: ends \
within its memory bound"
done

exit $failed
