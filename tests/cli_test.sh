#!/bin/sh
# TAP test of forkload(1): runs the demo with --verify over small synthetic
# datasets, of one field or several, under each option that changes the
# data path, checks the JSON counts, the help of each subcommand against
# its getopt table, the one-line errors for bad input (naming the flag
# where the library refuses a field), the summary of an interrupted run,
# the --pin-memory warning, that `exhaust` holds batches far past the fd
# limit (none keeps an fd) and that it leaves nothing, that `gen` writes files of each kind that
# `run --dataset` reads back verified (npy-zip's field by field), what
# three data-parallel ranks load together under each --shard-mode, that a
# run stopped with its state saved (atomically) resumes verified, on other
# workers, as they arrive and on another world size, and that no
# shared-memory name outlives the runs.
# `cleanup` is cleanup_test.sh's.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
# Alone in /dev/shm where it can be, so that a name another test program's
# killed parent leaves there for a moment is not taken for one of ours.
in_private_dev_shm "$0" "$@"
bin=$top_builddir/examples/forkload
scratch_dir
time_limit 60

echo "1..227"

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

# number NAME: field NAME, or 0 where there is none, for arithmetic.
number() {
  v=$(field "$1")
  echo "${v:-0}"
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

# counts_ok DESCRIPTION BATCHES SAMPLES ARGS...: a verified run with ARGS
# exits 0 and its JSON counts BATCHES batches and SAMPLES samples.
counts_ok() {
  desc=$1 batches=$2 samples=$3
  shift 3
  forkload run --verify --json --quiet "$@"
  rc=$?
  got="$(field batches) $(field samples) $(field verified)"
  got="$got $(field interrupted)"
  if [ "$rc" = 0 ] && [ "$got" = "$batches $samples true false" ]; then
    pass "$desc"
  else
    echo "# exit $rc, batches samples verified interrupted: $got" \
      >>"$tmp/err"
    fail "$desc"
  fi
}

# run_ok DESCRIPTION BATCHES SAMPLES ARGS...: counts_ok over 2000 synthetic
# samples of 1024 bytes (batch size 64 unless ARGS say otherwise).
run_ok() {
  desc=$1 batches=$2 samples=$3
  shift 3
  counts_ok "$desc" "$batches" "$samples" --samples 2000 --sample-bytes 1024 \
    "$@"
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
  grep -q "\"checksum\":$sum," "$tmp/fs.json" &&
  grep -q "\"checksum\":$sum," "$tmp/inline.json"
check $? "fd, fs and no workers give the same checksum"

# Samples of 3 fields, each an array of its own in the batch: --verify
# checks every byte of each, filled by get_fields, by get_batch in its
# field form, and in-process.
for how in "" --batched "--workers 0"; do
  counts_ok "3 fields of 12,8,1 bytes${how:+, $how}" 32 2000 --samples 2000 \
    --sample-bytes 12,8,1 $how
done
# The tally reads field 0 at its own stride: its first value is that of a
# sample of one field, so the checksum is the one above.
[ "$(field bytes)" = 42000 ] && [ "$(field checksum)" = "$sum" ]
check $? "3 fields: bytes count every field, field 0 gives the checksum"

# checksum_of ARGS...: the checksum of a run of ARGS over 2000 samples of
# 64 bytes: the sum of the first value of every sample delivered, a hash
# of its index, so sums of runs compare which indices they delivered.
checksum_of() {
  forkload run --json --quiet --samples 2000 --sample-bytes 64 "$@"
  number checksum
}
whole=$(checksum_of)

# shares MODE N0 N1 N2: ranks 0, 1 and 2 of 3 under --shard-mode MODE load
# N0, N1 and N2 samples of the 2000, each verified against the order
# DistributedSampler gives it; $shared is the sum of their checksums.
shares() {
  mode=$1
  shift
  shared=0
  for r in 0 1 2; do
    counts_ok "rank $r of 3, $mode: $1 samples verified" \
      $((($1 + 63) / 64)) "$1" --samples 2000 --sample-bytes 64 \
      --world-size 3 --rank $r --shard-mode "$mode"
    shared=$((shared + $(number checksum)))
    shift
  done
}

shares pad 667 667 667
[ "$whole" != 0 ] &&
  [ "$shared" = $((whole + $(checksum_of --indices 0:1))) ]
check $? "pad: three ranks load every index once, index 0 (padding) twice"
shares trim 666 666 666
[ "$whole" != 0 ] &&
  [ "$shared" = $((whole - $(checksum_of --indices 1998:2000))) ]
check $? "trim: three ranks load every index once but the 2 of the tail"
shares uneven 667 667 666
[ "$whole" != 0 ] && [ "$shared" = "$whole" ] &&
  [ "$(field rank) $(field world_size) $(field shard_mode)" = \
    '2 3 "uneven"' ]
check $? "uneven: three ranks load every index once; JSON names the rank"

# Stopped after 45 of its 64 batches, with its state saved, the run goes
# on from that state: --verify checks, before the state is written, that
# it resumes exactly the batches not handed out, and then each resumed
# batch against the uninterrupted run.  Together the two deliver the
# uninterrupted run's batches and checksum.
ck=$tmp/ck
mkdir "$ck"
run_ok "2 shuffled epochs, uninterrupted" 64 4000 --epochs 2 --shuffle \
  --seed 5
full=$(number checksum)
run_ok "--stop-after 45 --save-state, verified" 45 2832 --epochs 2 \
  --shuffle --seed 5 --stop-after 45 --save-state "$ck/s.state"
part=$(number checksum)
[ "$(field stopped) $(field save_state)" = "true \"$ck/s.state\"" ] &&
  [ "$(ls -A "$ck")" = s.state ]
check $? "the run says it stopped; its directory holds the state alone"
# resumed DESCRIPTION ARGS...: the stopped run's 19 batches left, resumed
# with ARGS and verified, add up to the uninterrupted run's checksum.
resumed() {
  desc=$1
  shift
  run_ok "$desc" 19 1168 --epochs 2 --shuffle --seed 5 \
    --resume "$ck/s.state" "$@"
  [ "$(field first_epoch)" = 1 ] &&
    [ $((part + $(number checksum))) = "$full" ]
  check $? "$desc: with the stopped run, the uninterrupted checksum"
}
resumed "--resume: the 19 batches left, verified"
resumed "--resume with --workers 0" --workers 0
resumed "--resume with --workers 3, fs sharing, prefetch 1" --workers 3 \
  --sharing fs --prefetch 1
# --epochs counts from epoch 0: the state of epoch 1 has none left of 1.
run_ok "--resume of epoch 1 with --epochs 1 runs nothing" 0 0 \
  --shuffle --seed 5 --resume "$ck/s.state"
# Saved at an epoch's end, a state begins the next one.
run_ok "--stop-after 32, the first epoch whole" 32 2000 --epochs 2 \
  --stop-after 32 --save-state "$ck/e.state"
run_ok "resumed at the second epoch's start" 32 2000 --epochs 2 \
  --resume "$ck/e.state"
# As they arrive, the state lists the batches of the window not handed
# out, and the resumed epoch delivers exactly those and the rest.
run_ok "--out-of-order, 3 slow workers, stopped after 10" 10 640 \
  --out-of-order --workers 3 --delay-us 20 --stop-after 10 \
  --save-state "$ck/o.state"
part=$(number checksum)
run_ok "--out-of-order resumed with 1 worker: the 22 left" 22 1360 \
  --out-of-order --workers 1 --resume "$ck/o.state"
[ $((part + $(number checksum))) = "$(checksum_of)" ]
check $? "--out-of-order: with the stopped run, the whole epoch's checksum"

# A new state replaces the old one by rename: another file, and no
# temporary one left beside it.
ino=$(ls -i "$ck/s.state" | cut -d' ' -f1)
forkload run --quiet --samples 2000 --sample-bytes 1024 --stop-after 3 \
  --save-state "$ck/s.state" &&
  [ "$(ls -A "$ck" | tr '\n' ' ')" = "e.state o.state s.state " ] &&
  [ "$(ls -i "$ck/s.state" | cut -d' ' -f1)" != "$ino" ]
check $? "--save-state over a state renames a new file onto it, leaves no other"

# Elastic: two ranks stop after 9 batches each (1152 samples of the
# order), and three go on from rank 0's state, splitting the 848 left:
# 283 each, the first of them padding.  All five deliver every index once
# but that one.
elastic=0
for r in 0 1; do
  run_ok "rank $r of 2, stopped after 9" 9 576 --sample-bytes 64 \
    --world-size 2 --rank $r --stop-after 9 --save-state "$ck/w$r.state"
  elastic=$((elastic + $(number checksum)))
done
for r in 0 1 2; do
  run_ok "rank $r of 3 resumes rank 0's state of 2 ranks, verified" 5 283 \
    --sample-bytes 64 --world-size 3 --rank $r --resume "$ck/w0.state"
  elastic=$((elastic + $(number checksum)))
done
[ "$whole" != 0 ] &&
  [ "$elastic" = $((whole + $(checksum_of --indices 1152:1153))) ]
check $? "elastic: 2 ranks then 3 load every index once, but one padding"

forkload run --quiet --samples 2000 --sample-bytes 64 --world-size 3 \
  --resume "$ck/w0.state" --verify &&
  grep -q '^resumed  *epoch 0 from .*w0.state, verified as an elastic' \
    "$tmp/out" &&
  grep -q ', rank 0 of 3 (pad),' "$tmp/out"
check $? "text summary of an elastic resume"

forkload run --quiet --samples 200 --workers 2 --show-workers &&
  [ "$(grep -c '^worker [01]: pid [0-9]* seed [0-9]*$' "$tmp/err")" = 2 ]
check $? "--show-workers prints one line per worker"

forkload run --quiet --samples 500 --sample-bytes 64 &&
  grep -q '^batches  *8$' "$tmp/out" &&
  grep -q '^samples  *500$' "$tmp/out"
check $? "text summary"

forkload -V && [ "$(cat "$tmp/out")" = "forkload $PACKAGE_VERSION" ]
check $? "-V prints the version"

# The overview: every subcommand's usage, --version, and where the options
# are told.
for arg in help -h --help; do
  forkload $arg && [ ! -s "$tmp/err" ] &&
    grep -q '^usage: forkload run \[options\]$' "$tmp/out" &&
    grep -q '^  *forkload doctor \[--json\] \[--fd-limit N\] \[options\]$' \
      "$tmp/out" &&
    grep -q '^  *forkload exhaust --sharing fd|fs \[options\]$' "$tmp/out" &&
    grep -q '^  *forkload cleanup \[--dry-run\]$' "$tmp/out" &&
    grep -q '^  *forkload gen npy-dir|npy|raw PATH ' "$tmp/out" &&
    grep -q '^  *forkload help | -h | --help | -V | --version$' "$tmp/out" &&
    grep -q "'forkload SUBCOMMAND --help'" "$tmp/out"
  check $? "forkload $arg prints the overview on stdout"
done

forkload
[ $? = 2 ] && [ ! -s "$tmp/out" ] && head -1 "$tmp/err" | grep -q '^usage: '
check $? "no subcommand: the overview on stderr, exit 2"

# options_of FILE: the long options of the getopt_long tables in
# examples/FILE, from lines such as {"batch-size", required_argument, ...}.
options_of() {
  tr '{' '\n' <"$top_srcdir/examples/$1" |
    sed -n 's/^ *"\([a-z][a-z0-9-]*\)", *[a-z_]*_argument,.*/\1/p'
}

# A subcommand's --help lists the options of its table, run's, doctor's
# and exhaust's with the shared ones of options.c (--help among them), and
# no other: the text and the tables must not drift apart.
for cmd in run doctor exhaust cleanup gen; do
  forkload $cmd --help && [ ! -s "$tmp/err" ] && cp "$tmp/out" "$tmp/help" &&
    forkload $cmd -h && cmp -s "$tmp/out" "$tmp/help" &&
    head -1 "$tmp/help" | grep -q "^usage: forkload $cmd "
  check $? "$cmd --help and -h print its usage and options on stdout"
  # The text is printed with %s: a printf escape would show as written.
  ! grep -q '%%' "$tmp/help"
  check $? "$cmd --help shows no doubled % (its text is not a format)"
  case $cmd in
  run | doctor | exhaust)
    table="$(options_of $cmd.c) $(options_of options.c)" ;;
  *) table="$(options_of $cmd.c) help" ;;
  esac
  printf '%s\n' $table | sort >"$tmp/table"
  sed -n 's/^  \(-h, \)\{0,1\}--\([a-z][a-z0-9-]*\).*/\2/p' "$tmp/help" |
    sort >"$tmp/listed"
  if [ "$(wc -l <"$tmp/table")" -gt 1 ] && cmp -s "$tmp/table" "$tmp/listed"
  then
    pass "$cmd --help lists exactly the options of its getopt table"
  else
    diff "$tmp/table" "$tmp/listed" >"$tmp/err"
    fail "$cmd --help lists exactly the options of its getopt table"
  fi
done

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
bad "a negative number" "^forkload: --samples: .*'-5'" run --samples -5
bad "an overflowing number" "^forkload: --seed: " \
  run --seed 18446744073709551616
bad "exhaust --fd-limit 3" "^forkload: --fd-limit: " \
  exhaust --sharing fd --fd-limit 3
bad "exhaust without --sharing" \
  "^forkload: exhaust: --sharing fd|fs is required" exhaust --hold 5
bad "--strategy bogus names --strategy" "^forkload: --strategy: .*'bogus'" \
  exhaust --strategy bogus
bad "a size of 0 in --sample-bytes" \
  "^forkload: --sample-bytes: each size must be at least 1, got '12,0,1'" \
  run --sample-bytes 12,0,1
bad "33 sizes in --sample-bytes" "^forkload: --sample-bytes: .* 2 to 32 " \
  exhaust --sharing fd --sample-bytes "$(seq -s, 33)"
bad "--shard-mode bogus" "^forkload: --shard-mode: .*'bogus'" \
  run --shard-mode bogus
bad "exhaust --shard-mode bogus" "^forkload: --shard-mode: .*'bogus'" \
  exhaust --sharing fd --shard-mode bogus
bad "--rank not below --world-size" \
  "^forkload: --rank is 3 but --world-size is 3: " \
  run --world-size 3 --rank 3
bad "--rank without --world-size" \
  "^forkload: --rank is 1 but --world-size is 1" run --rank 1
bad "--stop-after 0" "^forkload: --stop-after: .*'0'" run --stop-after 0
bad "--save-state in a missing directory" \
  "^forkload: --save-state .*/none/s.state: cannot write in .*/none: " \
  run --save-state "$tmp/none/s.state"
bad "--save-state of a directory" \
  "^forkload: --save-state .*: is a directory" run --save-state "$tmp"
bad "--resume of a missing file" \
  "^forkload: --resume .*/none.state: No such file or directory$" \
  run --resume "$tmp/none.state"
head -c 100 "$ck/s.state" >"$tmp/cut.state"
# What the library refuses of a state is told in its words, which name
# the field and both values.
load=fl_loader_state_load
bad "--resume of a state cut short" \
  "^forkload: --resume .*/cut.state: $load: not a loader state .*header" \
  run --resume "$tmp/cut.state"
bad "--resume of a state of another batch size" \
  "^forkload: --resume .*/s.state: $load: the state was saved with \
batch_size 64, and this loader has 32\$" \
  run --samples 2000 --sample-bytes 1024 --resume "$ck/s.state" \
  --batch-size 32
bad "--resume in order of a state saved as they arrive" \
  "^forkload: --resume .*: the state was saved with in_order 0, " \
  run --samples 2000 --sample-bytes 64 --resume "$ck/o.state"

# refused DESCRIPTION LINE ARGS...: exit 2, and stderr is exactly LINE.
refused() {
  desc=$1 line=$2
  shift 2
  forkload "$@"
  rc=$?
  if [ "$rc" = 2 ] && [ "$(cat "$tmp/err")" = "$line" ]; then
    pass "$desc"
  else
    echo "# exit $rc, expected: $line" >>"$tmp/err"
    fail "$desc"
  fi
}

# What the library refuses is told of the flag, not of its C field:
# "FIELD is VALUE: REASON" as "--flag VALUE: REASON", and field names
# elsewhere in a message word by word.
refused "--workers 99999, refused by the library, names the flag" \
  "forkload: --workers 99999: at most 1024 are allowed" run --workers 99999
refused "--batch-size 0, refused by the library, names the flag" \
  "forkload: --batch-size 0: it must be at least 1" run --batch-size 0
refused "--prefetch 0, refused by the library, names the flag" \
  "forkload: --prefetch 0: with workers it must be at least 1" \
  run --prefetch 0
refused "the fields of a longer message are told as flags, word by word" \
  "forkload: --prefetch 5000000 x --workers 1000 is too large" \
  run --workers 1000 --prefetch 5000000
refused "exhaust names the flag too" \
  "forkload: --workers 2000: at most 1024 are allowed" \
  exhaust --sharing fd --workers 2000
refused "--world-size 0, refused by the library, names the flag" \
  "forkload: --world-size 0: it must be at least 1" run --world-size 0

# No option may exhaust the machine's memory.  These run under a file-size
# limit with SIGXFSZ ignored: memfd segments are files, so a regression
# meets EFBIG here instead of the OOM killer.
(
  ulimit -f 262144
  trap '' XFSZ
  forkload run --samples 10 --batch-size 100000000000000 --verify --json \
    --quiet
  echo "rc $?" >>"$tmp/out"
)
grep -q '"batches":1,"samples":10,' "$tmp/out" &&
  grep -q '"verified":true' "$tmp/out" && grep -q '^rc 0$' "$tmp/out" &&
  [ "$(field bytes_mapped_peak)" -lt 1000000 ]
check $? "a batch size of 10^14 over 10 samples runs in segments of 10"
(
  ulimit -f 262144
  trap '' XFSZ
  # 4096 batches: the epoch's batches per worker cap no factor.
  forkload run --workers 64 --prefetch 64 --sample-bytes 1048576 \
    --samples 262144 --quiet
  echo "rc $?" >>"$tmp/out"
)
grep -q '^rc 2$' "$tmp/out" &&
  grep -q '^forkload: the prefetch window needs [0-9]* bytes: (--prefetch 64 x --workers 64 + 1) segments of [0-9]* bytes, each for 64 samples of 1048576 bytes' "$tmp/err" &&
  grep -q 'Options that fit, each alone: --prefetch [0-9]*, --workers [0-9]* or --batch-size [0-9]*$' "$tmp/err"
check $? "a window of 64 workers x prefetch 64 is refused with the arithmetic, exit 2"
(
  ulimit -f 262144
  trap '' XFSZ
  forkload run --sample-bytes 1000000000000000 --batch-size 1 --quiet
  echo "rc $?" >>"$tmp/out"
)
grep -q '^rc 2$' "$tmp/out" && grep -Eq 'MemAvailable|memory cgroup' "$tmp/err"
check $? "--sample-bytes above the machine's memory is refused at create"
forkload run --samples 2305843009213693953 --sample-bytes 1 --batch-size 1 \
  --shuffle --quiet
rc=$?
[ "$rc" = 2 ] &&
  grep -q "more bytes than this machine can address, or shuffle with --shuffle-algorithm bijection" "$tmp/err"
check $? "--samples whose torch order's bytes wrap is refused, not a segfault"
forkload run --samples 10000000000 --sample-bytes 8 --batch-size 64 \
  --shuffle --shuffle-algorithm bijection --stop-after 3 --json
[ $? = 0 ] && grep -q '"batches":3,' "$tmp/out"
check $? "--shuffle-algorithm bijection loads 10^10 samples, keeping no order"
counts_ok "--verify: the bijection's epochs give every sample once" 286 2002 \
  --samples 1001 --sample-bytes 16 --batch-size 7 --workers 2 --shuffle \
  --shuffle-algorithm bijection --epochs 2
forkload run --samples 10000000000 --sample-bytes 8 --shuffle \
  --shuffle-algorithm bijection --verify --quiet
[ $? = 2 ] &&
  grep -q "verify holds each epoch's reference order, 9 bytes a sample: it checks at most 100000000 samples, and these are 10000000000" "$tmp/err"
check $? "--verify refuses an epoch too large to hold, saying why"
forkload run --shuffle --shuffle-algorithm random --quiet
[ $? = 2 ] &&
  grep -q "shuffle-algorithm: expected 'torch' or 'bijection', got 'random'" "$tmp/err"
check $? "--shuffle-algorithm takes torch or bijection"

# interrupt SIGNAL ARGS...: starts `run ARGS` on a slow dataset, sends
# SIGNAL to it a second later, and waits: output in $tmp/out and $tmp/err,
# exit status in $rc.  timeout --foreground passes the signal on to the run
# alone: without it, timeout sends it to the run and again to their process
# group, and a second signal kills.
interrupt() {
  sig=$1
  shift
  ${limit:+timeout --foreground -k 5 60} "$bin" run --quiet --sharing fs \
    --delay-us 1000 "$@" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  sleep 1
  kill -s "$sig" $pid
  wait $pid
  rc=$?
}

# A first SIGINT or SIGTERM ends a run with the summary of what it did.
interrupt INT
nb=$(sed -n 's/^batches  *\([0-9][0-9]*\)$/\1/p' "$tmp/out")
if [ "$rc" = 130 ] && [ -n "$nb" ] &&
  grep -q "^interrupted  *by SIGINT after $nb batches\$" "$tmp/out" &&
  grep -q '^checksum  *[0-9]' "$tmp/out"; then
  pass "SIGINT: the summary of the batches so far, exit 130"
else
  echo "# exit $rc" >>"$tmp/err"
  cat "$tmp/out" >>"$tmp/err"
  fail "SIGINT: the summary of the batches so far, exit 130"
fi
orphans /dev/shm >"$tmp/shm.int"
comm -13 "$tmp/shm.before" "$tmp/shm.int" >"$tmp/err"
[ ! -s "$tmp/err" ]
check $? "SIGINT: no name is left in /dev/shm"
interrupt TERM --json
if [ "$rc" = 143 ] && [ "$(field interrupted)" = true ] &&
  [ -n "$(field batches)" ]; then
  pass "SIGTERM: the JSON summary says interrupted, exit 143"
else
  echo "# exit $rc" >>"$tmp/err"
  cat "$tmp/out" >>"$tmp/err"
  fail "SIGTERM: the JSON summary says interrupted, exit 143"
fi

# A first SIGTERM saves the state too: the run goes on from it.
interrupt TERM --json --samples 4000 --sample-bytes 64 \
  --save-state "$ck/t.state"
nb=$(field batches)
if [ "$rc" = 143 ] && [ "$(field interrupted)" = true ] && [ -n "$nb" ] &&
  [ "$nb" -lt 63 ]; then
  run_ok "SIGTERM: the state saved resumes the $((63 - nb)) batches left" \
    $((63 - nb)) $((4000 - 64 * nb)) --samples 4000 --sample-bytes 64 \
    --resume "$ck/t.state"
else
  echo "# exit $rc, batches $nb" >>"$tmp/err"
  fail "SIGTERM: the state saved resumes the batches left"
fi

# pin_run KB ARGS...: `run ARGS` under a RLIMIT_MEMLOCK of KB kilobytes.
# Root is not bound by the limit (CAP_IPC_LOCK), so as root it runs as
# nobody, which pin_as_nobody checked it can.
pin_run() {
  kb=$1
  shift
  if [ "$(id -u)" = 0 ]; then
    $limit setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
      sh -c 'ulimit -l "$0" && exec "$@"' "$kb" "$bin" run "$@"
  else
    (ulimit -l "$kb" && exec $limit "$bin" run "$@")
  fi >"$tmp/out" 2>"$tmp/err"
}

# Why the pin case cannot be run here, or nothing.
pin_skip() {
  case " ${CFLAGS-} " in
  *-fsanitize=*address*)
    echo "AddressSanitizer makes mlock a no-op that always succeeds"
    return
    ;;
  esac
  [ "$(id -u)" = 0 ] || return
  if ! command -v setpriv >/dev/null 2>&1 || ! id nobody >/dev/null 2>&1
  then
    echo "root ignores RLIMIT_MEMLOCK, and setpriv or user nobody is missing"
  elif ! setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
    "$bin" -V >/dev/null 2>&1; then
    echo "root ignores RLIMIT_MEMLOCK, and nobody cannot run $bin"
  fi
}

# --pin-memory past RLIMIT_MEMLOCK warns once and goes on, as the library
# does: no segment of 64 samples of 1024 bytes fits in 64 KB (FL_ENOMEM),
# nor any in 0 (FL_EPERM); each batch is still delivered, and verified.
why=$(pin_skip)
for kb in 64 0; do
  desc="--pin-memory under ulimit -l $kb warns once and the run is verified"
  if [ -n "$why" ]; then
    skip "$desc" "$why"
    continue
  fi
  pin_run $kb --pin-memory --no-reuse --verify --json --quiet \
    --samples 2000 --sample-bytes 1024
  rc=$?
  got="$(field batches) $(field verified)"
  if [ "$rc" = 0 ] && [ "$got" = "32 true" ] &&
    [ "$(wc -l <"$tmp/err")" = 1 ] &&
    grep -q '^forkload: warning: .*`ulimit -l`' "$tmp/err"; then
    pass "$desc"
  else
    echo "# exit $rc, batches verified: $got" >>"$tmp/err"
    fail "$desc"
  fi
done

# exhaust: 2000 samples of 1024 bytes in batches of 8, 600 of them held
# (over two epochs) under a limit of 64 fds: short of fds, the loader lets
# go of those of the batches held, and goes on.
forkload exhaust --sharing fd --fd-limit 64 --hold 600 --samples 2000 \
  --sample-bytes 1024 --batch-size 8 --json
rc=$?
cp "$tmp/out" "$tmp/held.json"
[ "$rc" = 0 ] && [ "$(field error_name)" = null ] &&
  [ "$(field batches_held)" = 600 ]
check $? "exhaust --fd-limit 64 holds 600 batches with no error and exits 0"
[ "$(field fds)" -le 64 ] && [ "$(field segments)" -ge 600 ]
check $? "its 600 mapped segments take no more than the 64 fds"
[ "$(field error_message)" = null ] && [ "$(field binding)" != '"fds"' ]
check $? "no error stopped it, and fds do not bind first in its budget"
[ "$(field shm_clean) $(field fds_clean) $(field children_clean)" = \
  "true true true" ]
check $? "destroy leaves no name, fd or child behind"

# hold_ok FLAG SHARING: holding 5 batches is no error and leaves nothing,
# and the JSON names the sharing as run's does.
hold_ok() {
  forkload exhaust "$1" "$2" --hold 5 --samples 2000 --sample-bytes 1024 \
    --json
  rc=$?
  got="$(field sharing) $(field batches_held) $(field error_name)"
  got="$got $(field recovered) $(field shm_clean) $(field fds_clean)"
  got="$got $(field children_clean) $(field interrupted)"
  if [ "$rc" = 0 ] &&
    [ "$got" = "\"$2\" 5 null null true true true false" ]; then
    pass "exhaust $1 $2 --hold 5"
  else
    echo "# exit $rc, sharing held error recovered clean interrupted: $got" \
      >>"$tmp/err"
    fail "exhaust $1 $2 --hold 5"
  fi
}
hold_ok --sharing fd
hold_ok --sharing fs
# The name exhaust first gave --sharing.
hold_ok --strategy fs

forkload run --strategy fs --quiet --json --samples 100 &&
  [ "$(field sharing)" = '"fs"' ]
check $? "run takes --strategy as --sharing"

forkload exhaust --sharing fs --hold 3 --samples 100 --sample-bytes 64 &&
  grep -q '^sharing  *fs (/dev/shm)$' "$tmp/out" &&
  grep -q '^held  *3 batches' "$tmp/out" &&
  grep -q '^error  *none: 3 batches held$' "$tmp/out" &&
  [ "$(grep -c '^[a-z ]* ok$' "$tmp/out")" = 3 ]
check $? "exhaust text report"

# gen writes each kind of file; run --dataset reads it back and --verify
# checks every byte against the generator, with each sharing strategy.
# gen_ok DESCRIPTION PATTERN ARGS...: gen exits 0 and prints one line
# matching PATTERN.
gen_ok() {
  desc=$1 pattern=$2
  shift 2
  forkload gen "$@"
  rc=$?
  if [ "$rc" = 0 ] && [ "$(wc -l <"$tmp/out")" = 1 ] &&
    grep -q -e "$pattern" "$tmp/out"; then
    pass "$desc"
  else
    echo "# exit $rc" >>"$tmp/err"
    fail "$desc"
  fi
}

gen_ok "gen npy-dir" \
  "^wrote 2000 samples of 1024 bytes, seed 0, to npy-dir .*: 2000 files .*, \
each '<f4' of shape (256,); 2304000 bytes\$" \
  npy-dir "$tmp/dir" --samples 2000 --sample-bytes 1024
[ "$(ls "$tmp/dir" | wc -l)" = 2000 ] && [ -f "$tmp/dir/00001999.npy" ] &&
  [ "$(head -c 6 "$tmp/dir/00000000.npy" | tail -c 5)" = NUMPY ]
check $? "gen npy-dir writes 2000 files 00000000.npy to 00001999.npy"
# Bytes, not floats: 1001 is no multiple of 4.
gen_ok "gen npy, seed 3" \
  "^wrote 1000 samples of 1001 bytes, seed 3, to npy .*: \
'|u1' of shape (1000, 1001); 1001128 bytes\$" \
  npy "$tmp/a.npy" --samples 1000 --sample-bytes 1001 --seed 3
gen_ok "gen raw with a header" \
  "^wrote 2000 samples of 1024 bytes, seed 0, to raw .*: \
2000 records after a 16-byte header; 2048016 bytes\$" \
  raw "$tmp/r.raw" --samples 2000 --sample-bytes 1024 --header-bytes 16

for sharing in fd fs; do
  counts_ok "npy-dir, $sharing sharing, 2 workers" 32 2000 \
    --dataset "npy-dir:$tmp/dir" --sharing $sharing --workers 2
  cp "$tmp/out" "$tmp/dir.$sharing.json"
  counts_ok "npy, $sharing sharing, 2 workers, seed 3" 16 1000 \
    --dataset "npy:$tmp/a.npy" --seed 3 --sharing $sharing --workers 2
  counts_ok "raw, $sharing sharing, 2 workers" 32 2000 \
    --dataset "raw:$tmp/r.raw:1024:16" --sharing $sharing --workers 2
  cp "$tmp/out" "$tmp/raw.$sharing.json"
done
counts_ok "npy-dir, 2 shuffled persistent epochs, out of order" 64 4000 \
  --dataset "npy-dir:$tmp/dir" --epochs 2 --shuffle --persistent \
  --out-of-order
# 5, 12, ..., 999: 143 indices.
counts_ok "npy with a sampler 5:1000:7" 3 143 --dataset "npy:$tmp/a.npy" \
  --seed 3 --indices 5:1000:7

# The files hold the synthetic dataset: the checksums agree.
grep -q "\"checksum\":$sum," "$tmp/dir.fd.json" &&
  grep -q "\"checksum\":$sum," "$tmp/dir.fs.json" &&
  grep -q "\"checksum\":$sum," "$tmp/raw.fd.json" &&
  grep -q "\"checksum\":$sum," "$tmp/raw.fs.json" &&
  grep -q "\"dataset\":\"raw:$tmp/r.raw:1024:16\"}" "$tmp/raw.fs.json"
check $? "npy-dir and raw files give the synthetic dataset's checksum"

forkload run --quiet --dataset "npy:$tmp/a.npy" --verify
[ $? = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -q "^forkload: verify: .*index 0 is wrong from byte 0 .*--seed" \
    "$tmp/err"
check $? "--verify of files gen wrote with another seed fails, exit 1"
# A run that fails writes no state: the last one stays, whole.
cp "$ck/s.state" "$tmp/s.before"
forkload run --quiet --dataset "npy:$tmp/a.npy" --verify \
  --save-state "$ck/s.state"
[ $? = 1 ] && cmp -s "$ck/s.state" "$tmp/s.before" &&
  [ "$(ls -A "$ck" | wc -l)" = "$(ls "$ck" | wc -l)" ]
check $? "a run that fails leaves the state file as it was, and nothing else"

# npy-zip: an array per field, read back side by side, every field of
# every sample verified.
zip="$tmp/zx.npy,$tmp/zy.npy"
gen_ok "gen npy-zip of 2 fields" \
  "^wrote 500 samples of 3080 bytes in 2 fields of 3072,8, seed 0, to \
npy-zip .*: 2 arrays, '<f4' of shape (500, 768), '<f4' of shape (500, 2); \
1540256 bytes\$" \
  npy-zip "$zip" --samples 500 --sample-bytes 3072,8
counts_ok "npy-zip of 2 fields, 2 shuffled epochs" 16 1000 \
  --dataset "npy-zip:$zip" --shuffle --epochs 2
cp "$tmp/out" "$tmp/zip.json"
forkload run --json --quiet --samples 500 --sample-bytes 3072,8 --shuffle \
  --epochs 2 &&
  [ "$(field checksum) $(field bytes)" = \
    "$(sed -n 's/.*"checksum":\([0-9]*\),.*/\1/p' "$tmp/zip.json") 3080000" ]
check $? "npy-zip files give the checksum and bytes of the synthetic fields"
forkload run --quiet --dataset "npy-zip:$zip" --seed 1 --verify
[ $? = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -q "^forkload: verify: .*index 0 field 0 is wrong .*--verify" "$tmp/err"
check $? "--verify of npy-zip files gen wrote with another seed fails, exit 1"
# Field 1 holding field 0's content: field 1 is checked too.
forkload run --quiet --dataset "npy-zip:$tmp/zx.npy,$tmp/zx.npy" --verify
[ $? = 1 ] && grep -q "index 0 field 1 is wrong from byte 0 " "$tmp/err"
check $? "--verify of npy-zip checks field 1 against its own content"
forkload gen npy-zip "$tmp/new.npy,$tmp/zy.npy" --samples 5 \
  --sample-bytes 4,8
[ $? = 1 ] && grep -q "^forkload: gen: .*zy.npy exists (--force" "$tmp/err" &&
  [ ! -e "$tmp/new.npy" ]
check $? "gen npy-zip refused at its second file puts neither in place"

# llm.c token shards (issue 18): 100 windows of 64 + 1 tokens split 34,
# 33, 33 among 3 shards cut from one stream, every window verified.
tok="$tmp/t0.bin,$tmp/t1.bin,$tmp/t2.bin"
gen_ok "gen tokens of 3 shards" \
  "^wrote 100 windows of 64 + 1 tokens in 3 shards, 6403 tokens, seed 5, \
to tokens .*; 15878 bytes\$" \
  tokens "$tok" --samples 100 --seq-len 64 --seed 5
[ "$(od -An -t d4 -N 12 "$tmp/t0.bin" | tr -s ' ')" = " 20240520 1 2177" ] &&
  [ "$(wc -c <"$tmp/t0.bin")" = 5378 ] && [ "$(wc -c <"$tmp/t2.bin")" = 5250 ]
check $? "gen tokens writes llm.c's header, magic, version and count"
counts_ok "tokens of 3 shards, shuffled in 2 workers, 2 epochs" 26 200 \
  --dataset "tokens:$tok:64" --seed 5 --shuffle --epochs 2 --batch-size 8
forkload run --quiet --dataset "tokens:$tok:64" --verify
[ $? = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -q "^forkload: verify: .*index 0 has input token 0 .*--seed" "$tmp/err"
check $? "--verify of token shards gen wrote with another seed fails, exit 1"
forkload run --quiet --dataset "tokens:$tmp/t0.bin,$tmp/a.npy:64"
[ $? = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -q "^forkload: .*a\.npy: magic .*not a token shard" "$tmp/err"
check $? "a file that is no token shard exits 1 naming it"
forkload gen tokens "$tmp/t3.bin,$tmp/t0.bin" --samples 4 --seq-len 8
[ $? = 1 ] && grep -q "^forkload: gen: .*t0.bin exists (--force" "$tmp/err" &&
  [ ! -e "$tmp/t3.bin" ]
check $? "gen tokens refused at its second shard puts neither in place"
bad "gen tokens without --seq-len" \
  "^forkload: gen: tokens takes --samples and --seq-len (required)" \
  gen tokens "$tmp/t9.bin" --samples 4
bad "gen tokens of fewer windows than shards" \
  "^forkload: gen: tokens: 1 windows for 2 shards: each shard needs one$" \
  gen tokens "$tmp/t8.bin,$tmp/t9.bin" --samples 1 --seq-len 8
bad "gen npy --seq-len" "^forkload: --seq-len: only token shards" \
  gen npy "$tmp/x.npy" --samples 1 --sample-bytes 4 --seq-len 8

forkload run --quiet --dataset "npy:$tmp/missing.npy"
[ $? = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -q "^forkload: .*missing\.npy" "$tmp/err"
check $? "a dataset that cannot be opened exits 1 naming the file"

for spec in npy-dir: npy tar:x raw:x raw:x:0 raw:x:0:16 raw::64 raw:x:64: \
  raw:x:abc tokens:x tokens:x:0 tokens::8 tokens:a,,b:8 lmdb:x lmdb:x:0; do
  bad "--dataset $spec" "^forkload: --dataset: .*'$spec'" run --dataset "$spec"
done
bad "--samples with --dataset" "^forkload: --samples: .*--dataset" \
  run --dataset "npy:$tmp/a.npy" --samples 10
bad "--delay-us with --dataset" "^forkload: --delay-us: .*--dataset" \
  exhaust --sharing fd --delay-us 1 --dataset "npy:$tmp/a.npy"
bad "gen without --samples" "^forkload: gen: --samples" \
  gen raw "$tmp/x.raw" --sample-bytes 4
bad "gen of an unknown kind" \
  "^forkload: gen: expected npy-dir, npy, raw, npy-zip, images, lmdb, tokens or webdataset" \
  gen tar "$tmp/x.tar" --samples 1 --sample-bytes 4
bad "gen npy --header-bytes" "^forkload: --header-bytes: " \
  gen npy "$tmp/x.npy" --samples 1 --sample-bytes 4 --header-bytes 8
bad "gen npy-zip of 3 paths for 2 sizes" \
  "^forkload: gen: npy-zip: 3 path(s) for 2 size(s) in --sample-bytes" \
  gen npy-zip "$tmp/p.npy,$tmp/q.npy,$tmp/r.npy" --samples 5 \
  --sample-bytes 3,4
bad "gen npy-dir with a list of sizes" \
  "^forkload: --sample-bytes: a list .*only npy-zip writes .*npy-dir$" \
  gen npy-dir "$tmp/d2" --samples 5 --sample-bytes 3,4
bad "run --dataset npy-dir with a list of sizes" \
  "^forkload: --sample-bytes: does not apply with --dataset" \
  run --dataset "npy-dir:$tmp/dir" --sample-bytes 3,4
bad "--dataset npy-zip with an empty path" \
  "^forkload: --dataset: npy-zip .*'npy-zip:a,,b'" run --dataset npy-zip:a,,b

: >"$tmp/dir/notes.txt"
forkload gen npy-dir "$tmp/dir" --samples 10 --sample-bytes 8
[ $? = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  grep -q "^forkload: gen: .* is not empty (--force" "$tmp/err" &&
  [ "$(ls "$tmp/dir" | wc -l)" = 2001 ]
check $? "gen into a non-empty directory without --force is refused"
forkload gen raw "$tmp/r.raw" --samples 10 --sample-bytes 8
[ $? = 1 ] && grep -q "^forkload: gen: .* exists (--force" "$tmp/err"
check $? "gen over an existing file without --force is refused"
# --force replaces the directory, and all that was in it.
gen_ok "gen npy-dir --force over it" "to npy-dir .*: 10 files " \
  npy-dir "$tmp/dir" --samples 10 --sample-bytes 8 --force
[ "$(ls "$tmp/dir" | wc -l)" = 10 ] && [ ! -e "$tmp/dir/notes.txt" ]
check $? "gen --force leaves the 10 .npy files alone in the directory"
counts_ok "it reads back verified" 1 10 --dataset "npy-dir:$tmp/dir"

# Images (issue 17).  Where the build lacks the decoders, each case checks
# instead that the command says which package is missing.
bad "--image-size without --dataset images:" \
  "^forkload: --image-size: applies only with --dataset images:DIR$" \
  run --image-size 32
bad "--crop takes random or center" "^forkload: --crop: expected 'random'" \
  run --dataset "images:$tmp/img" --crop sideways
bad "--hflip is a probability" "^forkload: --hflip: expected a probability" \
  run --dataset "images:$tmp/img" --hflip 2
forkload gen images "$tmp/img" --samples 24 --classes 3
if grep -q "built without libjpeg-turbo" "$tmp/err"; then
  no_images=1
  check 0 "gen images: this build lacks libjpeg-turbo, and says so"
else
  no_images=""
  [ $? = 0 ] && [ "$(ls "$tmp"/img/class00[0-2]/*.jpg | wc -l)" = 24 ] &&
    [ "$(ls "$tmp/img/class002" | wc -l)" = 8 ]
  check $? "gen images writes 24 JPEGs, 8 in each of 3 class folders"
fi
if [ -n "$no_images" ]; then
  forkload run --dataset "images:$tmp/img"
  [ $? = 1 ] && grep -q "FL_ENOTSUP\|built without" "$tmp/err"
  check $? "run --dataset images: says what the build lacks"
  for n in 1 2 3; do check 0 "images: not built, case $n skipped"; done
else
  counts_ok "images, random crops, float, verified: every label right" 3 24 \
    --dataset "images:$tmp/img" --batch-size 10 --shuffle --float \
    --image-size 32
  forkload run --json --dataset "images:$tmp/img" --crop center --resize 40 \
    --image-size 32x24 --workers 0
  [ $? = 0 ] && [ "$(field samples)" = 24 ] &&
    awk -v r="$(field samples_per_s)" 'BEGIN { exit !(r > 0) }' &&
    [ "$(field bytes)" = $((24 * (32 * 24 * 3 + 8))) ]
  check $? "images, center crop, uint8: samples_per_s in the JSON"
  forkload run --dataset "images:$tmp/img" --image-size 32 --quiet
  grep -q "^images/s " "$tmp/out"
  check $? "the summary counts images/s"
  echo "not a picture" >"$tmp/img/class001/zz.jpg"
  forkload run --dataset "images:$tmp/img" --image-size 32 --quiet
  [ $? = 1 ] && grep -q "zz.jpg: not an image" "$tmp/err"
  check $? "a file that is not an image ends the run, named"
fi

# LMDB: gen writes the samples as values under %08zu keys, run reads them
# back verified; a value over MAX_BYTES ends the run naming its key.
forkload gen lmdb "$tmp/db" --samples 500 --sample-bytes 1000 --seed 4
if grep -q "built without liblmdb" "$tmp/err"; then
  check 0 "gen lmdb: this build lacks liblmdb, and says so"
  for n in 1 2 3; do check 0 "lmdb: not built, case $n skipped"; done
else
  grep -q "^wrote 500 samples of 1000 bytes, seed 4, to lmdb .*: 500 values \
under keys 00000000 to 00000499 in data.mdb; [0-9]* bytes$" "$tmp/out"
  check $? "gen lmdb writes 500 values under keys 00000000 to 00000499"
  counts_ok "lmdb, 2 workers, shuffled, verified" 8 500 \
    --dataset "lmdb:$tmp/db:1000" --seed 4 --shuffle --workers 2
  forkload run --dataset "lmdb:$tmp/db:999" --seed 4 --quiet
  [ $? = 1 ] && grep -q "key '00000000' (sample 0) holds 1000 bytes, more \
than max_bytes 999" "$tmp/err"
  check $? "a value over lmdb's MAX_BYTES ends the run, its key named"
  forkload gen lmdb "$tmp/db" --samples 5 --sample-bytes 8
  [ $? = 1 ] && grep -q "db is not empty (--force replaces it)$" "$tmp/err"
  check $? "gen lmdb over an existing environment needs --force"
fi

# WebDataset tar shards (issue 18), an iterable: each sample once across
# the workers, and across the ranks.  Without libarchive, each case checks
# instead that the command says what is missing.
bad "webdataset: takes EXT=MAX after the shards" \
  "^forkload: --dataset: webdataset takes SHARD" \
  run --dataset "webdataset:$tmp/a.tar"
bad "webdataset: EXT=MAX alone needs --shard" \
  "^forkload: --dataset: webdataset names no shard: .*--shard" \
  run --dataset "webdataset:bin=8"
bad "--shard applies only to webdataset" \
  "^forkload: --shard: applies only with --dataset webdataset:" \
  run --shard "pipe:cat x.tar"
forkload gen webdataset "$tmp/wds" --samples 30 --shards 4 --sample-bytes 64
gen_rc=$?
if grep -q "built without libarchive" "$tmp/err"; then
  check 0 "gen webdataset: this build lacks libarchive, and says so"
  for n in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
    check 0 "webdataset: not built, case $n skipped"
  done
else
  [ $gen_rc = 0 ] && [ "$(ls "$tmp"/wds/shard-0000[0-3].tar | wc -l)" = 4 ]
  check $? "gen webdataset writes 4 tar shards"
  shards=$(ls "$tmp"/wds/*.tar | paste -sd, -)
  forkload run --json --dataset "webdataset:$shards:bin=64,cls=8" \
    --workers 3 --batch-size 4
  [ $? = 0 ] && [ "$(field samples)" = 30 ] &&
    [ "$(field bytes)" = $((30 * 65)) ]
  check $? "run --dataset webdataset: 3 workers read each sample once"
  total=0
  for r in 0 1; do
    forkload run --json --dataset "webdataset:$shards:bin=64,cls=8" \
      --workers 2 --world-size 2 --rank $r
    total=$((total + $(number samples)))
  done
  [ "$total" = 30 ]
  check $? "webdataset: two ranks of 2 workers read the 30 samples once"
  forkload run --dataset "webdataset:$shards:bin=63,cls=8" --quiet
  [ $? = 1 ] && grep -q "shard-00000.tar: 00000000: member 00000000.bin is \
64 bytes, more than its max of 63" "$tmp/err"
  check $? "webdataset: a member over its max ends the run, shard and key named"
  for w in 0 3; do
    forkload run --json --dataset "webdataset:$shards:bin=64,cls=8" \
      --workers $w --batch-size 4 --epochs 2 --verify
    [ $? = 0 ] && [ "$(field samples)" = 60 ]
    check $? "webdataset: --verify, $w workers: each sample once an epoch, \
its bytes and label gen's"
  done
  total=0 failed_rank=
  for r in 0 1 2; do
    forkload run --json --dataset "webdataset:$shards:bin=64" \
      --workers 2 --world-size 3 --rank $r --verify || failed_rank=$r
    total=$((total + $(number samples)))
  done
  [ "$total" = 30 ] && [ -z "$failed_rank" ]
  check $? "webdataset: --verify on 3 ranks: each its shards' samples, 30 in all"
  forkload run --dataset "webdataset:$shards:bin=64" --seed 5 --verify
  [ $? = 1 ] && grep -q "key 00000000's .bin is wrong from byte 0" "$tmp/err"
  check $? "webdataset: --verify with another --seed finds the bytes wrong"
  cp -r "$tmp/wds" "$tmp/wds2"
  # The first member's data starts after its 512-byte header.
  printf 'X' | dd of="$tmp/wds2/shard-00000.tar" bs=1 seek=540 conv=notrunc \
    2>/dev/null
  forkload run --dataset \
    "webdataset:$(ls "$tmp"/wds2/*.tar | paste -sd, -):bin=64" --verify
  [ $? = 1 ] && grep -q "key 00000000's .bin is wrong from byte 28" "$tmp/err"
  check $? "webdataset: --verify finds a byte changed in a shard"
  forkload run --dataset "webdataset:$shards,$tmp/wds/shard-00002.tar:bin=64" \
    --verify
  [ $? = 1 ] && grep -q "hold key 000000[0-9][0-9] twice" "$tmp/err"
  check $? "webdataset: --verify finds a shard listed twice"
  forkload doctor --dataset "webdataset:$shards:bin=64"
  [ $? = 0 ] && grep -q "^loader  *streams of samples of 64 bytes" "$tmp/out"
  check $? "doctor: a stream's samples are not counted as 0"
  # Compressed shards and pipe:COMMAND shards (issue 28): --shard takes
  # one whole, commas, colons and quotes included.
  w=$tmp/wds
  gzip -c "$w/shard-00001.tar" >"$w/shard-00001.tar.gz"
  xz -c "$w/shard-00002.tar" >"$w/shard-00002.tar.xz"
  forkload run --json --workers 2 --dataset "webdataset:$w/shard-00000.tar,\
$w/shard-00001.tar.gz,$w/shard-00002.tar.xz,$w/shard-00003.tar:bin=64,cls=8"
  [ $? = 0 ] && [ "$(field samples)" = 30 ]
  check $? "webdataset: .tar.gz and .tar.xz shards read as plain ones"
  forkload run --json --workers 2 --dataset "webdataset:bin=64,cls=8" \
    --shard "pipe:cat '$w/shard-00000.tar'" \
    --shard "pipe:gzip -dc '$w/shard-00001.tar.gz' | cat" \
    --shard "pipe:xz -dc $w/shard-00002.tar.xz; : a, b: c" \
    --shard "$w/shard-00003.tar"
  [ $? = 0 ] && [ "$(field samples)" = 30 ]
  check $? "webdataset: --shard pipe:COMMAND shards read each sample once"
  forkload run --dataset "webdataset:bin=64,cls=8" --quiet \
    --shard "pipe:cat '$w/shard-00000.tar'; exit 3"
  [ $? = 1 ] && grep -q "pipe:cat '$w/shard-00000.tar'; exit 3: after \
00000006: the tar ends, but the command failed: exit 3" "$tmp/err"
  check $? "webdataset: a command that exits 3 ends the run, named"
  # Over HTTP with curl, from a server of this test's own on 127.0.0.1.
  if ! command -v curl >/dev/null 2>&1; then
    skip "webdataset: pipe:curl shards from http://127.0.0.1:PORT" "no curl"
    skip "webdataset: a curl that gets a 404 ends the run" "no curl"
  else
    /usr/bin/python3 -u -m http.server 0 --bind 127.0.0.1 \
      --directory "$w" >"$tmp/http" 2>&1 &
    server=$!
    port=
    for i in $(seq 100); do
      port=$(sed -n 's/.* port \([0-9]*\).*/\1/p' "$tmp/http")
      [ -n "$port" ] && break
      sleep 0.1
    done
    forkload run --json --workers 2 --dataset "webdataset:bin=64,cls=8" \
      --shard "pipe:curl -sf http://127.0.0.1:$port/shard-00000.tar" \
      --shard "pipe:curl -sf http://127.0.0.1:$port/shard-00001.tar.gz"
    [ $? = 0 ] && [ "$(field samples)" = 15 ]
    check $? "webdataset: pipe:curl shards from http://127.0.0.1:PORT"
    forkload run --dataset "webdataset:bin=64,cls=8" --quiet \
      --shard "pipe:curl -sf http://127.0.0.1:$port/missing.tar"
    [ $? = 1 ] && grep -q "missing.tar: .*; the command: exit 22" "$tmp/err"
    check $? "webdataset: a curl that gets a 404 ends the run, its exit named"
    kill "$server"
    wait "$server" 2>/dev/null
  fi
fi
# What a stream cannot do is said before any shard is opened: these
# shards do not exist.
nowhere="webdataset:$tmp/none-0.tar,$tmp/none-1.tar:bin=64"
bad "webdataset: --indices is refused before a shard is opened" \
  "^forkload: --indices: a webdataset is a stream" \
  run --dataset "$nowhere" --indices 0:4
bad "webdataset: --shuffle is refused before a shard is opened" \
  "^forkload: --shuffle: a webdataset is a stream" \
  run --dataset "$nowhere" --shuffle
bad "webdataset: --verify --resume is refused before a shard is opened" \
  "^forkload: --verify checks a stream's epochs whole, and takes no --resume" \
  run --dataset "$nowhere" --verify --resume "$tmp/none.state"
bad "exhaust: a stream is refused before a shard is opened" \
  "^forkload: exhaust: .* is a stream" \
  exhaust --sharing fd --dataset "$nowhere"

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
