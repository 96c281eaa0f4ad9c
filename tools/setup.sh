#!/bin/sh
# Installs, on Debian or Ubuntu, whatever building and testing forkload needs
# and the machine lacks; does nothing when all of it is there.
set -e
pkgs="gcc make autoconf automake libtool pkg-config libuv1-dev libcmocka-dev
mandoc"
# make fuzz (CI) needs clang and libFuzzer's runtime: its own package in
# Debian 12, which clang only recommends; older releases ship it in clang.
pkgs="$pkgs clang"
apt-cache show libclang-rt-dev >/dev/null 2>&1 && pkgs="$pkgs libclang-rt-dev"
missing=""
for p in $pkgs; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
echo "tools/setup.sh: installing$missing"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
