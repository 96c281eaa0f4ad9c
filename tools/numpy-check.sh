#!/bin/sh
# usage: sh tools/numpy-check.sh [X.Y ...]
# CI's pass of tests/python under the CPythons forkload supports besides
# Debian's 3.11 (default 3.10, 3.12 and 3.13, pyenv's), where PyPI has no
# CPU torch: each gets a venv of its own with numpy, pytest, hypothesis
# and mypy (the stubs, checked as that version reads them) and forkload pip
# installed from the release wheel of this checkout (tools/wheel.sh:
# 3.10's own cp310-cp310 wheel; 3.12 and up share one cp311-abi3 wheel,
# built once), then pytest runs tests/python there, on the installed
# package: the modules that compare with torch skip saying so,
# test_numpy.py and the others run.  The wheels are built from a copy of
# the checkout: pip leaves nothing in it.
set -eu
cd "$(dirname "$0")/.."
src=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
[ $# -gt 0 ] || set -- 3.10 3.12 3.13
root=$(pyenv root 2>/dev/null) || {
  echo "tools/numpy-check.sh: no pyenv to find python$1 with" \
    "(https://github.com/pyenv/pyenv, then pyenv install $*)" >&2
  exit 1
}
mkdir "$tmp/tree"
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$tmp/tree"
failed=0
for v in "$@"; do
  python=$(ls "$root"/versions/"$v".*/bin/python"$v" 2>/dev/null | tail -n 1)
  if [ -z "$python" ]; then
    echo "tools/numpy-check.sh: no python$v from pyenv (pyenv install $v)" >&2
    exit 1
  fi
  start=$(date +%s)
  # One wheel for 3.11 and later (abi3), one for 3.10.
  case $v in 3.10) abi=cp310 ;; *) abi=abi3 ;; esac
  "$python" -m venv "$tmp/venv$v"
  "$tmp/venv$v/bin/pip" install -q numpy pytest hypothesis mypy
  if ! ls "$tmp"/wheels/forkload-*-"$abi"-*.whl >/dev/null 2>&1; then
    PYTHON=$python sh "$tmp/tree/tools/wheel.sh" "$tmp/wheels" \
      >"$tmp/wheel.out" 2>&1 || { tail -n 30 "$tmp/wheel.out"; exit 1; }
  fi
  "$tmp/venv$v/bin/pip" install -q "$tmp"/wheels/forkload-*-"$abi"-*.whl
  echo "== tests/python under $python, numpy alone"
  (cd "$src/tests/python" && PYTHONDONTWRITEBYTECODE=1 \
    FL_PYTHON_INSTALLED="$tmp/venv$v/bin/python" \
    "$tmp/venv$v/bin/python" -m pytest -q -p no:cacheprovider -rs) ||
    failed=1
  echo "== CPython $v: $(($(date +%s) - start)) s"
done
exit $failed
