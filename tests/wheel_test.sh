#!/bin/sh
# TAP test of pip's builds, run by make check-installed (CI's torch 2 pass,
# which has PyPI): tools/wheel.sh's wheel is cp311-abi3 and
# manylinux_2_28, installs with pip, its module and command-line tool need
# glibc's libraries alone (every other library linked in, its license
# shipped) and no symbol newer than glibc 2.28 (tools/wheel-symbols.sh),
# then loads batches from forked workers and runs the forkload command,
# under CPython 3.12 and 3.13 too; under CPython 3.10 tools/wheel.sh makes
# a cp310-cp310 wheel that does the same; and the sdist that python -m
# build makes installs with pip into a fresh venv as a normal user
# (nobody, where this runs as root), imports from another folder and runs
# the forkload command.  Skipped (77) without FL_PYTHON_INSTALLED.
# make check's time limit: 900 s (tests/run-test.sh): a machine's first
# run builds tools/deps.sh's libraries, some 4 minutes on 2 cores.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
. "$top_srcdir/tests/tap.sh"
python=${FL_PYTHON_INSTALLED-}
if [ -z "$python" ]; then
  echo "1..0 # SKIP make check-installed PYTHON_INSTALLED=PYTHON runs it"
  exit 77
fi
scratch_dir
src=$(cd "$top_srcdir" && pwd)
# Other CPythons, where pyenv has them: the abi3 wheel serves 3.12 and
# 3.13 as it is; 3.10 has a wheel of its own.
other_python() {
  command -v pyenv >/dev/null 2>&1 || return 1
  ls "$(pyenv root)"/versions/"$1".*/bin/python"$1" 2>/dev/null | tail -n 1
}
echo "1..13"

# A loader of 2 forked workers, in its batches' order, from the folder the
# module is imported in (never the source tree).
loads() {
  (cd "$tmp" && PYTHONPATH=$1 "$2" -c '
import sys, forkload
assert forkload.__file__.startswith(sys.argv[1]), forkload.__file__
dl = forkload.DataLoader(list(range(10)), batch_size=4, num_workers=2,
                         tensor_type="numpy")
got = [b.tolist() for b in dl]
assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], got
' "$3")
}

if PYTHON=$python sh "$src/tools/wheel.sh" "$tmp/dist" >"$tmp/wheel.out" 2>&1
then
  ok "tools/wheel.sh builds and repairs a wheel"
else
  not_ok "tools/wheel.sh builds and repairs a wheel"
  tail -n 30 "$tmp/wheel.out" | sed 's/^/# /'
fi
whl=$(ls "$tmp"/dist/forkload-*.whl 2>/dev/null | head -n 1)
case ${whl##*/} in
forkload-*-cp311-abi3-manylinux_2_28_"$(uname -m)".whl)
  ok "the wheel is cp311-abi3 and manylinux_2_28: ${whl##*/}" ;;
*) not_ok "the wheel is cp311-abi3 and manylinux_2_28: '${whl##*/}'" ;;
esac
# A wheel for pip to download: the brief's bound, a tenth of the 16.7 MB
# that shipping the libraries' shared builds took.
size=$(wc -c <"$whl" 2>/dev/null || echo 0)
if [ "$size" -gt 0 ] && [ "$size" -le 3000000 ]; then
  ok "the wheel is at most 3 MB: $size bytes"
else
  not_ok "the wheel is at most 3 MB: $size bytes"
fi

"$python" -m pip install -q --no-deps --target "$tmp/site" "$whl" \
  >"$tmp/pip.out" 2>&1
so=$(ls "$tmp"/site/forkload/_forkload*.abi3.so 2>/dev/null)
# One module, the abi3 one: a module make linked into python/forkload/
# for one interpreter would be imported first where it came along.
if [ -n "$so" ] && [ "$(ls "$tmp"/site/forkload/*.so | wc -l)" -eq 1 ]; then
  ok "pip installs the wheel, its one module: ${so#"$tmp"/site/}"
else
  not_ok "pip installs the wheel"
  sed 's/^/# /' "$tmp/pip.out"
fi
# Every library ldd resolves for $2 (the module, the command-line tool) is
# glibc's: the others are linked in, and the wheel has no forkload.libs.
resolves() {
  ldd "$2" >"$tmp/ldd" 2>&1
  outside=$(awk '/=>/ {print $1}' "$tmp/ldd" | while read -r name; do
    case $name in
    libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.*) ;;
    *) echo "$name" ;;
    esac
  done)
  if [ -s "$tmp/ldd" ] && [ -z "$outside" ] &&
    ! grep -q 'not found' "$tmp/ldd" && [ ! -e "$tmp/site/forkload.libs" ]
  then
    ok "$1 needs glibc's libraries alone"
  else
    not_ok "$1 needs glibc's libraries alone"
    printf '%s\n' "$outside" | sed 's/^/# outside: /'
    sed 's/^/# /' "$tmp/ldd"
    ls "$tmp/site/forkload.libs" 2>/dev/null | sed 's/^/# forkload.libs: /'
  fi
}
resolves "the module" "$so"
resolves "the command-line tool (forkload/bin/forkload)" \
  "$tmp/site/forkload/bin/forkload"
if sh "$src/tools/wheel-symbols.sh" "$tmp/site" >"$tmp/sym.out" 2>&1; then
  ok "no file of the wheel needs a symbol newer than glibc 2.28 or one without a version"
else
  not_ok "no file of the wheel needs a symbol newer than glibc 2.28 or one without a version"
  head -n 30 "$tmp/sym.out" | sed 's/^/# /'
fi
# Each library linked in has its copyright and license in the wheel.
missing=""
for lib in $(awk '/^[^#]/ {print $1}' "$src/tools/deps.lock"); do
  [ -s "$tmp/site/forkload/_vendor_licenses/$lib/copyright" ] ||
    missing="$missing $lib"
done
if [ -z "$missing" ]; then
  ok "the wheel has the license of each library linked in"
else
  not_ok "the wheel has the license of each library linked in: none of$missing"
fi
if loads "$tmp/site" "$python" "$tmp/site" >"$tmp/run.out" 2>&1; then
  ok "the wheel's module loads batches from forked workers"
else
  not_ok "the wheel's module loads batches from forked workers"
  sed 's/^/# /' "$tmp/run.out"
fi

# pip's forkload command and python -m forkload in venv $1 are the
# command-line tool, of the wheel's version, and forkload doctor gives a
# budget; forkload(1)'s pages are where man looks from the command's
# folder (man -w finds them, where man is installed).
ver=${whl##*/forkload-}
ver=${ver%%-*}
runs_tool() {
  [ "$("$1/bin/forkload" --version)" = "forkload $ver" ] &&
    [ "$("$1/bin/python" -m forkload --version)" = "forkload $ver" ] &&
    "$1/bin/forkload" doctor | grep -q . &&
    [ -f "$1/share/man/man1/forkload-doctor.1" ] &&
    { ! command -v man >/dev/null 2>&1 ||
      [ "$(PATH=$1/bin:$PATH MANPATH= man -w forkload)" = \
        "$1/share/man/man1/forkload.1" ]; }
}

for v in 3.12 3.13; do
  other=$(other_python "$v")
  if [ -z "$other" ]; then
    skip "the wheel loads batches under CPython $v" "no python$v from pyenv"
    continue
  fi
  rm -rf "$tmp/venv$v"
  if "$other" -m venv "$tmp/venv$v" >"$tmp/v.out" 2>&1 &&
    "$tmp/venv$v/bin/pip" install -q numpy "$whl" >>"$tmp/v.out" 2>&1 &&
    loads "" "$tmp/venv$v/bin/python" "$tmp/venv$v/" >>"$tmp/v.out" 2>&1 &&
    runs_tool "$tmp/venv$v" >>"$tmp/v.out" 2>&1
  then
    ok "the wheel loads batches and runs forkload under CPython $v ($other)"
  else
    not_ok "the wheel loads batches and runs forkload under CPython $v ($other)"
    tail -n 20 "$tmp/v.out" | sed 's/^/# /'
  fi
done

# The sdist, installed by pip into a fresh venv by a user who is not root
# (nobody, where this runs as root): its own build, from the sdist alone.
"$python" -m build --version >/dev/null 2>&1 ||
  "$python" -m pip install -q build >"$tmp/pip.out" 2>&1
# As nobody, the interpreter must be one nobody can run: Debian's, where
# the test's own lies under root's home (pyenv's).
user=$(id -un)
run_as=
base=$("$python" -c 'import sys; print(sys._base_executable)')
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1 &&
  [ -x /usr/bin/python3 ]; then
  run_as="setpriv --reuid=nobody --regid=nogroup --clear-groups"
  user=nobody
  base=/usr/bin/python3
fi
mkdir "$tmp/home" && chmod 777 "$tmp" "$tmp/home"
if "$python" -m build -q --sdist --outdir "$tmp/sdist" "$src" \
  >"$tmp/sdist.out" 2>&1 &&
  sdist=$(ls "$tmp"/sdist/forkload-*.tar.gz) &&
  chmod -R a+rX "$tmp/sdist" &&
  env HOME="$tmp/home" $run_as sh -c '
    set -e
    "$1" -m venv "$2/user-venv"
    "$2/user-venv/bin/pip" install -q "$3"' sh "$base" "$tmp" "$sdist" \
    >>"$tmp/sdist.out" 2>&1 &&
  loads "" "$tmp/user-venv/bin/python" "$tmp/user-venv/" \
    >>"$tmp/sdist.out" 2>&1 &&
  runs_tool "$tmp/user-venv" >>"$tmp/sdist.out" 2>&1; then
  ok "pip installs the sdist into a fresh venv of $base as $user, the forkload command too"
else
  not_ok "pip installs the sdist into a fresh venv of $base as $user, the forkload command too"
  tail -n 30 "$tmp/sdist.out" | sed 's/^/# /'
fi
# CPython 3.10, whose limited API lacks the buffer protocol: tools/wheel.sh
# under it builds a wheel of its own, the module on 3.10's full API
# (cp310-cp310, setup.py), which loads batches and runs forkload there.
old=$(other_python 3.10)
if [ -z "$old" ]; then
  skip "tools/wheel.sh under CPython 3.10 builds a cp310-cp310 wheel that loads batches" \
    "no python3.10 from pyenv"
else
  PYTHON=$old sh "$src/tools/wheel.sh" "$tmp/dist3.10" >"$tmp/old.out" 2>&1
  whl310=$(ls "$tmp"/dist3.10/forkload-*-cp310-cp310-manylinux_*.whl 2>/dev/null)
  if [ -n "$whl310" ] && "$old" -m venv "$tmp/venv3.10" >>"$tmp/old.out" 2>&1 &&
    "$tmp/venv3.10/bin/pip" install -q numpy "$whl310" >>"$tmp/old.out" 2>&1 &&
    loads "" "$tmp/venv3.10/bin/python" "$tmp/venv3.10/" >>"$tmp/old.out" 2>&1 &&
    runs_tool "$tmp/venv3.10" >>"$tmp/old.out" 2>&1
  then
    ok "tools/wheel.sh under CPython 3.10 builds a cp310-cp310 wheel that loads batches: ${whl310##*/}"
  else
    not_ok "tools/wheel.sh under CPython 3.10 builds a cp310-cp310 wheel that loads batches ($old)"
    ls "$tmp/dist3.10" 2>&1 | sed 's/^/# made: /'
    tail -n 30 "$tmp/old.out" | sed 's/^/# /'
  fi
fi
exit $failed
