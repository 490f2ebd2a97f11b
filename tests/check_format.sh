#!/usr/bin/env bash
# Fails, naming the files, if a tracked C or C++ file differs from what clang-format-14 makes of
# it with the tree's .clang-format (scripts/format.sh rewrites them in place).
set -euo pipefail
root="${1:?usage: check_format.sh SOURCE_DIR}"
cd "$root"
command -v clang-format-14 >/dev/null || { echo "check_format: clang-format-14 is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp')
[ "${#files[@]}" -gt 0 ] || { echo "check_format: no C or C++ files found under $root" >&2; exit 1; }
bad=()
for f in "${files[@]}"; do
  clang-format-14 --style=file "$f" | cmp -s - "$f" || bad+=("$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files differ from .clang-format (run scripts/format.sh):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files follow .clang-format"
