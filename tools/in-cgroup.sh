#!/bin/sh
# sh tools/in-cgroup.sh SIZE COMMAND [ARG...]: runs the command as on a
# container development box (issue 16): in a new memory cgroup of SIZE
# bytes (a K, M or G suffix multiplies by 1024s), under cgroup v2 or v1,
# whichever this machine lets it make, with the soft RLIMIT_NOFILE raised
# to the hard one.  It prints one line that says the cgroup and the limits
# the command runs under, or why no cgroup could be made, and then runs it
# without one.  The cgroup is removed afterwards, whatever the command's
# status; a process the command left in it is reported, killed, and fails
# the run.  Exits with the command's status.  Making a cgroup takes root.
# dash, bash and busybox sh all have ulimit -H and -S.
# shellcheck disable=SC3045
set -u
me=in-cgroup
if [ $# -lt 2 ]; then
  echo "usage: sh tools/in-cgroup.sh SIZE COMMAND [ARG...]" >&2
  exit 2
fi
case $1 in
*[!0-9KMG]* | [!0-9]* | *[KMG]?*)
  echo "$me: a size is bytes, or a number with K, M or G: $1" >&2
  exit 2
  ;;
*G) bytes=$((${1%G} * 1073741824)) ;;
*M) bytes=$((${1%M} * 1048576)) ;;
*K) bytes=$((${1%K} * 1024)) ;;
*) bytes=$1 ;;
esac
shift

# The fd limit: a container often gives 1048576 hard, and a soft limit
# below it only where a program lowers it.
hard=$(ulimit -H -n)
[ "$hard" = unlimited ] && hard=$(cat /proc/sys/fs/nr_open)
ulimit -S -n "$hard" 2>/dev/null
limits="RLIMIT_NOFILE $(ulimit -S -n) (hard $(ulimit -H -n))"

# mount_of TYPE [CONTROLLER]: "ROOT MOUNTPOINT" of a cgroup file system of
# that type (with that controller among its options, for v1).
mount_of() {
  awk -v type="$1" -v ctl="${2-}" '{
      for (i = 7; $i != "-"; i++) ;
      if ($(i + 1) != type) next
      if (ctl != "" && ("," $(i + 3) ",") !~ ("," ctl ",")) next
      print $4, $5; exit
    }' /proc/self/mountinfo
}

# path_in ROOT MOUNTPOINT PATH: where a cgroup's PATH (from
# /proc/self/cgroup) lies under a mount of the hierarchy's ROOT.
path_in() {
  case $3 in
  "$1"/* | "$1") [ "$1" != / ] && set -- "$1" "$2" "${3#"$1"}" ;;
  esac
  echo "$2${3%/}"
}

cg='' own='' why=''
name=forkload-ci.$$
# cgroup v2: a new cgroup takes memory.max where its parent hands the
# memory controller down.  This process's own cgroup cannot (it holds
# processes, and only the root may then), unless it is the root: the new
# one is made beside it.
try_v2() {
  # shellcheck disable=SC2046
  set -- $(mount_of cgroup2)
  [ $# = 2 ] || { why="no cgroup2 file system is mounted"; return 1; }
  path=$(sed -n 's/^0:://p' /proc/self/cgroup)
  [ -n "$path" ] || { why="this process has no cgroup v2 path"; return 1; }
  own=$(path_in "$1" "$2" "$path")
  if [ "$own" = "$2" ]; then
    # The root of the hierarchy: it may hand the controller down, and
    # does from now on (systemd does so at boot).
    parent=$own
    grep -qw memory "$parent/cgroup.subtree_control" ||
      { grep -qw memory "$parent/cgroup.controllers" &&
        echo +memory >"$parent/cgroup.subtree_control"; } 2>/dev/null
  else
    parent=${own%/*}
  fi
  if ! grep -qw memory "$parent/cgroup.subtree_control" 2>/dev/null; then
    why="cgroup v2 at $2 does not hand the memory controller to $parent's \
children"
    return 1
  fi
  make_cgroup "$parent/$name" memory.max v2
}

# cgroup v1: the memory hierarchy allows a child of any cgroup.
try_v1() {
  # shellcheck disable=SC2046
  set -- $(mount_of cgroup memory)
  if [ $# != 2 ]; then
    why="$why; no cgroup v1 memory hierarchy is mounted"
    return 1
  fi
  path=$(awk -F: '("," $2 ",") ~ /,memory,/ { print $3; exit }' \
    /proc/self/cgroup)
  if [ -z "$path" ]; then
    why="$why; this process is in no v1 memory cgroup"
    return 1
  fi
  own=$(path_in "$1" "$2" "$path")
  make_cgroup "$own/$name" memory.limit_in_bytes v1
}

# make_cgroup DIR FILE VERSION: the cgroup DIR with FILE set to the size.
make_cgroup() {
  if ! err=$(mkdir "$1" 2>&1); then
    why="$why${why:+; }cannot make a cgroup: ${err#mkdir: }"
    return 1
  fi
  if ! err=$( (echo "$bytes" >"$1/$2") 2>&1); then
    why="$why${why:+; }cannot set $1/$2 to $bytes: $err"
    rmdir "$1"
    return 1
  fi
  cg=$1 version=$3 file=$2
}

# Back to the cgroup this process came from, and the new one removed; a
# process the command left there is named and killed.
cleanup() {
  [ -n "$cg" ] || return 0
  echo $$ >"$own/cgroup.procs" 2>/dev/null
  left=$(cat "$cg/cgroup.procs" 2>/dev/null)
  tries=0
  while [ -n "$left" ] && [ $tries -lt 20 ]; do
    sleep 0.1
    tries=$((tries + 1))
    left=$(cat "$cg/cgroup.procs" 2>/dev/null)
  done
  if [ -n "$left" ]; then
    echo "$me: left behind in $cg, killed:" >&2
    for pid in $left; do
      echo "  $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" >&2
      kill -9 "$pid" 2>/dev/null
    done
    sleep 0.5
    status=${status:-0}
    [ "$status" = 0 ] && status=1
  fi
  rmdir "$cg" || echo "$me: cannot remove $cg" >&2
  cg=
}

if [ "$(id -u)" != 0 ]; then
  why="not root"
elif ! try_v2; then
  try_v1
fi
status=
trap 'cleanup; exit ${status:-1}' EXIT
trap 'status=${status:-130}; exit' HUP INT TERM
if [ -n "$cg" ] && ! err=$( (echo $$ >"$cg/cgroup.procs") 2>&1); then
  why="cannot move into $cg: $err"
  cleanup
fi
if [ -n "$cg" ]; then
  echo "$me: running in memory cgroup $version $cg, $file $bytes; $limits"
else
  echo "$me: no memory cgroup of $bytes bytes ($why); running without one" \
    "under $limits"
fi
"$@"
status=$?
