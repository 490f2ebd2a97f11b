#!/usr/bin/env bash
# Configures and builds QHexRT into build/ (Release), or into the folder given
# as $1 with any extra CMake arguments after it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
dir="${1:-$QHX_ROOT/build}"
shift || true
cmake -S "$QHX_ROOT" -B "$dir" -G Ninja -DQHX_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
