#!/bin/sh
# TAP test of how `forkload gen` puts its files in place (issue 28): each
# kind is written beside its target and renamed into place only when
# whole.  --force replaces what was there, leaving nothing of an earlier,
# bigger run (images, shards, files); without it an existing target is
# refused and left as it was; a write that fails (past ulimit -f, which
# must give EFBIG and not kill gen with SIGXFSZ; on a full tmpfs, where
# root and unshare -m can mount one) and a SIGTERM leave the directory as
# it was, an older target included, and no TARGET.gen-* sibling.  Kinds
# this build lacks (libjpeg, liblmdb, libarchive) are skipped, saying so.
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
top_builddir=${top_builddir:-$top_srcdir}
. "$top_srcdir/tests/tap.sh"
bin=$top_builddir/examples/forkload
scratch_dir
time_limit 60
w=$tmp/w
mkdir "$w" || exit 1

echo "1..34"

# gen ARGS...: the binary, output in $tmp/out and $tmp/err, its status in
# $rc.
gen() {
  $limit "$bin" gen "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

# result CONDITION-STATUS DESCRIPTION: ok, or not ok with the exit status
# and stderr.
result() {
  if [ "$1" = 0 ]; then
    ok "$2"
  else
    not_ok "$2"
    diag "exit $rc" "$(cat "$tmp/err")"
  fi
}

# snapshot: every name under $w and every file's checksum, to compare.
snapshot() {
  (cd "$w" && find . -print | LC_ALL=C sort &&
    find . -type f -exec cksum {} + | LC_ALL=C sort)
}

# args KIND SAMPLES: the target and options of gen KIND.  With 100
# samples every kind writes a file past 16 KiB; npy-zip's first array
# stays under it, so that only its second fails.
args() {
  case $1 in
  npy) echo "npy $w/t.npy --samples $2 --sample-bytes 1000" ;;
  raw) echo "raw $w/t.raw --samples $2 --sample-bytes 1000" ;;
  npy-dir) echo "npy-dir $w/d --samples $2 --sample-bytes 20000" ;;
  npy-zip) echo "npy-zip $w/x.npy,$w/y.npy --samples $2 --sample-bytes 8,1000" ;;
  tokens) echo "tokens $w/t0.bin,$w/t1.bin --samples $2 --seq-len 200" ;;
  images) echo "images $w/img --samples $2" ;;
  lmdb) echo "lmdb $w/db --samples $2 --sample-bytes 1000" ;;
  webdataset) echo "webdataset $w/wds --samples $2 --shards 2 --sample-bytes 1000" ;;
  esac
}
kinds="npy raw npy-dir npy-zip tokens images lmdb webdataset"

# Which kinds this build writes: gen says which library it lacks.
lacks=
for kind in images lmdb webdataset; do
  # shellcheck disable=SC2046
  gen $(args "$kind" 2)
  grep -q "built without" "$tmp/err" && lacks="$lacks $kind"
  rm -rf "${w:?}"/*
done
# missing KIND: whether this build lacks KIND.
missing() {
  case " $lacks " in *" $1 "*) return 0 ;; esac
  return 1
}

# (a) --force over a bigger earlier run leaves only the new one.
if missing images; then
  skip "gen images --force leaves no stale image" "built without libjpeg"
else
  gen images "$w/img" --samples 40 &&
    gen images "$w/img" --samples 10 --force
  [ "$rc" = 0 ] && [ "$(find "$w/img" -name '*.jpg' | wc -l)" = 10 ] &&
    [ "$(ls "$w/img" | wc -l)" = 10 ] && [ "$(ls "$w")" = img ]
  result $? "gen images 40, then 10 --force, leaves exactly 10 images"
fi
rm -rf "${w:?}"/*
if missing webdataset; then
  skip "gen webdataset --force leaves no stale shard" "built without libarchive"
else
  gen webdataset "$w/wds" --samples 40 --shards 8 &&
    gen webdataset "$w/wds" --samples 10 --shards 2 --force
  [ "$rc" = 0 ] && [ "$(ls "$w/wds" | tr '\n' ' ')" = \
    "shard-00000.tar shard-00001.tar " ] && [ "$(ls "$w")" = wds ]
  result $? "gen webdataset 8 shards, then 2 --force, leaves exactly 2"
fi
rm -rf "${w:?}"/*
gen npy-dir "$w/d" --samples 40 --sample-bytes 8 && : >"$w/d/notes.txt" &&
  gen npy-dir "$w/d" --samples 10 --sample-bytes 8 --force
[ "$rc" = 0 ] && [ "$(ls "$w/d" | wc -l)" = 10 ] && [ -f "$w/d/00000009.npy" ] &&
  [ "$(ls "$w")" = d ]
result $? "gen npy-dir --force replaces the directory, leaving its 10 files"
rm -rf "${w:?}"/*

# (b) Without --force an existing target is refused and left as it was.
for kind in $kinds; do
  if missing "$kind"; then
    skip "gen $kind over an existing target is refused" "built without it"
    continue
  fi
  # shellcheck disable=SC2046
  gen $(args "$kind" 2)
  snapshot >"$tmp/before"
  # shellcheck disable=SC2046
  gen $(args "$kind" 3)
  snapshot >"$tmp/after"
  [ "$rc" = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
    grep -q "^forkload: gen: $w/.* \(exists\|is not empty\) (--force replaces it)$" \
      "$tmp/err" && cmp -s "$tmp/before" "$tmp/after"
  result $? "gen $kind over an existing target is refused, exit 1, untouched"
  rm -rf "${w:?}"/*
done
mkdir "$w/d"
gen npy-dir "$w/d" --samples 3 --sample-bytes 4
[ "$rc" = 0 ] && [ "$(ls "$w/d" | wc -l)" = 3 ] && [ "$(ls "$w")" = d ]
result $? "gen npy-dir into an existing empty directory takes it"
gen npy "$w/d" --samples 3 --sample-bytes 4 --force
[ "$rc" = 1 ] && [ "$(ls "$w/d" | wc -l)" = 3 ] && [ "$(ls "$w")" = d ] &&
  grep -q "^forkload: gen: .*/d is a directory: --force replaces only a file" \
    "$tmp/err"
result $? "gen npy --force does not replace a directory with a file"
rm -rf "${w:?}"/*

# (c) Past ulimit -f (16 KiB) a write fails with EFBIG: gen says so, exits
# 1 (not 153, killed by SIGXFSZ) and leaves nothing new, nor any change to
# an older target it was to replace.
# fails_big KIND DESCRIPTION [--force]: gen KIND of 100 samples under the
# limit fails and leaves $w as it was.
fails_big() {
  snapshot >"$tmp/before"
  # shellcheck disable=SC2046
  (ulimit -f 16 && exec $limit "$bin" gen $(args "$1" 100) $3 \
    >"$tmp/out" 2>"$tmp/err")
  rc=$?
  snapshot >"$tmp/after"
  [ "$rc" = 1 ] && [ "$(wc -l <"$tmp/err")" = 1 ] &&
    grep -q "^forkload: gen: .*\(File too large\|Input/output error\)$" \
      "$tmp/err" && cmp -s "$tmp/before" "$tmp/after"
  result $? "$2"
}
for kind in $kinds; do
  if missing "$kind"; then
    skip "gen $kind past ulimit -f leaves nothing" "built without it"
    skip "gen $kind --force past ulimit -f leaves the old" "built without it"
    continue
  fi
  fails_big "$kind" "gen $kind past ulimit -f: EFBIG, exit 1, nothing new"
  # shellcheck disable=SC2046
  gen $(args "$kind" 2)
  fails_big "$kind" "gen $kind --force past ulimit -f leaves the old target" \
    --force
  rm -rf "${w:?}"/*
done

# (d) On a full tmpfs (1 MiB, in a private mount namespace) writes fail
# with ENOSPC: nothing new is left, and an older target stays.
# Run as root in a mount namespace of its own: each kind's status, then
# the names it left, in $tmp/full.KIND.
full="npy-dir lmdb webdataset"
abs=$(cd "$(dirname "$bin")" && pwd)/forkload
cat >"$tmp/full.sh" <<EOF
mount -t tmpfs -o size=1m forkload-gen "$w" || exit 1
cd "$w" || exit 1
for k in $full; do
  "$abs" gen \$k \$k --samples 2000 --sample-bytes 1000 \\
    \$([ \$k = webdataset ] && echo --shards 2) 2>"$tmp/full.\$k.err"
  echo \$? >"$tmp/full.\$k"
  ls -A >>"$tmp/full.\$k"
done
"$abs" gen raw old.raw --samples 100 --sample-bytes 1000 >/dev/null &&
  cksum old.raw >"$tmp/old.before" || exit 1
"$abs" gen raw old.raw --samples 2000 --sample-bytes 1000 --force \\
  2>"$tmp/full.raw.err"
echo \$? >"$tmp/full.raw"
ls -A >>"$tmp/full.raw"
cksum old.raw >"$tmp/old.after"
EOF
if [ "$(id -u)" = 0 ] &&
  unshare -m mount -t tmpfs -o size=1m forkload-gen "$w" 2>/dev/null; then
  unshare -m sh "$tmp/full.sh"
  for k in $full raw; do
    if missing "$k"; then
      skip "gen $k on a full tmpfs leaves nothing new" "built without it"
      continue
    fi
    # LMDB says EIO, of the short write that ENOSPC makes.
    cp "$tmp/full.$k.err" "$tmp/err"
    rc=$(head -n 1 "$tmp/full.$k")
    [ "$rc" = 1 ] &&
      grep -q "No space left on device\|Input/output error" "$tmp/err"
    failed_right=$?
    left=$(sed 1d "$tmp/full.$k")
    if [ "$k" = raw ]; then
      [ $failed_right = 0 ] && [ "$left" = old.raw ] &&
        cmp -s "$tmp/old.before" "$tmp/old.after"
      result $? "gen raw --force on a full tmpfs: ENOSPC leaves the old file"
    else
      [ $failed_right = 0 ] && [ -z "$left" ]
      result $? "gen $k on a full tmpfs: ENOSPC, exit 1, nothing new"
    fi
  done
else
  for k in $full raw; do
    skip "gen $k on a full tmpfs leaves nothing new" \
      "needs root and unshare -m to mount a small tmpfs"
  done
fi
rm -rf "${w:?}"/*

# (e) A SIGTERM while gen writes stops it (128 + 15) and removes what it
# wrote.  Images come slowly (a JPEG to encode each), so that the signal
# comes while it writes, after a few MB.
if missing images; then
  skip "gen stopped by SIGTERM exits 143 and leaves nothing" \
    "built without libjpeg, whose images come slowly enough"
else
  (
    ulimit -f 262144
    exec "$bin" gen images "$w/img" --samples 100000 2>"$tmp/err"
  ) &
  pid=$!
  i=0
  while [ -z "$(ls "$w")" ] && [ $i -lt 100 ]; do
    sleep 0.05
    i=$((i + 1))
  done
  sleep 0.2
  kill -TERM $pid
  wait $pid
  rc=$?
  [ "$rc" = 143 ] && [ -z "$(ls -A "$w")" ] &&
    grep -q "^forkload: gen: stopped by SIGTERM: nothing was put in place" \
      "$tmp/err"
  result $? "gen stopped by SIGTERM exits 143 and leaves nothing"
fi

exit $failed
