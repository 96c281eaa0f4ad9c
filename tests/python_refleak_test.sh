#!/bin/sh
# TAP test: CPython's refleak hunt (regrtest -R) for the Python module.
# Debian's debug interpreter (python3.11-dbg, $FL_PYTHON_DBG) counts every
# reference it and the code built for it take or drop
# (sys.gettotalrefcount()); the module is built for it here (setup.py,
# into a scratch folder: built for the release interpreter, as make
# builds it, it loads but its references are not counted), and
# tests/python_refleaks.py runs each chosen test 2 times to warm up and 3
# times counted, failing a test whose every counted run left more
# references.
#
# The tests are those of tests/python/test_leaks.py whose batches hold
# Python objects alone (FL_REFLEAK_TESTS, pytest's -k, chooses others):
# Debian's torch and numpy are built for the release interpreter, and
# wherever they make or drop an object the count drifts by a few
# references a run with nothing leaked.  With no workers the worker's
# side (the C collate walk, the pickling) runs in the process and is
# counted too; a worker's own count is its process's, not seen here
# (test_leaks.py counts a worker's blocks).
#
# Skipped (77), saying why, without the debug interpreter, or where the
# build tree's module needs a sanitizer's runtime (CI's sanitizer pass:
# this one's module is built apart and would test nothing new).
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
src=$(cd "$top_srcdir" && pwd)
dbg=${FL_PYTHON_DBG:-python3.11-dbg}
if ! command -v "$dbg" >/dev/null 2>&1; then
  echo "1..0 # SKIP no $dbg (apt-get install python3.11-dbg;" \
    "sh tools/setup.sh does)"
  exit 77
fi
so=$(ls "$top_builddir"/python/.libs/_forkload*.so 2>/dev/null | head -n 1)
if [ -n "$so" ] && objdump -p "$so" 2>/dev/null |
  grep -q 'NEEDED.*lib\(a\|ub\)san'; then
  echo "1..0 # SKIP the build tree's module is built with a sanitizer"
  exit 77
fi
missing=$(python_lacks "$dbg")
if [ -n "$missing" ]; then
  echo "1..0 # SKIP $dbg cannot import $missing"
  exit 77
fi
scratch_dir
echo "1..2"

# The module for the debug interpreter: its EXT_SUFFIX has a "d", and
# setup.py builds it with its headers (Py_INCREF then counts).
time_limit 600
# Debian's setuptools is older than the one pyproject.toml asks for: that
# one, from PyPI, goes on the path for the build, and -S keeps Debian's
# site-packages (its older packaging) out, as pip's isolated build does.
requires=$(cd "$src" && python3 -c 'import tomllib
print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
python3 -m pip install -q --target "$tmp/setuptools" $requires \
  >"$tmp/build.out" 2>&1
if (cd "$src" && PYTHONPATH=$tmp/setuptools \
  $limit "$dbg" -S setup.py -q build --build-base "$tmp/build") \
  >>"$tmp/build.out" 2>&1; then
  ok "setup.py builds the module for $dbg"
else
  not_ok "setup.py builds the module for $dbg"
  tail -n 30 "$tmp/build.out" | sed 's/^/# /'
  exit 1
fi
lib=$(ls -d "$tmp"/build/lib.* | head -n 1)

time_limit 300
PYTHONPATH=$lib:$src/tests PYTHONDONTWRITEBYTECODE=1 \
  $limit "$dbg" -m pytest -q -p no:cacheprovider -p python_refleaks \
  --refleaks=2:3 --refleaks-log "$tmp/deltas" --rootdir "$src/tests/python" \
  --basetemp "$tmp/pytest" -k "${FL_REFLEAK_TESTS:-python_object}" \
  "$src/tests/python/test_leaks.py" >"$tmp/out" 2>&1 </dev/null
rc=$?
# Each test's references and blocks a counted run.
[ -f "$tmp/deltas" ] && sed 's/^/# /' "$tmp/deltas"
if [ "$rc" -eq 0 ] && [ -s "$tmp/deltas" ]; then
  ok "no test leaks references under $dbg"
else
  not_ok "no test leaks references under $dbg (pytest: $rc)"
  tail -n 60 "$tmp/out" | sed 's/^/# /'
fi
exit "$failed"
