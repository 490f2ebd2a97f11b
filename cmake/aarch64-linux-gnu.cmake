# Cross-compiling for 64-bit Arm Linux with Debian's toolchain
# (g++-aarch64-linux-gnu) and arm64 libraries installed by multiarch
# (libhwy-dev:arm64, libgtest-dev:arm64, the codecs, utf8proc, xxhash,
# libsimdjson14: scripts/setup.sh); tests and tools run under qemu-aarch64
# (scripts/test_aarch64.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# The arm64 C library installed by multiarch (/lib/aarch64-linux-gnu, libc6:arm64)
# with its own loader: qemu's -L / finds both. (The cross toolchain's copy in
# /usr/aarch64-linux-gnu is another Debian revision of glibc; a loader of one
# revision with the libc of the other hangs in the first pthread_create.)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
