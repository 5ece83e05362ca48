# Cross-compiling the course for arm64 on an x86-64 Debian (CI's arm64 lane): Debian's g++-aarch64-linux-gnu, the
# arm64 -dev packages installed through multiarch (dpkg --add-architecture arm64), and the tests run under
# qemu-user (CMAKE_CROSSCOMPILING_EMULATOR, which ctest and doctest's test discovery both use).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# qemu-user loads the arm64 C library that multiarch installed (libc6:arm64, beside the arm64 -dev packages) from
# /lib/aarch64-linux-gnu, as the arm64 machine would. Not `-L /usr/aarch64-linux-gnu`, the cross compiler's own copy
# of glibc: under Debian 12's qemu 7.2 with that one, every thread's start hung (std::thread, OpenBLAS's pool).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
# Headers of architecture-independent packages (xtensor, doctest, CLI11) stay in /usr/include; libraries and
# their configs come from the multiarch folders only, never the host's x86-64 ones.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# xtensor and xtensor-blas are header-only packages of architecture "all" that install their CMake configs in the
# build machine's multiarch folder; those configs name headers only, so the x86-64 ones serve arm64 as they are.
set(xtensor_DIR /usr/lib/x86_64-linux-gnu/cmake/xtensor)
set(xtensor-blas_DIR /usr/lib/x86_64-linux-gnu/cmake/xtensor-blas)
