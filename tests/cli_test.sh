#!/bin/sh
# TAP test of forkload(1): runs the demo with --verify over small synthetic
# datasets under each option that changes the data path, checks the JSON
# counts, the one-line errors for bad input, what `exhaust` reports when it
# runs out of fds and that it leaves nothing, that `cleanup` removes only
# stale segments, and that no shared-memory name outlives the runs.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
bin=$top_builddir/examples/forkload
tmp=$(mktemp -d) || exit 1
planted= # names the cleanup cases put in /dev/shm
trap 'rm -f $planted; rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
# A hung run fails its case instead of the whole script.
limit=
command -v timeout >/dev/null 2>&1 && limit="timeout -k 5 60"

echo "1..44"

pass() {
  ok "$1"
}

fail() {
  not_ok "$1"
  sed 's/^/# /' "$tmp/err"
}

check() {
  if [ "$1" = 0 ]; then pass "$2"; else fail "$2"; fi
}

# field NAME: the value of NAME in the JSON object in $tmp/out.
field() {
  sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" "$tmp/out"
}

# forkload ARGS...: runs the binary, output in $tmp/out and $tmp/err.
forkload() {
  $limit "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
}

# Names of the form forkload.PID.* whose owner is gone: what runs leaked.
orphans() {
  for f in "$1"/forkload*; do
    [ -e "$f" ] || continue
    pid=$(basename "$f" | cut -d. -f2)
    case $pid in
    '' | *[!0-9]*) echo "$f" ;;
    *) kill -0 "$pid" 2>/dev/null || echo "$f" ;;
    esac
  done
}

orphans /dev/shm >"$tmp/shm.before"
: >"$tmp/mq.before"
[ -d /dev/mqueue ] && orphans /dev/mqueue >"$tmp/mq.before"

# run_ok DESCRIPTION BATCHES SAMPLES ARGS...: a verified run over 2000
# samples of 1024 bytes (batch size 64 unless ARGS say otherwise) exits 0
# and its JSON counts BATCHES batches and SAMPLES samples.
run_ok() {
  desc=$1 batches=$2 samples=$3
  shift 3
  forkload run --verify --json --quiet --samples 2000 --sample-bytes 1024 "$@"
  rc=$?
  got="$(field batches) $(field samples) $(field verified)"
  if [ "$rc" = 0 ] && [ "$got" = "$batches $samples true" ]; then
    pass "$desc"
  else
    echo "# exit $rc, batches samples verified: $got" >>"$tmp/err"
    fail "$desc"
  fi
}

run_ok "fd sharing" 32 2000 --sharing fd
cp "$tmp/out" "$tmp/fd.json"
run_ok "fs sharing" 32 2000 --sharing fs
cp "$tmp/out" "$tmp/fs.json"
run_ok "fd, out of order" 32 2000 --out-of-order
run_ok "fs, out of order" 32 2000 --sharing fs --out-of-order
run_ok "fd, persistent workers, 2 epochs" 64 4000 --persistent --epochs 2
run_ok "fs, persistent, out of order, 2 epochs" 64 4000 \
  --sharing fs --persistent --out-of-order --epochs 2
run_ok "no workers" 32 2000 --workers 0
cp "$tmp/out" "$tmp/inline.json"
run_ok "3 workers" 32 2000 --workers 3
run_ok "2 shuffled epochs" 64 4000 --epochs 2 --shuffle --seed 7
run_ok "drop_last drops the short batch" 31 1984 --drop-last
run_ok "2 shuffled epochs with drop_last" 62 3968 \
  --epochs 2 --shuffle --drop-last
run_ok "batched fetch with a delay" 32 2000 --batched --delay-us 100
run_ok "fd, a new segment per batch" 32 2000 --no-reuse
run_ok "fs, a new segment per batch" 32 2000 --no-reuse --sharing fs
run_ok "fd, segments in /dev/shm" 32 2000 --fd-in-dev-shm --no-reuse
# 10, 13, ..., 499: 164 indices.
run_ok "custom sampler 10:500:3" 3 164 --indices 10:500:3
run_ok "batch 7, prefetch 4, pin_memory, timeout, 3 workers" 286 2000 \
  --batch-size 7 --prefetch 4 --pin-memory --timeout-ms 10000 --workers 3
run_ok "samples of 7 bytes" 400 2000 --sample-bytes 7 --batch-size 5

# The data path does not change the data.
sum=$(sed -n 's/.*"checksum":\([0-9]*\).*/\1/p' "$tmp/fd.json")
[ -n "$sum" ] &&
  grep -q "\"checksum\":$sum}" "$tmp/fs.json" &&
  grep -q "\"checksum\":$sum}" "$tmp/inline.json"
check $? "fd, fs and no workers give the same checksum"

forkload run --quiet --samples 200 --workers 2 --show-workers &&
  [ "$(grep -c '^worker [01]: pid [0-9]* seed [0-9]*$' "$tmp/err")" = 2 ]
check $? "--show-workers prints one line per worker"

forkload run --quiet --samples 500 --sample-bytes 64 &&
  grep -q '^batches  *8$' "$tmp/out" &&
  grep -q '^samples  *500$' "$tmp/out"
check $? "text summary"

forkload -V && [ "$(cat "$tmp/out")" = "forkload 0.1.0" ]
check $? "-V prints the version"

forkload help && grep -q '^usage: forkload run' "$tmp/out" &&
  [ ! -s "$tmp/err" ]
check $? "help prints the usage on stdout"

# bad DESCRIPTION PATTERN ARGS...: exit 2 and exactly one line on stderr,
# matching PATTERN.
bad() {
  desc=$1 pattern=$2
  shift 2
  forkload "$@"
  rc=$?
  if [ "$rc" = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
    grep -q -e "$pattern" "$tmp/err"; then
    pass "$desc"
  else
    echo "# exit $rc" >>"$tmp/err"
    fail "$desc"
  fi
}

bad "--batch-size x" "^forkload: --batch-size: .*'x'" run --batch-size x
bad "--sharing bogus" "^forkload: --sharing: .*'bogus'" run --sharing bogus
bad "unknown option" "^forkload: .*'--frobnicate'" run --frobnicate
bad "--batch-size without a value" "^forkload: --batch-size: missing" \
  run --batch-size
bad "--batch-size 0, refused by the library" "^forkload: .*batch_size" \
  run --batch-size 0
bad "a negative number" "^forkload: --samples: .*'-5'" run --samples -5
bad "an overflowing number" "^forkload: --seed: " \
  run --seed 18446744073709551616
bad "exhaust --fd-limit 3" "^forkload: --fd-limit: " \
  exhaust --strategy fd --fd-limit 3
bad "exhaust without --strategy" "^forkload: .*--strategy" exhaust --hold 5

# exhaust: 2000 samples of 1024 bytes in batches of 8 reach a limit of 64
# fds after some 50 batches held.
forkload exhaust --strategy fd --fd-limit 64 --samples 2000 \
  --sample-bytes 1024 --batch-size 8 --json
rc=$?
cp "$tmp/out" "$tmp/emfile.json"
[ "$rc" = 0 ] && [ "$(field error_name)" = '"FL_EMFILE"' ] &&
  [ "$(field error_code)" = -24 ] && [ "$(field batches_held)" -gt 0 ]
check $? "exhaust --fd-limit 64 stops at FL_EMFILE and exits 0"
grep -q 'ulimit -n' "$tmp/emfile.json" &&
  grep -q 'FL_SHARE_FILE_SYSTEM' "$tmp/emfile.json"
check $? "its message names ulimit -n and FL_SHARE_FILE_SYSTEM"
[ "$(field recovered)" = true ]
check $? "after the batches are released, fl_loader_next delivers again"
[ "$(field shm_clean) $(field fds_clean) $(field children_clean)" = \
  "true true true" ]
check $? "destroy leaves no name, fd or child behind"

# hold_ok STRATEGY: holding 5 batches is no error and leaves nothing.
hold_ok() {
  forkload exhaust --strategy "$1" --hold 5 --samples 2000 \
    --sample-bytes 1024 --json
  rc=$?
  got="$(field batches_held) $(field error_name) $(field recovered)"
  got="$got $(field shm_clean) $(field fds_clean) $(field children_clean)"
  if [ "$rc" = 0 ] && [ "$got" = "5 null null true true true" ]; then
    pass "exhaust --strategy $1 --hold 5"
  else
    echo "# exit $rc, held error recovered clean: $got" >>"$tmp/err"
    fail "exhaust --strategy $1 --hold 5"
  fi
}
hold_ok fd
hold_ok fs

forkload exhaust --strategy fs --hold 3 --samples 100 --sample-bytes 64 &&
  grep -q '^strategy  *fs (/dev/shm)$' "$tmp/out" &&
  grep -q '^held  *3 batches' "$tmp/out" &&
  grep -q '^error  *none: 3 batches held$' "$tmp/out" &&
  [ "$(grep -c '^[a-z ]* ok$' "$tmp/out")" = 3 ]
check $? "exhaust text report"

# cleanup: a name of forkload's form whose owner is gone, one whose owner
# (this shell) is alive, and one of another form.
dead=$(sh -c 'echo $$')
while kill -0 "$dead" 2>/dev/null; do dead=$(sh -c 'echo $$'); done
stale=/dev/shm/forkload.$dead.deadbeef.7
live=/dev/shm/forkload.$$.deadbeef.8
other=/dev/shm/forkload-not-ours
planted="$stale $live $other"

# sweep_ok DESCRIPTION VERB SUMMARY ARGS...: cleanup ARGS reports the stale
# name with VERB and a last line ending in SUMMARY, and no other planted
# name.  A loader created elsewhere meanwhile (make -j check) may sweep
# the stale name first: then it is planted again, twice at most.
sweep_ok() {
  desc=$1 verb=$2 summary=$3
  shift 3
  for try in 1 2 3; do
    : >"$stale" && : >"$live" && : >"$other" || break
    forkload cleanup "$@"
    rc=$?
    grep -q "^$verb $stale " "$tmp/out" || [ -e "$stale" ] || continue
    break
  done
  if [ "$rc" = 0 ] &&
    grep -qx "$verb $stale (owner pid $dead is gone)" "$tmp/out" &&
    ! grep -q -e "forkload\.$$\." -e 'forkload-not-ours' "$tmp/out" &&
    tail -n 1 "$tmp/out" | grep -q "^[0-9]* segment(s) $summary\$"; then
    pass "$desc"
  else
    echo "# exit $rc; stdout:" >>"$tmp/err"
    sed 's/^/#   /' "$tmp/out" >>"$tmp/err"
    fail "$desc"
  fi
}

sweep_ok "cleanup --dry-run lists only the stale name" "would remove" \
  "would be removed" --dry-run
[ -e "$stale" ] && [ -e "$live" ] && [ -e "$other" ]
check $? "cleanup --dry-run removes nothing"
sweep_ok "cleanup reports the stale name" removed removed
[ ! -e "$stale" ] && [ -e "$live" ] && [ -e "$other" ]
check $? "cleanup removes only the stale name"
rm -f $planted

# No name a run made outlived it: comm lists those new since the start.
orphans /dev/shm >"$tmp/shm.after"
: >"$tmp/mq.after"
[ -d /dev/mqueue ] && orphans /dev/mqueue >"$tmp/mq.after"
{
  comm -13 "$tmp/shm.before" "$tmp/shm.after"
  comm -13 "$tmp/mq.before" "$tmp/mq.after"
} >"$tmp/err"
[ ! -s "$tmp/err" ]
check $? "no forkload name is left in /dev/shm or /dev/mqueue"

exit $failed
