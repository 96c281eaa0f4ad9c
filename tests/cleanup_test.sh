#!/bin/sh
# TAP test of `forkload cleanup`: in a /dev/shm holding a name of forkload's
# form whose owner is gone, one whose owner (this shell) is alive, one of
# another PID namespace (whose pid means nothing here), one of another form
# and a directory of a stale name's form, --dry-run lists only the stale
# name, and the other namespace's as left alone, and removes nothing, and
# cleanup removes only the stale name.  Runs in a private mount namespace
# with its own tmpfs over /dev/shm, so that no other loader on the machine
# (make -j check) sweeps the stale name first; without root and unshare(1)
# it is skipped.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
private_dev_shm_or_skip "$0" "$@"
bin=$top_builddir/examples/forkload
scratch_dir

echo "1..6"

dead=$(sh -c 'echo $$')
while kill -0 "$dead" 2>/dev/null; do dead=$(sh -c 'echo $$'); done
stale=/dev/shm/forkload.$dead.deadbeef.7
live=/dev/shm/forkload.$$.deadbeef.8
other=/dev/shm/forkload-not-ours
dir=/dev/shm/forkload.$dead.deadbeef.0123456789abcdef
# No PID namespace has inode 1.
foreign=/dev/shm/forkload.$dead.deadbeef.0123456789abcdef.1.0123456789abcdef
: >"$stale" && : >"$live" && : >"$other" && : >"$foreign" && mkdir "$dir" ||
  exit 1

# cleanup_ok DESCRIPTION EXPECTED ARGS...: `forkload cleanup ARGS` exits 0
# and prints exactly the lines EXPECTED.
cleanup_ok() {
  desc=$1 expected=$2
  shift 2
  timeout -k 5 60 "$bin" cleanup "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" = 0 ] && [ "$(cat "$tmp/out")" = "$expected" ]; then
    ok "$desc"
  else
    not_ok "$desc"
    diag "exit $rc; stdout:" "$(cat "$tmp/out")" "stderr:" "$(cat "$tmp/err")"
  fi
}

# present WHICH...: which planted names are there, in the order given.
present() {
  for f in "$@"; do
    if [ -e "$f" ]; then echo "$f"; fi
  done
}

left_alone="left alone $foreign (owner pid $dead is in another PID namespace)"
cleanup_ok "cleanup --dry-run lists only the stale name, and what it leaves" \
  "would remove $stale (owner pid $dead is gone)
$left_alone
1 segment(s) would be removed
1 name(s) of another PID namespace left alone" --dry-run
if [ "$(present "$stale" "$live" "$other" "$foreign")" = "$stale
$live
$other
$foreign" ]; then
  ok "cleanup --dry-run removes nothing"
else
  not_ok "cleanup --dry-run removes nothing"
fi
cleanup_ok "cleanup reports the stale name, and what it leaves" \
  "removed $stale (owner pid $dead is gone)
$left_alone
1 segment(s) removed
1 name(s) of another PID namespace left alone"
if [ "$(present "$stale" "$live" "$other" "$foreign")" = "$live
$other
$foreign" ]; then
  ok "cleanup removes only the stale name"
else
  not_ok "cleanup removes only the stale name"
fi
# A dry run counts only what cleanup removes: not a directory.
if [ -d "$dir" ]; then
  ok "the directory of a stale name's form was neither counted nor removed"
else
  not_ok "the directory of a stale name's form was neither counted nor removed"
fi
rm -f "$foreign"
cleanup_ok "cleanup with nothing stale removes nothing" "0 segment(s) removed"
exit $failed
