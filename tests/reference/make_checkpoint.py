"""Tiny random Qwen3-VL checkpoints written by transformers itself (spec QWEN3VL.md §9.3).

    make_checkpoint("tiny_a", out_dir)

torch.manual_seed(0); Qwen3VLForConditionalGeneration(config); every parameter re-randomized
(matrices, embeddings, pos_embed and biases ~ N(0, 0.02); every *norm*.weight, incl.
q_norm/k_norm, ~ 1 + N(0, 0.1)); lm_head checked tied to embed_tokens; cast to bfloat16;
save_pretrained(safe_serialization=True) -> one model.safetensors without lm_head.weight.
Plus tokenizer, chat template, generation and processor configs (common.py).

A name ending in "_tf5" (tiny_configs.TF5_NAMES) takes the same config dict and recipe but must
run under transformers 5.x: its save_pretrained writes 5.x's config.json spelling
(vision_config.model_type "qwen3_vl_vision", rope_parameters, top-level dtype), and the processor
file is the 5.x layout (common.PREPROCESSOR_CONFIG_TF5).

Idempotent: skipped when out_dir/qhx_stamp.json holds the hash of (config, SCRIPT_VERSION,
the harness sources, chat template, tokenizer sha256, package versions). Built in a temporary sibling directory
and renamed into place, so an interrupted build never leaves a half checkpoint behind.

CLI:  make_checkpoint.py NAME OUT_DIR [--force]
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

import tiny_configs  # noqa: E402
from chat_template import QWEN3VL_CHAT_TEMPLATE  # noqa: E402
from common import (STAMP_FILE, installed_transformers_major, is_norm_weight,  # noqa: E402
                    package_versions, read_stamp, replace_dir, sha256_file, sha256_json,
                    source_digest, tokenizer_dir, write_json, write_tokenizer_and_processor_files)

SCRIPT_VERSION = 1
WEIGHT_STD = 0.02
NORM_STD = 0.1
SEED = 0


def checkpoint_hash(config: dict[str, Any], tok_dir: Path) -> str:
    return sha256_json({
        "config": config,
        "script_version": SCRIPT_VERSION,
        "sources": source_digest("make_checkpoint.py", "common.py", "chat_template.py"),
        "recipe": [SEED, WEIGHT_STD, NORM_STD],
        "chat_template": QWEN3VL_CHAT_TEMPLATE,
        "tokenizer_json_sha256": sha256_file(tok_dir / "tokenizer.json"),
        "versions": package_versions(),
    })


def randomize_(model, generator=None, chunk_elems: int = 1 << 24) -> None:
    """Re-randomizes every parameter in place, in named_parameters() order (a tied lm_head is
    visited once, as embed_tokens). Values are drawn in float32 chunks of at most
    `chunk_elems` elements and copied into the parameter (whatever its dtype), which bounds the
    extra memory for the 2B model's 311M-element embedding."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            flat = p.view(-1)
            norm = is_norm_weight(name)
            for start in range(0, flat.numel(), chunk_elems):
                n = min(chunk_elems, flat.numel() - start)
                buf = torch.empty(n, dtype=torch.float32)
                if norm:
                    buf.normal_(0.0, NORM_STD, generator=generator).add_(1.0)
                else:
                    buf.normal_(0.0, WEIGHT_STD, generator=generator)
                flat[start:start + n].copy_(buf)


def check_tied(model) -> None:
    lm = model.lm_head.weight
    emb = model.model.language_model.embed_tokens.weight
    if lm is not emb:
        raise AssertionError("lm_head.weight is not tied to model.language_model.embed_tokens.weight")


def expected_keys(model) -> list[str]:
    """The parameter names save_pretrained must write: every parameter except lm_head.weight."""
    return sorted(n for n, _ in model.named_parameters(remove_duplicate=False) if n != "lm_head.weight")


def verify_saved(out_dir: Path, want_keys: list[str]) -> dict[str, Any]:
    """Asserts the written model.safetensors: single file, exact key list (no lm_head.weight),
    all BF16. Returns a small summary."""
    from safetensors import safe_open

    st = out_dir / "model.safetensors"
    if not st.is_file():
        raise AssertionError(f"{st} missing (files: {sorted(os.listdir(out_dir))})")
    if (out_dir / "model.safetensors.index.json").exists():
        raise AssertionError("save_pretrained sharded the checkpoint")
    with safe_open(str(st), framework="pt") as f:
        keys = sorted(f.keys())
        dtypes = {f.get_slice(k).get_dtype() for k in keys}
        n_params = 0
        for k in keys:
            shape = f.get_slice(k).get_shape()
            c = 1
            for d in shape:
                c *= d
            n_params += c
    if "lm_head.weight" in keys:
        raise AssertionError("model.safetensors contains lm_head.weight (tying lost)")
    if keys != want_keys:
        missing = sorted(set(want_keys) - set(keys))
        extra = sorted(set(keys) - set(want_keys))
        raise AssertionError(f"key list mismatch: missing {missing[:5]}, extra {extra[:5]}")
    if dtypes != {"BF16"}:
        raise AssertionError(f"expected only BF16 tensors, got {sorted(dtypes)}")
    return {"tensors": len(keys), "parameters": n_params, "bytes": st.stat().st_size}


def make_checkpoint(name: str, out_dir: str | os.PathLike[str], config: dict[str, Any] | None = None,
                    tok_dir: str | os.PathLike[str] | None = None, force: bool = False,
                    log=print) -> dict[str, Any]:
    """Builds (or reuses) the checkpoint `name` in out_dir. Returns the stamp dict plus
    {"built": bool, "seconds": float}."""
    out = Path(out_dir)
    major = tiny_configs.transformers_major(name)
    if installed_transformers_major() != major:
        raise RuntimeError(f"{name} is built by transformers {major}.x, this interpreter has "
                           f"{package_versions()['transformers']} (use build_all.py, which picks the venv)")
    cfg = config if config is not None else tiny_configs.get(name)
    tdir = Path(tok_dir) if tok_dir is not None else tokenizer_dir()
    want = checkpoint_hash(cfg, tdir)
    stamp = read_stamp(out)
    if not force and stamp is not None and stamp.get("hash") == want \
            and (out / "model.safetensors").is_file():
        return {**stamp, "built": False, "seconds": 0.0}

    t0 = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    torch.set_num_threads(1)  # tiny models: threads only add contention on loaded CI machines
    torch.manual_seed(SEED)
    model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(**cfg))
    check_tied(model)
    randomize_(model)
    check_tied(model)
    model = model.to(torch.bfloat16)
    check_tied(model)
    want_keys = expected_keys(model)

    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=False)
    try:
        if major == 5:
            model.save_pretrained(str(tmp))  # 5.x writes safetensors only (no safe_serialization)
        else:
            model.save_pretrained(str(tmp), safe_serialization=True)
        summary = verify_saved(tmp, want_keys)
        # save_pretrained also wrote a generation_config.json derived from the model config;
        # replace it (and add the tokenizer/processor files) with the hub set of spec §1.6/§1.7.
        write_tokenizer_and_processor_files(tmp, tdir, tf5=major == 5)
        new_stamp = {
            "hash": want,
            "name": name,
            "script_version": SCRIPT_VERSION,
            "versions": package_versions(),
            **summary,
        }
        write_json(tmp / STAMP_FILE, new_stamp)
        replace_dir(tmp, out)
    except BaseException:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    dt = time.perf_counter() - t0
    log(f"[{name}] checkpoint built in {dt:.1f} s: {summary['tensors']} tensors, "
        f"{summary['parameters']:,} parameters, {summary['bytes'] / 1e6:.1f} MB -> {out}")
    return {**new_stamp, "built": True, "seconds": dt}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", choices=tiny_configs.ALL_NAMES)
    ap.add_argument("out_dir")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    info = make_checkpoint(args.name, args.out_dir, force=args.force)
    print(json.dumps({k: v for k, v in info.items() if k != "hash"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
