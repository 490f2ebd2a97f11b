#!/usr/bin/env bash
# Runs one libFuzzer target (tests/fuzz) for SECONDS, then prints its executions,
# coverage (edges) and features on one line:
#   bash scripts/fuzz.sh TARGET SECONDS [extra libFuzzer flags]
#   bash scripts/fuzz.sh fuzz_image_png 600 -max_len=65536
# The targets live in the clang sanitizer build (build-asan, QHX_FUZZ=ON; another
# with QHX_FUZZ_BUILD). It starts from the committed seeds and regression inputs and
# from what earlier runs found, kept in $QHX_CACHE/fuzz/corpus/TARGET (never in git).
# A crash leaves its input in $QHX_CACHE/fuzz/crashes/TARGET/ and fails with its path:
# copy it into tests/fuzz/regressions/TARGET/ once the bug is fixed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

if [[ $# -lt 2 ]]; then
  echo "usage: $0 TARGET SECONDS [libFuzzer flags...]" >&2
  exit 2
fi
target=$1 seconds=$2
shift 2
build=${QHX_FUZZ_BUILD:-$QHX_ROOT/build-asan}
bin=$build/bin/$target
src=$QHX_ROOT/tests/fuzz
[[ -x $bin ]] || { echo "fuzz.sh: no $bin (build with -DQHX_FUZZ=ON, as scripts/test.sh's build-asan is)" >&2; exit 2; }

work=$QHX_CACHE/fuzz
corpus=$work/corpus/$target crashes=$work/crashes/$target log=$work/logs/$target.log
mkdir -p "$corpus" "$crashes" "$work/logs"
# The first folder is the one libFuzzer adds new inputs to; the committed ones are only read.
dirs=("$corpus")
for d in "$src/corpus/$target" "$src/regressions/$target"; do [[ -d $d ]] && dirs+=("$d"); done
flags=(-max_total_time="$seconds" -print_final_stats=1 -timeout=30 -artifact_prefix="$crashes/")
[[ -f $src/$target.dict ]] && flags+=(-dict="$src/$target.dict")
# A target's own flags (e.g. a malloc limit that states the bound its parser promises).
[[ -f $src/$target.options ]] && read -r -a own <"$src/$target.options" && flags+=("${own[@]}")

# The sanitizers as scripts/test.sh runs the tests (a leak is a crash too).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
rc=0
"$bin" "${flags[@]}" "$@" "${dirs[@]}" >"$log" 2>&1 || rc=$?

# libFuzzer's own figures: the last status line ("#N ... cov: C ft: F corp: K/...")
# and the final stats.
last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
field() { sed -nE "s/.* $1: ([0-9]+).*/\1/p" <<<"$last"; }
execs=$(sed -nE 's/^stat::number_of_executed_units: ([0-9]+)/\1/p' "$log" | tail -1)
cov=$(field cov) ft=$(field ft) corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$last")
crash=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log" | tail -1)
crashed=0
if [[ $rc -ne 0 ]]; then
  crashed=1
  echo "fuzz.sh: $target FAILED (exit $rc); log: $log" >&2
  grep -E '^==[0-9]+==ERROR|^SUMMARY|runtime error|fuzz invariant failed|deadly signal|uncaught exception|what\(\)' "$log" | head -8 >&2 || true
  [[ -n $crash ]] && echo "fuzz.sh: reproducer: $crash (run: $bin $crash)" >&2
fi
printf 'fuzz-summary %s seconds=%s execs=%s cov=%s ft=%s corpus=%s crashes=%s\n' \
  "$target" "$seconds" "${execs:-0}" "${cov:-0}" "${ft:-0}" "${corp:-0}" "$crashed"
exit $(( crashed ))
