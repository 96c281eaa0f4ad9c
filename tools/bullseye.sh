#!/bin/sh
# usage: sh tools/bullseye.sh
# Makes, once per machine, the Debian 11 (bullseye, glibc 2.31) userland
# in which tests/chroot_test.sh installs forkload's wheel as a user of an
# older distribution would: debootstrap's minbase, with CPython 3.11 built
# from source inside it (bookworm's python3.11 source package, its
# upstream tarball) into /opt/python3.11, and the build's compiler and
# headers removed again, so that the wheel finds only what such a system
# has.  Needs root, debootstrap and the network (deb.debian.org, or
# $FL_DEBIAN_MIRROR); takes minutes.  The tree is cached outside the clone,
# in ${FL_CHROOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/forkload}/
# bullseye-HASH, HASH of this script, and reused while the script is
# unchanged; its path is the one line written to stdout.
set -eu
say() { echo "tools/bullseye.sh: $*" >&2; }
fail() { say "$*"; exit 1; }
start=$(date +%s)
mirror=${FL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${FL_CHROOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/forkload}
key=$(sha256sum "$0" | cut -c 1-16)
dir=$cache/bullseye-$key
# The trees of this script's other versions, half a GiB each, go.
prune() {
  for old in "$cache"/bullseye-*; do
    [ "$old" = "$dir" ] || [ ! -d "$old" ] && continue
    rm -rf --one-file-system "$old"
    say "removed $old, which another version of this script made"
  done
}
if [ -x "$dir/opt/python3.11/bin/python3.11" ]; then
  prune
  say "reused $dir ($(($(date +%s) - start)) s)"
  echo "$dir"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || fail "debootstrap and chroot need root: run it as root"
command -v debootstrap >/dev/null 2>&1 ||
  fail "no debootstrap: apt-get install debootstrap (sh tools/setup.sh does)"
command -v unshare >/dev/null 2>&1 ||
  fail "no unshare: apt-get install util-linux"
mkdir -p "$cache"
# Made beside its final place and renamed into it at the end: an
# interrupted run leaves no tree that a later one would take as made.
work=$(mktemp -d "$cache/.bullseye-$key.XXXXXX")
# Nothing is mounted under $work in this mount namespace (the chroot's
# /proc lives in unshare's own), so removing it stays inside it.
trap 'rm -rf --one-file-system "$work"' EXIT
trap 'exit 1' HUP INT TERM
root=$work/root
say "making $dir: debootstrap bullseye from $mirror"
debootstrap --variant=minbase bullseye "$root" "$mirror" >"$work/log" 2>&1 ||
  { tail -n 20 "$work/log" >&2; fail "debootstrap failed (log above)"; }
say "building CPython 3.11 in it ($(($(date +%s) - start)) s so far)"
# In a mount namespace of its own, so that the chroot's mounts vanish
# with it, whatever happens: /proc, and a /dev/shm where configure finds
# sem_open working (else multiprocessing has no locks).
unshare -m sh -c 'mount -t proc proc "$1/proc" && mkdir -p "$1/dev/shm" &&
  mount -t tmpfs -o size=64m,mode=1777 fl-shm "$1/dev/shm" &&
  exec chroot "$1" /bin/sh -eu' sh "$root" >>"$work/log" 2>&1 <<'EOF' ||
export DEBIAN_FRONTEND=noninteractive LC_ALL=C PATH=/usr/sbin:/usr/bin:/sbin:/bin
# The libraries of Python's modules that pip, venv and the tests need:
# ssl, ctypes, sqlite3, lzma, bz2 and zlib.
build_deps="gcc make libc6-dev libssl-dev zlib1g-dev libffi-dev libbz2-dev
liblzma-dev libsqlite3-dev"
apt-get -q update
apt-get install -y -q --no-install-recommends ca-certificates $build_deps
# bookworm's python3.11 source, through an apt configuration of its own
# (the chroot's stays bullseye's alone); apt checks it against the
# archive's signed index.
mkdir -p /tmp/apt/lists/partial /tmp/src
echo "deb-src ${FL_DEBIAN_MIRROR:-http://deb.debian.org/debian} bookworm main" \
  >/tmp/apt/sources.list
apt_src="-o Dir::Etc::SourceList=/tmp/apt/sources.list"
apt_src="$apt_src -o Dir::Etc::SourceParts=/nonexistent"
apt_src="$apt_src -o Dir::State::Lists=/tmp/apt/lists"
apt-get -q $apt_src update
cd /tmp/src
apt-get -q $apt_src source --download-only python3.11
tar xzf python3.11_*.orig.tar.gz
cd Python-3.11*/
./configure -q --prefix=/opt/python3.11
make -s -j"$(nproc)"
make -s install
cd /
rm -rf /tmp/src /tmp/apt
# The libraries Python's modules load stay; the compiler and headers go.
apt-mark manual libssl1.1 libffi7 libsqlite3-0 zlib1g libbz2-1.0 liblzma5
apt-get purge -y -q --autoremove $build_deps
apt-get clean
rm -rf /var/lib/apt/lists/*
/opt/python3.11/bin/python3.11 -c 'import ssl, ctypes, sqlite3, lzma, bz2, zlib, venv, ensurepip, multiprocessing.synchronize'
EOF
  { tail -n 30 "$work/log" >&2; fail "building CPython in the chroot failed (log above)"; }
prune
# A run beside this one may have made it first: its tree stands.
if mv -T "$root" "$dir" 2>/dev/null; then
  say "made $dir in $(($(date +%s) - start)) s"
else
  say "reused $dir, which a run beside this one made"
fi
echo "$dir"
