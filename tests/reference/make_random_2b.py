#!/usr/bin/env python3
"""A random checkpoint with the exact Qwen3-VL-2B shapes, for benchmarks (not CI).

    make_random_2b.py --out DIR [--force] [--seed N]

The model is instantiated on the meta device (no init cost, no memory), cast to bfloat16,
materialized with to_empty(device="cpu"), and every parameter is filled with the recipe of
make_checkpoint.py (N(0, 0.02); *norm*.weight 1 + N(0, 0.1)) in float32 chunks of 16M
elements, so peak memory stays near the 4.26 GB of bf16 weights. lm_head stays tied to
embed_tokens; save_pretrained writes one ~4.26 GB model.safetensors without lm_head.weight.
Tokenizer, chat template, generation and processor files as for the tiny checkpoints.

Verified: 625 tensors and 2,127,532,032 parameters (spec §2), all BF16.
The in-memory model is never run: its non-persistent buffers (rotary inv_freq) are
uninitialized after to_empty and are not saved; from_pretrained recomputes them.

Idempotent: skipped when DIR/qhx_stamp.json matches (config, script version, seed, ...).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_checkpoint  # noqa: E402
import tiny_configs  # noqa: E402
from common import (STAMP_FILE, package_versions, read_stamp, replace_dir,  # noqa: E402
                    sha256_json, tokenizer_dir, write_json, write_tokenizer_and_processor_files)

SCRIPT_VERSION = 1
EXPECTED_TENSORS = 625
EXPECTED_PARAMS = 2_127_532_032
EXPECTED_VISION_PARAMS = 406_957_056
EXPECTED_TEXT_PARAMS = 1_720_574_976


def make_random_2b(out_dir: str | os.PathLike[str], seed: int = 0, force: bool = False,
                   log=print) -> dict:
    out = Path(out_dir)
    cfg = tiny_configs.get("qwen3vl_2b")
    tdir = tokenizer_dir()
    want = sha256_json({"base": make_checkpoint.checkpoint_hash(cfg, tdir),
                        "script_version": SCRIPT_VERSION, "seed": seed})
    stamp = read_stamp(out)
    if not force and stamp is not None and stamp.get("hash") == want \
            and (out / "model.safetensors").is_file():
        log(f"cached: {out} ({stamp['bytes'] / 1e9:.2f} GB)")
        return {**stamp, "built": False}

    t0 = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(**cfg))
    model = model.to(torch.bfloat16)
    tied_on_meta = model.lm_head.weight is model.model.language_model.embed_tokens.weight
    model = model.to_empty(device="cpu")
    # to_empty (torch 2.13) gives lm_head and embed_tokens separate new Parameters: re-tie.
    tied_after_to_empty = model.lm_head.weight is model.model.language_model.embed_tokens.weight
    model.tie_weights()
    make_checkpoint.check_tied(model)
    log(f"  tied on meta: {tied_on_meta}, after to_empty: {tied_after_to_empty}, "
        f"after tie_weights(): True")
    t_inst = time.perf_counter()

    counts = {"vision": 0, "text": 0, "other": 0}
    for name, p in model.named_parameters():
        key = "vision" if name.startswith("model.visual.") else \
            "text" if name.startswith("model.language_model.") else "other"
        counts[key] += p.numel()
    if counts != {"vision": EXPECTED_VISION_PARAMS, "text": EXPECTED_TEXT_PARAMS, "other": 0}:
        raise AssertionError(f"parameter counts {counts} differ from spec §2")

    gen = torch.Generator().manual_seed(seed)
    make_checkpoint.randomize_(model, generator=gen, chunk_elems=1 << 24)
    make_checkpoint.check_tied(model)
    t_fill = time.perf_counter()
    want_keys = make_checkpoint.expected_keys(model)

    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=False)
    try:
        model.save_pretrained(str(tmp), safe_serialization=True, max_shard_size="20GB")
        del model
        summary = make_checkpoint.verify_saved(tmp, want_keys)
        if summary["tensors"] != EXPECTED_TENSORS or summary["parameters"] != EXPECTED_PARAMS:
            raise AssertionError(f"saved {summary['tensors']} tensors / {summary['parameters']:,} "
                                 f"parameters, expected {EXPECTED_TENSORS} / {EXPECTED_PARAMS:,}")
        write_tokenizer_and_processor_files(tmp, tdir)
        new_stamp = {"hash": want, "name": "qwen3vl_2b_random", "seed": seed,
                     "script_version": SCRIPT_VERSION, "versions": package_versions(), **summary}
        write_json(tmp / STAMP_FILE, new_stamp)
        replace_dir(tmp, out)
    except BaseException:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    t_end = time.perf_counter()
    log(f"random 2B checkpoint: {summary['tensors']} tensors, {summary['parameters']:,} parameters, "
        f"{summary['bytes']:,} bytes -> {out}")
    log(f"  instantiate {t_inst - t0:.1f} s, fill {t_fill - t_inst:.1f} s, "
        f"save+verify {t_end - t_fill:.1f} s, total {t_end - t0:.1f} s")
    return {**new_stamp, "built": True, "seconds": t_end - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="random Qwen3-VL-2B-shaped checkpoint (benchmarks)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    make_random_2b(args.out, seed=args.seed, force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
