#!/usr/bin/env bash
# The main job, as far as it exists: installs and builds, then tokenizes a
# sample chat prompt with the real Qwen3 tokenizer and decodes it back.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$QHX_ROOT"
bash scripts/setup.sh >/dev/null
bash scripts/build.sh build
echo "== encode (one JSON string per line -> one id array per line)"
ids="$(build/bin/qhx_tokenize --tokenizer "$QHX_TOKENIZER_JSON" < docs/sample_prompts.jsonl)"
paste -d'\n' docs/sample_prompts.jsonl <(echo "$ids") | sed 'n;s/^/  -> /'
echo "== decode (the ids back to text)"
echo "$ids" | build/bin/qhx_tokenize --tokenizer "$QHX_TOKENIZER_JSON" --decode
