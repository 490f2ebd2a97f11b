#!/usr/bin/env bash
# The main job: image -> text with QHexRT, end to end.
#
#   bash scripts/demo.sh [CHECKPOINT] [--weights w8|w4|f16|f32] [--activations int8|f16|f32]
#
# CHECKPOINT (or $QHX_MODEL) is a Hugging Face Qwen3-VL checkpoint directory, or a hub repo id
# such as Qwen/Qwen3-VL-2B-Instruct when the machine is online. It is exported to a w8 bundle
# (or --weights, --activations: qhx_export's) checked against its fp32 source by the export
# gate, and the bundle captions assets/sample.png through the seed's command line. When the
# gate refuses the bundle, nothing is published and the demo says by how much and which
# command to run next (the export measured the alternatives). Bundles go to $QHX_CACHE/bundles
# (or $QHX_DEMO_BUNDLES).
#
# With no checkpoint, the demo trains (once, cached in $QHX_CACHE/toy) a tiny Qwen3-VL on a
# synthetic task of simple scenes (scripts/toy_task.py, scripts/toy_train.py: a few minutes on
# 2 cores), exports it the same way and captions fresh images of the task, printing each image's
# true caption beside QHexRT's.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$QHX_ROOT"
t_start=$SECONDS
# A bundle's image manifest of size $2: qhx_export names it after the model (docs/bundle.md).
vlm_manifest() {
  local found=("$1"/*-vlm-"$2".json)
  [ -f "${found[0]}" ] || { echo "demo: $1 holds no *-vlm-$2.json manifest" >&2; exit 1; }
  echo "${found[0]}"
}
bash scripts/setup.sh --demo >/dev/null
# The two tools the demo runs: from the test build when there is one, else from a lean build
# without the tests and benchmarks.
bin=build-demo
[ -f build/CMakeCache.txt ] && bin=build
[ -f "$bin/CMakeCache.txt" ] || cmake -S . -B "$bin" -G Ninja -DQHX_TESTS=OFF -DQHX_BENCH=OFF -DQHX_SERVE=OFF >/dev/null
cmake --build "$bin" -j"$(nproc)" --target qhx_export qhx_generate >/dev/null
echo "== set-up and build: $((SECONDS - t_start)) s"

model="${QHX_MODEL:-}"
weights=w8
activations=""
while [ $# -gt 0 ]; do
  case "$1" in
    --weights) weights="${2:?--weights needs a value}"; shift 2 ;;
    --activations) activations="${2:?--activations needs a value}"; shift 2 ;;
    -*) echo "demo: unknown option $1 (usage: bash scripts/demo.sh [CHECKPOINT] [--weights W] [--activations A])" >&2
        exit 2 ;;
    *) model="$1"; shift ;;
  esac
done
if [ -n "$model" ] && [ ! -d "$model" ]; then
  echo "== downloading $model from the Hugging Face hub"
  model="$("$QHX_PY" -c 'import sys; from huggingface_hub import snapshot_download; print(snapshot_download(sys.argv[1]))' "$model")"
fi
if [ -z "$model" ]; then
  echo "== no Qwen3-VL checkpoint given: the demo runs a TINY Qwen3-VL trained here on a TOY task"
  echo "   (shapes, colours and numbered signs; scripts/toy_task.py). It knows nothing else."
  echo "   For the real model: bash scripts/demo.sh /path/to/Qwen3-VL-2B-Instruct"
  echo "== train the toy model (or reuse the cached one): $QHX_CACHE/toy/checkpoint"
  t_train=$SECONDS
  HF_HUB_OFFLINE=1 "$QHX_PY" scripts/toy_train.py >/dev/null
  echo "   ($((SECONDS - t_train)) s)"
  model="$QHX_CACHE/toy/checkpoint"
  bundle="$QHX_CACHE/bundles/toy-w8"
  echo "== export $model -> $bundle (w8, 96x96 images), with the export gate"
  "$bin/bin/qhx_export" --hf "$model" --out "$bundle" --weights w8 --image-size 96 --verify --quiet
  vlm="$(vlm_manifest "$bundle" 96)"
  images="$(mktemp -d)"
  trap 'rm -rf "$images"' EXIT
  seed=$(( $(date +%s) % 100000 + 1000 ))  # fresh scenes each run; training never uses these seeds
  "$QHX_PY" scripts/toy_task.py --seed "$seed" --count 3 --out "$images" >/dev/null
  echo "== caption 3 fresh images of the task (seed $seed) with the seed's command line, CPU backend"
  for i in 0 1 2; do
    img="$images/000$i.png"
    truth="$("$QHX_PY" -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["image"] == sys.argv[2] and r["kind"] == "caption": print(r["answer"])' "$images/tasks.jsonl" "000$i.png")"
    ours="$("$bin/bin/qhx_generate" "$vlm" cpu - "$bundle" 40 'Describe this image.' "$img" 2>/dev/null)"
    echo "   image $i   true caption: $truth"
    echo "             QHexRT:       $ours"
  done
  echo "== the same, with its timings (image 0)"
  "$bin/bin/qhx_generate" "$vlm" cpu - "$bundle" 40 'Describe this image.' "$images/0000.png"
  echo "== demo done in $((SECONDS - t_start)) s"
  exit 0
fi

bundle="${QHX_DEMO_BUNDLES:-$QHX_CACHE/bundles}/$(basename "$model")-$weights${activations:+-$activations}"
echo "== export $model -> $bundle ($weights${activations:+, $activations activations}), with the export gate"
gate_log="$(mktemp)"
trap 'rm -f "$gate_log"' EXIT
status=0
"$bin/bin/qhx_export" --hf "$model" --out "$bundle" --weights "$weights" ${activations:+--activations "$activations"} \
  --verify --quiet 2>"$gate_log" || status=$?
cat "$gate_log" >&2
if [ "$status" != 0 ]; then
  grep -q "fails the export gate" "$gate_log" || exit 1  # another error: qhx_export said what
  # The gate measured the same weights with f32 activations; else more bits are what is left.
  if grep -q -- "--activations f32 give .*: they pass" "$gate_log"; then
    next="--weights $weights --activations f32"
  elif [ "$weights" = w4 ]; then
    next="--weights w8"
  elif [ "$weights" != f32 ] && [ "$weights" != f16 ]; then
    next="--weights f16"
  else
    next="--weights f32"
  fi
  echo "== the export gate refused the $weights bundle (figures above): nothing was published."
  echo "   next: bash scripts/demo.sh $model $next"
  exit 1
fi
echo "== caption assets/sample.png (the seed's command line, CPU backend)"
"$bin/bin/qhx_generate" "$(vlm_manifest "$bundle" 512)" cpu - "$bundle" 32 'Describe this image.' assets/sample.png
