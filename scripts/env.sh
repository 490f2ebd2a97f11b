# Sourced by the other scripts: where things live. Override any of these from the environment.
QHX_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export QHX_ROOT
export QHX_CACHE="${QHX_CACHE:-$HOME/.cache/qhexrt}"          # generated data: tokenizer, checkpoints, bundles
export QHX_VENV="${QHX_VENV:-$QHX_ROOT/.venv}"                # Python reference side
export QHX_TOKENIZER_JSON="${QHX_TOKENIZER_JSON:-$QHX_CACHE/tokenizer/tokenizer.json}"
export QHX_PY="$QHX_VENV/bin/python"
export QHX_VENV_TF5="${QHX_VENV_TF5:-$QHX_ROOT/.venv-tf5}"    # the transformers 5.x line (the _tf5 references)
export QHX_PY_TF5="$QHX_VENV_TF5/bin/python"
