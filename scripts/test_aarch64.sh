#!/usr/bin/env bash
# The CPU kernels on 64-bit Arm: cross-compiles the kernels and their tests
# (the shared kernel suite, the int8 path with its NEON dotprod kernel, the
# thread pool) with Debian's aarch64 toolchain and runs them under qemu-aarch64,
# so the NEON paths are tested, not just compiled. The packages come from
# scripts/setup.sh. Usage: bash scripts/test_aarch64.sh [BUILD_DIR]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
build="${1:-$QHX_ROOT/build-aarch64}"
cmake -S "$QHX_ROOT" -B "$build" -G Ninja -DQHX_KERNELS_ONLY=ON -DQHX_WERROR=ON \
  -DCMAKE_TOOLCHAIN_FILE="$QHX_ROOT/cmake/aarch64-linux-gnu.cmake" >/dev/null
cmake --build "$build" -j2
# qemu's default CPU ("max") has dotprod, so the NEON dotprod kernel runs beside the portable one.
ctest --test-dir "$build" --output-on-failure -j2
