# Included at the end of every project() of a build that uses mingw-w64-x86_64.cmake (CMAKE_PROJECT_INCLUDE):
# prefer static archives when searching libraries. The toolchain file cannot do this itself, because
# CMake's Windows-GNU platform file, read after it, puts ".dll.a" first again; FindOpenMP would then link
# libgomp.dll.a and the .exe would need libgomp-1.dll next to it.
set(CMAKE_FIND_LIBRARY_SUFFIXES ".a" ".dll.a" ".lib")
