#!/usr/bin/env bash
# ctest's run of one fuzz target over its committed inputs, once each: the seed
# corpus and every input a fuzzer ever crashed on (regressions/). Files, not
# folders: given a folder, libFuzzer would start fuzzing it.
#   bash tests/fuzz/run_inputs.sh FUZZ_BINARY TARGET_NAME
set -euo pipefail
bin=$1 name=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mapfile -t inputs < <(find "$here/corpus/$name" "$here/regressions/$name" -type f 2>/dev/null | sort)
if [[ ${#inputs[@]} -eq 0 ]]; then
  echo "run_inputs.sh: no inputs for $name under $here/corpus or $here/regressions" >&2
  exit 1
fi
flags=()
[[ -f $here/$name.options ]] && read -r -a flags <"$here/$name.options"
echo "$name: ${#inputs[@]} inputs"
exec "$bin" "${flags[@]}" "${inputs[@]}"
