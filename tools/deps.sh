#!/bin/sh
# usage: sh tools/deps.sh          (prints the prefix on stdout)
#        sh tools/deps.sh --update (rewrites tools/deps.lock)
# Builds the third-party libraries that tools/wheel.sh links statically
# into forkload's wheel -- libuv, libjpeg-turbo (with its SIMD), libspng,
# libwebp, libtiff, lmdb, libarchive and what they need (zlib, bzip2, xz,
# zstd, lz4) -- as static, position-independent archives compiled by zig
# for glibc 2.28 (manylinux_2_28), and prints the prefix they are in.
#
# The sources are Debian 12's source packages, Debian's patches (its
# security fixes) applied, at the versions tools/deps.lock pins by the
# SHA256 of their .dsc; each file is checked against it before use.  The
# prefix is cached outside the clone, keyed by this script, the lock and
# zig's version, so that a machine builds it once:
#   ${FL_DEPS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/forkload}/deps-KEY
# zig is $PYTHON's ziglang (pip install ziglang); $PYTHON defaults to
# python3.  Each library is built with the least it needs: libtiff without
# C++ (no Lerc), jbig or libdeflate; libarchive with the gzip, bzip2, xz,
# zstd and lz4 filters for forkload's tar reader, and no XML, crypto,
# ACLs, xattrs or iconv.  Needs apt-get, dpkg-source (dpkg-dev), nasm, cmake, make,
# autoconf, automake and libtool (tools/setup.sh installs them).
#
# --update asks Debian for each package's newest version in bookworm and
# bookworm-security whose .dsc downloads and writes them into
# tools/deps.lock, printing the lines that changed: commit the lock once
# the wheel builds and its tests pass.
set -eu
cd "$(dirname "$0")/.."
src=$(pwd)
lock=$src/tools/deps.lock
me="tools/deps.sh"
die() {
  echo "$me: $*" >&2
  exit 1
}
say() {
  echo "$me: $*" >&2
}
for tool in apt-get dpkg-source sha256sum; do
  command -v $tool >/dev/null 2>&1 ||
    die "no $tool: it runs on Debian or Ubuntu (apt-get install dpkg-dev)"
done
python=${PYTHON:-python3}
zig=$("$python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))' 2>/dev/null) ||
  die "no ziglang for $python (pip install ziglang, or set PYTHON)"
arch=$(uname -m)
target=$arch-linux-gnu.2.28

tmp=$(mktemp -d)
prefix=""
cleanup() {
  rm -rf "$tmp"
  # A prefix left half built would be taken for a built one.
  [ -z "$prefix" ] || [ -f "$prefix/.complete" ] || rm -rf "$prefix"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# apt-get on a configuration of its own: Debian 12's source lists in $tmp,
# whatever the machine's own sources.list says.
mkdir -p "$tmp/apt/lists/partial" "$tmp/apt/cache/archives/partial"
printf '%s\n' \
  'deb-src http://deb.debian.org/debian bookworm main' \
  'deb-src http://deb.debian.org/debian-security bookworm-security main' \
  >"$tmp/apt/sources.list"
: >"$tmp/apt/status"
apt() {
  cmd=$1
  shift
  $cmd -q -o Dir::Etc::SourceList="$tmp/apt/sources.list" \
    -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$tmp/apt/lists" \
    -o Dir::Cache="$tmp/apt/cache" -o Dir::State::status="$tmp/apt/status" \
    -o APT::Sandbox::User="$(id -un)" "$@"
}
apt_update() {
  apt apt-get update >"$tmp/apt.out" 2>&1 || {
    cat "$tmp/apt.out" >&2
    die "apt-get update of Debian 12's source lists failed (is deb.debian.org reachable?)"
  }
}

# The versions on stdin, newest first (by how many are newer).
sort_versions() {
  cat >"$tmp/versions"
  while read -r v; do
    n=0
    while read -r w; do
      if dpkg --compare-versions "$w" gt "$v"; then n=$((n + 1)); fi
    done <"$tmp/versions"
    echo "$n $v"
  done <"$tmp/versions" | sort -n | cut -d' ' -f2
}
packages() {
  awk '!/^#/ && NF == 3 {print $1}' "$lock"
}

if [ "${1-}" = --update ]; then
  apt_update
  {
    sed -n '/^#/p' "$lock"
    for pkg in $(packages); do
      # The newest version whose .dsc downloads: Debian's lists may name
      # one that the mirror does not have yet.
      took=""
      for v in $(apt apt-cache showsrc --only-source "$pkg" |
        awk '/^Version:/ {print $2}' | sort -u | sort_versions); do
        rm -rf "$tmp/dsc" && mkdir "$tmp/dsc"
        if (cd "$tmp/dsc" && apt apt-get source --download-only --dsc-only \
          --only-source "$pkg=$v" >/dev/null 2>&1); then
          took=$v
          break
        fi
        say "$pkg $v is listed, but its .dsc does not download: trying older"
      done
      [ -n "$took" ] || die "no version of $pkg downloads from Debian 12"
      sha=$(cat "$tmp"/dsc/*.dsc | sha256sum | cut -d' ' -f1)
      echo "$pkg $took $sha"
    done
  } >"$tmp/lock"
  diff "$lock" "$tmp/lock" | sed -n 's/^> //p' | grep -v '^#' >&2 ||
    say "the lock is up to date"
  cp "$tmp/lock" "$lock"
  exit 0
fi
[ $# -eq 0 ] || die "usage: sh tools/deps.sh [--update]"

zigver=$("$zig" version)
# The key: this script, the lock's pins (not its comments) and zig.
key=$({ cat "$src/tools/deps.sh"; grep -v '^#' "$lock"
  echo "zig $zigver $target"; } | sha256sum | cut -c1-16)
cache=${FL_DEPS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/forkload}
if [ -f "$cache/deps-$key/.complete" ]; then
  say "reusing the libraries built before in $cache/deps-$key"
  echo "$cache/deps-$key"
  exit 0
fi
mkdir -p "$cache"
prefix=$cache/deps-$key
rm -rf "$prefix"
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include" "$prefix/licenses"
say "building the libraries into $prefix (zig $zigver, $target)"

multiarch=$(CC= dpkg-architecture -qDEB_HOST_MULTIARCH)
machine_dirs=""
for d in /lib /lib64 /usr/lib /usr/lib64 /usr/local/lib /usr/include \
  /usr/local/include; do
  machine_dirs="$machine_dirs;$d;$d/$multiarch"
done
# zig as a compiler, archiver and ranlib of one word each, as cmake and
# configure want them.  -O2 at least: zig's default (Debug) traps on
# undefined behaviour.
bin=$tmp/bin
mkdir "$bin"
printf '#!/bin/sh\nexec "%s" cc -target %s "$@"\n' "$zig" "$target" >"$bin/cc"
printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$zig" >"$bin/ar"
printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$zig" >"$bin/ranlib"
chmod +x "$bin/cc" "$bin/ar" "$bin/ranlib"
CC=$bin/cc
AR=$bin/ar
RANLIB=$bin/ranlib
CFLAGS="-O2 -g0 -fPIC -ffunction-sections -fdata-sections"
CPPFLAGS="-I$prefix/include"
LDFLAGS="-L$prefix/lib"
# The libraries see each other in the prefix, never the machine's own.
PKG_CONFIG_LIBDIR=$prefix/lib/pkgconfig
PKG_CONFIG_PATH=
export CC AR RANLIB CFLAGS CPPFLAGS LDFLAGS PKG_CONFIG_LIBDIR PKG_CONFIG_PATH
jobs=$(nproc 2>/dev/null || echo 2)

apt_update
# fetch PKG: the locked version's source, checked and unpacked with
# Debian's patches into $tmp/PKG, the current folder after; its copyright
# goes with the prefix's licenses, to be shipped with the libraries.
fetch() {
  pkg=$1
  line=$(awk -v p="$pkg" '$1 == p' "$lock")
  [ -n "$line" ] || die "tools/deps.lock has no line for $pkg"
  set -- $line
  ver=$2 sha=$3
  upstream=${ver#*:}
  upstream=${upstream%-*}
  mkdir -p "$tmp/dl/$pkg"
  cd "$tmp/dl/$pkg"
  if ! apt apt-get source --download-only --only-source "$pkg=$ver" \
    >"$tmp/get.out" 2>&1; then
    sed 's/^/  /' "$tmp/get.out" >&2
    die "Debian 12 no longer has $pkg $ver (tools/deps.lock): run sh tools/deps.sh --update, check the build, and commit tools/deps.lock"
  fi
  dsc=$(ls ./*.dsc)
  [ "$(sha256sum <"$dsc" | cut -d' ' -f1)" = "$sha" ] ||
    die "$dsc is not the one tools/deps.lock pins (SHA256 $sha): Debian changed it; run sh tools/deps.sh --update and review"
  # Every other file against the .dsc's own SHA256s.
  awk '/^Checksums-Sha256:/ {on = 1; next} /^[^ ]/ {on = 0}
    on && NF == 3 {print $1 "  " $3}' "$dsc" >"$tmp/sums"
  [ -s "$tmp/sums" ] || die "$dsc lists no SHA256"
  sha256sum --quiet -c "$tmp/sums" >&2 ||
    die "$pkg $ver's files do not match their .dsc: download again"
  dpkg-source -x --no-check "$dsc" "$tmp/$pkg" >"$tmp/get.out" 2>&1 || {
    cat "$tmp/get.out" >&2
    die "dpkg-source could not unpack $pkg $ver"
  }
  cd "$tmp/$pkg"
  mkdir -p "$prefix/licenses/$pkg"
  cp debian/copyright "$prefix/licenses/$pkg/copyright"
  say "$pkg $ver"
}
# cmake_build [ARGS]: the unpacked source in the current folder, static,
# finding libraries in the prefix alone: one of the machine's own (its
# libm.so, say) would tie the build to its glibc ($machine_dirs).
cmake_build() {
  cmake -S . -B _build -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$CC" -DCMAKE_AR="$AR" -DCMAKE_RANLIB="$RANLIB" \
    -DCMAKE_C_FLAGS_RELEASE="$CFLAGS" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR="$prefix/lib" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DCMAKE_IGNORE_PATH="${machine_dirs#;}" \
    -DBUILD_SHARED_LIBS=OFF "$@" >"$tmp/build.out" 2>&1 &&
    cmake --build _build -j "$jobs" >>"$tmp/build.out" 2>&1 &&
    cmake --install _build >>"$tmp/build.out" 2>&1 || failed
}
# configure_build [ARGS]: the same, with the source's configure script.
configure_build() {
  ./configure --prefix="$prefix" --libdir="$prefix/lib" --disable-shared \
    --enable-static --with-pic "$@" >"$tmp/build.out" 2>&1 &&
    make -j "$jobs" >>"$tmp/build.out" 2>&1 &&
    make install >>"$tmp/build.out" 2>&1 || failed
}
failed() {
  tail -n 40 "$tmp/build.out" >&2
  die "building $pkg failed (above, the end of its log)"
}
# pc NAME VERSION LIBS: a pkg-config file for a library that has none
# (or, for libspng, not the one that setup.py asks for).
pc() {
  printf '%s\n' "prefix=$prefix" "Name: $1" "Description: $1" \
    "Version: $2" "Cflags: -I\${prefix}/include" \
    "Libs: -L\${prefix}/lib $3" >"$prefix/lib/pkgconfig/$1.pc"
}

# The compression libraries first: libtiff and libarchive look for them.
fetch zlib
CHOST= ./configure --static --prefix="$prefix" --libdir="$prefix/lib" \
  >"$tmp/build.out" 2>&1 && make -j "$jobs" libz.a >>"$tmp/build.out" 2>&1 &&
  make install >>"$tmp/build.out" 2>&1 || failed

fetch bzip2
make -j "$jobs" libbz2.a CC="$CC" AR="$AR" RANLIB="$RANLIB" \
  CFLAGS="$CFLAGS -D_FILE_OFFSET_BITS=64" >"$tmp/build.out" 2>&1 || failed
cp libbz2.a "$prefix/lib/" && cp bzlib.h "$prefix/include/"
pc bzip2 "$upstream" -lbz2

fetch xz-utils
configure_build --disable-xz --disable-xzdec --disable-lzmadec \
  --disable-lzmainfo --disable-lzma-links --disable-scripts --disable-doc \
  --disable-nls

fetch libzstd
make -C lib -j "$jobs" libzstd.a ZSTD_LEGACY_SUPPORT=0 \
  >"$tmp/build.out" 2>&1 &&
  make -C lib install-static install-includes install-pc PREFIX="$prefix" \
    LIBDIR="$prefix/lib" >>"$tmp/build.out" 2>&1 || failed

fetch lz4
make -C lib -j "$jobs" liblz4.a >"$tmp/build.out" 2>&1 &&
  make -C lib install PREFIX="$prefix" LIBDIR="$prefix/lib" BUILD_SHARED=no \
    >>"$tmp/build.out" 2>&1 || failed

fetch libjpeg-turbo
# x86's SIMD is assembled by nasm; Arm's NEON is C intrinsics.
[ "$arch" != x86_64 ] || command -v nasm >/dev/null 2>&1 ||
  die "no nasm: libjpeg-turbo's SIMD needs it (apt-get install nasm)"
cmake_build -DENABLE_SHARED=OFF -DENABLE_STATIC=ON -DWITH_TURBOJPEG=OFF \
  -DREQUIRE_SIMD=ON
# Without its SIMD, decoding is some times slower: never ship that.
nm "$prefix/lib/libjpeg.a" 2>/dev/null |
  grep -Eq ' T jsimd_idct_islow_(avx2|neon)$' ||
  die "libjpeg.a was built without its SIMD (jsimd_*): see nasm above"

fetch libwebp
configure_build --disable-libwebpmux --disable-libwebpdemux \
  --disable-libwebpdecoder --disable-libwebpextras --disable-gl \
  --disable-sdl --disable-png --disable-jpeg --disable-tiff --disable-gif \
  --disable-wic

fetch tiff
cmake_build -Dtiff-tools=OFF -Dtiff-tests=OFF -Dtiff-contrib=OFF \
  -Dtiff-docs=OFF -Dcxx=OFF -Dlerc=OFF -Djbig=OFF -Dlibdeflate=OFF \
  -Djpeg12=OFF -Djpeg=ON -Dzlib=ON -Dlzma=ON -Dzstd=ON -Dwebp=ON
# libtiff leaves out a codec whose library it did not find, silently.
for codec in JPEG ZIP LZMA ZSTD WebP; do
  nm "$prefix/lib/libtiff.a" | grep -q " T TIFFInit$codec\$" ||
    die "libtiff was built without $codec: cmake did not find its library"
done

fetch libspng
# One file: its cmake would name the archive libspng_static.
"$CC" $CFLAGS $CPPFLAGS -c spng/spng.c -o spng.o >"$tmp/build.out" 2>&1 &&
  "$AR" rcs "$prefix/lib/libspng.a" spng.o >>"$tmp/build.out" 2>&1 ||
  failed
cp spng/spng.h "$prefix/include/"
pc spng "$upstream" "-lspng -lz -lm"

fetch libuv1
sh autogen.sh >"$tmp/build.out" 2>&1 || failed
configure_build

fetch lmdb
make -C libraries/liblmdb -j "$jobs" liblmdb.a CC="$CC" AR="$AR" \
  OPT="$CFLAGS" >"$tmp/build.out" 2>&1 || failed
cp libraries/liblmdb/liblmdb.a "$prefix/lib/" &&
  cp libraries/liblmdb/lmdb.h "$prefix/include/" &&
  cp libraries/liblmdb/LICENSE "$prefix/licenses/lmdb/LICENSE"
pc lmdb "$upstream" "-llmdb -lpthread"

fetch libarchive
# Debian's patches touch configure.ac: regenerate, as Debian's build does.
autoreconf -fi >"$tmp/build.out" 2>&1 || failed
configure_build --disable-bsdtar --disable-bsdcpio --disable-bsdcat \
  --disable-acl --disable-xattr --without-xml2 --without-expat \
  --without-nettle --without-openssl --without-mbedtls --without-iconv \
  --without-libiconv-prefix --without-lzo2 --without-libb2 --without-cng \
  --with-zlib --with-bz2lib --with-lzma --with-zstd --with-lz4

touch "$prefix/.complete"
say "built in $prefix"
echo "$prefix"
