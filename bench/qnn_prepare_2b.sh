#!/usr/bin/env bash
# QNN context binaries for the full-size random 2B w8 bundle (not in CI: 10+ minutes, GBs of RAM).
#
#   bash bench/qnn_prepare_2b.sh [CPU_W8_BUNDLE] [OUT]
#
# Runs tools/qnn/make_qnn_bundle.py --graphs text,lm_head (and vision when tools/qnn/vision_graph.py
# exists) for SM8750 at the bundle manifest's context and prefill chunk, under /usr/bin/time -v
# (the driver prints each binary's size, prepare time and its child's peak RSS), lists the files,
# then creates every twin's and the lm-head's context in x86 emulation (check_text_graphs.py
# --load-only: executing 2B graphs in emulation would take hours). Prints figures; not a test.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${QHX_CACHE:-$HOME/.cache/qhexrt}
PY=$CACHE/qnn/venv/bin/python
BUNDLE=${1:-$CACHE/bundles/random_2b-w8}
OUT=${2:-$CACHE/qnn/bundles/random_2b-v79}
[ -x "$PY" ] || { echo "no QNN venv at $PY (bash scripts/setup_qnn.sh)" >&2; exit 1; }
[ -d "$BUNDLE" ] || { echo "no bundle at $BUNDLE (bash scripts/bench.sh --quick builds it)" >&2; exit 1; }

MANIFEST=$(ls "$BUNDLE"/qwen3vl-2b-text-*.json | head -1)
read -r CL AR S < <("$PY" -c "import json,sys,re; m=json.load(open(sys.argv[1])); \
print(m.get('context_length', 1024), m.get('prefill_chunk', 320), re.search(r'_(\d+)\.bin', m['graphs']['llm']['weights']).group(1))" "$MANIFEST")
GRAPHS=text,lm_head
[ -f "$ROOT/tools/qnn/vision_graph.py" ] && GRAPHS=$GRAPHS,vision
echo "bundle $BUNDLE: context $CL, prefill chunk $AR, image size $S; graphs $GRAPHS -> $OUT"
uptime

rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
/usr/bin/time -v -o "$OUT.time.log" "$PY" "$ROOT/tools/qnn/make_qnn_bundle.py" --bundle "$BUNDLE" --out "$OUT" \
    --soc SM8750 --context "$CL" --prefill-chunk "$AR" --image-size "$S" --graphs "$GRAPHS" 2>&1 | grep --line-buffered -v LIBNATIVE
grep -E "Elapsed|Maximum resident" "$OUT.time.log" || true
ls -l "$OUT"
"$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print('int8 weight bytes', d['int8_weight_bytes'], \
'fp16', d['fp16_weight_bytes'], 'prepare s', d['prepare_seconds'], 'peak RSS MB (one binary)', d['peak_rss_mb'])" "$OUT/qnn_graphs.json"
"$PY" "$ROOT/tools/qnn/check_text_graphs.py" --bundle "$BUNDLE" --graphs "$OUT" --load-only 2>&1 | grep --line-buffered -v LIBNATIVE
