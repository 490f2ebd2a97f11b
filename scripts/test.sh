#!/usr/bin/env bash
# Installs everything and runs every test: the C++ tests (Release), the same
# under AddressSanitizer + UndefinedBehaviorSanitizer, a short run of every fuzz
# target, then the Python reference-side tests (parity against Hugging Face).
# Exit 0 = all passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$QHX_ROOT"

bash scripts/setup.sh

# The toy model (a tiny Qwen3-VL trained on its synthetic task, scripts/toy_train.py; cached) trains
# at the lowest priority beside everything below: the two cores are busy in the builds and C++ tests,
# but the references, the qnn bundles and the Python tests leave about a third of them idle, which the
# training (~400 s of both cores) fills. The accuracy test's fixture waits on the checkpoint's lock.
toy_log="$(mktemp)"
echo "== [${SECONDS} s] the toy model trains in the background (nice 19; log at the end)"
HF_HUB_OFFLINE=1 nice -n 19 "$QHX_PY" scripts/toy_train.py >"$toy_log" 2>&1 &
toy_pid=$!
trap 'kill "$toy_pid" 2>/dev/null || true; rm -f "$toy_log"' EXIT

echo "== [${SECONDS} s] references: tiny checkpoints written by transformers, fp32 outputs (cached)"
HF_HUB_OFFLINE=1 "$QHX_PY" tests/reference/build_all.py
echo "== [${SECONDS} s] references: the same tiny configs written and computed by transformers 5.x (cached)"
HF_HUB_OFFLINE=1 "$QHX_PY_TF5" tests/reference/build_all.py --configs tiny_a_tf5,tiny_b_tf5
bash scripts/setup_qnn.sh  # the qnn-htp backend's QAIRT libraries and v79 context binaries (docs/qnn.md)

# The compiler cache: a machine that ran this before rebuilds only what changed. ccache keys
# the compiler by the name it is called by, so the build names gcc/g++ (CMake's default would
# be cc/c++, the same binaries, other keys); -Werror does not change an object that compiled.
export CCACHE_DIR="${CCACHE_DIR:-$QHX_CACHE/ccache}" CCACHE_BASEDIR=/ CCACHE_IGNOREOPTIONS=-Werror \
  CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-2G}
echo "== [${SECONDS} s] build (Release)"
bash scripts/build.sh build -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
echo "== [${SECONDS} s] qnn-htp bundles of the tiny checkpoints (qhx_export --target qnn-htp; cached)"
bash scripts/qnn_bundles.sh build
echo "== [${SECONDS} s] C++ tests (Release)"
ctest --test-dir build --output-on-failure -j2
echo "== [${SECONDS} s] the runtime on aarch64 (cross-built; kernel tests and qhx_export + qhx_generate under qemu-aarch64, against build/)"
bash scripts/test_aarch64.sh

echo "== [${SECONDS} s] build (ASan + UBSan, clang, with the fuzz targets)"
# One instrumented build for both: the tests below and the libFuzzer targets (tests/fuzz).
bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQHX_SANITIZE=ON -DQHX_BENCH=OFF \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DQHX_FUZZ=ON
echo "== [${SECONDS} s] C++ tests (ASan + UBSan), with every fuzz target's seeds and regression inputs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j2
echo "== [${SECONDS} s] fuzzing: every target for ${QHX_CI_FUZZ_SECONDS:=10} s, two at a time"
bash scripts/fuzz_all.sh "$QHX_CI_FUZZ_SECONDS" 2

echo "== [${SECONDS} s] Python tests: text parity on the plain reference kernels (the oracle path)"
QHX_KERNELS=reference QHX_BIN="$QHX_ROOT/build/bin" "$QHX_PY" -m pytest tests/python/test_text_parity.py -q

echo "== [${SECONDS} s] Python tests (parity with Hugging Face; fast kernels)"
# The Python package test packages the Release build's libqhexrt.so (this checkout is HEAD)
# from a clean clone with pip; tests/python/test_python_package.py says how.
QHX_BIN="$QHX_ROOT/build/bin" "$QHX_PY" -m pytest tests/python -q --durations=20
toy_rc=0; wait "$toy_pid" || toy_rc=$?
echo "== the toy model's background training (exit code $toy_rc):"
tail -c 1500 "$toy_log" | tr '\r' '\n' | tail -n 4
[ "$toy_rc" -eq 0 ] || { echo "the toy model's training failed"; exit 1; }
echo "== the toy model's held-out accuracy per path (tests/python/test_toy_accuracy.py)"
cat "$QHX_CACHE/toy/accuracy.md"
echo "== [${SECONDS} s] all tests passed"
