#!/bin/sh
# Checks the manual pages, with TAP output:
#   1-2  mandoc -Tlint -W warning finds nothing in forkload.1 and forkload.3;
#   3    every long option of the CLI (the getopt_long tables in
#        examples/*.c) appears in the rendered forkload.1;
#   4    every FL_EXTERN function of lib/forkload.h appears in forkload.3
#        as .Fn, .Fo or .Nm.
# Exits 77 (skip) when mandoc is not installed.

top_srcdir=${top_srcdir:-$(dirname "$0")/..}
man1=$top_srcdir/man/forkload.1
man3=$top_srcdir/man/forkload.3
header=$top_srcdir/lib/forkload.h

if ! command -v mandoc >/dev/null 2>&1; then
  echo "1..0 # SKIP mandoc is not installed"
  exit 77
fi

. "$top_srcdir/tests/tap.sh"

echo "1..4"

for page in "$man1" "$man3"; do
  name=$(basename "$page")
  if [ ! -f "$page" ]; then
    not_ok "$name: mandoc -Tlint -W warning is silent"
    diag "$page does not exist"
    continue
  fi
  out=$(mandoc -Tlint -W warning "$page" 2>&1)
  if [ -z "$out" ]; then
    ok "$name: mandoc -Tlint -W warning is silent"
  else
    not_ok "$name: mandoc -Tlint -W warning is silent"
    diag "$out"
  fi
done

# Case 3: the CLI's long options, from lines such as
#   {"batch-size", required_argument, NULL, 'b'},
options=$(cat "$top_srcdir"/examples/*.c 2>/dev/null | tr '{' '\n' |
  grep -E '^ *"[a-z][a-z0-9-]*" *, *(no_argument|required_argument|optional_argument|[012]) *,' |
  sed 's/^ *"\([^"]*\)".*/\1/')

bs=$(printf '\b')
# One very wide line per paragraph, so that no option is split.
text=$(mandoc -Tascii -O width=1000 "$man1" 2>/dev/null | sed "s/.$bs//g")
missing=
for opt in $options; do
  printf '%s\n' "$text" | grep -Eq -e "--$opt([^a-z0-9-]|\$)" ||
    missing="$missing --$opt"
done
if [ -n "$text" ] && [ -n "$options" ] && [ -z "$missing" ]; then
  ok "forkload.1 documents every option of the CLI"
else
  not_ok "forkload.1 documents every option of the CLI"
  diag "missing:${missing:- (forkload.1 did not render, or no getopt_long table in examples/*.c)}"
fi

# Case 4: the public functions.
functions=$(sed -n \
  's/^FL_EXTERN[^(]*[^A-Za-z0-9_]\([A-Za-z_][A-Za-z0-9_]*\)(.*/\1/p' \
  "$header" 2>/dev/null)
missing=
for f in $functions; do
  grep -Eq "^\.(Fn|Fo|Nm) $f( |\$)" "$man3" 2>/dev/null ||
    missing="$missing $f"
done
if [ -n "$functions" ] && [ -z "$missing" ]; then
  ok "forkload.3 documents every FL_EXTERN function"
else
  not_ok "forkload.3 documents every FL_EXTERN function"
  diag "missing:${missing:- (no FL_EXTERN function found in $header)}"
fi

exit $failed
