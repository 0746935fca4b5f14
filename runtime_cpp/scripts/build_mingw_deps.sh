#!/usr/bin/env bash
# build_mingw_deps.sh — cross-build the runtime's third-party libraries for x86_64-w64-mingw32 from Debian's
# source packages, into ${GSURG_CACHE:-$HOME/.cache/gsurg}/mingw64-deps (static libraries only).
#
# Usage: build_mingw_deps.sh [--jobs N]
#
# Contract:
#   - zlib, libpng1.6, libjpeg-turbo (with its NASM SIMD code, as Debian's host build) and utf8proc, at the
#     versions of the host's -dev packages when those are installed (else the newest in bookworm), so the
#     Linux and Windows builds use the same library code.
#   - sources come from `apt-get source` through a private apt configuration (deb-src lines for bookworm,
#     bookworm-updates and bookworm-security, signed by Debian's archive key) kept in $CACHE/apt-src; the
#     system's apt sources are not touched. apt checks every downloaded file against the signed Sources
#     index, and dpkg-source checks the files against the .dsc's checksums while unpacking (Debian's patches
#     applied).
#   - nlohmann-json is header-only and taken from the host's nlohmann-json3-dev: the prefix gets symlinks to
#     its headers and CMake package files (their paths are relative to their own location), so
#     find_package(nlohmann_json) works in the cross build without -I/usr/include reaching the mingw compiler.
#   - the prefix is built in a temporary folder and renamed into place with stamp.txt written last; a stamp
#     that records the same wanted versions, recipe and toolchain means "reuse" (no network needed then).
#     built-from.txt names the source packages actually built (a version the mirror lacks is replaced by
#     the next older one). Prints the prefix as the LAST stdout line.
set -euo pipefail
{  # the whole script is parsed before it runs: editing the file meanwhile cannot derail a running build


SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUNTIME_DIR=$(dirname "$SCRIPT_DIR")
TOOLCHAIN="$RUNTIME_DIR/cmake/mingw-w64-x86_64.cmake"
CACHE=${GSURG_CACHE:-$HOME/.cache/gsurg}
PREFIX="$CACHE/mingw64-deps"
TRIPLE=x86_64-w64-mingw32
jobs=${GSURG_JOBS:-2}
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs|-j) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_mingw_deps.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

log() { echo "[build_mingw_deps] $*" >&2; }

# shellcheck source=debs.sh
. "$SCRIPT_DIR/debs.sh"
ensure_debs build_mingw_deps.sh cmake make dpkg-dev nasm xz-utils bzip2 nlohmann-json3-dev \
  g++-mingw-w64-x86-64-posix gcc-mingw-w64-x86-64-posix binutils-mingw-w64-x86-64

mkdir -p "$CACHE"
exec 9>"$CACHE/.mingw64-deps.lock"
flock 9

# ---- private apt configuration for source packages --------------------------------------------------------
APTDIR="$CACHE/apt-src"
mkdir -p "$APTDIR/etc" "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial"
cat >"$APTDIR/etc/debian-src.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
APT_OPTS=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$APTDIR/etc"
  -o "Dir::State::Lists=$APTDIR/lists" -o "Dir::Cache=$APTDIR/cache" -o "APT::Sandbox::User=root")

# Source package -> the host -dev package whose version we match.
packages=(zlib libpng1.6 libjpeg-turbo utf8proc)
declare -A dev_of=([zlib]=zlib1g-dev [libpng1.6]=libpng-dev [libjpeg-turbo]=libjpeg62-turbo-dev
  [utf8proc]=libutf8proc-dev)

apt_src_updated=0
apt_src_update() {
  [ $apt_src_updated = 1 ] && return 0
  log "apt-get update (deb-src lists in $APTDIR)"
  apt-get "${APT_OPTS[@]}" update >&2
  apt_src_updated=1
}
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
  local pkg=$1 v dsc
  for v in $(candidates "$pkg"); do
    dsc="$CACHE/downloads/debian-src/${pkg}_${v#*:}.dsc"
    if [ -f "$dsc" ]; then echo "$dsc"; return 0; fi
    log "apt-get source $pkg=$v"
    rm -rf "$CACHE/downloads/debian-src/.partial"
    mkdir -p "$CACHE/downloads/debian-src/.partial"
    if (cd "$CACHE/downloads/debian-src/.partial" && apt-get "${APT_OPTS[@]}" source --download-only "$pkg=$v" >&2)
    then
      mv "$CACHE/downloads/debian-src/.partial/"* "$CACHE/downloads/debian-src/"
      echo "$dsc"
      return 0
    fi
    log "$pkg=$v could not be fetched; trying an older version"
  done
  echo "build_mingw_deps.sh: no source of $pkg could be fetched" >&2
  return 1
}
RECIPE=2  # bump when the way the libraries are built changes: forces a rebuild
# the toolchain's compilers and flags (not its comments or search settings) shape the libraries
toolchain_id=$(grep -E '^set\((PVL_MINGW_TRIPLE|CMAKE_(SYSTEM_NAME|SYSTEM_PROCESSOR|C_COMPILER|CXX_COMPILER|C_FLAGS_INIT|CXX_FLAGS_INIT)) ' \
  "$TOOLCHAIN" | sha256sum | cut -c1-16)
# The stamp names the versions asked for (the host -dev packages'), so reuse needs no network.
stamp_text="mingw64-deps recipe=$RECIPE triple=$TRIPLE toolchain=$toolchain_id"
for pkg in "${packages[@]}"; do
  stamp_text+=" $pkg=$(dpkg-query -W -f='${source:Version}' "${dev_of[$pkg]}" 2>/dev/null || echo newest)"
done
stamp_text+=" nlohmann-json3-dev=$(dpkg-query -W -f='${Version}' nlohmann-json3-dev)"
if [ -f "$PREFIX/stamp.txt" ] && [ "$(cat "$PREFIX/stamp.txt")" = "$stamp_text" ]; then
  log "reusing $PREFIX"
  echo "$PREFIX"
  exit 0
fi

mkdir -p "$CACHE/downloads/debian-src"
if [ -z "$(ls "$APTDIR/lists" | grep Sources)" ] || [ -n "$(find "$APTDIR/updated" -mmin +1440 2>/dev/null)" ]; then
  apt_src_update
  touch "$APTDIR/updated"
fi
declare -A dsc_of
for pkg in "${packages[@]}"; do
  dsc_of[$pkg]=$(fetch "$pkg")
done

t_start=$(date +%s)
work=$(mktemp -d "$CACHE/.tmp-mingw64-deps.XXXXXX")
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

cmake_cross=(-DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN" -DGSURG_MINGW_PREFIXES="$stage" -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_INSTALL_PREFIX="$stage" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF)
cmake_build() {  # cmake_build NAME SRC [ARGS...]
  local name=$1 srcd=$2
  shift 2
  log "building $name"
  cmake -S "$srcd" -B "$work/build/$name" "${cmake_cross[@]}" "$@" >&2
  cmake --build "$work/build/$name" -j "$jobs" >&2
  cmake --install "$work/build/$name" >&2
}

# zlib: only the static library (Debian's dfsg tarball lacks win32/zlib1.rc, which the DLL needs).
log "building zlib"
cmake -S "${srcdir_of[zlib]}" -B "$work/build/zlib" "${cmake_cross[@]}" >&2
cmake --build "$work/build/zlib" --target zlibstatic -j "$jobs" >&2
mkdir -p "$stage/include" "$stage/lib"
cp "${srcdir_of[zlib]}/zlib.h" "$work/build/zlib/zconf.h" "$stage/include/"
cp "$work/build/zlib/libzlibstatic.a" "$stage/lib/libz.a"

cmake_build libpng "${srcdir_of[libpng1.6]}" -DPNG_SHARED=OFF -DPNG_STATIC=ON -DPNG_TESTS=OFF \
  -DPNG_EXECUTABLES=OFF -DZLIB_ROOT="$stage"
cmake_build libjpeg-turbo "${srcdir_of[libjpeg-turbo]}" -DENABLE_SHARED=OFF -DENABLE_STATIC=ON \
  -DWITH_TURBOJPEG=OFF -DWITH_SIMD=ON -DREQUIRE_SIMD=ON -DCMAKE_ASM_NASM_COMPILER=nasm \
  -DCMAKE_INSTALL_LIBDIR="$stage/lib"  # libjpeg-turbo's own GNUInstallDirs reads a relative dir from the cwd
cmake_build utf8proc "${srcdir_of[utf8proc]}" -DUTF8PROC_INSTALL=ON -DUTF8PROC_ENABLE_TESTING=OFF

# nlohmann-json: links to the host package's headers and relocatable CMake package files.
mkdir -p "$stage/share/cmake/nlohmann_json"
ln -s /usr/include/nlohmann "$stage/include/nlohmann"
for f in /usr/share/cmake/nlohmann_json/*.cmake; do ln -s "$f" "$stage/share/cmake/nlohmann_json/"; done

# Only static archives: remove any import library or DLL a package installed anyway.
find "$stage" \( -name '*.dll' -o -name '*.dll.a' \) -delete
# Installed text files (pkg-config, CMake, *-config) name the staging folder: point them at the prefix.
grep -rlI --exclude-dir=nlohmann -F "$stage" "$stage" 2>/dev/null | while read -r f; do
  sed -i "s|$stage|$PREFIX|g" "$f"
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
