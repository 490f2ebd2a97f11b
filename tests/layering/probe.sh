#!/usr/bin/env bash
# probe.sh BUILD_DIR: the build enforces the layers. A scratch target of the formats layer
# with only downward includes builds; the same layer's target including runtime/manifest.hpp
# is refused, with the compiler naming that header.
set -uo pipefail
build=$1
if ! out=$(cmake --build "$build" --target qhx_layering_probe_down 2>&1); then
  echo "FAIL: the downward probe (tests/layering/probe_downward.cpp) did not build:"; echo "$out"; exit 1
fi
if out=$(cmake --build "$build" --target qhx_layering_probe_up 2>&1); then
  echo "FAIL: an upward include (formats -> runtime/manifest.hpp) built; the layers are not enforced"; exit 1
fi
if ! grep -Eq "runtime/manifest\.hpp('|:)? (file not found|No such file or directory)" <<<"$out"; then
  echo "FAIL: the upward probe failed, but not for its include:"; echo "$out"; exit 1
fi
echo "ok: downward include builds; upward include refused:"
grep -E "runtime/manifest\.hpp" <<<"$out" | head -1
