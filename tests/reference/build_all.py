#!/usr/bin/env python3
"""Builds (or reuses) the tiny HF reference checkpoints and their text references.

    build_all.py [--cache DIR] [--configs tiny_a,tiny_b] [--force]

Layout (DIR defaults to $QHX_CACHE, itself defaulting to ~/.cache/qhexrt):

    DIR/reference/<name>/checkpoint/      config.json, model.safetensors (bf16, no lm_head.weight),
                                          generation_config.json, tokenizer.json,
                                          tokenizer_config.json, chat_template.json,
                                          preprocessor_config.json,
                                          video_preprocessor_config.json, qhx_stamp.json
    DIR/reference/<name>/text_<case>.safetensors / text_<case>.json
    DIR/reference/<name>/manifest.json    written last; its "hash" marks the set complete

Both steps are skipped when their stamp hash matches (config, script versions, chat
template, tokenizer sha256, package versions); a cached run imports neither torch nor
transformers. Builders take a per-config file lock, so concurrent runs do not race.
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
from common import cache_root, locked, sha256_json, tokenizer_dir, write_json  # noqa: E402

MANIFEST = "manifest.json"


def reference_dir(name: str, cache: str | os.PathLike[str] | None = None) -> Path:
    return cache_root(cache) / "reference" / name


def _read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ensure_reference(name: str, cache: str | os.PathLike[str] | None = None, force: bool = False,
                     log=print) -> dict[str, Any]:
    """Builds what is missing or stale for config `name`; returns its manifest (plus
    "built_checkpoint"/"built_text" flags and "seconds")."""
    t0 = time.perf_counter()
    root = reference_dir(name, cache)
    ckpt_dir = root / "checkpoint"
    tok_dir = tokenizer_dir(cache)
    with locked(root.parent / f".{name}.lock"):
        ck = make_checkpoint.make_checkpoint(name, ckpt_dir, tok_dir=tok_dir, force=force, log=log)
        want = sha256_json({"checkpoint": ck["hash"], "text": make_text_reference.reference_hash_inputs()})
        man_path = root / MANIFEST
        man = _read_manifest(man_path)
        cases = list(make_text_reference.CASES)
        files_ok = man is not None and all(
            (root / f"text_{c}.{ext}").is_file() for c in cases for ext in ("safetensors", "json"))
        built_text = False
        if force or ck["built"] or man is None or man.get("hash") != want or not files_ok:
            man_path.unlink(missing_ok=True)
            results = make_text_reference.make_text_reference(ckpt_dir, root, cases, log=log)
            man = {
                "hash": want,
                "name": name,
                "config": tiny_configs.get(name),
                "checkpoint": "checkpoint",
                "checkpoint_hash": ck["hash"],
                "text_script_version": make_text_reference.SCRIPT_VERSION,
                "versions": ck.get("versions"),
                "cases": {
                    c: {
                        "safetensors": f"text_{c}.safetensors",
                        "json": f"text_{c}.json",
                        "num_prompt_tokens": r["num_prompt_tokens"],
                        "num_generated": r["num_generated"],
                        "min_top2_margin": r["min_top2_margin"],
                        "step0_vs_prompt_last_max_abs": r["step0_vs_prompt_last_max_abs"],
                        "step_vs_teacher_forced_max_abs": r["step_vs_teacher_forced_max_abs"],
                    }
                    for c, r in results.items()
                },
            }
            write_json(man_path, man)
            built_text = True
    return {**man, "built_checkpoint": ck["built"], "built_text": built_text,
            "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=None, help="cache root (default $QHX_CACHE or ~/.cache/qhexrt)")
    ap.add_argument("--configs", default=",".join(tiny_configs.TINY_NAMES))
    ap.add_argument("--force", action="store_true", help="rebuild even when the stamps match")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = [n for n in args.configs.split(",") if n]
    for n in names:
        if n not in tiny_configs.TINY_NAMES:
            ap.error(f"unknown config {n!r}; known: {', '.join(tiny_configs.TINY_NAMES)}")
    t0 = time.perf_counter()
    for n in names:
        man = ensure_reference(n, args.cache, force=args.force)
        what = []
        what.append("built checkpoint" if man["built_checkpoint"] else "checkpoint cached")
        what.append("built text references" if man["built_text"] else "text references cached")
        print(f"[{n}] {', '.join(what)} ({man['seconds']:.1f} s) -> {reference_dir(n, args.cache)}")
        for c, info in man["cases"].items():
            print(f"    {c:<13} L={info['num_prompt_tokens']:<4} N={info['num_generated']:<3}"
                  f" min top2 margin {info['min_top2_margin']:.4g}")
    print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
