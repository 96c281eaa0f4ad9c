#!/bin/sh
# Prints every public name of a forkload header, one per line: its
# functions, its function-like macros and its types.  `make install` links
# man3/NAME.3 to forkload.3 for each, so that `man NAME` opens the page;
# tests/man_lint.sh checks that the page documents each.
# usage: man-links.sh lib/forkload.h
sed -n -E \
  -e 's/^FL_EXTERN[^(]*[^A-Za-z0-9_](fl_[a-z0-9_]*)\(.*/\1/p' \
  -e 's/^#define (fl_[a-z0-9_]*)\(.*/\1/p' \
  -e 's/^typedef (struct|enum) (fl_[a-z0-9_]*) (fl_[a-z0-9_]*);.*/\3/p' \
  -e 's/^typedef enum \{.*\} (fl_[a-z0-9_]*);.*/\1/p' \
  -e 's/^} (fl_[a-z0-9_]*);.*/\1/p' \
  -e 's/^typedef [^(]*\(\*(fl_[a-z0-9_]*)\).*/\1/p' \
  "$1"
