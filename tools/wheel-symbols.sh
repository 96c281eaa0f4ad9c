#!/bin/sh
# usage: sh tools/wheel-symbols.sh DIR
# Checks that every ELF file under DIR (an unpacked or installed wheel)
# loads on glibc 2.28 (manylinux_2_28): it prints each undefined symbol
# that needs a newer glibc, or a version of another library than glibc,
# or that has no version at all -- which the loader binds to whatever
# first has the name, as zig's link leaves a symbol its glibc 2.28 lacks --
# other than CPython's own (Py*, _Py*, which the interpreter gives the
# module) and weak ones (which may stay unresolved), and exits 1 if any.
# Needs readelf (apt-get install binutils).
set -eu
[ $# -eq 1 ] && [ -d "$1" ] || {
  echo "usage: sh tools/wheel-symbols.sh DIR" >&2
  exit 2
}
command -v readelf >/dev/null 2>&1 || {
  echo "tools/wheel-symbols.sh: no readelf (apt-get install binutils)" >&2
  exit 2
}
elf=0
bad=0
for f in $(find "$1" -type f | sort); do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  elf=$((elf + 1))
  readelf -W --dyn-syms "$f" | awk -v f="${f#"$1"/}" '
    $7 == "UND" && $8 != "" {
      name = $8; ver = ""
      if ((at = index(name, "@")) > 0) {
        ver = substr(name, at + 1); name = substr(name, 1, at - 1)
        sub(/^@/, "", ver)
      }
      if (ver == "") {
        if (name ~ /^_?Py/ || $5 == "WEAK") next
        print f ": " name " has no version"; bad = 1; next
      }
      n = split(ver, v, /[_.]/)
      if (v[1] != "GLIBC" || n < 3 || v[2] != 2 || v[3] + 0 > 28) {
        print f ": " name "@" ver " is newer than glibc 2.28, or not glibc'"'"'s"
        bad = 1
      }
    }
    END { exit bad }' || bad=1
done
if [ "$elf" -eq 0 ]; then
  echo "tools/wheel-symbols.sh: no ELF file under $1" >&2
  exit 1
fi
exit "$bad"
