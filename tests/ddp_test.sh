#!/bin/sh
# TAP test of examples/train_ddp under a real mpirun (Open MPI): a run of
# 2 ranks that never stops; one stopped mid-epoch (--stop-after) and
# resumed on 2 ranks prints the same epoch lines and trains on the same
# indices, rank for rank; resumed on 1 and on 3 ranks, every epoch still
# covers every index, repeating exactly the padding of the worlds that
# shared it.  The same for a stop at an epoch's last step, resumed on 2
# and on 3.  --log-indices makes its folder and the missing parents
# (0700).  No run prints a fork warning or leaves a process, a
# /dev/shm name or a file under its TMPDIR.  Without MPI or train_ddp the
# whole program is skipped (exit 77) with the reason.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
bin=$top_builddir/examples/train_ddp
mpirun=${MPIRUN-$(command -v mpirun)}

why=
if [ ! -x "$bin" ]; then
  why="examples/train_ddp is not built: ${FL_MPI_WHY:-no MPI, or no make}"
elif [ -z "$mpirun" ]; then
  why=${FL_MPI_WHY:-"no mpirun (apt-get install openmpi-bin)"}
elif ! "$mpirun" --version 2>/dev/null | grep -q 'Open MPI'; then
  why="$mpirun is not Open MPI's, whose options this test uses"
fi
if [ -n "$why" ]; then
  echo "1..0 # SKIP $why"
  exit 77
fi

scratch_dir
mkdir "$tmp/t"
time_limit 60
# Root, and containers without cross-memory attach (more ranks than cores
# take --oversubscribe, below).
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
  OMPI_MCA_btl_vader_single_copy_mechanism
# Under AddressSanitizer (CI's second pass), LeakSanitizer would report
# what Open MPI never frees: its own tables, and memory of the components it
# unloads at MPI_Finalize, which no suppression can name.  The library's
# own leaks are checked by every other test program of that pass.
if [ -n "${ASAN_OPTIONS+set}" ]; then
  ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
  export ASAN_OPTIONS
fi
# Every process of a run (ranks and workers) carries this in its
# environment, and only they do: the script itself does not export it.
marker=FL_DDP_TEST=$$.$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')

samples=1001 epochs=3 batch=32 # batch: BATCH in examples/train_ddp.c
stop=20 # 2 ranks take 16 steps an epoch: 4 steps into epoch 2

echo "1..10"

# run NAME NP ARGS...: train_ddp on NP ranks, its output in $tmp/NAME.out
# and .err, its index logs in $tmp/logs/NAME/ (train_ddp makes it, and
# $tmp/logs before the first run), its ranks' pids added to $tmp/pids
# (each rank is a shell that writes its pid, then execs).
run() {
  name=$1 np=$2
  shift 2
  env "$marker" TMPDIR="$tmp/t" $limit "$mpirun" -np "$np" --oversubscribe \
    --bind-to none --mca btl self,vader \
    sh -c 'echo $$ >>"$0"; exec "$@"' "$tmp/pids" \
    "$bin" --samples $samples --epochs $epochs --log-indices "$tmp/logs/$name" \
    "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  rc=$?
  [ "$rc" = 0 ] || diag "$name: exit status $rc; output:" \
    "$(cat "$tmp/$name.out")" "standard error:" "$(cat "$tmp/$name.err")"
  return $rc
}

# pad N W: how many indices FL_SHARD_PAD repeats when N samples are split
# among W ranks.
pad() {
  echo $(((($2 - $1 % $2) % $2)))
}

# covered STOP STEP W2 NAME: 0 when, for every epoch, the logs of run
# STOP (2 ranks, stopped after step STEP) and of run NAME (resumed on W2
# ranks) hold every index below $samples, and the only extra lines are
# the padding.  In the k steps STOP had of an epoch each rank took
# min(k * batch, m) samples, m being its share: a prefix of the padded
# order, of 2 * that.  What is left is split among W2 ranks, padded for
# W2.
covered() {
  m=$(((samples + $(pad $samples 2)) / 2))
  steps=$(((m + batch - 1) / batch))
  for e in $(seq 1 $epochs); do
    k=$(($2 - (e - 1) * steps))
    [ $k -lt 0 ] && k=0
    [ $k -gt $steps ] && k=$steps
    took=$((k * batch < m ? k * batch : m))
    gone=$((2 * took))
    left=$((gone < samples ? samples - gone : 0))
    extra=$((gone + left + $(pad $left $3) - samples))
    cat "$tmp/logs/$1"/epoch-$e.rank-* >"$tmp/union" 2>/dev/null
    got=$(wc -l <"$tmp/union")
    cat "$tmp/logs/$4"/epoch-$e.rank-* >>"$tmp/union" 2>/dev/null
    verdict=$(awk -v n=$samples -v want=$((samples + extra)) -v gone=$gone \
      -v got=$got '
      $0 !~ /^[0-9]+$/ || $0 + 0 >= n { bad = bad " " $0; next }
      !seen[$0]++ { distinct++ }
      END {
        if (got != gone) print "the stopped run logged " got ", not " gone
        else if (bad != "") print "indices out of range:" bad
        else if (distinct != n) print distinct " distinct indices, not " n
        else if (NR != want) print NR " lines, not " want
        else print "ok"
      }' "$tmp/union")
    if [ "$verdict" != ok ]; then
      diag "epoch $e, stopped after step $2 on 2 ranks, resumed on $3:" \
        "$verdict"
      return 1
    fi
  done
}

# epoch_lines NAME...: the epoch lines of the runs, in turn.
epoch_lines() {
  for name; do
    grep '^epoch ' "$tmp/$name.out"
  done
}

# as_full STOP NAME: 0 when run STOP, then run NAME resumed from it on 2
# ranks, printed the full run's epoch lines and trained on its indices,
# rank for rank and in order.
as_full() {
  if [ "$(epoch_lines "$1" "$2")" != "$(epoch_lines full)" ]; then
    diag "$(epoch_lines full)" "against" "$(epoch_lines "$1" "$2")"
    return 1
  fi
  for e in $(seq 1 $epochs); do
    for r in 0 1; do
      f=epoch-$e.rank-$r
      cat "$tmp/logs/$1/$f" "$tmp/logs/$2/$f" 2>/dev/null |
        cmp -s - "$tmp/logs/full/$f" ||
        { diag "$f: stopped and resumed differ from the full run"; return 1; }
    done
  done
}

# tell STATUS DESCRIPTION: ok or not_ok; returns STATUS.
tell() {
  if [ "$1" = 0 ]; then ok "$2"; else not_ok "$2"; fi
  return "$1"
}

run full 2 && [ "$(epoch_lines full | wc -l)" = $epochs ]
tell $? "2 ranks: $epochs epoch lines"
[ "$(stat -c %a "$tmp/logs" "$tmp/logs/full")" = "$(printf '700\n700')" ]
tell $? "--log-indices makes its folder and the missing parents, 0700" ||
  diag "$(ls -ld "$tmp/logs" "$tmp/logs/full" 2>&1)"

run stop 2 --checkpoint "$tmp/ck" --checkpoint-every 7 --stop-after $stop &&
  grep -q "^stopped after step $stop: checkpoint in $tmp/ck\$" \
    "$tmp/stop.out" && [ -s "$tmp/ck" ] &&
  [ -z "$(find "$tmp" -maxdepth 1 -name 'ck.*')" ]
tell $? "2 ranks stopped after step $stop: a checkpoint, no temporary file"

run res2 2 --resume "$tmp/ck" && as_full stop res2
tell $? "resumed on 2 ranks: the full run's epoch lines and indices"

for w in 1 3; do
  run res$w $w --resume "$tmp/ck" &&
    [ "$(epoch_lines stop res$w | wc -l)" = $epochs ] &&
    covered stop $stop $w res$w
  tell $? "resumed on $w rank(s): every index, repeats only the padding"
done

# A stop at an epoch's last step: the state starts the next epoch, and
# the resumed run prints the line of the one that ended.
run end 2 --checkpoint "$tmp/ck-end" --stop-after 16 &&
  run end2 2 --resume "$tmp/ck-end" && as_full end end2
tell $? "stopped at an epoch's end, resumed on 2 ranks: as the full run"
run end3 3 --resume "$tmp/ck-end" && covered end 16 3 end3
tell $? "stopped at an epoch's end, resumed on 3 ranks: every index"

# Open MPI's warning names "fork()" and its mpi_warn_on_fork parameter.
fork=$(grep -El 'fork\(\)|warn_on_fork' "$tmp"/*.err)
[ -z "$fork" ]
tell $? "no fork warning on standard error" || diag "$(cat $fork)"

# Nothing of the runs is left: no process, no /dev/shm name of a rank, no
# file under the TMPDIR they were given (datasets, Open MPI's session).
procs=$(grep -alF "$marker" /proc/[0-9]*/environ 2>/dev/null)
names=
for pid in $(cat "$tmp/pids"); do
  names="$names$(ls /dev/shm | grep "^forkload\.$pid\.")"
done
[ -z "$procs" ] && [ -z "$names" ] && [ -z "$(ls -A "$tmp/t" 2>/dev/null)" ]
tell $? "no process, /dev/shm name or temporary file is left" ||
  diag "processes: $procs" "names: $names" "files: $(ls -A "$tmp/t")"

exit $failed
