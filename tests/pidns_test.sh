#!/bin/sh
# TAP test of the sweep across PID namespaces that share /dev/shm (docker
# --ipc=host without --pid=host, pods sharing memory): a pid means nothing
# outside its namespace, so `forkload cleanup` must leave alone the names of
# a loader in another one, which are in transit.  A long
# `forkload run --sharing fs --no-reuse --verify` runs in a new PID
# namespace (unshare -p) while cleanup loops outside, then the other way
# round.  Each run must verify, cleanup must remove none of its names, and
# it must have seen some of them and said it left them alone.  Inside, the
# run is given a pid that no process has outside, where the sweep of
# forkload 0.3 and earlier took it for a dead owner's.  Runs in a private
# /dev/shm; skipped without root, unshare -m or unshare -p.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
private_dev_shm_or_skip "$0" "$@"
if ! why=$(unshare -p -f --mount-proc true 2>&1); then
  echo "1..0 # SKIP needs a new PID namespace (unshare -p -f --mount-proc):" \
    "$why"
  exit 77
fi
bin=$top_builddir/examples/forkload
scratch_dir
time_limit 60

# About two seconds of batches, each in its own segment, whose name lives
# while a worker fills it (1 ms).
run_args="run --sharing fs --no-reuse --verify --quiet --samples 4000
  --sample-bytes 64 --batch-size 2 --delay-us 500 --workers 2"

echo "1..7"

# sh -c "$loop" BIN OUT STOP: `forkload cleanup` again and again until STOP
# exists, its output appended to OUT (a failed one says so there), or
# until STOP's directory is gone: the script ended first.  Run under
# $limit, as the runs are, so that no wait here can hang.
loop='while [ ! -e "$2" ] && [ -d "${2%/*}" ]; do
  "$0" cleanup >>"$1" 2>&1 || echo "cleanup failed" >>"$1"
done'

# check_side WHERE RC RUN_OUT CLEAN_OUT: the cases of one direction.
check_side() {
  if [ "$2" = 0 ] && grep -q '^checksum' "$3"; then
    ok "a run $1 completes and verifies while cleanup loops"
  else
    not_ok "a run $1 completes and verifies while cleanup loops"
    diag "exit $2:" "$(tail -5 "$3")"
  fi
  if grep -q '^removed\|^cleanup failed' "$4"; then
    not_ok "cleanup removed none of the names of the run $1"
    diag "$(grep '^removed\|^cleanup failed' "$4" | head -5)"
  else
    ok "cleanup removed none of the names of the run $1"
  fi
  seen=$(grep -c '^left alone /dev/shm/forkload\..*another PID namespace' "$4")
  names=$(sed -n 's/^left alone \([^ ]*\) .*/\1/p' "$4" | sort -u | wc -l)
  runs=$(grep -c 'segment(s) removed$' "$4")
  diag "run $1: $(sed -n 's/^seconds *//p' "$3") s; $runs cleanups saw" \
    "$names of its names in transit $seen times, and left them alone"
  if [ "$seen" -gt 0 ] &&
    grep -q '^[0-9]* name(s) of another PID namespace left alone$' "$4"; then
    ok "cleanup saw names of the run $1 in transit and left them alone"
  else
    not_ok "cleanup saw names of the run $1 in transit and left them alone"
    diag "$(tail -5 "$4")"
  fi
}

# The run in a new PID namespace, as the pid that a process just gone had
# here (kernel.ns_last_pid of the new namespace says what the next fork
# gets); cleanup outside.
gone=$(sh -c 'echo $$')
$limit unshare -p -f --mount-proc sh -c '
  echo $(($2 - 1)) >/proc/sys/kernel/ns_last_pid 2>/dev/null
  "$0" $3 &
  echo $! >"$1"
  wait $!' "$bin" "$tmp/pid" "$gone" "$run_args" >"$tmp/run1" 2>&1 &
run=$!
$limit sh -c "$loop" "$bin" "$tmp/clean1" "$tmp/stop1" &
cleaner=$!
wait "$run"
rc=$?
: >"$tmp/stop1"
wait "$cleaner"
check_side "in a new PID namespace" "$rc" "$tmp/run1" "$tmp/clean1"
inside=$(cat "$tmp/pid")
if kill -0 "$inside" 2>/dev/null; then
  skip "the run's pid, $inside, is no live process outside" \
    "it is one (kernel.ns_last_pid could not be set)"
else
  ok "the run's pid, $inside, is no live process outside"
fi

# The run here; cleanup in a new PID namespace, which has no process of
# its pid.
# shellcheck disable=SC2086 # run_args is a word list
$limit "$bin" $run_args >"$tmp/run2" 2>&1 &
run=$!
$limit unshare -p -f --mount-proc sh -c "$loop" "$bin" "$tmp/clean2" \
  "$tmp/stop2" &
cleaner=$!
wait "$run"
rc=$?
: >"$tmp/stop2"
wait "$cleaner"
check_side "outside" "$rc" "$tmp/run2" "$tmp/clean2"
exit $failed
