#!/usr/bin/env bash
# build_and_test.sh — the single command from nothing: build and test runtime_cpp for Linux and for Windows
# (mingw-w64 cross build, tests run under wine).
#
# Usage: build_and_test.sh [--linux-only | --mingw-only | --sanitize-only] [--no-sanitize] [--jobs N]
#                          [--no-test] [-- CTEST_ARGS...]
#
# Contract:
#   - installs the Debian packages it needs when missing (as root): cmake, g++, the -dev packages of
#     utf8proc, nlohmann-json, libpng, libjpeg-turbo and zlib, mingw-w64 (posix threads), wine + wine64
#     (64-bit only: no i386 architecture needed), faketime, nasm, dpkg-dev.
#   - builds ncnn for the host and for mingw64 (scripts/build_ncnn.sh) and the mingw libraries
#     (scripts/build_mingw_deps.sh), all cached in ${GSURG_CACHE:-$HOME/.cache/gsurg}; then configures and
#     builds runtime_cpp into $GSURG_BUILD_DIR/linux and .../mingw64 (default GSURG_BUILD_DIR:
#     $CACHE/runtime-build/<hash of this checkout's path>, printed at the end) and runs ctest on each
#     (--output-on-failure), the Windows tests through scripts/wine_run.sh (WINEPREFIX in the cache).
#   - with the Linux build (unless --no-sanitize) also .../linux-asan: the runtime (not ncnn) built with
#     -fsanitize=address,undefined -fno-sanitize-recover=undefined (CMake GSURG_SANITIZE), the same ctest
#     suite plus runner_fuzz run on it, sharing the Linux tree's converted tiny model.
#   - GSURG_PYTHON (default: python3 on PATH) is the interpreter the parity tests use (torch, tokenizers, PIL).
#   - prints the time of every phase; exits non-zero when any phase or test fails (both builds are still
#     attempted).
set -uo pipefail
{  # the whole script is parsed before it runs: editing the file meanwhile cannot derail a running build


SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUNTIME_DIR=$(dirname "$SCRIPT_DIR")
CACHE=${GSURG_CACHE:-$HOME/.cache/gsurg}
# One build tree per checkout: CMake refuses a build folder configured from another source folder, and two
# clones sharing one cache (CI beside a developer's checkout) must not fight over it.
source_key=$(printf '%s' "$RUNTIME_DIR" | sha256sum | cut -c1-12)
BUILD_ROOT=${GSURG_BUILD_DIR:-$CACHE/runtime-build/$source_key}
PYTHON=${GSURG_PYTHON:-$(command -v python3 || command -v python || true)}
jobs=${GSURG_JOBS:-2}
do_linux=1
do_mingw=1
do_asan=1
do_test=1
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --linux-only) do_mingw=0; shift ;;
    --mingw-only) do_linux=0; do_asan=0; shift ;;
    --sanitize-only) do_linux=0; do_mingw=0; shift ;;
    --no-sanitize) do_asan=0; shift ;;
    --no-test) do_test=0; shift ;;
    --jobs|-j) jobs=$2; shift 2 ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_and_test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
export GSURG_CACHE=$CACHE GSURG_JOBS=$jobs

timings=()
failures=()
# phase NAME COMMAND...: runs the command, records its time and whether it failed.
phase() {
  local name=$1 t0 t1 rc
  shift
  echo "=== $name" >&2
  t0=$(date +%s.%N)
  "$@"
  rc=$?
  t1=$(date +%s.%N)
  timings+=("$(printf '%-28s %8.1f s%s' "$name" "$(awk "BEGIN{print $t1 - $t0}")" "$([ $rc = 0 ] || echo "  FAILED ($rc)")")")
  [ $rc = 0 ] || failures+=("$name")
  return $rc
}
summary() {
  echo "=== build trees: $BUILD_ROOT/{linux,linux-asan,mingw64} (gsurg_run and the families' aliases in runner/)" >&2
  echo "=== timings" >&2
  for t in "${timings[@]}"; do echo "  $t" >&2; done
  if [ ${#failures[@]} -gt 0 ]; then
    echo "FAILED: ${failures[*]}" >&2
    exit 1
  fi
  echo "all phases passed" >&2
}

# shellcheck source=debs.sh
. "$SCRIPT_DIR/debs.sh"
install_debs() {
  local want=(cmake make g++ pkg-config libutf8proc-dev nlohmann-json3-dev libpng-dev libjpeg62-turbo-dev
    zlib1g-dev faketime nasm dpkg-dev xz-utils bzip2)
  [ $do_mingw = 1 ] && want+=(g++-mingw-w64-x86-64-posix gcc-mingw-w64-x86-64-posix binutils-mingw-w64-x86-64
    wine wine64)
  ensure_debs build_and_test.sh "${want[@]}"
}

ncnn_host=""
ncnn_mingw=""
mingw_deps=""
get_ncnn_host() { ncnn_host=$("$SCRIPT_DIR/build_ncnn.sh" --target host --jobs "$jobs" | tail -n1); [ -n "$ncnn_host" ]; }
get_ncnn_mingw() { ncnn_mingw=$("$SCRIPT_DIR/build_ncnn.sh" --target mingw64 --jobs "$jobs" | tail -n1); [ -n "$ncnn_mingw" ]; }
get_mingw_deps() { mingw_deps=$("$SCRIPT_DIR/build_mingw_deps.sh" --jobs "$jobs" | tail -n1); [ -n "$mingw_deps" ]; }
# The wine prefix is created by the first run (wine_run.sh does it under a lock); timed on its own here.
wine_start() { "$SCRIPT_DIR/wine_run.sh" cmd /c exit >/dev/null; }

configure_linux() {
  cmake -S "$RUNTIME_DIR" -B "$BUILD_ROOT/linux" -DCMAKE_BUILD_TYPE=Release \
    -Dncnn_DIR="$ncnn_host/lib/cmake/ncnn" -DGSURG_PYTHON="$PYTHON" -DGSURG_TEST_WRAPPER=
}
configure_asan() {
  mkdir -p "$BUILD_ROOT/linux"  # the shared tiny models live there
  cmake -S "$RUNTIME_DIR" -B "$BUILD_ROOT/linux-asan" -DCMAKE_BUILD_TYPE=Release -DGSURG_SANITIZE=ON \
    -Dncnn_DIR="$ncnn_host/lib/cmake/ncnn" -DGSURG_PYTHON="$PYTHON" -DGSURG_TEST_WRAPPER= \
    -DGSURG_TEST_MODELS_DIR="$BUILD_ROOT/linux"
}
configure_mingw() {
  cmake -S "$RUNTIME_DIR" -B "$BUILD_ROOT/mingw64" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$RUNTIME_DIR/cmake/mingw-w64-x86_64.cmake" -DGSURG_MINGW_PREFIXES="$mingw_deps" \
    -Dncnn_DIR="$ncnn_mingw/lib/cmake/ncnn" -DGSURG_PYTHON="$PYTHON" \
    -DGSURG_TEST_WRAPPER="$SCRIPT_DIR/wine_run.sh"
}
build_tree() { cmake --build "$1" -j "$jobs"; }
test_tree() { (cd "$1" && ctest --output-on-failure --no-tests=error "${ctest_args[@]}"); }

phase "debian packages" install_debs || { summary; }

if [ $do_linux = 1 ]; then
  if phase "ncnn host" get_ncnn_host; then
    echo "ncnn (host): $ncnn_host" >&2
    phase "configure linux" configure_linux && phase "build linux" build_tree "$BUILD_ROOT/linux" &&
      [ $do_test = 1 ] && phase "ctest linux" test_tree "$BUILD_ROOT/linux"
  fi
fi

if [ $do_asan = 1 ]; then
  if [ -n "$ncnn_host" ] || phase "ncnn host" get_ncnn_host; then
    phase "configure linux-asan" configure_asan && phase "build linux-asan" build_tree "$BUILD_ROOT/linux-asan" &&
      [ $do_test = 1 ] && phase "ctest linux-asan" test_tree "$BUILD_ROOT/linux-asan"
  fi
fi

if [ $do_mingw = 1 ]; then
  phase "mingw deps" get_mingw_deps && echo "mingw deps: $mingw_deps" >&2
  phase "ncnn mingw64" get_ncnn_mingw && echo "ncnn (mingw64): $ncnn_mingw" >&2
  if [ -n "$mingw_deps" ] && [ -n "$ncnn_mingw" ]; then
    phase "configure mingw64" configure_mingw && phase "build mingw64" build_tree "$BUILD_ROOT/mingw64" &&
      [ $do_test = 1 ] && phase "wine start" wine_start && phase "ctest mingw64 (wine)" test_tree "$BUILD_ROOT/mingw64"
  fi
fi

summary

exit 0
}
