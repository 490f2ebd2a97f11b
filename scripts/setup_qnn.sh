#!/usr/bin/env bash
# The qnn-htp backend's test inputs, idempotent (cached run: about 1 s):
#   - the QAIRT runtime libraries for Linux x86-64 (libQnnHtp.so emulates the Hexagon NPU,
#     libQnnSystem.so reads context binaries) from PyPI's onnxruntime-qnn wheel, pinned, in
#     their own venv $QHX_CACHE/qnn/venv (ONNX Runtime and onnx pins there do not touch .venv),
#     linked as $QHX_CACHE/qnn/lib where QHexRT looks for them (docs/qnn.md)
#   - QNN context binaries prepared for HTP v79 / SM8750 from the tiny_a reference checkpoint
#     (tools/qnn/make_qnn_graphs.py), into $QHX_CACHE/qnn/graphs/tiny_a
# Needs the reference checkpoints: run after tests/reference/build_all.py.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

# onnxruntime-qnn 2.7.0 bundles QAIRT 2.51.0 (its onnxruntime_qnn/build_and_package_info.py);
# it is a plugin EP for a stock onnxruntime (>= 1.24.2), pinned here too.
QNN_PINS=(onnxruntime-qnn==2.7.0 onnxruntime==1.32.0 onnx==1.23.2 numpy==2.4.6)
QNN_VENV="$QHX_CACHE/qnn/venv"
QNN_PY="$QNN_VENV/bin/python"

[ -x "$QNN_PY" ] || "$QHX_PY" -m venv "$QNN_VENV"  # the project's Python 3.11: the wheel is cp311
have="$("$QNN_PY" -m pip freeze 2>/dev/null | grep -i -E '^(onnxruntime[-_]qnn|onnxruntime|onnx|numpy)==' | tr 'A-Z_' 'a-z-' | sort || true)"
want="$(printf '%s\n' "${QNN_PINS[@]}" | tr 'A-Z_' 'a-z-' | sort)"
if [ "$have" != "$want" ]; then
  echo "setup_qnn: pip install ${QNN_PINS[*]} into $QNN_VENV"
  "$QNN_PY" -m pip install -q --disable-pip-version-check "${QNN_PINS[@]}"
fi
lib_dir="$("$QNN_PY" -c 'import onnxruntime_qnn, os; print(os.path.dirname(onnxruntime_qnn.__file__))')"
for f in libQnnHtp.so libQnnSystem.so; do
  [ -f "$lib_dir/$f" ] || { echo "setup_qnn: $lib_dir/$f missing from onnxruntime-qnn" >&2; exit 1; }
done
ln -sfn "$lib_dir" "$QHX_CACHE/qnn/lib"

ckpt="$QHX_CACHE/reference/tiny_a/checkpoint"
[ -f "$ckpt/model.safetensors" ] || {
  echo "setup_qnn: $ckpt missing: run tests/reference/build_all.py first" >&2; exit 1; }
"$QNN_PY" "$QHX_ROOT/tools/qnn/make_qnn_graphs.py" --checkpoint "$ckpt" --out "$QHX_CACHE/qnn/graphs/tiny_a" 2>&1 |
  grep -v -e '^ *$' -e 'LIBNATIVE' || true
[ -f "$QHX_CACHE/qnn/graphs/tiny_a/qhx_stamp.json" ] || { echo "setup_qnn: graph generation failed" >&2; exit 1; }
