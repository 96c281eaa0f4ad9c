#!/bin/sh
# usage: python_test.sh [tests/python/test_FILE.py ...]
# TAP test of the Python module: pytest runs the files given (make check
# gives one, each file a test of its own, under its own time limit), or
# all of tests/python, with the
# interpreter configure built the module for ($FL_PYTHON) and the build
# tree's package first on PYTHONPATH, and tests/python_tap.py turns each
# test into a TAP line: "ok N - tests/python/FILE::TEST", "not ok" with
# the failure as diagnostics, a skip with pytest's reason.  pytest runs
# under a time limit (FL_PYTEST_TIMEOUT, or what is left of run-test.sh's
# less 30 s),
# with the soft fd limit at 1024, with no cache or bytecode written.
#
# Where the module was built with AddressSanitizer (CI's second pass), a
# plain python3 cannot load it: the ASan runtime (and UBSan's) is
# preloaded, leaks are not looked for (the interpreter's are not ours),
# and if torch cannot be imported so, the tests that need it skip saying
# why and the others run.
#
# With FL_PYTHON_INSTALLED=PYTHON (make check-installed), the tests run
# with that interpreter and the forkload pip installed into it, as a user
# has it: the build tree's module plays no part.
#
# Skipped as a whole (exit 77) with the reason where configure built no
# module, or where that interpreter lacks pytest, numpy or torch.
start=$(date +%s)
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
python=${FL_PYTHON_INSTALLED:-${FL_PYTHON-}}
so=$top_builddir/python/.libs/_forkload${FL_PYTHON_EXT_SUFFIX-}

if [ -n "${FL_PYTHON_INSTALLED-}" ]; then
  so=$("$python" -c 'import forkload._forkload as m; print(m.__file__)') || {
    echo "1..1"
    echo "not ok 1 - forkload is installed for $python (pip install .)"
    exit 1
  }
elif [ -z "$python" ] || [ -n "${FL_PYTHON_WHY-}" ]; then
  echo "1..0 # SKIP the Python module is not built:" \
    "${FL_PYTHON_WHY:-configure found no Python}"
  exit 77
elif [ ! -f "$so" ] || [ ! -f "$top_builddir/python/forkload/__init__.py" ]; then
  echo "1..1"
  echo "not ok 1 - the Python module is built: no $so or" \
    "$top_builddir/python/forkload/__init__.py (did make run?)"
  exit 1
fi
missing=$(python_lacks "$python")
if [ -n "$missing" ]; then
  m=${missing%% *}
  why=${missing#* }
  case $python in
  /usr/bin/python3*) how="apt-get install python3-$m; sh tools/setup.sh does" ;;
  *)
    how="$python -m pip install $m, or ./configure"
    how="$how --with-python=/usr/bin/python3 with Debian's python3-$m"
    ;;
  esac
  echo "1..0 # SKIP no $m for $python ($how): $why"
  exit 77
fi
scratch_dir

# The build tree's package first (not where it is installed); this
# script's plugin after it.
[ -n "${FL_PYTHON_INSTALLED-}" ] ||
  PYTHONPATH=$(cd "$top_builddir/python" && pwd)${PYTHONPATH:+:$PYTHONPATH}
PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$(cd "$top_srcdir/tests" && pwd)
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH PYTHONDONTWRITEBYTECODE
# The limit the tests were written for, wherever the shell's is higher.
hard=$(ulimit -H -n)
if [ "$hard" = unlimited ] || [ "$hard" -ge 1024 ]; then
  ulimit -S -n 1024
fi

# The sanitizers' runtimes, first in the process where the module needs
# them: the paths the module itself resolves, else the compiler's.
preload=
needed=$(objdump -p "$so" 2>/dev/null | sed -n 's/^ *NEEDED *//p')
if [ -z "$needed" ] && command -v ldd >/dev/null 2>&1; then
  needed=$(ldd "$so" 2>/dev/null | awk '{print $1}')
fi
for rt in libasan libubsan; do
  case $needed in
  *"$rt".so*) ;;
  *) continue ;;
  esac
  path=$(ldd "$so" 2>/dev/null | awk -v rt="$rt" \
    'index($1, rt ".so") == 1 && $3 ~ /^\// {print $3}')
  [ -n "$path" ] || path=$(${CC:-cc} -print-file-name="$rt.so")
  preload="$preload${preload:+ }$path"
done
block_torch=
if [ -n "$preload" ]; then
  diag "the module needs $(echo "$preload" | sed 's|[^ ]*/||g'):" \
    "pytest runs with LD_PRELOAD=$preload"
  LD_PRELOAD=$preload${LD_PRELOAD:+ $LD_PRELOAD}
  # The interpreter's and torch's leaks are not the module's; the rest of
  # CI's options stand.
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
  # The differential fuzzer's cases, fewer where each takes several times
  # as long.
  FL_FUZZ_CASES=${FL_FUZZ_CASES:-150}
  export FL_FUZZ_CASES
  export LD_PRELOAD ASAN_OPTIONS
  if ! why=$(time_limit 120 && $limit "$python" -c 'import torch' 2>&1); then
    block_torch="torch cannot be imported with $preload preloaded:"
    block_torch="$block_torch $(printf '%s\n' "$why" | grep . | tail -n 1)"
    diag "$block_torch" "so the tests that need torch skip, the others run"
  fi
fi

# What is left of run-test.sh's limit, less 30 s for the report.
limit=${FL_PYTEST_TIMEOUT:-$((${FL_TEST_TIMEOUT:-300} - 30 - ($(date +%s) - start)))}
[ "$limit" -ge 30 ] || limit=30
# A hang is shown before it is killed: 2 s before the limit, the processes
# under this script; at the limit, timeout(1) sends SIGUSR2 to its process
# group, on which each Python process prints its stack (conftest.py has
# faulthandler do it; the children pytest forks inherit it, and a worker,
# whose handlers libforkload resets, just ends); 5 s later, SIGKILL.
# Not pytest's faulthandler_timeout: it starts a watchdog thread per test,
# and a fork while one of them exits copies the locks it holds (under
# ASan, its allocator's) into the child, which then hangs on them.
# pytest runs in the foreground: an asynchronous command of a
# non-interactive shell starts with SIGINT ignored, which the tests'
# consumers would inherit.
(
  sleep $((limit - 2)) &
  sleeper=$!
  trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
  wait "$sleeper" || exit 0
  tree=$(ps -e -o pid= -o ppid= | awk -v root="$$" '
    {parent[$1] = $2}
    END {
      for (p in parent) {
        q = p
        while (q in parent && q != root && q > 1) q = parent[q]
        if (q == root) print p
      }
    }' | tr '\n' , | sed 's/,$//')
  {
    echo "== $((limit - 2)) s: the processes under $0 (pid $$)"
    ps -o pid,ppid,stat,wchan:24,etime,args -p "$tree"
  } >"$tmp/hang" 2>&1
) >/dev/null 2>&1 &
watch_pid=$!
mkdir "$tmp/stacks"
FL_PYTEST_STACKS=$tmp/stacks timeout -s USR2 -k 5 "$limit" "$python" -m pytest -q --no-summary \
  -p no:cacheprovider --capture=sys --continue-on-collection-errors \
  -p python_tap --tap-file "$tmp/tap" --tap-prefix tests/python/ \
  ${block_torch:+--tap-block-torch "$block_torch"} \
  --basetemp "$tmp/pytest" --rootdir "$top_srcdir/tests/python" \
  "${@:-$top_srcdir/tests/python}" \
  >"$tmp/out" 2>&1 </dev/null
rc=$?
kill "$watch_pid" 2>/dev/null
wait "$watch_pid" 2>/dev/null

# The plugin's lines, then what it could not say: a test during which
# pytest died or was killed, or an error no test carries.
touch "$tmp/tap"
n=$(grep -c '^\(not \)\{0,1\}ok ' "$tmp/tap")
cat "$tmp/tap"
# What else pytest's process wrote (its progress lines aside): what the C
# code, the sanitizers and faulthandler wrote to fds 1 and 2, the last
# line pytest's count (blank lines left out).
awk 'NF && !/^[.sxXfFE]+ *\[ *[0-9]+%\]$/' "$tmp/out" >"$tmp/rest"
{
  [ -f "$tmp/hang" ] && cat "$tmp/hang"
  for f in "$tmp"/stacks/stack.*; do
    [ -s "$f" ] && echo "== the Python stack of pid ${f##*.}" && cat "$f"
  done
} >>"$tmp/rest"
rest_out() {
  lines=$(wc -l <"$tmp/rest")
  [ "$lines" -gt 300 ] && diag "(the last 300 of $lines lines written)"
  tail -n 300 "$tmp/rest" | awk '{print "# " $0}'
}
case $rc in
124 | 137) how="pytest was killed after $limit s: hung?" ;;
0 | 1 | 5) how="pytest ended in it, with status $rc" ;;
*) how="pytest exited $rc" ;;
esac
[ "$rc" -gt 128 ] && [ "$rc" -ne 137 ] &&
  how="pytest died of signal $((rc - 128)) ($(kill -l "$rc" 2>/dev/null))"
# The test that ran when pytest ended, if it did not end itself, or the
# run as a whole where pytest's status is not that of its tests (5: no
# test collected, unless files were skipped whole).
running=$(cat "$tmp/tap.running" 2>/dev/null)
if [ -n "$running" ]; then
  not_ok "$running ends ($how)"
elif [ "$rc" -eq 5 ] && [ "$n" -eq 0 ]; then
  not_ok "pytest finds tests in tests/python"
elif [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ] && ! grep -q '^not ok ' "$tmp/tap"
then
  not_ok "pytest tests/python ends with status 0 ($how)"
fi
rest_out
echo "1..$n"
# automake's driver counts the failures; the exit status is pytest's.
[ "$rc" -eq 0 ] || { [ "$rc" -eq 5 ] && [ "$failed" -eq 0 ]; }
