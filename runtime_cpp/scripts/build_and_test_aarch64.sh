#!/usr/bin/env bash
# build_and_test_aarch64.sh — build runtime_cpp for 64-bit ARM Linux (aarch64, cross-compiled with Debian's
# g++-aarch64-linux-gnu) and run its whole ctest suite under user-mode qemu. Not part of .ci/run (see
# BUILD.md, "aarch64 under qemu", for its times); the same conventions as build_and_test.sh.
#
# Usage: build_and_test_aarch64.sh [--no-test] [--jobs N] [-- CTEST_ARGS...]
#
# Contract:
#   - installs the Debian packages it needs when missing (as root): cmake, g++ (the Python side's
#     extensions), the aarch64 cross compilers (g++-aarch64-linux-gnu: their C/C++/OpenMP libraries in
#     /usr/aarch64-linux-gnu), qemu-user, faketime, dpkg-dev, and the host -dev packages of utf8proc,
#     nlohmann-json, libpng, libjpeg-turbo and zlib (the versions the aarch64 libraries are built at, and the
#     nlohmann-json headers).
#   - builds ncnn for aarch64 (scripts/build_ncnn.sh --target aarch64) and the aarch64 libraries
#     (scripts/build_aarch64_deps.sh: static zlib, libpng, libjpeg-turbo, utf8proc from Debian's sources),
#     both cached in ${GSURG_CACHE:-$HOME/.cache/gsurg} beside the host and mingw64 builds; then configures
#     and builds runtime_cpp into $GSURG_BUILD_DIR/aarch64 (default GSURG_BUILD_DIR: the one build_and_test.sh
#     uses, $CACHE/runtime-build/<hash of this checkout's path>) with cmake/aarch64-linux-gnu.cmake and runs
#     ctest there (--output-on-failure), every built program through scripts/qemu_run.sh
#     (GSURG_TEST_WRAPPER). The Python goldens (HF tokenizers, Pillow, PyTorch, HF transformers) run natively.
#   - GSURG_PYTHON (default: python3 on PATH) is the interpreter the parity tests use.
#   - prints the time of every phase; exits non-zero when any phase or test fails.
set -uo pipefail
{  # the whole script is parsed before it runs: editing the file meanwhile cannot derail a running build


SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUNTIME_DIR=$(dirname "$SCRIPT_DIR")
CACHE=${GSURG_CACHE:-$HOME/.cache/gsurg}
source_key=$(printf '%s' "$RUNTIME_DIR" | sha256sum | cut -c1-12)
BUILD_ROOT=${GSURG_BUILD_DIR:-$CACHE/runtime-build/$source_key}
BUILD="$BUILD_ROOT/aarch64"
PYTHON=${GSURG_PYTHON:-$(command -v python3 || command -v python || true)}
jobs=${GSURG_JOBS:-2}
do_test=1
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-test) do_test=0; shift ;;
    --jobs|-j) jobs=$2; shift 2 ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_and_test_aarch64.sh: unknown argument '$1'" >&2; exit 2 ;;
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
  echo "=== build tree: $BUILD (gsurg_run and the families' aliases in runner/; run them with scripts/qemu_run.sh)" >&2
  echo "=== timings" >&2
  for t in "${timings[@]}"; do echo "  $t" >&2; done
  if [ ${#failures[@]} -gt 0 ]; then
    echo "FAILED: ${failures[*]}" >&2
    exit 1
  fi
  echo "all phases passed" >&2
  exit 0
}

# shellcheck source=debs.sh
. "$SCRIPT_DIR/debs.sh"
install_debs() {
  ensure_debs build_and_test_aarch64.sh cmake make g++ pkg-config libutf8proc-dev nlohmann-json3-dev \
    libpng-dev libjpeg62-turbo-dev zlib1g-dev faketime dpkg-dev xz-utils bzip2 \
    g++-aarch64-linux-gnu gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu qemu-user
}

ncnn_aarch64=""
aarch64_deps=""
get_ncnn() { ncnn_aarch64=$("$SCRIPT_DIR/build_ncnn.sh" --target aarch64 --jobs "$jobs" | tail -n1); [ -n "$ncnn_aarch64" ]; }
get_deps() { aarch64_deps=$("$SCRIPT_DIR/build_aarch64_deps.sh" --jobs "$jobs" | tail -n1); [ -n "$aarch64_deps" ]; }
# One program under qemu before the suite: a broken emulator or loader prefix fails here, with its message.
qemu_smoke() { "$SCRIPT_DIR/qemu_run.sh" "$BUILD/tests/wine_smoke/gsurg_console_smoke" "qemu ✓" >&2; }

configure() {
  cmake -S "$RUNTIME_DIR" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$RUNTIME_DIR/cmake/aarch64-linux-gnu.cmake" -DGSURG_AARCH64_PREFIXES="$aarch64_deps" \
    -Dncnn_DIR="$ncnn_aarch64/lib/cmake/ncnn" -DGSURG_PYTHON="$PYTHON" \
    -DGSURG_TEST_WRAPPER="$SCRIPT_DIR/qemu_run.sh" || return
  # The preprocess checks (tests/check_preprocess*.py) hand the program paths prefixed with wine's "Z:"
  # whenever a wrapper is set; on Linux "Z:/tmp/x" is a relative path, which this link (in the tests'
  # working folder) turns back into /tmp/x.
  local dir
  for dir in "$BUILD"/families/*/; do ln -sfn / "$dir/Z:"; done
}
build() { cmake --build "$BUILD" -j "$jobs"; }
# Every program must be aarch64 code (a host compiler slipping in would pass the tests without qemu).
check_arch() {
  local f bad=0
  for f in "$BUILD"/runner/*_run; do
    readelf -h "$f" | grep -q '^ *Machine: *AArch64$' || { echo "not an aarch64 program: $f" >&2; bad=1; }
  done
  return $bad
}
test_tree() { (cd "$BUILD" && ctest --output-on-failure --no-tests=error "${ctest_args[@]}"); }

phase "debian packages" install_debs || summary
phase "ncnn aarch64" get_ncnn && echo "ncnn (aarch64): $ncnn_aarch64" >&2
phase "aarch64 deps" get_deps && echo "aarch64 deps: $aarch64_deps" >&2
if [ -n "$ncnn_aarch64" ] && [ -n "$aarch64_deps" ]; then
  phase "configure aarch64" configure && phase "build aarch64" build && phase "check aarch64 code" check_arch &&
    [ $do_test = 1 ] && phase "qemu smoke" qemu_smoke && phase "ctest aarch64 (qemu)" test_tree
fi

summary

exit 0
}
