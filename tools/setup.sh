#!/bin/sh
# Installs, on Debian or Ubuntu, whatever building forkload and running
# make check need and the machine lacks (Open MPI included, for
# examples/train_ddp and its test, and Python's headers, numpy, pytest and
# torch, for the Python module and its tests); with --fuzz, also what make
# fuzz needs; with --study, what make study needs for its plots (gnuplot)
# and the PyTorch side of make study and make bench (python3-torchvision
# too, where the release has it).  Does nothing when all of it is there.
set -e
usage() {
  echo "usage: sh tools/setup.sh [--fuzz] [--study]"
}
fuzz=""
study=""
for arg; do
  case $arg in
  --fuzz) fuzz=1 ;;
  --study) study=1 ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
  esac
done
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
updated=""
update() {
  [ -n "$updated" ] && return 0
  $sudo apt-get update -qq
  updated=1
}
# libjpeg-turbo, libspng, libwebp and libtiff: the decoders of
# fl_dataset_image_folder (BMP and PNM need none); liblmdb: fl_dataset_lmdb; libarchive: fl_dataset_webdataset's tar reader.
pkgs="gcc make autoconf automake libtool pkg-config libuv1-dev libcmocka-dev
mandoc libopenmpi-dev openmpi-bin libjpeg-dev libspng-dev libwebp-dev
libtiff-dev liblmdb-dev libarchive-dev"
# The tests' compressed and pipe: shards: xz writes one, and curl reads
# shards from a server of the test's own on 127.0.0.1.
pkgs="$pkgs xz-utils curl"
# The Python module (python/) is built for the release's python3 and
# tested with its pytest, numpy and torch (tests/python: without torch
# they are skipped, that is untested); python3-pil is small, and tests may
# compare images with it; python3-lmdb writes and reads the LMDB of
# tests/python/test_datasets.py, and python3-torchvision is what its
# ImageFolder is compared with.  Older releases have no python3-torch.
# python3-hypothesis draws the cases of tests/python/test_fuzz_sameness.py.
pkgs="$pkgs python3-dev python3-numpy python3-pytest python3-pil python3-lmdb"
pkgs="$pkgs python3-hypothesis"
# pip's build (tests/wheel_test.sh): a fresh venv of Debian's python3.
pkgs="$pkgs python3-venv"
# tools/wheel.sh's libraries (tools/deps.sh): Debian's sources unpacked
# by dpkg-source, libjpeg-turbo's SIMD assembled by nasm and built by
# cmake (libspng too); readelf checks the wheel's symbols.
pkgs="$pkgs dpkg-dev nasm cmake binutils"
# The wheel in Debian 11 (tests/chroot_test.sh): tools/bullseye.sh makes
# its userland with debootstrap.
pkgs="$pkgs debootstrap"
# The refleak hunt (tests/python_refleak_test.sh): Debian's debug
# interpreter, whose sys.gettotalrefcount() counts every reference; a
# release without it is said, and that test skips.
if ! dpkg -s python3.11-dbg >/dev/null 2>&1; then
  apt-cache show python3.11-dbg >/dev/null 2>&1 || update
  if apt-cache show python3.11-dbg >/dev/null 2>&1; then
    pkgs="$pkgs python3.11-dbg"
  else
    echo "tools/setup.sh: no package python3.11-dbg here: the refleak" \
      "test skips"
  fi
fi
if ! dpkg -s python3-torch >/dev/null 2>&1; then
  apt-cache show python3-torch >/dev/null 2>&1 || update
  apt-cache show python3-torch >/dev/null 2>&1 && pkgs="$pkgs python3-torch"
fi
if ! dpkg -s python3-torchvision >/dev/null 2>&1; then
  apt-cache show python3-torchvision >/dev/null 2>&1 || update
  apt-cache show python3-torchvision >/dev/null 2>&1 &&
    pkgs="$pkgs python3-torchvision"
fi
# make fuzz (CI) needs clang and libFuzzer's runtime: its own package in
# Debian 12, which clang only recommends; older releases ship it in clang.
# A fresh machine may have no package lists yet to tell which it is.
if [ -n "$fuzz" ]; then
  pkgs="$pkgs clang"
  if ! dpkg -s libclang-rt-dev >/dev/null 2>&1; then
    apt-cache show libclang-rt-dev >/dev/null 2>&1 || update
    apt-cache show libclang-rt-dev >/dev/null 2>&1 &&
      pkgs="$pkgs libclang-rt-dev"
  fi
fi
# make study runs PyTorch's side with the release's own python3 and
# torch; without python3-torch it measures forkload alone.
if [ -n "$study" ]; then
  pkgs="$pkgs gnuplot-nox python3-numpy"
  if ! dpkg -s python3-torchvision >/dev/null 2>&1; then
    apt-cache show python3-torchvision >/dev/null 2>&1 || update
    apt-cache show python3-torchvision >/dev/null 2>&1 &&
      pkgs="$pkgs python3-torch python3-torchvision python3-pil"
  fi
fi
missing=""
for p in $pkgs; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "tools/setup.sh: installing$missing"
update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
