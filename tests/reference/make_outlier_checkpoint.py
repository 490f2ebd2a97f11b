"""A random Qwen3-VL checkpoint with planted outlier channels, and its fp32 text references.

Real Qwen checkpoints carry a few hidden dimensions whose activations are one to two orders of
magnitude larger than the rest ("massive activations"). A per-row int8 activation scale is set by
the largest element of the row, so such a row crushes every ordinary channel to a handful of
levels. Random N(0, 0.02) weights have no such channels; this checkpoint plants them:

  - OUTLIER_CHANNELS of the residual stream (4 of 256) get large values in the embedding table
    (EMBED_GAIN times their random values), so every token enters the decoder with outliers;
  - the same channels of every decoder layer's input_layernorm and post_attention_layernorm
    weights are multiplied by NORM_GAINS (50 to 100), so the inputs of q/k/v and gate/up carry
    them after the norm as well;
  - one channel of each MLP's intermediate (the input of down_proj) gets large gate/up rows,
    the other place real models show them.

The model is otherwise make_checkpoint's recipe (its randomize_, bf16, tied lm-head, the real
tokenizer), with a wider text tower than tiny_a (hidden 256) so a row holds ordinary channels
enough for the effect to be what it is on a real model. transformers 4.57 writes it, and computes
the fp32 references (make_text_reference.py) that tests/python/test_outlier_activations.py
compares QHexRT's w8 bundles against.

    make_outlier_checkpoint.py [OUT_DIR]      default: $QHX_CACHE/reference/outlier
    make_outlier_checkpoint.py --shape 2b     the same recipe at the 2B's widths (hidden 2048,
                                              MLP 6144, 16 heads of 128, 4 layers) for bench/quality.py:
                                              default $QHX_CACHE/reference/outlier_2b
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_checkpoint  # noqa: E402
import make_text_reference  # noqa: E402
import tiny_configs  # noqa: E402
from common import (STAMP_FILE, cache_root, locked, package_versions, read_stamp, replace_dir,  # noqa: E402
                    sha256_file, sha256_json, source_digest, tokenizer_dir, write_json,
                    write_tokenizer_and_processor_files)

SCRIPT_VERSION = 1
SEED = 0
OUTLIER_CHANNELS = [5, 77, 150, 222]
NORM_GAINS = [50.0, 100.0, 70.0, 60.0]  # one per outlier channel
EMBED_GAIN = 60.0
MLP_CHANNEL = 31  # the intermediate channel made large (input of down_proj)
MLP_GAIN = 8.0    # gate and up rows x8 each: the product silu(gate) * up grows ~64x
CASES = ["chat_capital", "long_chat"]

CONFIG: dict[str, Any] = tiny_configs._top(
    tiny_configs._text(hidden=256, inter=512, layers=4, heads=4, kv_heads=2, head_dim=64,
                       mrope_section=[12, 10, 10]),
    tiny_configs._vision(depth=2, hidden=64, heads=1, inter=128, out_hidden=256, deepstack=[1]),
)


# The 2B's text widths (Qwen3-VL-2B: hidden 2048, MLP 6144, 16 query and 8 KV heads of 128) in 4
# layers; the planted channels at the same relative places of the wider residual stream.
SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {"config": CONFIG, "channels": OUTLIER_CHANNELS, "mlp_channel": MLP_CHANNEL, "name": "outlier"},
    "2b": {"config": tiny_configs._top(
        tiny_configs._text(hidden=2048, inter=6144, layers=4, heads=16, kv_heads=8, head_dim=128,
                           mrope_section=[24, 20, 20]),
        tiny_configs._vision(depth=2, hidden=64, heads=1, inter=128, out_hidden=2048, deepstack=[1])),
        "channels": [c * 8 for c in OUTLIER_CHANNELS], "mlp_channel": MLP_CHANNEL * 12, "name": "outlier_2b"},
}


def plant_outliers(model, shape: str = "tiny") -> dict[str, Any]:
    """Scales the planted channels in place (see the module docstring); returns what it did."""
    import torch

    lm = model.model.language_model
    with torch.no_grad():
        ch = torch.tensor(SHAPES[shape]["channels"])
        mlp_channel = SHAPES[shape]["mlp_channel"]
        gains = torch.tensor(NORM_GAINS)
        lm.embed_tokens.weight[:, ch] *= EMBED_GAIN
        for layer in lm.layers:
            layer.input_layernorm.weight[ch] *= gains
            layer.post_attention_layernorm.weight[ch] *= gains
            layer.mlp.gate_proj.weight[mlp_channel] *= MLP_GAIN
            layer.mlp.up_proj.weight[mlp_channel] *= MLP_GAIN
    return {"channels": SHAPES[shape]["channels"], "norm_gains": NORM_GAINS, "embed_gain": EMBED_GAIN,
            "mlp_channel": mlp_channel, "mlp_gain": MLP_GAIN}


def recipe_hash(tok_dir: Path, shape: str = "tiny") -> str:
    sh = SHAPES[shape]
    return sha256_json({
        "config": sh["config"],
        "script_version": SCRIPT_VERSION,
        "plant": [sh["channels"], NORM_GAINS, EMBED_GAIN, sh["mlp_channel"], MLP_GAIN, SEED],
        "sources": source_digest("make_outlier_checkpoint.py", "make_checkpoint.py", "make_text_reference.py",
                                 "common.py", "chat_template.py"),
        "tokenizer_json_sha256": sha256_file(tok_dir / "tokenizer.json"),
        "versions": package_versions(),
    })


def ensure_outlier_reference(out_dir: str | os.PathLike[str] | None = None, log=print, shape: str = "tiny") -> Path:
    """Builds (or reuses) OUT/checkpoint and OUT/text_<case>.{safetensors,json}; returns OUT."""
    out = Path(out_dir) if out_dir is not None else cache_root() / "reference" / SHAPES[shape]["name"]
    tok_dir = tokenizer_dir()
    want = recipe_hash(tok_dir, shape)
    out.parent.mkdir(parents=True, exist_ok=True)
    with locked(out.parent / f".{SHAPES[shape]['name']}.lock"):
        stamp = read_stamp(out)
        if stamp is not None and stamp.get("hash") == want:
            return out
        t0 = time.perf_counter()
        import torch
        from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

        torch.set_num_threads(1)
        torch.manual_seed(SEED)
        model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(**SHAPES[shape]["config"]))
        make_checkpoint.randomize_(model)
        planted = plant_outliers(model, shape)
        model = model.to(torch.bfloat16)
        make_checkpoint.check_tied(model)
        want_keys = make_checkpoint.expected_keys(model)

        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        tmp.mkdir(parents=True, exist_ok=False)
        try:
            ckpt = tmp / "checkpoint"
            model.save_pretrained(str(ckpt), safe_serialization=True)
            make_checkpoint.verify_saved(ckpt, want_keys)
            write_tokenizer_and_processor_files(ckpt, tok_dir)
            del model
            results = make_text_reference.make_text_reference(ckpt, tmp, CASES, log=log)
            write_json(tmp / STAMP_FILE, {"hash": want, "planted": planted,
                                          "cases": {c: {"num_prompt_tokens": r["num_prompt_tokens"]}
                                                    for c, r in results.items()}})
            replace_dir(tmp, out)
        except BaseException:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log(f"[outlier] checkpoint and references built in {time.perf_counter() - t0:.1f} s -> {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    args = ap.parse_args(argv)
    out = ensure_outlier_reference(args.out_dir, shape=args.shape)
    print(json.dumps({"out": str(out), **(read_stamp(out) or {})}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
