#!/bin/sh
# usage: sh tools/venv-check.sh
# CI's second torch, as a PyTorch user has it: a venv of the python3 on
# PATH with torch 2.13.0 and the frameworks from PyPI, forkload installed
# into it from this checkout with pip as the README says, then make
# check-installed (tests/python and the wheel's test) with that venv.  Run
# after ./configure && make.  The venv is FL_VENV (default .venv-check).
set -eu
cd "$(dirname "$0")/.."
venv=${FL_VENV:-$PWD/.venv-check}
python3 -m venv "$venv"
# torch first and pinned: a package that asks for torch would otherwise
# take a newer one (a CUDA build of several GB).
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q torch==2.13.0 numpy pytest hypothesis pillow build \
  'lightning==2.6.*' datasets webdataset accelerate mypy lmdb
"$venv/bin/pip" install -q .
make check-installed PYTHON_INSTALLED="$venv/bin/python"
