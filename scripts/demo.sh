#!/usr/bin/env bash
# The main job: image -> text with QHexRT, end to end.
#
#   bash scripts/demo.sh [CHECKPOINT]
#
# CHECKPOINT (or $QHX_MODEL) is a Hugging Face Qwen3-VL checkpoint directory, or a hub repo id
# such as Qwen/Qwen3-VL-2B-Instruct when the machine is online. It is exported to a w8 bundle
# (checked against its fp32 source by the export gate) and the bundle captions
# assets/sample.png through the seed's command line.
#
# With no checkpoint, the demo builds a random-weight checkpoint of a small Qwen3-VL config
# and runs the very same pipeline, with timings: its text is meaningless by construction.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$QHX_ROOT"
bash scripts/setup.sh >/dev/null
bash scripts/build.sh build >/dev/null

model="${1:-${QHX_MODEL:-}}"
if [ -n "$model" ] && [ ! -d "$model" ]; then
  echo "== downloading $model from the Hugging Face hub"
  model="$("$QHX_PY" -c 'import sys; from huggingface_hub import snapshot_download; print(snapshot_download(sys.argv[1]))' "$model")"
fi
if [ -z "$model" ]; then
  echo "== no Qwen3-VL checkpoint given: building a RANDOM-WEIGHT demo checkpoint (small config)."
  echo "   Everything below runs for real, but the generated text is meaningless: the weights are noise."
  echo "   Give a checkpoint to caption for real: bash scripts/demo.sh /path/to/Qwen3-VL-2B-Instruct"
  HF_HUB_OFFLINE=1 "$QHX_PY" tests/reference/build_all.py --configs tiny_a --no-images >/dev/null
  model="$QHX_CACHE/reference/tiny_a/checkpoint"
fi

bundle="$QHX_CACHE/bundles/$(basename "$model")-w8"
echo "== export $model -> $bundle (w8), with the export gate"
build/bin/qhx_export --hf "$model" --out "$bundle" --weights w8 --verify --quiet
echo "== caption assets/sample.png (the seed's command line, CPU backend)"
build/bin/qhx_generate "$bundle/qwen3vl-2b-vlm-512.json" cpu - "$bundle" 32 'Describe this image.' assets/sample.png
