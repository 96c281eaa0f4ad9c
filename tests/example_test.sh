#!/bin/sh
# Runs the examples, with TAP output:
#   1  the EXAMPLES section of forkload.3 holds a program and its output;
#   2  that program compiles with -Wall -Wextra -Werror;
#   3  linked with the static library it exits 0 and prints what the page
#      promises;
#   4  examples/train_min exits 0, prints one loss line per epoch, and the
#      last loss is lower than the first;
#   5  the README's first C program ("first-c") compiles, links and exits 0;
#   6  the program of doc/datasets.md's "A folder of images"
#      ("image-folder") compiles and trains on a folder that
#      `forkload gen images` writes.
# A block is found by the name its fence gives it, ```c run=NAME, in
# README.md or doc/*.md (tests/docs_test.sh holds each such block to
# being named here).
# Cases 3 to 6 are skipped while the library or train_min is not built,
# and case 6 where the build lacks the image decoders.
# CC, CFLAGS and LDFLAGS come from make check, so that a sanitizer build
# links its instrumented library with the same flags.

top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
man3=$top_srcdir/man/forkload.3
lib=$top_builddir/.libs/libforkload.a
train_min=$top_builddir/examples/train_min
epochs=3 # EPOCHS in examples/train_min.c
CC=${CC:-cc}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/forkload-example.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

. "$top_srcdir/tests/tap.sh"
# Runs a command under a time limit when timeout(1) is there.
limited() {
  if command -v timeout >/dev/null 2>&1; then
    timeout -k 5 60 "$@"
  else
    "$@"
  fi
}

echo "1..6"

# Case 1: write each literal block of EXAMPLES to $tmp/block.N, with the
# roff escapes undone (\& dropped, \- to -, \e to a backslash).
awk -v dir="$tmp" '
  /^\.Sh / { in_ex = ($2 == "EXAMPLES"); next }
  in_ex && /^\.Bd -literal/ { inblock = 1; nblock++; next }
  inblock && /^\.Ed/ { inblock = 0; close(file); next }
  inblock {
    file = dir "/block." nblock
    line = $0
    gsub(/\\&/, "", line)
    gsub(/\\-/, "-", line)
    gsub(/\\e/, "\\", line)
    print line > file
  }
' "$man3"
prog=
expected=
i=1
while [ -f "$tmp/block.$i" ]; do
  if grep -q '^#include' "$tmp/block.$i"; then
    prog=$tmp/block.$i
    [ "$i" -gt 1 ] && expected=$tmp/block.$((i - 1))
    break
  fi
  i=$((i + 1))
done
if [ -n "$prog" ] && [ -n "$expected" ]; then
  cp "$prog" "$tmp/example.c"
  ok "forkload.3 EXAMPLES holds a program and the output it promises"
else
  not_ok "forkload.3 EXAMPLES holds a program and the output it promises"
  diag "no .Bd -literal block with #include, after the one showing its output"
fi

# Case 2: it compiles cleanly.
compiled=0
if [ -f "$tmp/example.c" ] &&
  $CC $CFLAGS -std=gnu11 -Wall -Wextra -Werror -I"$top_srcdir/lib" \
    -I"$top_builddir/lib" -c "$tmp/example.c" -o "$tmp/example.o" \
    >"$tmp/cc.out" 2>&1; then
  compiled=1
  ok "the forkload.3 example compiles with -Wall -Wextra -Werror"
else
  not_ok "the forkload.3 example compiles with -Wall -Wextra -Werror"
  [ -f "$tmp/cc.out" ] && diag "$(cat "$tmp/cc.out")"
fi

# Case 3: linked with the library, it runs and prints what it promises.
if [ ! -f "$lib" ]; then
  skip "the forkload.3 example runs and prints its promised output" \
    "$lib is not built"
elif [ "$compiled" -ne 1 ]; then
  not_ok "the forkload.3 example runs and prints its promised output"
  diag "it did not compile"
elif ! $CC $CFLAGS $LDFLAGS -o "$tmp/example" "$tmp/example.o" "$lib" \
  $(pkg-config --libs libuv) -lrt -lpthread -lm >"$tmp/ld.out" 2>&1; then
  not_ok "the forkload.3 example runs and prints its promised output"
  diag "it does not link:" "$(cat "$tmp/ld.out")"
else
  limited "$tmp/example" >"$tmp/example.out" 2>"$tmp/example.err"
  rc=$?
  if [ "$rc" -eq 0 ] && cmp -s "$expected" "$tmp/example.out"; then
    ok "the forkload.3 example runs and prints its promised output"
  else
    not_ok "the forkload.3 example runs and prints its promised output"
    diag "exit status $rc; expected output:" "$(cat "$expected")" \
      "output:" "$(cat "$tmp/example.out")" \
      "standard error:" "$(cat "$tmp/example.err")"
  fi
fi

# Case 4: the training loop learns.
if [ ! -x "$train_min" ]; then
  skip "train_min prints $epochs falling losses" "$train_min is not built"
else
  limited "$train_min" >"$tmp/train.out" 2>"$tmp/train.err"
  rc=$?
  # Lines read "epoch N: loss L over S samples".
  verdict=$(awk -v want="$epochs" '
    $1 == "epoch" && $3 == "loss" { n++; if (n == 1) first = $4 + 0; last = $4 + 0 }
    END {
      if (n != want) print "found " n " loss lines, not " want
      else if (!(last < first)) print "the loss went from " first " to " last
      else print "ok"
    }
  ' "$tmp/train.out")
  if [ "$rc" -eq 0 ] && [ "$verdict" = ok ]; then
    ok "train_min prints $epochs falling losses"
  else
    not_ok "train_min prints $epochs falling losses"
    diag "exit status $rc; $verdict" "output:" "$(cat "$tmp/train.out")" \
      "standard error:" "$(cat "$tmp/train.err")"
  fi
fi

# Cases 5 and 6: the documents' programs are real code, the block
# marked ```c run=NAME in NAME.c.
awk '/^```c run=/ { f = substr($2, 5) ".c"; next } /^```$/ { f = "" }
     f != "" { print > (dir "/" f) }' dir="$tmp" \
  "$top_srcdir/README.md" "$top_srcdir"/doc/*.md
if [ ! -f "$lib" ]; then
  skip "the README's program compiles and runs" "$lib is not built"
elif [ -s "$tmp/first-c.c" ] &&
  $CC $CFLAGS $LDFLAGS -std=gnu11 -Wall -Wextra -Werror \
    -I"$top_srcdir/lib" -I"$top_builddir/lib" -o "$tmp/first-c" \
    "$tmp/first-c.c" "$lib" \
    $(pkg-config --libs libuv) -lrt -lpthread -lm >"$tmp/first-c.out" 2>&1 &&
  limited "$tmp/first-c" >>"$tmp/first-c.out" 2>&1; then
  ok "the README's program compiles and runs"
else
  not_ok "the README's program compiles and runs"
  diag "$(cat "$tmp/first-c.out")"
fi

# Case 6: the image program, in a directory holding the folder "train";
# linked with the static library, so with every library forkload.pc says
# it needs (the decoders configure found among them).
images=$(grep -c '^#define HAVE_\(LIBJPEG\|SPNG\) 1' "$top_builddir/config.h")
name="the guide's image program trains on a folder gen images wrote"
if [ ! -f "$lib" ] || [ ! -x "$top_builddir/examples/forkload" ]; then
  skip "$name" "$lib or examples/forkload is not built"
elif [ "$images" != 2 ]; then
  skip "$name" "this build lacks libjpeg-turbo or libspng"
elif [ -s "$tmp/image-folder.c" ] &&
  $CC $CFLAGS $LDFLAGS -std=gnu11 -Wall -Wextra -Werror \
    -I"$top_srcdir/lib" -I"$top_builddir/lib" -o "$tmp/image-folder" \
    "$tmp/image-folder.c" "$lib" $(pkg-config --libs $(sed -n \
      's/^Requires.private: //p' "$top_builddir/forkload.pc")) \
    -lrt -lpthread -lm >"$tmp/image-folder.out" 2>&1 &&
  "$top_builddir/examples/forkload" gen images "$tmp/train" --samples 40 \
    --classes 4 >>"$tmp/image-folder.out" 2>&1 &&
  (cd "$tmp" && limited ./image-folder) >>"$tmp/image-folder.out" 2>&1; then
  ok "$name"
else
  not_ok "$name"
  diag "$(cat "$tmp/image-folder.out")"
fi

exit $failed
