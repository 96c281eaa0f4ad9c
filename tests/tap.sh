# TAP helpers for the shell tests, sourced by each: ok, not_ok, skip, diag.
# A script prints its plan, reports each case, and ends with `exit $failed`.
n=0
failed=0
ok() {
  n=$((n + 1))
  echo "ok $n - $1"
}
not_ok() {
  n=$((n + 1))
  failed=1
  echo "not ok $n - $1"
}
skip() {
  n=$((n + 1))
  echo "ok $n - $1 # SKIP $2"
}
diag() {
  printf '%s\n' "$@" | sed 's/^/# /'
}
