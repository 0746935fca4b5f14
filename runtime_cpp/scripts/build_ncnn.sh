#!/usr/bin/env bash
# build_ncnn.sh — build the ncnn C++ library (1.0.20261020) from its PyPI sdist into a cache outside the repo.
#
# Usage: build_ncnn.sh [--target host|mingw64|aarch64] [--flavor full|lean] [--jobs N]
#
# Contract:
#   - installs into ${GSURG_CACHE:-$HOME/.cache/gsurg}/ncnn-1.0.20261020-<target>/install
#     (lib/cmake/ncnn/ncnnConfig.cmake for find_package(ncnn)) and prints that prefix as the LAST stdout line;
#     all progress goes to stderr.
#   - reuses an install whose stamp file (written only after a successful install, then the whole folder
#     renamed into place) records the same configuration; a killed or failed build leaves nothing behind
#     but a temporary folder, so the next run starts over.
#   - the sdist is fetched with pip (the clock set to the release date with faketime, because ncnn's
#     setup.py stamps today's date into the version and pip then rejects the pin; without faketime the
#     unpacked tree left by a --no-clean pip run in a private TMPDIR is used) and verified by sha256 (the
#     tarball) or by a hash of its file tree (the unpacked route).
#   - Vulkan, tools, examples, benchmark, python bindings and tests are off. host defaults to the full build
#     (NCNN_RUNTIME_CPU on: every x86 kernel, dispatched at run time); mingw64 defaults to the lean build
#     (AVX2+FMA+F16C compiled in; FMA4/XOP/AVX-512/VNNI off — FMA4/XOP on would emit AMD-only code).
#     aarch64 (cmake/aarch64-linux-gnu.cmake, Debian's g++-aarch64-linux-gnu) is full only: an ARMv8-A
#     baseline plus every ARM kernel ncnn's CMakeLists enables for GCC 12 (ARMv8.2 fp16/dotprod/fp16fml,
#     v8.4 bf16/i8mm, v8.6 SVE/SVE2), dispatched at run time; OpenMP on, as for the other targets.
#   - missing Debian packages (cmake, g++, faketime, mingw-w64 or the aarch64 cross compilers) are installed
#     with apt-get when run as root.
set -euo pipefail
{  # the whole script is parsed before it runs: editing the file meanwhile cannot derail a running build


NCNN_VERSION_FULL=1.0.20261020
NCNN_DATE=20261020
NCNN_SHA256=ad8cdd63e9755cfa8e23b9b6d9ce46156077d80298a89e7c3ba325ffccfca200
# sha256 over "sha256  ./path" lines of the sdist's files (sorted, python/*.egg-info excluded: pip rewrites it)
NCNN_TREE_SHA256=eb6551922408185d360cfa8e099f1b5664f31642c8e73c130dfaef6435bdd9f0

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUNTIME_DIR=$(dirname "$SCRIPT_DIR")
CACHE=${GSURG_CACHE:-$HOME/.cache/gsurg}
PYTHON=${GSURG_PYTHON:-$(command -v python3 || command -v python)}

target=host
flavor=""
jobs=${GSURG_JOBS:-2}
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target=$2; shift 2 ;;
    --target=*) target=${1#*=}; shift ;;
    --flavor) flavor=$2; shift 2 ;;
    --flavor=*) flavor=${1#*=}; shift ;;
    --jobs|-j) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_ncnn.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case "$target" in host|mingw64|aarch64) ;; *) echo "build_ncnn.sh: --target must be host, mingw64 or aarch64" >&2; exit 2 ;; esac
if [ -z "$flavor" ]; then
  if [ "$target" = mingw64 ]; then flavor=lean; else flavor=full; fi
fi
case "$flavor" in full|lean) ;; *) echo "build_ncnn.sh: --flavor must be full or lean" >&2; exit 2 ;; esac
if [ "$target" = aarch64 ] && [ "$flavor" = lean ]; then
  echo "build_ncnn.sh: --target aarch64 has only the full flavor (its lean switches are x86 ones)" >&2
  exit 2
fi

log() { echo "[build_ncnn $target] $*" >&2; }

# shellcheck source=debs.sh
. "$SCRIPT_DIR/debs.sh"

debs=(cmake make g++ faketime)
[ "$target" = mingw64 ] && debs+=(g++-mingw-w64-x86-64-posix gcc-mingw-w64-x86-64-posix)
[ "$target" = aarch64 ] && debs+=(g++-aarch64-linux-gnu gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu)
ensure_debs build_ncnn.sh "${debs[@]}" || log "continuing without: the build may fail"

# The configuration recorded in the stamp: an install is reused only when it was built this way.
cmake_args=(
  -DCMAKE_BUILD_TYPE=Release -DNCNN_VERSION=$NCNN_DATE
  -DNCNN_VULKAN=OFF -DNCNN_BUILD_TOOLS=OFF -DNCNN_BUILD_EXAMPLES=OFF -DNCNN_BUILD_BENCHMARK=OFF
  -DNCNN_PYTHON=OFF -DNCNN_BUILD_TESTS=OFF -DNCNN_SHARED_LIB=OFF -DNCNN_OPENMP=ON
)
if [ "$flavor" = lean ]; then
  cmake_args+=(-DNCNN_RUNTIME_CPU=OFF -DNCNN_AVX512=OFF -DNCNN_AVXVNNI=OFF -DNCNN_AVXVNNIINT8=OFF
    -DNCNN_AVXVNNIINT16=OFF -DNCNN_AVXNECONVERT=OFF -DNCNN_FMA4=OFF -DNCNN_XOP=OFF)
else
  cmake_args+=(-DNCNN_RUNTIME_CPU=ON)
fi
toolchain_file=""
case "$target" in
  mingw64) toolchain_file="$RUNTIME_DIR/cmake/mingw-w64-x86_64.cmake" ;;
  aarch64) toolchain_file="$RUNTIME_DIR/cmake/aarch64-linux-gnu.cmake" ;;
esac
if [ -n "$toolchain_file" ]; then
  cmake_args+=("-DCMAKE_TOOLCHAIN_FILE=$toolchain_file")
fi
stamp_text="ncnn $NCNN_VERSION_FULL target=$target flavor=$flavor sha256=$NCNN_SHA256 args=${cmake_args[*]//$RUNTIME_DIR/RUNTIME}"
if [ -n "$toolchain_file" ]; then  # the toolchain's compilers and flags shape the library too
  stamp_text+=" toolchain=$(grep -E '^set\((PVL_(MINGW|AARCH64)_TRIPLE|CMAKE_(SYSTEM_NAME|SYSTEM_PROCESSOR|C_COMPILER|CXX_COMPILER|C_FLAGS_INIT|CXX_FLAGS_INIT)) ' \
    "$toolchain_file" | sha256sum | cut -c1-16)"
fi

final_dir="$CACHE/ncnn-$NCNN_VERSION_FULL-$target"
prefix="$final_dir/install"
stamp="$final_dir/stamp.txt"

mkdir -p "$CACHE"
# One build per target at a time (several scripts may ask for the same install concurrently).
exec 9>"$CACHE/.ncnn-$target.lock"
flock 9

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ] && [ -f "$prefix/lib/cmake/ncnn/ncnnConfig.cmake" ]; then
  log "reusing $prefix"
  echo "$prefix"
  exit 0
fi

# ---- get the sdist ----------------------------------------------------------------------------------------
tree_hash() {
  (cd "$1" && find . -type f ! -path '*.egg-info/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum |
    sha256sum | cut -d' ' -f1)
}

work=$(mktemp -d "$CACHE/.tmp-ncnn-$target.XXXXXX")
trap 'rm -rf "$work"' EXIT
src="$work/src"
tarball="$CACHE/downloads/ncnn-$NCNN_VERSION_FULL.tar.gz"
mkdir -p "$CACHE/downloads"

if [ -f "$tarball" ] && ! echo "$NCNN_SHA256  $tarball" | sha256sum -c --status; then
  log "cached sdist has a wrong sha256: fetching again"
  rm -f "$tarball"
fi
if [ ! -f "$tarball" ] && command -v faketime >/dev/null; then
  log "pip download ncnn==$NCNN_VERSION_FULL (clock set to the release date)"
  mkdir -p "$work/dl"
  if faketime "${NCNN_DATE:0:4}-${NCNN_DATE:4:2}-${NCNN_DATE:6:2} 12:00:00" \
      "$PYTHON" -m pip download --no-deps --no-binary ncnn "ncnn==$NCNN_VERSION_FULL" -d "$work/dl" >&2; then
    if echo "$NCNN_SHA256  $work/dl/ncnn-$NCNN_VERSION_FULL.tar.gz" | sha256sum -c --status; then
      mv "$work/dl/ncnn-$NCNN_VERSION_FULL.tar.gz" "$tarball"
    else
      echo "build_ncnn.sh: sha256 mismatch for the downloaded ncnn sdist" >&2
      exit 1
    fi
  else
    log "pip download under faketime failed; trying the unpacked-tree route"
  fi
fi
if [ -f "$tarball" ]; then
  mkdir -p "$src"
  tar -xzf "$tarball" -C "$src" --strip-components=1
else
  # pip unpacks the sdist, fails on the version check and (with --no-clean) leaves the tree in TMPDIR.
  log "pip download ncnn==$NCNN_VERSION_FULL with --no-clean in a private TMPDIR"
  mkdir -p "$work/piptmp"
  TMPDIR="$work/piptmp" "$PYTHON" -m pip download --no-clean --no-deps --no-binary ncnn \
    "ncnn==$NCNN_VERSION_FULL" -d "$work/dl2" >&2 || true
  tree=$(find "$work/piptmp" -mindepth 2 -maxdepth 2 -type d -name 'ncnn_*' | head -n1)
  if [ -z "$tree" ] || [ ! -f "$tree/CMakeLists.txt" ]; then
    echo "build_ncnn.sh: could not obtain the ncnn sdist with pip" >&2
    exit 1
  fi
  mv "$tree" "$src"
fi
got=$(tree_hash "$src")
if [ "$got" != "$NCNN_TREE_SHA256" ]; then
  echo "build_ncnn.sh: the ncnn source tree does not match the released sdist (tree hash $got)" >&2
  exit 1
fi
log "source verified"

# ---- configure, build, install ----------------------------------------------------------------------------
t0=$(date +%s)
cmake -S "$src" -B "$work/build" -DCMAKE_INSTALL_PREFIX="$work/install" "${cmake_args[@]}" >&2
cmake --build "$work/build" -j "$jobs" >&2
cmake --install "$work/build" >&2
t1=$(date +%s)
log "built in $((t1 - t0)) s"

# The exported CMake files must be relocatable: we rename the install into place.
if grep -rqF "$work" "$work/install/lib/cmake" 2>/dev/null; then
  echo "build_ncnn.sh: the installed CMake files mention the temporary build folder" >&2
  exit 1
fi

mkdir -p "$work/final"
mv "$work/install" "$work/final/install"
echo "$stamp_text" >"$work/final/stamp.txt"
echo "build seconds: $((t1 - t0))" >"$work/final/build-time.txt"
rm -rf "$final_dir"
mv "$work/final" "$final_dir"
log "installed $prefix"
echo "$prefix"

exit 0
}
