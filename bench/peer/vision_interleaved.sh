#!/usr/bin/env bash
# Image encode and time to first token, QHexRT vs llama.cpp, measured in
# alternation (as decode_interleaved.sh does for decode): on a shared host the
# machine's speed moves from one minute to the next, so figures taken minutes
# apart do not compare; pairs taken seconds apart do.
#
#   bash bench/peer/vision_interleaved.sh [--pairs N] [--threads T]
#
# Needs what run_llama_cpp.sh built (llama-mtmd-cli, the Q8_0 GGUF and its
# mmproj) and the w8 bundle of scripts/bench.sh. Each pair: llama-mtmd-cli on
# assets/sample.png with "Describe this image." (its log's image encode time,
# and its TTFT as bench/peer/mtmd_ttft.py times it), then qhx_generate on the
# same image and prompt (vision_ms, ttft_ms; load excluded on both sides). The
# medians and the median of the per-pair ratios are printed. A benchmark, not a test.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/env.sh"
cd "$QHX_ROOT"
pairs=5 threads=2
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) pairs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    *) echo "vision_interleaved.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
peer="$QHX_CACHE/peer"
mtmd="$(ls -d "$peer"/build-*/bin | tail -1)/llama-mtmd-cli"
models="$peer/models"
manifest="$QHX_CACHE/bundles/random_2b-w8/qwen3vl-2b-vlm-512.json"
[ -x "$mtmd" ] || { echo "vision_interleaved.sh: run bench/peer/run_llama_cpp.sh first" >&2; exit 1; }
[ -f "$manifest" ] || { echo "vision_interleaved.sh: run scripts/bench.sh first (no $manifest)" >&2; exit 1; }
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
rows=()
for i in $(seq "$pairs"); do
  "$QHX_PY" bench/peer/mtmd_ttft.py "$mtmd" -m "$models/random_2b-Q8_0.gguf" \
    --mmproj "$models/random_2b-mmproj-Q8_0.gguf" --image assets/sample.png -p "Describe this image." -n 2 \
    -t "$threads" --temp 0 >"$log" 2>&1
  theirs="$("$QHX_PY" - "$log" <<'PY'
import re, sys
log = open(sys.argv[1], errors="replace").read()
enc = re.search(r"slice encoded in (\d+) ms", log) or re.search(r"mtmd batch encoding done in (\d+) ms", log)
ttft = re.search(r"^mtmd_ttft: ([\d.]+) ms", log, re.M)
if not enc or not ttft:
    sys.exit("vision_interleaved.sh: no image encode time or TTFT in llama-mtmd-cli's output")
print(enc.group(1), ttft.group(1))
PY
)"
  ours="$(build/bin/qhx_generate -m "$manifest" -i assets/sample.png -p "Describe this image." -n 1 --temp 0 \
    --threads "$threads" --json 2>/dev/null | tail -1 |
    "$QHX_PY" -c 'import json,sys; t=json.load(sys.stdin)["timings"]; print(t["vision_ms"], t["ttft_ms"])')"
  echo "   pair $i: QHexRT vision/ttft ms $ours, llama.cpp $theirs"
  rows+=("$ours $theirs")
done
"$QHX_PY" - "${rows[@]}" <<'PY'
import statistics, sys
rows = [list(map(float, r.split())) for r in sys.argv[1:]]
for k, name in ((0, "image encode"), (1, "TTFT")):
    ours = [r[k] for r in rows]
    theirs = [r[2 + k] for r in rows]
    ratios = [t / o for o, t in zip(ours, theirs)]
    print(f"{name}, {len(rows)} alternating pairs: QHexRT {statistics.median(ours):.1f} ms, "
          f"llama.cpp {statistics.median(theirs):.1f} ms, median speed ratio {statistics.median(ratios):.3f}x "
          f"(range {min(ratios):.3f}-{max(ratios):.3f})")
PY
