#!/usr/bin/env bash
# llama.cpp side by side with QHexRT on the SAME random Qwen3-VL-2B weights, in one run.
#
#   bash bench/peer/run_llama_cpp.sh [--threads N] [--skip-qhx] [--quick]
#
# --skip-qhx compares with the qhx_bench figures of an earlier run ($QHX_CACHE/peer/results/qhx_w8.json,
# qhx_w4.json) instead of measuring QHexRT again.
#
# A benchmark, not a test (scripts/test.sh never calls it). Steps, each skipped when done:
#   1-2. llama.cpp's source and a build of llama-bench, llama-quantize and llama-mtmd-cli
#      (bench/peer/llama_cpp_env.sh).
#   3. $QHX_CACHE/random_2b (tests/reference/make_random_2b.py) -> GGUF Q8_0 with the vendored
#      convert_hf_to_gguf.py and gguf-py (project venv), the vision projector (mmproj) at Q8_0,
#      and Q4_0 with llama-quantize (requantized from the Q8_0 file: speed is what is compared;
#      llama-quantize keeps the tied token_embd/output at q6_K, as it does by default).
#      The converter's Qwen vocab path imports sentencepiece: it goes to $QHX_CACHE/peer/pydeps.
#   4. llama-bench -t N -p 320 -n 32 on both (JSON; also -t 1), qhx_bench --json on the w8 bundle (and w4
#      when its bundle exists) with the same thread count, and the table of bench/peer/compare.py.
# Nothing here is written into the repository: sources, builds, models and results stay in
# $QHX_CACHE/peer.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/env.sh"
cd "$QHX_ROOT"

threads=2
skip_qhx=0
quick=""
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --skip-qhx) skip_qhx=1; shift ;;
    --quick) quick="--quick"; shift ;;
    *) echo "run_llama_cpp.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

source bench/peer/llama_cpp_env.sh  # step 1, and step 2 below
ckpt="$QHX_CACHE/random_2b"

# 2. build (only the needed targets)
build_llama_cpp llama-bench llama-quantize llama-mtmd-cli

# 3. the same random 2B weights as GGUF
if [ ! -f "$ckpt/model.safetensors" ]; then
  echo "== random 2B checkpoint -> $ckpt"
  "$QHX_PY" tests/reference/make_random_2b.py --out "$ckpt"
fi
gguf_convert "$ckpt" "$models/random_2b-Q8_0.gguf" --outtype q8_0
gguf_convert "$ckpt" "$models/random_2b-mmproj-Q8_0.gguf" --outtype q8_0 --mmproj
if [ ! -f "$models/random_2b-Q4_0.gguf" ]; then
  echo "== llama-quantize Q8_0 -> Q4_0"
  nice -n 10 "$bin/llama-quantize" --allow-requantize "$models/random_2b-Q8_0.gguf" "$models/random_2b-Q4_0.gguf.part" Q4_0 2
  mv "$models/random_2b-Q4_0.gguf.part" "$models/random_2b-Q4_0.gguf"
fi

# 4. measure
# Also at 1 thread: QHexRT's kernels may run single-threaded (qhx_bench's threads_used says),
# and compare.py then shows that pairing too.
reps=3
[ -n "$quick" ] && reps=2
tlist="$threads"
[ "$threads" != 1 ] && tlist="1,$threads"
for q in Q8_0 Q4_0; do
  echo "== llama-bench $q -t $tlist -p 320 -n 32 -r $reps"
  "$bin/llama-bench" -m "$models/random_2b-$q.gguf" -t "$tlist" -p 320 -n 32 -r "$reps" -o json \
    >"$results/llama_bench_$q.json"
done
if [ -f assets/sample.png ]; then  # image encode and TTFT of the multimodal CLI (bench/peer/mtmd_ttft.py times it)
  echo "== llama-mtmd-cli Q8_0 + mmproj, 'Describe this image.' (1 token)"
  "$QHX_PY" bench/peer/mtmd_ttft.py "$bin/llama-mtmd-cli" -m "$models/random_2b-Q8_0.gguf" \
    --mmproj "$models/random_2b-mmproj-Q8_0.gguf" --image assets/sample.png -p "Describe this image." -n 2 \
    -t "$threads" --temp 0 >"$results/mtmd_Q8_0.txt" 2>&1 || echo "   (llama-mtmd-cli failed: see $results/mtmd_Q8_0.txt)"
fi
qhx_args=()
if [ "$skip_qhx" = 0 ]; then
  bash scripts/bench.sh --threads "$threads" $quick --json >"$results/qhx_w8.json"
  qhx_args+=(--qhx-w8 "$results/qhx_w8.json")
  if [ -d "$QHX_CACHE/bundles/random_2b-w4" ]; then
    QHX_BENCH_WEIGHTS=w4 bash scripts/bench.sh --threads "$threads" $quick --json >"$results/qhx_w4.json"
    qhx_args+=(--qhx-w4 "$results/qhx_w4.json")
  fi
else
  for w in w8 w4; do  # figures of an earlier run, if any
    if [ -f "$results/qhx_$w.json" ]; then qhx_args+=(--qhx-$w "$results/qhx_$w.json"); fi
  done
fi
"$QHX_PY" bench/peer/compare.py --llama-q8 "$results/llama_bench_Q8_0.json" --llama-q4 "$results/llama_bench_Q4_0.json" \
  --mtmd "$results/mtmd_Q8_0.txt" --threads "$threads" "${qhx_args[@]}"
