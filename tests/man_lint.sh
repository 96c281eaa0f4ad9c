#!/bin/sh
# Checks the manual pages, with TAP output:
#   1-2  mandoc -Tlint -W warning finds nothing in forkload.1 and forkload.3;
#   3    every long option of the CLI (the getopt_long tables in
#        examples/*.c, but for the train_* programs, which are not the
#        CLI) appears in the rendered forkload.1;
#   4    every public name of lib/forkload.h (tools/man-links.sh -h: its
#        functions, function-like macros and types) is in forkload.3's
#        NAME (.Nm) or, for a type, in a .Vt line;
#   5    every .Xr names a page that exists: forkload(1), forkload(3), or
#        one of the system's pages (where the system has its section);
#   6    installed with `make install-data` into a scratch directory, each
#        public name is a page of its own that is forkload.3 (man -w),
#        where man-db's man(1) is there.
# Exits 77 (skip) when mandoc is not installed.

top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
man1=$top_srcdir/man/forkload.1
man3=$top_srcdir/man/forkload.3
header=$top_srcdir/lib/forkload.h

if ! command -v mandoc >/dev/null 2>&1; then
  echo "1..0 # SKIP mandoc is not installed"
  exit 77
fi

. "$top_srcdir/tests/tap.sh"

echo "1..6"

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
options=$(for f in "$top_srcdir"/examples/*.c; do
  case $f in */train_*) ;; *) cat "$f" ;; esac
done 2>/dev/null | tr '{' '\n' |
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

# Case 4: the public names, as `make install` links them.
names=$(sh "$top_srcdir/tools/man-links.sh" -h "$header" 2>/dev/null)
missing=
for name in $names; do
  grep -Eq "^\.Nm $name( |\$)" "$man3" ||
    grep -Eq "^\.Vt .*[^A-Za-z0-9_]\(?\*?$name\)?[ (;]" "$man3" ||
    missing="$missing $name"
done
if [ -n "$names" ] && [ -z "$missing" ]; then
  ok "forkload.3 names every public function, macro and type"
else
  not_ok "forkload.3 names every public function, macro and type"
  diag "missing:${missing:- (no public name found in $header)}"
fi

# Case 5: no reference to a page that does not exist.
bad=
for page in "$man1" "$man3"; do
  refs=$(sed -n 's/^\.Xr \([A-Za-z0-9_.-]*\) \([1-9]\).*/\1.\2/p' "$page")
  for r in $refs; do
    name=${r%.*} sec=${r##*.}
    case $name.$sec in
    forkload.1 | forkload.3) continue ;;
    esac
    [ -d "/usr/share/man/man$sec" ] || continue
    ls "/usr/share/man/man$sec/$name.$sec"* >/dev/null 2>&1 ||
      bad="$bad $(basename "$page"):$name($sec)"
  done
done
if [ -z "$bad" ]; then
  ok "every .Xr names a page that exists"
else
  not_ok "every .Xr names a page that exists"
  diag "no such page:$bad"
fi

# Case 6: `man NAME` opens forkload.3, as installed.
if ! command -v man >/dev/null 2>&1 || [ ! -f "$top_builddir/Makefile" ]; then
  skip "man NAME opens forkload(3)" "no man(1), or no Makefile"
else
  dest=$(mktemp -d "${TMPDIR:-/tmp}/forkload-man.XXXXXX")
  mandir=$dest/man
  wrong=
  if make -C "$top_builddir" install-data DESTDIR="$dest" \
    mandir=/man >"$dest/log" 2>&1; then
    for n3 in $names; do
      got=$(man -M "$mandir" -w "$n3" 2>/dev/null)
      [ -n "$got" ] && [ "$(readlink -f "$got")" = \
        "$(readlink -f "$mandir/man3/forkload.3")" ] || wrong="$wrong $n3"
    done
  else
    wrong="(make install-data failed: $(tail -3 "$dest/log"))"
  fi
  rm -rf "$dest"
  if [ -n "$names" ] && [ -z "$wrong" ]; then
    ok "man NAME opens forkload(3) for each public name, as installed"
  else
    not_ok "man NAME opens forkload(3) for each public name, as installed"
    diag "not so:$wrong"
  fi
fi

exit $failed
