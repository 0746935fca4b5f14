#!/usr/bin/env bash
# build_aarch64_deps.sh — cross-build the runtime's third-party libraries for aarch64-linux-gnu from Debian's
# source packages, into ${GSURG_CACHE:-$HOME/.cache/gsurg}/aarch64-deps (static libraries only).
#
# Usage: build_aarch64_deps.sh [--jobs N]
#
# Contract:
#   - zlib, libpng1.6, libjpeg-turbo (with its NEON SIMD code, as Debian's arm64 build) and utf8proc, at the
#     versions of the host's -dev packages when those are installed (else the newest in bookworm), so the
#     Linux, Windows and aarch64 builds use the same library code. Compiled with cmake/aarch64-linux-gnu.cmake
#     (Debian's g++-aarch64-linux-gnu). Static archives, so the programs need nothing at run time but the
#     cross toolchain's C and C++ libraries (/usr/aarch64-linux-gnu, the qemu -L prefix).
#   - why not Debian's arm64 packages (dpkg --add-architecture arm64, libpng-dev:arm64, ...)? They install,
#     but they change the whole machine: dpkg-query then answers for both architectures at once
#     (build_mingw_deps.sh's version query reads "1:1.2.13.dfsg-11:1.2.13.dfsg-1" for zlib1g-dev), the arm64
#     C library they pull in is not the cross toolchain's (2.36-9+deb12uN against 2.36-8cross1: ld.so and
#     libc.so would come from different builds under qemu), and every apt-get update fetches a second
#     architecture. This folder touches nothing outside the cache.
#   - sources come from `apt-get source` through the private apt configuration build_mingw_deps.sh keeps in
#     $CACHE/apt-src (deb-src lines for bookworm, bookworm-updates and bookworm-security, signed by Debian's
#     archive key), sharing its verified downloads in $CACHE/downloads/debian-src; the system's apt sources
#     are not touched. dpkg-source checks the files against the .dsc's checksums while unpacking (Debian's
#     patches applied).
#   - nlohmann-json is header-only and taken from the host's nlohmann-json3-dev: the prefix gets symlinks to
#     its headers and CMake package files, so find_package(nlohmann_json) works in the cross build without
#     -I/usr/include reaching the aarch64 compiler.
#   - the prefix is built in a temporary folder and renamed into place with stamp.txt written last; a stamp
#     that records the same wanted versions, recipe and toolchain means "reuse" (no network needed then).
#     built-from.txt names the source packages actually built. Prints the prefix as the LAST stdout line.
set -euo pipefail
{  # the whole script is parsed before it runs: editing the file meanwhile cannot derail a running build


SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUNTIME_DIR=$(dirname "$SCRIPT_DIR")
TOOLCHAIN="$RUNTIME_DIR/cmake/aarch64-linux-gnu.cmake"
CACHE=${GSURG_CACHE:-$HOME/.cache/gsurg}
PREFIX="$CACHE/aarch64-deps"
TRIPLE=aarch64-linux-gnu
jobs=${GSURG_JOBS:-2}
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs|-j) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_aarch64_deps.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

log() { echo "[build_aarch64_deps] $*" >&2; }

# shellcheck source=debs.sh
. "$SCRIPT_DIR/debs.sh"
ensure_debs build_aarch64_deps.sh cmake make dpkg-dev xz-utils bzip2 nlohmann-json3-dev \
  g++-aarch64-linux-gnu gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu

mkdir -p "$CACHE"
exec 9>"$CACHE/.aarch64-deps.lock"
flock 9

# Source package -> the host -dev package whose version we match.
packages=(zlib libpng1.6 libjpeg-turbo utf8proc)
declare -A dev_of=([zlib]=zlib1g-dev [libpng1.6]=libpng-dev [libjpeg-turbo]=libjpeg62-turbo-dev
  [utf8proc]=libutf8proc-dev)
RECIPE=1  # bump when the way the libraries are built changes: forces a rebuild
# the toolchain's compilers and flags (not its comments or search settings) shape the libraries
toolchain_id=$(grep -E '^set\((PVL_AARCH64_TRIPLE|CMAKE_(SYSTEM_NAME|SYSTEM_PROCESSOR|C_COMPILER|CXX_COMPILER|C_FLAGS_INIT|CXX_FLAGS_INIT)) ' \
  "$TOOLCHAIN" | sha256sum | cut -c1-16)
# The stamp names the versions asked for (the host -dev packages'), so reuse needs no network.
stamp_text="aarch64-deps recipe=$RECIPE triple=$TRIPLE toolchain=$toolchain_id"
for pkg in "${packages[@]}"; do
  stamp_text+=" $pkg=$(dpkg-query -W -f='${source:Version}' "${dev_of[$pkg]}" 2>/dev/null || echo newest)"
done
stamp_text+=" nlohmann-json3-dev=$(dpkg-query -W -f='${Version}' nlohmann-json3-dev)"
if [ -f "$PREFIX/stamp.txt" ] && [ "$(cat "$PREFIX/stamp.txt")" = "$stamp_text" ]; then
  log "reusing $PREFIX"
  echo "$PREFIX"
  exit 0
fi

# ---- sources: build_mingw_deps.sh's private apt configuration and downloads -------------------------------
APTDIR="$CACHE/apt-src"
APT_OPTS=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$APTDIR/etc"
  -o "Dir::State::Lists=$APTDIR/lists" -o "Dir::Cache=$APTDIR/cache" -o "APT::Sandbox::User=root")
SOURCES='Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg'

# The version to build: the host -dev package's source version first, then the other versions the lists
# offer, newest first (a mirror may lack one, e.g. a security upload's source).
candidates() {  # candidates PKG -> versions, one per line
  local pkg=$1 v
  v=$(dpkg-query -W -f='${source:Version}' "${dev_of[$pkg]}" 2>/dev/null || true)
  [ -n "$v" ] && echo "$v"
  apt-cache "${APT_OPTS[@]}" showsrc "$pkg" 2>/dev/null | awk '/^Version:/{print $2}' | sort -u -V -r |
    grep -v -x -F "${v:-}" || true
}
# fetch PKG: puts the verified .dsc and its files into $CACHE/downloads/debian-src, prints the .dsc's path.
fetch() {
  local pkg=$1 v dsc partial="$CACHE/downloads/debian-src/.partial-aarch64"
  for v in $(candidates "$pkg"); do
    dsc="$CACHE/downloads/debian-src/${pkg}_${v#*:}.dsc"
    if [ -f "$dsc" ]; then echo "$dsc"; return 0; fi
    log "apt-get source $pkg=$v"
    rm -rf "$partial"
    mkdir -p "$partial"
    if (cd "$partial" && apt-get "${APT_OPTS[@]}" source --download-only "$pkg=$v" >&2); then
      mv "$partial/"* "$CACHE/downloads/debian-src/"
      rm -rf "$partial"
      echo "$dsc"
      return 0
    fi
    log "$pkg=$v could not be fetched; trying an older version"
  done
  echo "build_aarch64_deps.sh: no source of $pkg could be fetched" >&2
  return 1
}

mkdir -p "$CACHE/downloads/debian-src"
declare -A dsc_of
have_all=1
for pkg in "${packages[@]}"; do
  v=$(dpkg-query -W -f='${source:Version}' "${dev_of[$pkg]}" 2>/dev/null || true)
  if [ -n "$v" ] && [ -f "$CACHE/downloads/debian-src/${pkg}_${v#*:}.dsc" ]; then
    dsc_of[$pkg]="$CACHE/downloads/debian-src/${pkg}_${v#*:}.dsc"
  else
    have_all=0
  fi
done
if [ $have_all = 0 ]; then
  # build_mingw_deps.sh holds this lock while it updates the shared lists and fetches into the shared
  # downloads: take it for the same steps (only they), so the two scripts never write there at once.
  exec 8>"$CACHE/.mingw64-deps.lock"
  flock 8
  mkdir -p "$APTDIR/etc" "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial"
  if [ "$(cat "$APTDIR/etc/debian-src.sources" 2>/dev/null)" != "$SOURCES" ]; then
    printf '%s\n' "$SOURCES" >"$APTDIR/etc/debian-src.sources"
  fi
  if [ -z "$(ls "$APTDIR/lists" | grep Sources)" ] || [ -n "$(find "$APTDIR/updated" -mmin +1440 2>/dev/null)" ]; then
    log "apt-get update (deb-src lists in $APTDIR)"
    apt-get "${APT_OPTS[@]}" update >&2
    touch "$APTDIR/updated"
  fi
  for pkg in "${packages[@]}"; do
    dsc_of[$pkg]=$(fetch "$pkg")
  done
  flock -u 8
  exec 8>&-
fi

t_start=$(date +%s)
work=$(mktemp -d "$CACHE/.tmp-aarch64-deps.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage="$work/prefix"
mkdir -p "$stage" "$work/src"
cd "$work"

# ---- unpack (verified) --------------------------------------------------------------------------------------
declare -A srcdir_of
for pkg in "${packages[@]}"; do
  # dpkg-source verifies the files against the checksums the .dsc lists, then applies Debian's patches.
  dpkg-source -x "${dsc_of[$pkg]}" "$work/src/$pkg" >&2
  srcdir_of[$pkg]="$work/src/$pkg"
done

cmake_cross=(-DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN" -DGSURG_AARCH64_PREFIXES="$stage" -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_INSTALL_PREFIX="$stage" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON)
cmake_build() {  # cmake_build NAME SRC [ARGS...]
  local name=$1 srcd=$2
  shift 2
  log "building $name"
  cmake -S "$srcd" -B "$work/build/$name" "${cmake_cross[@]}" "$@" >&2
  cmake --build "$work/build/$name" -j "$jobs" >&2
  cmake --install "$work/build/$name" >&2
}

# zlib: its own configure, as Debian builds it (its CMakeLists wants win32/zlib1.rc on every platform but
# MinGW, and Debian's dfsg tarball drops that file); static only, the toolchain's compiler and -march.
log "building zlib"
(cd "${srcdir_of[zlib]}" && CHOST=$TRIPLE CFLAGS="-O2 -fPIC -march=armv8-a" ./configure --static --prefix="$stage" >&2 &&
  make -j "$jobs" libz.a >&2 && make install >&2)

cmake_build libpng "${srcdir_of[libpng1.6]}" -DPNG_SHARED=OFF -DPNG_STATIC=ON -DPNG_TESTS=OFF \
  -DPNG_EXECUTABLES=OFF -DZLIB_ROOT="$stage"
cmake_build libjpeg-turbo "${srcdir_of[libjpeg-turbo]}" -DENABLE_SHARED=OFF -DENABLE_STATIC=ON \
  -DWITH_TURBOJPEG=OFF -DWITH_SIMD=ON -DREQUIRE_SIMD=ON \
  -DCMAKE_INSTALL_LIBDIR="$stage/lib"  # libjpeg-turbo's own GNUInstallDirs reads a relative dir from the cwd
cmake_build utf8proc "${srcdir_of[utf8proc]}" -DUTF8PROC_INSTALL=ON -DUTF8PROC_ENABLE_TESTING=OFF

# nlohmann-json: links to the host package's headers and relocatable CMake package files.
mkdir -p "$stage/share/cmake/nlohmann_json"
ln -s /usr/include/nlohmann "$stage/include/nlohmann"
for f in /usr/share/cmake/nlohmann_json/*.cmake; do ln -s "$f" "$stage/share/cmake/nlohmann_json/"; done

# Only static archives: remove any shared library a package installed anyway.
find "$stage" -name '*.so*' -delete
# Installed text files (pkg-config, CMake, *-config) name the staging folder: point them at the prefix.
grep -rlI --exclude-dir=nlohmann -F "$stage" "$stage" 2>/dev/null | while read -r f; do
  sed -i "s|$stage|$PREFIX|g" "$f"
done
# Every object must be aarch64 code (a host compiler slipping in would otherwise only show at link time).
for a in "$stage"/lib/*.a; do
  machines=$(readelf -h "$a" | awk -F: '/^ *Machine:/{gsub(/^ +/, "", $2); print $2}' | sort -u)
  if [ "$machines" != AArch64 ]; then
    echo "build_aarch64_deps.sh: $a holds objects for '${machines:-nothing}', not only AArch64" >&2
    exit 1
  fi
done

t_end=$(date +%s)
echo "$stamp_text" >"$stage/stamp.txt"
for pkg in "${packages[@]}"; do basename "${dsc_of[$pkg]}" .dsc; done >"$stage/built-from.txt"
echo "build seconds: $((t_end - t_start))" >"$stage/build-time.txt"
rm -rf "$PREFIX"
mv "$stage" "$PREFIX"
log "installed $PREFIX in $((t_end - t_start)) s"
echo "$PREFIX"

exit 0
}
