#!/bin/sh
# TAP test of the ABI promise and of the one version source:
#   1  tests/abi/forkload-0.1.0.h is 0.1.0's header (no sized functions);
#   2  a program built against it links with the current libforkload.so
#      and calls the 0.1 entry points by their 0.1 names;
#   3  it runs: the library reads and writes the 0.1 structs exactly as 0.1
#      laid them out (canaries after each), over two epochs, a .npy
#      dataset and an iterable one;
#   4  the SONAME is still libforkload.so.0;
#   5  forkload --version, the header's FL_VERSION_* and fl_version() at run
#      time all say configure's version.
# Cases 2-4 are skipped where no shared library was built.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
CC=${CC:-cc}
libs=$top_builddir/.libs
old=$top_srcdir/tests/abi/forkload-0.1.0.h
tmp=$(mktemp -d "${TMPDIR:-/tmp}/forkload-abi.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

echo "1..5"

if grep -q '_sized' "$old" || ! grep -q 'FL_VERSION_MINOR 1$' "$old"; then
  not_ok "forkload-0.1.0.h is 0.1.0's header"
else
  ok "forkload-0.1.0.h is 0.1.0's header"
fi

if [ ! -f "$libs/libforkload.so" ]; then
  skip "a 0.1 program links with this library" "no shared library built"
  skip "a 0.1 program runs with this library" "no shared library built"
  skip "the SONAME is libforkload.so.0" "no shared library built"
else
  # shellcheck disable=SC2086 # CFLAGS and LDFLAGS are word lists
  if $CC $CFLAGS -I"$top_srcdir/tests/abi" \
    -o "$tmp/old" "$top_srcdir/tests/abi/old_program.c" \
    -L"$libs" -lforkload $LDFLAGS 2>"$tmp/err" &&
    nm -D --undefined-only "$tmp/old" >"$tmp/syms" &&
    grep -q ' fl_loader_create$' "$tmp/syms" &&
    grep -q ' fl_options_init$' "$tmp/syms" &&
    ! grep -q '_sized$' "$tmp/syms"; then
    ok "a 0.1 program links with this library, by the 0.1 names"
  else
    not_ok "a 0.1 program links with this library, by the 0.1 names"
    diag "$(cat "$tmp/err" "$tmp/syms" 2>/dev/null)"
  fi
  if out=$(LD_LIBRARY_PATH="$libs" "$tmp/old" 2>&1) && [ "$out" = ok ]; then
    ok "a 0.1 program runs with this library, its structs used as 0.1's"
  else
    not_ok "a 0.1 program runs with this library, its structs used as 0.1's"
    diag "$out"
  fi
  soname=$(readelf -d "$libs/libforkload.so" 2>/dev/null |
    sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
  if [ "$soname" = libforkload.so.0 ]; then
    ok "the SONAME is libforkload.so.0"
  else
    not_ok "the SONAME is libforkload.so.0"
    diag "SONAME: $soname"
  fi
fi

cat >"$tmp/version.c" <<'PROG'
#include <stdio.h>
#include <string.h>
#include <forkload.h>
int
main(void)
{
  printf("%d.%d.%d %s %s %d\n", FL_VERSION_MAJOR, FL_VERSION_MINOR,
         FL_VERSION_PATCH, FL_VERSION_STRING, fl_version_string(),
         fl_version() == FL_VERSION_HEX);
  return 0;
}
PROG
v=$PACKAGE_VERSION
# shellcheck disable=SC2086
if $CC $CFLAGS -I"$top_srcdir/lib" -I"$top_builddir/lib" -o "$tmp/version" \
  "$tmp/version.c" "$libs/libforkload.a" -luv -lrt -lpthread $LDFLAGS \
  2>"$tmp/err" &&
  [ "$("$tmp/version")" = "$v $v $v 1" ] &&
  [ "$("$top_builddir/examples/forkload" --version)" = "forkload $v" ]; then
  ok "forkload --version, FL_VERSION_* and fl_version() say $v"
else
  not_ok "forkload --version, FL_VERSION_* and fl_version() say $v"
  diag "$(cat "$tmp/err")" "$("$tmp/version" 2>&1)" \
    "$("$top_builddir/examples/forkload" --version 2>&1)"
fi

exit $failed
