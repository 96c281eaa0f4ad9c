#!/bin/sh
# Runs one test program for automake's TAP driver: a time limit turns a hang
# into a failure, and exit status 77 (the program printed a "1..0 # SKIP"
# plan and its reason) becomes a skip instead of an error.
limit=${FL_TEST_TIMEOUT:-300}
case "$1" in
*.sh) timeout -k 5 "$limit" sh "$@" ;;
*) timeout -k 5 "$limit" "$@" ;;
esac
rc=$?
if [ "$rc" -eq 124 ]; then
  echo "not ok - $1 did not finish within $limit s (hung?)"
  exit 1
fi
[ "$rc" -eq 77 ] && exit 0
exit "$rc"
