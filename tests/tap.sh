# TAP helpers for the shell tests, sourced by each: ok, not_ok, skip, diag,
# scratch_dir, time_limit, in_private_dev_shm, private_dev_shm_or_skip
# and python_lacks.
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
# scratch_dir: $tmp, a directory removed when the script ends.
scratch_dir() {
  tmp=$(mktemp -d) || exit 1
  trap 'rm -rf "$tmp"' EXIT
  trap 'exit 1' HUP INT TERM
}
# time_limit SECONDS: $limit, a prefix under which a hung run fails its
# case instead of the whole script (empty without timeout(1)).
time_limit() {
  limit=
  command -v timeout >/dev/null 2>&1 && limit="timeout -k 5 $1"
}
# private_dev_shm_or_skip SCRIPT ARGS...: in_private_dev_shm, or, where
# that cannot be had, the whole script skipped (exit 77) saying why.
private_dev_shm_or_skip() {
  in_private_dev_shm "$@" && return
  echo "1..0 # SKIP needs root and unshare -m for a private /dev/shm"
  exit 77
}
# in_private_dev_shm SCRIPT ARGS...: runs the script again in a private mount
# namespace (unshare -m) with its own tmpfs over /dev/shm, where no other
# program's names or sweeps meet its own, and returns 0 in that run; returns
# 1 where that cannot be had (it needs root).
in_private_dev_shm() {
  if [ "${FL_PRIVATE_SHM-}" = 1 ]; then
    mount -t tmpfs forkload-test /dev/shm 2>/dev/null
    return
  fi
  unshare -m true 2>/dev/null || return 1
  FL_PRIVATE_SHM=1 exec unshare -m sh "$@"
}
# python_lacks PYTHON: the first of pytest, numpy and torch that PYTHON
# cannot import, then its error's last line ("torch No module named
# 'torch'"), or nothing; one interpreter tries them all (torch takes
# seconds to import).
python_lacks() {
  "$1" -c '
import importlib, sys
for m in ("pytest", "numpy", "torch"):
    try:
        importlib.import_module(m)
    except Exception as e:
        sys.exit("%s %s" % (m, str(e).splitlines()[-1] if str(e) else type(e).__name__))
' 2>&1 | tail -n 1
}
