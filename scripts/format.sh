#!/usr/bin/env bash
# Rewrites every tracked C and C++ file in the tree's style (.clang-format, clang-format-14).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
git ls-files -z '*.c' '*.h' '*.cpp' '*.hpp' | xargs -0 clang-format-14 -i --style=file
