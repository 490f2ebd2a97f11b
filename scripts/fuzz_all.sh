#!/usr/bin/env bash
# Runs every fuzz target (tests/fuzz/fuzz_*.cpp) for SECONDS each through
# scripts/fuzz.sh, JOBS at a time (default 2: this machine's cores), and prints a
# table of executions, edges, features and crashes. Exit 1 if any target crashed;
# the reproducers' paths are printed above the table.
#   bash scripts/fuzz_all.sh SECONDS [JOBS] [TARGET...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

if [[ $# -lt 1 ]]; then
  echo "usage: $0 SECONDS [JOBS] [TARGET...]" >&2
  exit 2
fi
seconds=$1 jobs=${2:-2}
shift $(( $# >= 2 ? 2 : 1 ))
if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  mapfile -t targets < <(cd "$QHX_ROOT/tests/fuzz" && ls fuzz_*.cpp | sed 's/\.cpp$//')
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/qhx_fuzz_all.XXXXXX")
trap 'rm -rf "$out"' EXIT

start=$SECONDS
running=0
for t in "${targets[@]}"; do
  if (( running >= jobs )); then
    wait -n || true
    running=$(( running - 1 ))
  fi
  ( bash "$QHX_ROOT/scripts/fuzz.sh" "$t" "$seconds" >"$out/$t.out" 2>"$out/$t.err" || true ) &
  running=$(( running + 1 ))
done
wait

failed=0
printf '%-22s %12s %8s %8s %8s %8s\n' target executions edges features corpus crashes >"$out/table"
for t in "${targets[@]}"; do
  line=$(grep '^fuzz-summary ' "$out/$t.out" || true)
  [[ -s $out/$t.err ]] && cat "$out/$t.err" >&2
  if [[ -z $line ]]; then
    printf '%-22s %12s\n' "$t" "no result" >>"$out/table"
    failed=1
    continue
  fi
  get() { sed -nE "s/.* $1=([0-9]+).*/\1/p" <<<"$line"; }
  printf '%-22s %12s %8s %8s %8s %8s\n' "$t" "$(get execs)" "$(get cov)" "$(get ft)" "$(get corpus)" "$(get crashes)" >>"$out/table"
  [[ $(get crashes) == 0 ]] || failed=1
done
cat "$out/table"
echo "fuzz_all: ${#targets[@]} targets x ${seconds} s, $jobs at a time: $(( SECONDS - start )) s wall"
exit $failed
