#!/usr/bin/env bash
# qemu_run.sh — run an aarch64 Linux program under user-mode qemu; the test wrapper of the aarch64 cross build
# (-DGSURG_TEST_WRAPPER=<repo>/runtime_cpp/scripts/qemu_run.sh).
#
# Usage: qemu_run.sh PROGRAM [ARGS...]   (exit status, stdout, stderr and stdin are the program's)
#
# Contract:
#   - uses qemu-aarch64 (Debian qemu-user), else qemu-aarch64-static (qemu-user-static); QEMU names another.
#   - the dynamic loader and the C, C++ and OpenMP libraries come from the cross toolchain's prefix,
#     QEMU_LD_PREFIX (default /usr/aarch64-linux-gnu: Debian's libc6-arm64-cross, libstdc++6-arm64-cross,
#     libgomp1-arm64-cross), the ones the program was linked against; the other libraries are linked in
#     statically (scripts/build_aarch64_deps.sh).
#   - the emulated CPU is qemu's default for aarch64 ("max": ARMv8 with fp16, dotprod, bf16, i8mm, SVE/SVE2,
#     so ncnn's run-time dispatch takes its newest kernels); QEMU_CPU picks another (e.g. cortex-a53, an
#     ARMv8.0 core without fp16 arithmetic).
#   - the arguments and the working folder are passed through unchanged: Linux paths stay Linux paths.
set -euo pipefail
{  # the whole script is parsed before it runs: editing the file meanwhile cannot derail a running build


if [ $# -lt 1 ]; then
  echo "usage: qemu_run.sh PROGRAM [ARGS...]" >&2
  exit 2
fi

if [ -n "${QEMU:-}" ]; then
  qemu=$QEMU
elif command -v qemu-aarch64 >/dev/null; then
  qemu=qemu-aarch64
elif command -v qemu-aarch64-static >/dev/null; then
  qemu=qemu-aarch64-static
else
  echo "qemu_run.sh: qemu-aarch64 is not installed (Debian: apt-get install qemu-user)" >&2
  exit 127
fi
prefix=${QEMU_LD_PREFIX:-/usr/aarch64-linux-gnu}
if [ ! -e "$prefix/lib/ld-linux-aarch64.so.1" ]; then
  echo "qemu_run.sh: no aarch64 loader in $prefix/lib (Debian: apt-get install libc6-arm64-cross)" >&2
  exit 127
fi

exec "$qemu" -L "$prefix" "$@"

exit 0
}
