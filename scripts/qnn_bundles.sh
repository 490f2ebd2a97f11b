#!/usr/bin/env bash
# Exports the tiny reference checkpoints as qnn-htp bundles (qhx_export --target qnn-htp,
# HTP v79 / SM8750) into $QHX_CACHE/qnn/bundles/<config>, for the tests of the NPU path
# (tests/python/test_qnn_bundle.py, tests/cpp/test_qnn.cpp). Small shapes keep emulation
# quick: 256x256 images (256 patches, 64 image tokens), prefill blocks of 64, context 384;
# tiny_a's decoder in 2 parts (the split path), tiny_b's in one.
# Cached: re-exported when the generator, the exporter or the checkpoint changes.
# Usage: bash scripts/qnn_bundles.sh [BUILD_DIR]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
build="${1:-$QHX_ROOT/build}"
# Each also as a 4-bit bundle (--weights w4) into <config>-w4: tiny_a in blocks of 64, tiny_b
# (whose K = 96 and 160 are not multiples of 64) in blocks of 32.
for cfg in tiny_a:2:w8:64 tiny_b:1:w8:64 tiny_a:2:w4:64 tiny_b:1:w4:32; do
  IFS=: read -r name parts weights block <<< "$cfg"
  ckpt="$QHX_CACHE/reference/$name/checkpoint"
  out="$QHX_CACHE/qnn/bundles/$name"
  [ "$weights" = w8 ] || out="$out-$weights"
  stamp="$(cat "$QHX_ROOT"/tools/qnn/*.py "$QHX_ROOT"/src/export/*.cpp "$QHX_ROOT"/src/export/*.hpp \
             "$QHX_ROOT"/src/formats/quantize.cpp "$ckpt/model.safetensors" | sha256sum | cut -c1-16)-$parts-$block"
  if [ "$(cat "$out/qhx_stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "qnn bundle $name $weights: up to date"
    continue
  fi
  rm -rf "$out"
  t0=$(date +%s)
  "$build/bin/qhx_export" --hf "$ckpt" --out "$out" --target qnn-htp --soc SM8750 --weights "$weights" \
    --w4-block "$block" --image-size 256 --prefill-chunk 64 --context 384 --qnn-parts "$parts" -q
  echo "$stamp" > "$out/qhx_stamp"
  echo "qnn bundle $name $weights: exported in $(( $(date +%s) - t0 )) s"
done
