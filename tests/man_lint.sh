#!/bin/sh
# Checks the manual pages, man/*.[1-9], with TAP output:
#   for each page:
#     mandoc -Tlint -W warning finds nothing in it;
#     it renders to at most 900 lines at 80 columns, with mandoc and, where
#     it is there, man-db's man -l;
#   then:
#     every long option of the CLI (the getopt_long tables in examples/*.c,
#     but for the train_* and feed_* programs, which are not the CLI, and
#     whose options their own comments and usage give) appears in the
#     rendered page of its command, forkload-NAME.1 for the file that
#     defines the command NAME (its struct cli_command), forkload.1 for
#     the options the commands share; and every command has its page;
#     every public name of lib/forkload.h (tools/man-links.sh -h: its
#     functions, function-like macros and types) and of the Python module
#     (forkload.NAME for each NAME of its __all__, forkload.datasets.NAME
#     for each of forkload.datasets') is documented by exactly
#     one page: in its NAME section (.Nm) or, for a type, in a typedef of
#     its SYNOPSIS (.Vt), as tools/man-links.sh reads them;
#     every name a section 3 page documents so is a public name of the
#     header or the module, or the page's own (forkload);
#     every .Xr names a page that exists: one of ours, a name one of ours
#     documents, or one of the system's pages (where the system has its
#     section);
#     `make install-data` into a scratch directory installs every page;
#     installed so, man -w NAME opens the page that documents NAME, for
#     each name of every page, where man-db's man(1) is there.
# Exits 77 (skip) when mandoc is not installed.

top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
header=$top_srcdir/lib/forkload.h
links_sh=$top_srcdir/tools/man-links.sh
max_lines=900

if ! command -v mandoc >/dev/null 2>&1; then
  echo "1..0 # SKIP mandoc is not installed"
  exit 77
fi

. "$top_srcdir/tests/tap.sh"

pages=$(ls "$top_srcdir"/man/*.[1-9] 2>/dev/null)
npages=$(printf '%s\n' "$pages" | grep -c .)
echo "1..$((2 * npages + 6))"

bs=$(printf '\b')
# One very wide line per paragraph, so that no option is split.
render() {
  mandoc -Tascii -O width=1000 "$1" 2>/dev/null | sed "s/.$bs//g"
}
# man-db renders with groff, whose lines can differ from mandoc's.
have_man_l=
command -v man >/dev/null 2>&1 && [ -n "$pages" ] &&
  [ -n "$(MANWIDTH=80 man -l "${pages%%
*}" 2>/dev/null | head -1)" ] && have_man_l=1

for page in $pages; do
  name=$(basename "$page")
  out=$(mandoc -Tlint -W warning "$page" 2>&1)
  if [ -z "$out" ]; then
    ok "$name: mandoc -Tlint -W warning is silent"
  else
    not_ok "$name: mandoc -Tlint -W warning is silent"
    diag "$out"
  fi

  lines=$(mandoc -Tascii -O width=80 "$page" 2>/dev/null | wc -l)
  how="mandoc $lines"
  if [ -n "$have_man_l" ]; then
    groff_lines=$(MANWIDTH=80 man -l "$page" 2>/dev/null | wc -l)
    how="$how, man-db $groff_lines"
    [ "$groff_lines" -gt "$lines" ] && lines=$groff_lines
  fi
  if [ "$lines" -gt 0 ] && [ "$lines" -le "$max_lines" ]; then
    ok "$name: at most $max_lines lines at 80 columns ($how)"
  else
    not_ok "$name: at most $max_lines lines at 80 columns ($how)"
  fi
done

# The CLI's long options, from lines such as
#   {"batch-size", required_argument, NULL, 'b'},
long_options() {
  tr '{' '\n' <"$1" |
    grep -E '^ *"[a-z][a-z0-9-]*" *, *(no_argument|required_argument|optional_argument|[012]) *,' |
    sed 's/^ *"\([^"]*\)".*/\1/'
}
# The command a file defines, from
#   const struct cli_command cli_run = {
#     "run", ...
command_of() {
  awk '/^const struct cli_command cli_[a-z0-9_]* = \{/ {
    getline
    if (match($0, /"[^"]*"/))
      print substr($0, RSTART + 1, RLENGTH - 2)
    exit
  }' "$1"
}
missing=
noptions=0
for f in "$top_srcdir"/examples/*.c; do
  case $f in */train_* | */feed_*) continue ;; esac
  cmd=$(command_of "$f")
  page=$top_srcdir/man/forkload${cmd:+-$cmd}.1
  if [ ! -f "$page" ]; then
    missing="$missing (no page $(basename "$page") for $(basename "$f"))"
    continue
  fi
  options=$(long_options "$f")
  [ -n "$options" ] || continue
  text=$(render "$page")
  for opt in $options; do
    noptions=$((noptions + 1))
    printf '%s\n' "$text" | grep -Eq -e "--$opt([^a-z0-9-]|\$)" ||
      missing="$missing --$opt($(basename "$page"))"
  done
done
if [ "$noptions" -gt 0 ] && [ -z "$missing" ]; then
  ok "every option of the CLI is in the page of its command"
else
  not_ok "every option of the CLI is in the page of its command"
  diag "missing:${missing:- (no getopt_long table in examples/*.c)}"
fi

# "NAME.SECTION PAGE" for each name of each page, one page at a time so
# that a name two pages claim shows twice.
links=$(for page in $pages; do sh "$links_sh" "$page"; done 2>/dev/null)
names=$(sh "$links_sh" -h "$header" 2>/dev/null)
# The Python module's public names, from its package's __all__ and its
# submodules' (forkload.datasets.NAME), whose __all__ may span lines.
py_all() {
  awk '/^__all__ = \[/ { on = 1 } on { print } on && /\]/ { exit }' "$1" |
    sed 's/^__all__ = \[//; s/\].*//' | tr -d '" \n' | tr ',' '\n' |
    grep . | sed "s/^/$2/"
}
names="$names
$(py_all "$top_srcdir/python/forkload/__init__.py" forkload.)
$(py_all "$top_srcdir/python/forkload/datasets.py" forkload.datasets.)"
wrong=
for name in $names; do
  owners=$(printf '%s\n' "$links" | awk -v n="$name.3" '$1 == n { print $2 }')
  case $(printf '%s\n' "$owners" | grep -c .) in
  1) ;;
  0) wrong="$wrong $name (no page)" ;;
  *) wrong="$wrong $name ($(echo $owners))" ;;
  esac
done
if [ -n "$names" ] && [ -z "$wrong" ]; then
  ok "every public function, macro and type is documented by one page"
else
  not_ok "every public function, macro and type is documented by one page"
  diag "not so:${wrong:- (no public name found in $header)}"
fi

# A name on a page that the header lacks would be a link to nothing.
stray=
for pair in $(printf '%s\n' "$links" | awk '$1 ~ /\.3$/ { print $1 ":" $2 }'); do
  name=${pair%%.3:*} page=${pair#*:}
  [ "$name.3" = "$page" ] && continue
  printf '%s\n' "$names" | grep -qx "$name" || stray="$stray $page:$name"
done
if [ -z "$stray" ]; then
  ok "every name the section 3 pages document is in lib/forkload.h or the module"
else
  not_ok "every name the section 3 pages document is in lib/forkload.h or the module"
  diag "not in the header:$stray"
fi

# No reference to a page that does not exist.
bad=
for page in $pages; do
  refs=$(awk '/^\./ {
    for (i = 1; i + 2 <= NF; i++)
      if ($i == "Xr" || $i == ".Xr")
        print $(i + 1) "." $(i + 2)
  }' "$page")
  for r in $refs; do
    name=${r%.*} sec=${r##*.}
    sec=${sec%%[!0-9]*}
    [ -f "$top_srcdir/man/$name.$sec" ] && continue
    printf '%s\n' "$links" | awk -v n="$name.$sec" '$1 == n { f = 1 }
      END { exit !f }' && continue
    [ -d "/usr/share/man/man$sec" ] || continue
    ls "/usr/share/man/man$sec/$name.$sec"* >/dev/null 2>&1 && continue
    bad="$bad $(basename "$page"):$name($sec)"
  done
done
if [ -z "$bad" ]; then
  ok "every .Xr names a page that exists"
else
  not_ok "every .Xr names a page that exists"
  diag "no such page:$bad"
fi

# Installed: every page, and `man NAME` opens the page of NAME.
if [ ! -f "$top_builddir/Makefile" ]; then
  skip "make install-data installs every page" "no Makefile"
  skip "man NAME opens the page that documents NAME, as installed" \
    "no Makefile"
else
  dest=$(mktemp -d "${TMPDIR:-/tmp}/forkload-man.XXXXXX")
  mandir=$dest/man
  if make -C "$top_builddir" install-data DESTDIR="$dest" \
    mandir=/man >"$dest/log" 2>&1; then
    absent=
    for page in $pages; do
      name=$(basename "$page")
      [ -f "$mandir/man${name##*.}/$name" ] || absent="$absent $name"
    done
    if [ -z "$absent" ]; then
      ok "make install-data installs every page"
    else
      not_ok "make install-data installs every page"
      diag "not installed (is it in dist_man_MANS?):$absent"
    fi
    if ! command -v man >/dev/null 2>&1; then
      skip "man NAME opens the page that documents NAME, as installed" \
        "no man(1)"
    else
      wrong=
      for pair in $(printf '%s\n' "$links" | awk '{ print $1 ":" $2 }'); do
        link=${pair%%:*} page=${pair#*:}
        name=${link%.*} sec=${link##*.}
        got=$(man -M "$mandir" -w "$sec" "$name" 2>/dev/null)
        [ -n "$got" ] && [ "$(readlink -f "$got")" = \
          "$(readlink -f "$mandir/man$sec/$page")" ] ||
          wrong="$wrong $name($sec)"
      done
      if [ -n "$links" ] && [ -z "$wrong" ]; then
        ok "man NAME opens the page that documents NAME, as installed"
      else
        not_ok "man NAME opens the page that documents NAME, as installed"
        diag "not so:$wrong"
      fi
    fi
  else
    not_ok "make install-data installs every page"
    diag "make install-data failed: $(tail -3 "$dest/log")"
    skip "man NAME opens the page that documents NAME, as installed" \
      "make install-data failed"
  fi
  rm -rf "$dest"
fi

exit $failed
