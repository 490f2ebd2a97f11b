#!/usr/bin/env bash
# Decode speed, QHexRT vs llama.cpp, measured in alternation: on a machine whose
# memory bandwidth moves from one minute to the next (shared hosts), figures
# taken minutes apart do not compare; pairs taken seconds apart do.
#
#   bash bench/peer/decode_interleaved.sh [--pairs N] [--threads T] [--tokens K]
#
# Needs what run_llama_cpp.sh built (llama-bench, the GGUF files) and the w8/w4
# bundles of scripts/bench.sh. Each pair: llama-bench tg K from an empty context,
# then qhx_generate decoding K tokens after a 1-token raw prompt; the medians of
# both and the median of the per-pair ratios are printed. A benchmark, not a test.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/env.sh"
cd "$QHX_ROOT"
pairs=5 threads=2 tokens=64
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) pairs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    *) echo "decode_interleaved.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
peer="$QHX_CACHE/peer"
bench_bin="$(ls -d "$peer"/build-*/bin | tail -1)/llama-bench"
[ -x "$bench_bin" ] || { echo "decode_interleaved.sh: run bench/peer/run_llama_cpp.sh first" >&2; exit 1; }
# w4h4: the w4 bundle with a w4 lm-head, if built (build/bin/qhx_export --hf $QHX_CACHE/random_2b
# --out $QHX_CACHE/bundles/random_2b-w4h4 --weights w4 --lm-head w4).
for pair in "w8 Q8_0" "w4 Q4_0" "w4h4 Q4_0"; do
  set -- $pair
  w="$1" q="$2"
  manifest="$QHX_CACHE/bundles/random_2b-$w/qwen3vl-2b-text-512.json"
  gguf="$peer/models/random_2b-$q.gguf"
  [ -f "$manifest" ] && [ -f "$gguf" ] || { echo "== skip $w/$q: missing $manifest or $gguf"; continue; }
  ours=() theirs=()
  for i in $(seq "$pairs"); do
    t="$("$bench_bin" -m "$gguf" -t "$threads" -p 0 -n "$tokens" -r 1 -o json 2>/dev/null |
      "$QHX_PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])')"
    o="$(build/bin/qhx_generate -m "$manifest" -p hi --raw -n "$((tokens + 1))" --temp 0 --threads "$threads" --json \
      2>/dev/null | tail -1 | "$QHX_PY" -c 'import json,sys; print(1000.0 / json.load(sys.stdin)["timings"]["decode_ms_per_token"])')"
    echo "   pair $i: QHexRT $w $o tok/s, llama.cpp $q $t tok/s"
    ours+=("$o") theirs+=("$t")
  done
  "$QHX_PY" - "$w" "$q" "${ours[*]}" "${theirs[*]}" <<'PY'
import statistics, sys
w, q, ours, theirs = sys.argv[1], sys.argv[2], list(map(float, sys.argv[3].split())), list(map(float, sys.argv[4].split()))
ratios = [a / b for a, b in zip(ours, theirs)]
print(f"decode {w} vs {q}, {len(ours)} alternating pairs: QHexRT {statistics.median(ours):.2f} tok/s, "
      f"llama.cpp {statistics.median(theirs):.2f} tok/s, median ratio {statistics.median(ratios):.3f}x "
      f"(range {min(ratios):.3f}-{max(ratios):.3f})")
PY
done
