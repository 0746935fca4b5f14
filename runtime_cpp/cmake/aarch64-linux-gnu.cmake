# CMake toolchain file: cross-compile for 64-bit ARM Linux (aarch64) with Debian's cross compilers.
#
# Contract:
#   - compilers: aarch64-linux-gnu-gcc / g++ (Debian packages gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu).
#     Their C library, libstdc++, libgcc_s and libgomp (libc6-arm64-cross, ...) live in
#     /usr/aarch64-linux-gnu/lib: the dynamic loader's prefix under emulation (qemu-aarch64 -L
#     /usr/aarch64-linux-gnu, scripts/qemu_run.sh) and the same libraries any aarch64 Debian has.
#   - -march=armv8-a, the baseline ncnn's own aarch64-linux-gnu toolchain file uses: ncnn compiles its
#     ARMv8.2 fp16/dotprod/fp16fml, v8.4 bf16/i8mm and v8.6 SVE/SVE2 kernels with their own -march flags and
#     picks them at run time (NCNN_RUNTIME_CPU), so one build runs on every ARMv8-A CPU.
#   - libraries and packages are searched only below /usr/aarch64-linux-gnu and the prefixes listed in
#     GSURG_AARCH64_PREFIXES (environment variable or -D cache variable, ';'-separated). By default that is
#     ${GSURG_CACHE:-$HOME/.cache/gsurg}/aarch64-deps, where scripts/build_aarch64_deps.sh installs utf8proc,
#     zlib, libpng, libjpeg-turbo (static) and the nlohmann-json headers built from Debian's source packages.
#     Host (x86-64) headers and libraries are never picked up; programs (python, qemu) are found on the host.
#   - ncnn is found through -Dncnn_DIR=<aarch64 install>/lib/cmake/ncnn, which find_package honours as is.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

# PVL_AARCH64_TRIPLE keeps its old name: the set() lines of the triple and the compilers are hashed into the cache
# stamps of scripts/build_ncnn.sh and build_*_deps.sh, so renaming it would rebuild ncnn and the libraries.
set(PVL_AARCH64_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${PVL_AARCH64_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${PVL_AARCH64_TRIPLE}-g++)
set(CMAKE_C_FLAGS_INIT "-march=armv8-a")
set(CMAKE_CXX_FLAGS_INIT "-march=armv8-a")

# Where the cross-built third-party libraries live (see scripts/build_aarch64_deps.sh).
if(NOT DEFINED GSURG_AARCH64_PREFIXES)
  if(DEFINED ENV{GSURG_AARCH64_PREFIXES})
    set(GSURG_AARCH64_PREFIXES "$ENV{GSURG_AARCH64_PREFIXES}")
  elseif(DEFINED ENV{GSURG_CACHE})
    set(GSURG_AARCH64_PREFIXES "$ENV{GSURG_CACHE}/aarch64-deps")
  else()
    set(GSURG_AARCH64_PREFIXES "$ENV{HOME}/.cache/gsurg/aarch64-deps")
  endif()
endif()
set(GSURG_AARCH64_PREFIXES "${GSURG_AARCH64_PREFIXES}" CACHE STRING "Prefixes holding libraries built for aarch64")

# try_compile projects re-read this file: hand them the same prefixes.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES GSURG_AARCH64_PREFIXES)

set(CMAKE_FIND_ROOT_PATH /usr/${PVL_AARCH64_TRIPLE} ${GSURG_AARCH64_PREFIXES})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
