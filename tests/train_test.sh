#!/bin/sh
# TAP test of examples/train_linear, the classifier trained on X.npy and
# y.npy read through forkload as two fields: on a small dataset, shared
# through /dev/shm by name, it exits 0, prints one loss line per epoch with
# a falling loss, the waiting time and the line stating the final loss is
# below its bound; it leaves no /dev/shm name of its pid and removes its
# temporary files.  A second run, given a directory, keeps both files,
# with valid .npy headers.  Built from the files the `cc` line of
# doc/datasets.md names, it prints that guide's losses.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
bin=$top_builddir/examples/train_linear
epochs=8 # EPOCHS in examples/train_linear.c
tmp=$(mktemp -d "${TMPDIR:-/tmp}/forkload-train.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
limit=
command -v timeout >/dev/null 2>&1 && limit="timeout -k 5 60"

echo "1..8"

if [ ! -x "$bin" ]; then
  for i in 1 2 3 4 5 6 7 8; do
    skip "train_linear case $i" "$bin is not built"
  done
  exit 0
fi

# report DESCRIPTION STATUS [WHY]: one case, with WHY and the run's output
# when it fails.
report() {
  if [ "$2" = 0 ]; then
    ok "$1"
  else
    not_ok "$1"
    diag "${3:-exit status $rc}; output:" "$(cat "$tmp/out")" \
      "standard error:" "$(cat "$tmp/err")"
  fi
}

# In the background, so that $! is its pid, which its /dev/shm names hold
# (not under timeout(1), whose pid $! would be: run-test.sh bounds the
# whole script).
mkdir "$tmp/t"
TMPDIR=$tmp/t "$bin" -n 1200 -s fs >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait $pid
rc=$?
[ "$rc" = 0 ]
report "train_linear -n 1200 -s fs exits 0" $?

# Lines read "epoch E: loss L, accuracy A".
verdict=$(awk -v want="$epochs" '
  $1 == "epoch" && $3 == "loss" {
    n++; loss = $4 + 0; if (n == 1) first = loss; last = loss
  }
  END {
    if (n != want) print "found " n " loss lines, not " want
    else if (!(last < first / 2)) print "the loss went from " first " to " last
    else print "ok"
  }
' "$tmp/out")
[ "$verdict" = ok ]
report "it prints $epochs epochs and the loss falls by half or more" $? \
  "$verdict"

grep -Eq "^waited [0-9.]+ s for data over $epochs epochs\$" "$tmp/out"
report "it says how long it waited for data" $?

grep -Eq '^final loss 0\.[0-9]+ < 0\.5: ok$' "$tmp/out"
report "it states that the final loss is below its bound" $?

left=$(ls /dev/shm 2>/dev/null | grep "^forkload\.$pid\.")
[ -z "$left" ]
report "no /dev/shm name of its pid $pid is left" $? "left behind: $left"

[ -z "$(ls -A "$tmp/t")" ]
report "its temporary directory under TMPDIR is removed" $?

# Given a directory, the files stay: magic, version 1.0, the dict, aligned
# data.  0x76: the 118 bytes of the dict that take the data to byte 128.
$limit "$bin" -n 100 "$tmp/data" >"$tmp/out" 2>"$tmp/err"
rc=$?
x=$tmp/data/X.npy y=$tmp/data/y.npy
[ "$rc" -le 1 ] && [ -f "$x" ] && [ -f "$y" ] &&
  [ "$(head -c 10 "$x" | od -An -tx1 | tr -d ' \n')" = \
    934e554d505901007600 ] &&
  head -c 128 "$x" | grep -aq \
    "{'descr': '<f4', 'fortran_order': False, 'shape': (100, 16), }  *\$" &&
  [ "$(wc -c <"$x")" = $((128 + 100 * 16 * 4)) ] &&
  head -c 128 "$y" | grep -aq \
    "{'descr': '<i8', 'fortran_order': False, 'shape': (100,), }  *\$" &&
  [ "$(wc -c <"$y")" = $((128 + 100 * 8)) ]
report "given a directory, it keeps X.npy (100, 16) and y.npy (100,) there" \
  $?

# doc/datasets.md builds it with `cc FILES $(pkg-config ...) -lm -o
# train_linear`: FILES from examples/, linked here with the static
# library, must build a program that prints the guide's lines but the
# time it waited.
guide=$top_srcdir/doc/datasets.md
files=$(sed -n 's/^    \$ cc \(.*\) \$(pkg-config .* -o train_linear$/\1/p' \
  "$guide")
src=
for f in $files; do
  src="$src $top_srcdir/examples/$f"
done
sed -n '/^    \$ \.\/train_linear$/,/^$/p' "$guide" |
  sed -e '1d' -e '$d' -e 's/^    //' | grep -v '^waited ' >"$tmp/want"
: >"$tmp/out"
# shellcheck disable=SC2086 # $src and $CFLAGS are lists of words
[ -n "$files" ] && [ -s "$tmp/want" ] &&
  ${CC:-cc} $CFLAGS $LDFLAGS -std=gnu11 -I"$top_srcdir/lib" \
    -I"$top_builddir/lib" -o "$tmp/readme_linear" $src \
    "$top_builddir/.libs/libforkload.a" $(pkg-config --libs libuv) -lrt \
    -lpthread -lm >"$tmp/err" 2>&1 &&
  TMPDIR=$tmp/t $limit "$tmp/readme_linear" >"$tmp/all" 2>"$tmp/err" &&
  grep -v '^waited ' "$tmp/all" >"$tmp/out" && cmp -s "$tmp/want" "$tmp/out"
rc=$?
report "built from the guide's cc line ($files), it prints the guide's losses" \
  $rc "expected:
$(cat "$tmp/want")"

exit $failed
