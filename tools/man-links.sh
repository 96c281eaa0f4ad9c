#!/bin/sh
# The names of forkload's manual, read from where they are declared, so
# that a new page, or a new name on a page, needs no list kept anywhere
# else.
#
# usage: man-links.sh PAGE...
#   Prints "NAME.SECTION PAGE" for every name a page documents: each .Nm of
#   its NAME section, and each type its SYNOPSIS declares (.Vt typedef).
#   `make install` links manSECTION/NAME.SECTION to PAGE for each name that
#   is not the page's own, so that `man NAME` opens the page; it fails,
#   as this script does, when two pages claim one name.
# usage: man-links.sh -h lib/forkload.h
#   Prints every public name of the header, one per line: its functions,
#   its function-like macros and its types.  tests/man_lint.sh checks that
#   one page documents each.
if [ "$1" = -h ]; then
  exec sed -n -E \
    -e 's/^FL_EXTERN[^(]*[^A-Za-z0-9_](fl_[a-z0-9_]*)\(.*/\1/p' \
    -e 's/^#define (fl_[a-z0-9_]*)\(.*/\1/p' \
    -e 's/^typedef (struct|enum) (fl_[a-z0-9_]*) (fl_[a-z0-9_]*);.*/\3/p' \
    -e 's/^typedef enum \{.*\} (fl_[a-z0-9_]*);.*/\1/p' \
    -e 's/^} (fl_[a-z0-9_]*);.*/\1/p' \
    -e 's/^typedef [^(]*\(\*(fl_[a-z0-9_]*)\).*/\1/p' \
    "$2"
fi

awk '
FNR == 1 {
  page = FILENAME
  sub(/.*\//, "", page)
  sec = page
  sub(/.*\./, "", sec)
  sh = ""
}
/^\.Sh / { sh = $2; next }
sh == "NAME" && /^\.Nm [^ ]/ { claim($2) }
# typedef struct fl_x fl_x ;  typedef enum { ... } fl_x ;
# typedef void (*fl_x)(...) ;
sh == "SYNOPSIS" && /^\.Vt typedef / {
  if (match($0, /\(\*[A-Za-z_][A-Za-z0-9_]*\)/))
    claim(substr($0, RSTART + 2, RLENGTH - 3))
  else if ($NF == ";")
    claim($(NF - 1))
}
function claim(name) {
  name = name "." sec
  if (!(name in owner)) {
    owner[name] = page
    print name, page
  } else if (owner[name] != page) {
    printf "man-links.sh: %s is documented by %s and by %s\n", name,
      owner[name], page | "cat >&2"
    twice = 1
  }
}
END { exit twice }
' "$@"
