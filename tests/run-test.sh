#!/bin/sh
# Runs one test program for automake's TAP driver: a time limit turns a hang
# into a failure, and exit status 77 (the program printed a "1..0 # SKIP"
# plan and its reason) becomes a skip instead of an error.
# 300 s, or what the test asks for in its first lines ("make check's time
# limit: N s"), or FL_TEST_TIMEOUT, which tests/python_test.sh reads too.
for test; do :; done
case "$test" in
*.py | *.sh)
  asked=$(sed -n "1,20s/.*make check's time limit: \([0-9][0-9]*\) s.*/\1/p" \
    "$test" | head -n 1) ;;
esac
limit=${FL_TEST_TIMEOUT:-${asked:-300}}
FL_TEST_TIMEOUT=$limit
export FL_TEST_TIMEOUT
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
