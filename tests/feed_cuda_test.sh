#!/bin/sh
# TAP test of examples/feed_cuda, the loop that feeds a GPU:
#   1  configure found CUDA, and make built it: a program of its own, not
#      libtool's wrapper, that needs no libcudart.so where it runs;
#   2  --help prints its usage and exits 0; a bad option, or a sample
#      size that is not a multiple of 8, exits 2;
#   3  with no device it may see (CUDA_VISIBLE_DEVICES empty), it says so
#      in one sentence on standard error, prints nothing else and exits
#      77 (CI has no GPU: this is what it sees there);
#   4  left to find a device: where there is one, short runs, overlapped
#      and pinned, serial, and pageable, exit 0 with a line for each of
#      their 2 epochs, every batch's sum checked on the GPU; where there
#      is none, it exits 77 as in 3, and the case is skipped saying so.
# Where configure did not use CUDA the whole script is skipped (exit 77),
# with the reason.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
bin=$top_builddir/examples/feed_cuda

# configure's word first: a feed_cuda left by an earlier build with CUDA
# is not this build's.
if [ -n "${FL_CUDA_WHY-}" ] || [ ! -x "$bin" ]; then
  echo "1..0 # SKIP examples/feed_cuda is not built: ${FL_CUDA_WHY:-configure found no CUDA}"
  exit 77
fi
scratch_dir
time_limit 120
# AddressSanitizer's shadow memory takes addresses the CUDA driver wants.
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}protect_shadow_gap=0
export ASAN_OPTIONS
echo "1..4"

name="examples/feed_cuda is built, a program that needs no libcudart.so"
if ! head -c 4 "$bin" | grep -q ELF; then
  not_ok "$name"
  diag "$bin is not an ELF program (libtool's wrapper script?)"
elif command -v ldd >/dev/null 2>&1 && ldd "$bin" | grep -q libcudart; then
  not_ok "$name"
  diag "$(ldd "$bin")"
else
  ok "$name"
fi

name="--help exits 0 with the usage; bad usage exits 2"
$limit "$bin" --help >"$tmp/help" 2>&1
rc_help=$?
$limit "$bin" --no-such-option >/dev/null 2>&1
rc_bad=$?
$limit "$bin" --sample-bytes 20 >/dev/null 2>&1
rc_size=$?
if [ "$rc_help" -eq 0 ] && grep -q '^usage: feed_cuda' "$tmp/help" &&
  [ "$rc_bad" -eq 2 ] && [ "$rc_size" -eq 2 ]; then
  ok "$name"
else
  not_ok "$name"
  diag "--help: $rc_help, --no-such-option: $rc_bad," \
    "--sample-bytes 20: $rc_size" "$(cat "$tmp/help")"
fi

# A program without a device: exit 77, stdout empty, one line on stderr,
# one sentence ending with a full stop.
without_device() {
  [ "$1" -eq 77 ] && [ ! -s "$tmp/out" ] &&
    [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
    grep -q '^feed_cuda: .*\.$' "$tmp/err"
}
name="without a device it says so in one sentence and exits 77"
CUDA_VISIBLE_DEVICES= $limit "$bin" >"$tmp/out" 2>"$tmp/err"
rc=$?
if without_device $rc; then
  ok "$name"
else
  not_ok "$name"
  diag "exit status $rc" "stdout:" "$(cat "$tmp/out")" \
    "stderr:" "$(cat "$tmp/err")"
fi

name="with a device, pinned and overlapped, serial, and pageable runs check every batch"
small="--batches 12 --batch-size 8 --sample-bytes 4096 --workers 2 --step-ms 0.2"
$limit "$bin" $small >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 77 ] && without_device $rc; then
  skip "$name" "no CUDA device here: $(cat "$tmp/err")"
else
  bad=
  for flags in "" --no-overlap --no-pin; do
    $limit "$bin" $small $flags >"$tmp/out" 2>"$tmp/err"
    rc=$?
    epochs=$(grep -c '^epoch [12]: 12 batches' "$tmp/out")
    if [ "$rc" -ne 0 ] || [ "$epochs" -ne 2 ] || [ -s "$tmp/err" ]; then
      bad=1
      diag "flags '$flags': exit status $rc" "stdout:" "$(cat "$tmp/out")" \
        "stderr:" "$(cat "$tmp/err")"
    fi
  done
  if [ -z "$bad" ]; then ok "$name"; else not_ok "$name"; fi
fi

exit $failed
