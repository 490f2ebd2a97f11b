#!/usr/bin/env bash
# The installed package, used from outside (registered with ctest as "package"):
#   bash tests/package/run.sh BUILD_DIR CHECKPOINT_DIR
# installs BUILD_DIR (cmake --install) into a temporary prefix, checks the
# shared library (SONAME, exported symbols), builds this folder's programs
# against the prefix with find_package(qhexrt) (CMAKE_PREFIX_PATH) and main.c
# with pkg-config (PKG_CONFIG_PATH), and runs all three on CHECKPOINT_DIR.
# BUILD_DIR must be fully built. In a sanitizer build (QHX_SANITIZE=ON) the
# programs get the same -fsanitize flags: the instrumented library needs the
# sanitizer runtime, loaded first, which only the program's own link provides.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR CHECKPOINT_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
checkpoint=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/qhx_package.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

step() { echo "== $*"; }
die() { echo "tests/package/run.sh: $*" >&2; exit 1; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log" >&2; die "install failed"; }

for f in include/qhexrt/qhexrt.h include/qhexrt/session.hpp bin/qhx_generate bin/qhx_export bin/qhx_tokenize bin/qhx_chat \
         bin/qhx_bench; do
  [[ -e $prefix/$f ]] || die "the install has no $f"
done
pc=$(find "$prefix" -name qhexrt.pc)
[[ -n $pc ]] || die "the install has no qhexrt.pc"
libdir=$(dirname "$(dirname "$pc")")
so=$(readlink -f "$libdir/libqhexrt.so")
[[ -f $so ]] || die "the install has no libqhexrt.so in $libdir"
dynamic=$(readelf -d "$so")
grep -q 'SONAME.*\[libqhexrt\.so\.0\]' <<<"$dynamic" || die "$so: SONAME is not libqhexrt.so.0"
[[ -e $libdir/libqhexrt.so.0 ]] || die "the install has no libqhexrt.so.0 link"
# Only the public API is exported: the C functions and the public C++ classes,
# no internals (qhx::cpu::..., the kernels, simdjson) that programs could bind to.
exports=$(nm -D --defined-only "$so" | c++filt)
grep -q ' T qhx_session_send@@QHEXRT_0$' <<<"$exports" || die "$so does not export qhx_session_send"
grep -q 'qhx::Session::send' <<<"$exports" || die "$so does not export qhx::Session::send"
internal=$(grep -E 'qhx::(cpu|detail|test)::|simdjson|hwy::' <<<"$exports" || true)
if [[ -n $internal ]]; then
  head -3 <<<"$internal" >&2
  die "$so exports internal symbols"
fi

sanitize=""
link_extra=""
compilers=()
if grep -q '^QHX_SANITIZE:BOOL=ON$' "$build/CMakeCache.txt"; then
  sanitize="-fsanitize=address,undefined -fno-omit-frame-pointer"
  # The build's own compilers: one sanitizer runtime must serve the program and the
  # library (GCC's libasan does not provide what clang's instrumentation calls).
  cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
  export CC=$(cache_value CMAKE_C_COMPILER)
  # clang's UBSan runtime has a C++ part (the vptr and function checks the library was
  # compiled with) that it links into a C program only when asked, with the C++ library.
  if [[ $("$CC" --version) == *clang* ]]; then link_extra="-fsanitize-link-c++-runtime -lstdc++"; fi
  compilers=(-DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$(cache_value CMAKE_CXX_COMPILER)")
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

step "find_package(qhexrt 0.1) consumer (${sanitize:-no sanitizer})"
cmake -S "$here" -B "$work/build" "${generator[@]}" "${compilers[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_C_FLAGS="$sanitize" -DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_EXE_LINKER_FLAGS="$sanitize $link_extra" \
      >"$work/configure.log" || { cat "$work/configure.log" >&2; die "configuring the consumer failed"; }
cmake --build "$work/build" -j1 >"$work/build.log" || { cat "$work/build.log" >&2; die "building the consumer failed"; }
# The programs must use the installed library, not the build tree's.
# (ldd's whole output first: grep -q stops reading at the first match, and under pipefail
# the SIGPIPE that ldd may then get would fail the check by chance.)
deps=$(ldd "$work/build/consumer_c")
grep -q "$libdir/libqhexrt.so.0" <<<"$deps" || die "consumer_c does not load $libdir/libqhexrt.so.0"
"$work/build/consumer_c" "$checkpoint"
"$work/build/consumer_cpp" "$checkpoint"

step "pkg-config consumer"
export PKG_CONFIG_PATH=$(dirname "$pc")
# shellcheck disable=SC2046,SC2086  # word splitting of the flags is intended
"${CC:-cc}" -std=c11 -Wall -Wextra -Wpedantic -Werror $sanitize $link_extra "$here/main.c" \
  $(pkg-config --cflags --libs qhexrt) -o "$work/consumer_pc"
LD_LIBRARY_PATH="$(pkg-config --variable=libdir qhexrt)" "$work/consumer_pc" "$checkpoint"
echo "tests/package: ok"
