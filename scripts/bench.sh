#!/usr/bin/env bash
# QHexRT's speed on a full-size random-weight Qwen3-VL-2B bundle, and as fractions of this
# machine's limits (tools/qhx_bench.cpp says what is measured and how).
#
#   bash scripts/bench.sh [qhx_bench flags: --quick --runs N --threads N --json ...]
#
# QHX_BENCH_WEIGHTS=w8|w4 (default w8) picks the bundle $QHX_CACHE/bundles/random_2b-$W;
# QHX_BENCH_BUNDLE=DIR benchmarks another bundle instead; QHX_BUILD (default build/) is the
# build folder. On first use, each cached and reused afterwards:
#   - $QHX_CACHE/random_2b: tests/reference/make_random_2b.py (random weights, 2B shapes)
#   - the bundle: build/bin/qhx_export --hf $QHX_CACHE/random_2b --out ... --weights W
#   - the machine's limits, measured at every run with the shared roofline tool
#     (../shared/tools/roofline/roofline.c, compiled once as its build.sh does, into the
#     cache) and kept in $QHX_CACHE/roofline.json; QHX_BENCH_ROOFLINE=cached reuses that file
# Progress goes to stderr; stdout is qhx_bench's (one JSON object with --json).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$QHX_ROOT"

weights="${QHX_BENCH_WEIGHTS:-w8}"
build="${QHX_BUILD:-$QHX_ROOT/build}"
ckpt="$QHX_CACHE/random_2b"
bundle="${QHX_BENCH_BUNDLE:-$QHX_CACHE/bundles/random_2b-$weights}"
roofline_src="$QHX_ROOT/../shared/tools/roofline/roofline.c"
roofline_json="$QHX_CACHE/roofline.json"

{
  [ -x "$QHX_PY" ] || bash scripts/setup.sh
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$QHX_ROOT" -B "$build" -G Ninja -DQHX_WERROR=ON >/dev/null
  fi
  cmake --build "$build" -j2 --target qhx_bench qhx_export

  # The limits are measured in this run, just before the figures: on a shared
  # host the bandwidth and even the compute move from minute to minute, so a
  # fraction against an older measurement says little (~7 s). The last one is
  # kept in $roofline_json. QHX_BENCH_ROOFLINE=cached reuses it instead.
  if [ "${QHX_BENCH_ROOFLINE:-fresh}" != cached ] || [ ! -s "$roofline_json" ]; then
    if [ -f "$roofline_src" ]; then
      mkdir -p "$QHX_CACHE/roofline"
      if [ ! -x "$QHX_CACHE/roofline/roofline" ] || [ "$roofline_src" -nt "$QHX_CACHE/roofline/roofline" ]; then
        ${CC:-cc} -O3 -march=native -fopenmp -Wall -Wextra -o "$QHX_CACHE/roofline/roofline" "$roofline_src"
      fi
      echo "== roofline: measuring this machine's limits now -> $roofline_json"
      "$QHX_CACHE/roofline/roofline" | tee "$QHX_CACHE/roofline/roofline.txt"
      grep '^{"tool":"roofline"' "$QHX_CACHE/roofline/roofline.txt" >"$roofline_json.part"
      mv "$roofline_json.part" "$roofline_json"
    else
      echo "== no roofline tool at $roofline_src: fractions will be n/a"
    fi
  fi

  if [ -z "${QHX_BENCH_BUNDLE:-}" ] && [ ! -f "$bundle/config.json" ]; then
    if [ ! -f "$ckpt/model.safetensors" ]; then
      echo "== random Qwen3-VL-2B checkpoint -> $ckpt (about 4.3 GB)"
      "$QHX_PY" tests/reference/make_random_2b.py --out "$ckpt"
    fi
    echo "== export $ckpt -> $bundle ($weights)"
    "$build/bin/qhx_export" --hf "$ckpt" --out "$bundle" --weights "$weights" --quiet
  fi
} >&2

roofline_args=()
[ -s "$roofline_json" ] && roofline_args=(--roofline "$roofline_json")
exec "$build/bin/qhx_bench" --bundle "$bundle" "${roofline_args[@]}" "$@"
