#!/bin/sh
# TAP test of forkload's wheel where users are, run by make
# check-installed: a Debian 11 (bullseye, glibc 2.31) userland with a
# CPython 3.11 of its own, made and cached by tools/bullseye.sh.  Over a
# copy-on-write layer of that tree (the cache stays as made), in a mount
# namespace of the test's own (its mounts vanish with it), a venv of that
# Python gets the host's torch release and the tests' packages from the
# indexes the host's pip is configured with, then the wheel (FL_WHEEL, else
# tools/wheel.sh's with FL_PYTHON_INSTALLED); there the module resolves
# its libraries, tests/python passes against the installed wheel, and
# every image format, WebDataset shard and LMDB decodes to the bytes it
# does on this machine.  Skipped (77) without FL_PYTHON_INSTALLED, root,
# unshare, debootstrap or overlayfs.  The first run makes the chroot
# (minutes), and tests/python takes long (some 15 minutes here): make
# check-installed leaves it out (FL_CHROOT_PYTHON_TESTS=no, a skip saying
# so) and make check-bullseye runs it.  make check's time limit: 3000 s.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
. "$top_srcdir/tests/tap.sh"
start=$(date +%s)
python=${FL_PYTHON_INSTALLED-}
if [ -z "$python" ]; then
  echo "1..0 # SKIP make check-installed PYTHON_INSTALLED=PYTHON runs it"
  exit 77
fi
why=
if [ "$(id -u)" -ne 0 ]; then
  why="the chroot's mounts need root"
elif ! unshare -m true 2>/dev/null; then
  why="no unshare -m (util-linux)"
elif ! command -v debootstrap >/dev/null 2>&1; then
  why="no debootstrap (apt-get install debootstrap; sh tools/setup.sh does)"
elif ! grep -qw overlay /proc/filesystems && ! modprobe overlay 2>/dev/null
then
  why="no overlayfs in this kernel"
fi
if [ -n "$why" ]; then
  echo "1..0 # SKIP $why"
  exit 77
fi
scratch_dir
src=$(cd "$top_srcdir" && pwd)
since() { echo $(($(date +%s) - $1)); }
echo "1..8"

if chroot_dir=$(sh "$src/tools/bullseye.sh" 2>"$tmp/bullseye.out"); then
  ok "$(tail -n 1 "$tmp/bullseye.out")"
else
  not_ok "tools/bullseye.sh makes Debian 11 with CPython 3.11"
  sed 's/^/# /' "$tmp/bullseye.out"
  echo "Bail out! no chroot"
  exit 1
fi

# The host pip's configuration (find-links, indexes, constraints, its
# certificates), as PIP_* variables for the chroot's pip, and the local
# paths it names, to be bound there read-only: a PEP 503 index's whole
# folder, where its pages point at files beside simple/.
mkdir "$tmp/share" "$tmp/upper" "$tmp/work" "$tmp/root"
"$python" -m pip config list 2>/dev/null | while IFS= read -r line; do
  key=${line#*.}
  key=$(echo "${key%%=*}" | tr a-z- A-Z_)
  echo "export PIP_$key=${line#*=}"
done >"$tmp/share/env.sh"
binds=$(sed -n "s/^export [A-Z_]*='\(.*\)'$/\1/p" "$tmp/share/env.sh" |
  tr ' ' '\n' | sed 's|^file://||; s|/$||; s|/simple$||' | while read -r p
  do
    case $p in /*) [ -e "$p" ] && echo "$p" ;; esac
  done | sort -u)
# in_chroot COMMAND...: runs COMMAND in the chroot, as root, with the venv
# (/venv) first on PATH: in a mount namespace of its own, over the
# overlay whose writable layer is $tmp/upper, with /proc, the host's /dev
# with a private 1 GiB /dev/shm, /sys read-only, the host's resolver
# files, the source tree read-only at /src and $tmp/share at /scratch.  Nothing is mounted in
# this shell's namespace, so the scratch directory's removal stays in it.
in_chroot() {
  unshare -m --propagation private sh -eu -c '
    t=$1 lower=$2 src=$3 binds=$4
    shift 4
    r=$t/root
    mount -t overlay fl-bullseye \
      -o "lowerdir=$lower,upperdir=$t/upper,workdir=$t/work" "$r"
    mount -t proc proc "$r/proc"
    mount --bind /dev "$r/dev"
    mount -t tmpfs -o size=1g,mode=1777 fl-shm "$r/dev/shm"
    mount -t sysfs -o ro sysfs "$r/sys"
    ro() {
      if [ -d "$1" ]; then
        mkdir -p "$r$2"
      else
        mkdir -p "$(dirname "$r$2")"
        [ -e "$r$2" ] || : >"$r$2"
      fi
      mount --bind "$1" "$r$2"
      mount -o remount,bind,ro "$r$2"
    }
    [ -d /sys/fs/cgroup ] && ro /sys/fs/cgroup /sys/fs/cgroup
    # Names as the host resolves them: debootstrap writes no /etc/hosts,
    # and torchrun looks up localhost.
    ro /etc/resolv.conf /etc/resolv.conf
    ro /etc/hosts /etc/hosts
    ro "$src" /src
    for p in $binds; do ro "$p" "$p"; done
    mkdir -p "$r/scratch"
    mount --bind "$t/share" "$r/scratch"
    exec chroot "$r" /usr/bin/env -i HOME=/root LC_ALL=C.UTF-8 \
      PATH=/venv/bin:/opt/python3.11/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      /bin/sh -c ". /scratch/env.sh && cd /tmp && exec \"\$@\"" sh "$@"
  ' sh "$tmp" "$chroot_dir" "$src" "$binds" "$@"
}

glibc=$(in_chroot ldd --version 2>&1 | head -n 1)
case $glibc in
*" 2.31") ok "the chroot's glibc is 2.31: $glibc" ;;
*) not_ok "the chroot's glibc is 2.31: '$glibc'" ;;
esac

whl=${FL_WHEEL-}
if [ -z "$whl" ]; then
  PYTHON=$python sh "$src/tools/wheel.sh" "$tmp/dist" >"$tmp/wheel.out" 2>&1
  whl=$(ls "$tmp"/dist/forkload-*.whl 2>/dev/null | head -n 1)
fi
if [ -f "$whl" ] && cp "$whl" "$tmp/share/"; then
  ok "the wheel: ${whl##*/}${FL_WHEEL:+ (FL_WHEEL)}"
else
  not_ok "tools/wheel.sh builds a wheel, or FL_WHEEL names one: '$whl'"
  [ -f "$tmp/wheel.out" ] && tail -n 30 "$tmp/wheel.out" | sed 's/^/# /'
  echo "Bail out! no wheel"
  exit 1
fi

# The host's torch release first and pinned (as tools/venv-check.sh does:
# a package that asks for torch would otherwise take the newest), then
# what the tests import, then the wheel.
torch=$("$python" -c 'import torch; print(torch.__version__.split("+")[0])')
t0=$(date +%s)
if in_chroot sh -c 'python3.11 -m venv /venv && pip install -q "torch==$1"' \
  sh "$torch" >"$tmp/pip.out" 2>&1; then
  ok "pip installs torch $torch into a venv of the chroot's CPython 3.11 in $(since "$t0") s"
else
  not_ok "pip installs torch $torch into a venv of the chroot's CPython 3.11"
  tail -n 30 "$tmp/pip.out" | sed 's/^/# /'
fi
t0=$(date +%s)
in_chroot pip install -q "torch==$torch" numpy pytest hypothesis pillow lmdb \
  mypy webdataset >"$tmp/pip.out" 2>&1 || tail -n 30 "$tmp/pip.out" | sed 's/^/# /'
deps=$(since "$t0")
t0=$(date +%s)
if in_chroot pip install -q "/scratch/${whl##*/}" >"$tmp/pip.out" 2>&1; then
  ok "pip installs the wheel there in $(since "$t0") s (the tests' packages: $deps s)"
else
  not_ok "pip installs the wheel there"
  tail -n 30 "$tmp/pip.out" | sed 's/^/# /'
fi

# The module and the command-line tool resolve every library there (what
# glibc 2.31 lacks would be "not found" or a version error at import).
if in_chroot sh -ec '
    so=$(python -c "import forkload._forkload as m; print(m.__file__)")
    ldd "$so" "${so%/*}/bin/forkload" >/tmp/ldd
    cat /tmp/ldd
    if grep "not found" /tmp/ldd; then exit 1; fi
    forkload --version
    forkload doctor' >"$tmp/ldd.out" 2>&1; then
  ok "the module and the forkload command load and run there"
else
  not_ok "the module and the forkload command load and run there"
  sed 's/^/# /' "$tmp/ldd.out"
fi

# tests/python, by tests/python_test.sh, with the venv's python and the
# installed wheel (no source tree on PYTHONPATH), under what is left of
# this script's time limit.
left=$((${FL_TEST_TIMEOUT:-3000} - $(since "$start") - 120))
t0=$(date +%s)
if [ "${FL_CHROOT_PYTHON_TESTS-}" = no ]; then
  skip "tests/python there against the installed wheel" \
    "FL_CHROOT_PYTHON_TESTS=no: make check-bullseye runs it"
else
in_chroot env FL_PYTHON_INSTALLED=/venv/bin/python top_srcdir=/src \
  FL_PYTEST_TIMEOUT=$left sh /src/tests/python_test.sh >"$tmp/py.tap" 2>&1
failed_n=$(grep -c '^not ok ' "$tmp/py.tap")
skipped_n=$(grep -c '^ok .*# SKIP' "$tmp/py.tap")
passed_n=$(($(grep -c '^ok ' "$tmp/py.tap") - skipped_n))
counts="$passed_n passed, $failed_n failed, $skipped_n skipped in $(since "$t0") s"
if [ "$failed_n" -eq 0 ] && [ "$passed_n" -gt 0 ]; then
  ok "tests/python passes there against the installed wheel: $counts"
else
  not_ok "tests/python passes there against the installed wheel: $counts"
  grep -v '^ok ' "$tmp/py.tap" | tail -n 200 | sed 's/^/# /'
fi
fi

# The same decoders' bytes: what the wheel's forked workers make of every
# fixture, there and here (the wheel installed beside this machine's
# interpreter, imported from outside the source tree).
images=/src/tests/images/decode:/src/tests/images/crop
"$python" -m pip install -q --no-deps --target "$tmp/site" "$whl" \
  >"$tmp/site.out" 2>&1
if in_chroot sh -c 'python /src/tests/decode_digests.py make "$1" /scratch/dd &&
    python /src/tests/decode_digests.py digest /scratch/dd' sh "$images" \
  >"$tmp/there" 2>&1 &&
  (cd "$tmp" && PYTHONPATH=$tmp/site "$python" \
    "$src/tests/decode_digests.py" digest "$tmp/share/dd") >"$tmp/here" 2>&1 &&
  [ -s "$tmp/here" ] && cmp -s "$tmp/here" "$tmp/there"; then
  ok "$(wc -l <"$tmp/here") decoded samples (ImageFolder, LMDB, WebDataset .tar, .gz, .bz2, .xz) have the same SHA-256 there as here"
else
  not_ok "decoded samples have the same SHA-256 there as here"
  touch "$tmp/here"
  sed 's/^/# pip here: /' "$tmp/site.out"
  diff "$tmp/here" "$tmp/there" | head -n 40 | sed 's/^/# /'
fi
exit $failed
