#!/usr/bin/env bash
# ncnnllm2int_build.sh — build ncnn's own LLM weight quantizer, tools/quantize/ncnnllm2int, from a Tencent/ncnn
# git repository against the pinned ncnn library (1.0.20261020), into a cache outside the repo, so
# benchmarks/bench_quantizer.py can compare gsurg's block quantizer with it on the same weights (and, with
# --tool ncnnllm2table, its calibration tool, which writes the AWQ/GPTQ tables ncnnllm2int reads:
# benchmarks/accuracy_beside_llamacpp.py).
#
# Usage: ncnnllm2int_build.sh --ncnn-git DIR [--rev REV] [--tool ncnnllm2int|ncnnllm2table]
#   DIR: a clone (or bare git folder) of github.com/Tencent/ncnn that has tools/quantize/ncnnllm2int.cpp;
#        also $NCNN_GIT. REV: the commit to take the tool from (default HEAD).
#   --tool: which of the two tools (default ncnnllm2int); ncnnllm2table also reads tools/quantize/npy.hpp.
#
# Contract:
#   - nothing of ncnn is copied into this repository: the tool's files (tools/quantize/ncnnllm2int.cpp,
#     tools/quantize/ncnnllm_quant.h, tools/modelwriter.h, tests/prng.h) are read from DIR at REV with
#     `git show` into a temporary folder, compiled there and left there.
#   - it compiles against the pinned library as runtime_cpp/scripts/build_ncnn.sh --target host installs it
#     (that script is run first; it reuses its install) and against the private headers of the same
#     release (src/layer/gemm.h, ...), unpacked from the verified sdist in $CACHE/downloads. The tool's
#     sources are newer or older than the library: whatever they need that the release lacks fails to
#     compile, and the compiler's errors are printed and kept in the temporary folder's build.log.
#   - installs into ${GSURG_CACHE:-$HOME/.cache/gsurg}/<tool>-<commit12>-1.0.20261020/
#     (bin/<tool>, usage.txt: the tool's own usage text, stamp.txt, sources.sha256) and prints the
#     binary's path as the LAST stdout line; progress goes to stderr. The folder is renamed into place only
#     after the build and a run of the tool succeeded, so a killed or failed build leaves nothing but a
#     temporary folder; a folder whose stamp matches is reused.
set -euo pipefail
{  # parsed whole before it runs: editing the file meanwhile cannot derail a running build

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$SCRIPT_DIR")
BUILD_NCNN="$REPO/runtime_cpp/scripts/build_ncnn.sh"
CACHE=${GSURG_CACHE:-$HOME/.cache/gsurg}
CXX=${CXX:-g++}

ncnn_git=${NCNN_GIT:-}
rev=HEAD
tool=ncnnllm2int
while [ $# -gt 0 ]; do
  case "$1" in
    --ncnn-git) ncnn_git=$2; shift 2 ;;
    --ncnn-git=*) ncnn_git=${1#*=}; shift ;;
    --rev) rev=$2; shift 2 ;;
    --rev=*) rev=${1#*=}; shift ;;
    --tool) tool=$2; shift 2 ;;
    --tool=*) tool=${1#*=}; shift ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ncnnllm2int_build.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case "$tool" in
  ncnnllm2int) tool_files=(tools/quantize/ncnnllm2int.cpp tools/quantize/ncnnllm_quant.h tools/modelwriter.h tests/prng.h) ;;
  ncnnllm2table) tool_files=(tools/quantize/ncnnllm2table.cpp tools/quantize/ncnnllm_quant.h tools/quantize/npy.hpp
                             tools/modelwriter.h tests/prng.h) ;;
  *) echo "ncnnllm2int_build.sh: --tool is ncnnllm2int or ncnnllm2table, not '$tool'" >&2; exit 2 ;;
esac
if [ -z "$ncnn_git" ]; then
  echo "ncnnllm2int_build.sh: give the Tencent/ncnn git repository with --ncnn-git DIR (or NCNN_GIT)" >&2
  exit 2
fi

log() { echo "[ncnnllm2int_build] $*" >&2; }

# shellcheck source=../runtime_cpp/scripts/debs.sh
. "$REPO/runtime_cpp/scripts/debs.sh"
ensure_debs ncnnllm2int_build.sh g++ git || log "continuing without: the build may fail"

# The release the library is built from: the version and the sdist's sha256 as build_ncnn.sh pins them.
NCNN_VERSION_FULL=$(sed -n 's/^NCNN_VERSION_FULL=//p' "$BUILD_NCNN")
NCNN_SHA256=$(sed -n 's/^NCNN_SHA256=//p' "$BUILD_NCNN")
if [ -z "$NCNN_VERSION_FULL" ] || [ -z "$NCNN_SHA256" ]; then
  echo "ncnnllm2int_build.sh: cannot read the pinned ncnn version from $BUILD_NCNN" >&2
  exit 1
fi

commit=$(git -C "$ncnn_git" rev-parse --verify "$rev^{commit}") || {
  echo "ncnnllm2int_build.sh: $ncnn_git has no commit '$rev'" >&2
  exit 1
}
for f in "${tool_files[@]}"; do
  if ! git -C "$ncnn_git" cat-file -e "$commit:$f" 2>/dev/null; then
    echo "ncnnllm2int_build.sh: $ncnn_git at ${commit:0:12} has no $f (the tool first appeared in 2026)" >&2
    exit 1
  fi
done

# The library first (reused when built): its prefix is build_ncnn.sh's last stdout line.
prefix=$("$BUILD_NCNN" --target host | tail -n1)
lib="$prefix/lib/libncnn.a"
if [ ! -f "$lib" ] || [ ! -f "$prefix/include/ncnn/platform.h" ]; then
  echo "ncnnllm2int_build.sh: no static ncnn library under $prefix" >&2
  exit 1
fi
lib_stamp=$(cat "$(dirname "$prefix")/stamp.txt")

flags=(-O3 -DNDEBUG -fopenmp)  # what a CMake Release build of ncnn's tools passes, OpenMP as the library
sources_sha=$(for f in "${tool_files[@]}"; do
  printf '%s  %s\n' "$(git -C "$ncnn_git" show "$commit:$f" | sha256sum | cut -d' ' -f1)" "$f"
done)
stamp_text="$tool ncnn-commit=$commit library=[$lib_stamp] cxx=[$("$CXX" --version | head -n1)] flags=${flags[*]}
$sources_sha"

final_dir="$CACHE/$tool-${commit:0:12}-$NCNN_VERSION_FULL"
binary="$final_dir/bin/$tool"
mkdir -p "$CACHE"
exec 9>"$CACHE/.ncnnllm2int.lock"
flock 9

if [ -f "$final_dir/stamp.txt" ] && [ "$(cat "$final_dir/stamp.txt")" = "$stamp_text" ] && [ -x "$binary" ]; then
  log "reusing $binary"
  echo "$binary"
  exit 0
fi

work=$(mktemp -d "$CACHE/.tmp-$tool.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The release's private headers (layer/*.h), from the sdist build_ncnn.sh verified and kept.
tarball="$CACHE/downloads/ncnn-$NCNN_VERSION_FULL.tar.gz"
if [ ! -f "$tarball" ] || ! echo "$NCNN_SHA256  $tarball" | sha256sum -c --status; then
  echo "ncnnllm2int_build.sh: no verified sdist at $tarball (build_ncnn.sh keeps it when pip could download" \
    "it under faketime)" >&2
  exit 1
fi
mkdir -p "$work/release"
tar -xzf "$tarball" -C "$work/release" --strip-components=1 --wildcards '*/src/*'

# The tool, as its repository lays it out (ncnnllm2int.cpp includes ../modelwriter.h, which includes
# ../tests/prng.h).
for f in "${tool_files[@]}"; do
  mkdir -p "$work/tool/$(dirname "$f")"
  git -C "$ncnn_git" show "$commit:$f" >"$work/tool/$f"
done

log "compiling $tool of ncnn ${commit:0:12} against ncnn $NCNN_VERSION_FULL ($prefix)"
mkdir -p "$work/final/bin"
# The release's src/ first (layer/gemm.h, layer.h, ...), then the install for its generated headers
# (platform.h, layer_type_enum.h, ...), which src/ only has as *.in templates.
if ! "$CXX" "${flags[@]}" -I"$work/release/src" -I"$prefix/include/ncnn" \
    "$work/tool/tools/quantize/$tool.cpp" "$lib" -lpthread -o "$work/final/bin/$tool" \
    >"$work/build.log" 2>&1; then
  cat "$work/build.log" >&2
  trap - EXIT
  echo "ncnnllm2int_build.sh: $tool of ncnn ${commit:0:12} does not compile against ncnn" \
    "$NCNN_VERSION_FULL (the errors above; sources and build.log kept in $work)" >&2
  exit 1
fi
cat "$work/build.log" >&2

# It must run: without arguments it prints its usage and exits 255.
set +e
"$work/final/bin/$tool" >"$work/final/usage.txt" 2>&1
rc=$?
set -e
if [ "$rc" != 255 ] || ! grep -q '^Usage:' "$work/final/usage.txt"; then
  cat "$work/final/usage.txt" >&2
  echo "ncnnllm2int_build.sh: the built $tool did not print its usage (exit $rc)" >&2
  exit 1
fi

echo "$sources_sha" >"$work/final/sources.sha256"
echo "$stamp_text" >"$work/final/stamp.txt"
rm -rf "$final_dir"
mv "$work/final" "$final_dir"
log "installed $binary"
echo "$binary"

exit 0
}
