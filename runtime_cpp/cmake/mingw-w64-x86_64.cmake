# CMake toolchain file: cross-compile for 64-bit Windows with Debian's mingw-w64 (posix threads flavour).
#
# Contract:
#   - compilers: x86_64-w64-mingw32-gcc-posix / g++-posix (Debian package g++-mingw-w64-x86-64-posix); the
#     posix flavour is needed for std::thread / std::mutex and for ncnn's OpenMP (libgomp, winpthreads).
#   - libraries and packages are searched only below the mingw sysroot and the prefixes listed in
#     GSURG_MINGW_PREFIXES (environment variable or -D cache variable, ';'-separated). By default that is
#     ${GSURG_CACHE:-$HOME/.cache/gsurg}/mingw64-deps, where scripts/build_mingw_deps.sh installs utf8proc,
#     zlib, libpng, libjpeg-turbo and the nlohmann-json headers built from Debian's source packages.
#     Host (Linux) headers and libraries are never picked up; programs (python, wine) are found on the host.
#   - ncnn is found through -Dncnn_DIR=<mingw install>/lib/cmake/ncnn, which find_package honours as is.
#   - every object is assembled with -muse-unaligned-vector-move (AVX code and Win64's 16-byte stack).
#   - executables are linked statically (libgcc, libstdc++, winpthread, libgomp), so the .exe runs under
#     wine or on Windows without any DLL next to it.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)

# PVL_MINGW_TRIPLE keeps its old name: the set() lines of the triple and the compilers are hashed into the cache
# stamps of scripts/build_ncnn.sh and build_*_deps.sh, so renaming it would rebuild ncnn and the libraries.
set(PVL_MINGW_TRIPLE x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${PVL_MINGW_TRIPLE}-gcc-posix)
set(CMAKE_CXX_COMPILER ${PVL_MINGW_TRIPLE}-g++-posix)
set(CMAKE_RC_COMPILER ${PVL_MINGW_TRIPLE}-windres)

# Where the cross-built third-party libraries live (see scripts/build_mingw_deps.sh).
if(NOT DEFINED GSURG_MINGW_PREFIXES)
  if(DEFINED ENV{GSURG_MINGW_PREFIXES})
    set(GSURG_MINGW_PREFIXES "$ENV{GSURG_MINGW_PREFIXES}")
  elseif(DEFINED ENV{GSURG_CACHE})
    set(GSURG_MINGW_PREFIXES "$ENV{GSURG_CACHE}/mingw64-deps")
  else()
    set(GSURG_MINGW_PREFIXES "$ENV{HOME}/.cache/gsurg/mingw64-deps")
  endif()
endif()
set(GSURG_MINGW_PREFIXES "${GSURG_MINGW_PREFIXES}" CACHE STRING "Prefixes holding libraries built for mingw-w64")

# try_compile projects re-read this file: hand them the same prefixes.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES GSURG_MINGW_PREFIXES)

set(CMAKE_FIND_ROOT_PATH /usr/${PVL_MINGW_TRIPLE} ${GSURG_MINGW_PREFIXES})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Static archives first (libgomp.a rather than libgomp.dll.a, ...): set after each project() by this file,
# since the platform file read after the toolchain file resets the suffixes.
set(CMAKE_PROJECT_INCLUDE "${CMAKE_CURRENT_LIST_DIR}/mingw-prefer-static.cmake")

# GCC assumes 32-byte alignment for AVX spills to the stack, but Win64 aligns the stack to 16 bytes only
# (GCC bug 49001; crashes in AVX code such as ncnn's): let the assembler encode every aligned vector move as
# an unaligned one (same speed on aligned data; binutils >= 2.38).
set(CMAKE_C_FLAGS_INIT "-Wa,-muse-unaligned-vector-move")
set(CMAKE_CXX_FLAGS_INIT "-Wa,-muse-unaligned-vector-move")

# No DLL hunting at run time: link the GCC runtime, the C++ library and winpthread into every program.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static -static-libgcc -static-libstdc++")
