#!/usr/bin/env python3
"""Builds (or reuses) the tiny HF reference checkpoints and their text and image references.

    build_all.py [--cache DIR] [--configs tiny_a,tiny_b] [--force] [--no-images]

Configs come in two lines: tiny_a, tiny_b are built by transformers 4.57 (.venv), tiny_a_tf5,
tiny_b_tf5 by transformers 5.x (.venv-tf5): the same config dicts, checkpoint written by 5.x's
save_pretrained, references computed by 5.x. --configs defaults to the line of the running
interpreter; a config of the other line is handed to that line's interpreter ($QHX_PY or
$QHX_PY_TF5, see common.python_for_major), so one command can build both.

Layout (DIR defaults to $QHX_CACHE, itself defaulting to ~/.cache/qhexrt):

    DIR/reference/<name>/checkpoint/      config.json, model.safetensors (bf16, no lm_head.weight),
                                          generation_config.json, tokenizer.json,
                                          tokenizer_config.json, chat_template.json,
                                          preprocessor_config.json,
                                          video_preprocessor_config.json, qhx_stamp.json
    DIR/reference/<name>/text_<case>.safetensors / text_<case>.json
    DIR/reference/<name>/image_<case>.safetensors / image_<case>.json
    DIR/reference/<name>/session_<case>.safetensors / session_<case>.json /
                          session_<case>.turn<k>.messages.json / session_<case>.replay.messages.json
    DIR/reference/<name>/manifest.json    written last; its "hash" marks the text set complete,
                                          its "image_hash" the image set, its "session_hash"
                                          the session (multi-turn) set
    DIR/reference/images/                 img512.png, img256x320.png, img300x200.png,
                                          qhx_stamp.json (test_images.py; shared by all configs)

Every step is skipped when its stamp hash matches (config, script versions, chat
template, tokenizer sha256, package versions; for images also the test images' hash); a
cached run imports neither torch nor transformers. Builders take a per-config file lock (and
the images their own lock), so concurrent runs do not race. The text and image references
have separate hashes: editing the image scripts never rebuilds the text references. The
session references (make_session_reference.py) have their own hash too; they need the test
images, so --no-images skips them as well.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_checkpoint  # noqa: E402
import make_image_reference  # noqa: E402
import make_session_reference  # noqa: E402
import make_text_reference  # noqa: E402
import test_images  # noqa: E402
import tiny_configs  # noqa: E402
from common import (cache_root, installed_transformers_major, locked,  # noqa: E402
                    python_for_major, read_stamp, sha256_json, tokenizer_dir, write_json)

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
                     log=print, images: bool = True) -> dict[str, Any]:
    """Builds what is missing or stale for config `name`; returns its manifest (plus
    "built_checkpoint"/"built_text"/"built_images"/"built_image_refs"/"built_session_refs"
    flags and "seconds"). With images=False the image and session references are neither
    built nor checked (a manifest that already lists them keeps them). A config of the other
    transformers line is built by that line's interpreter (a subprocess running this script);
    its flags are then None."""
    if tiny_configs.transformers_major(name) != installed_transformers_major():
        return _ensure_in_other_venv(name, cache, force, log, images)
    t0 = time.perf_counter()
    root = reference_dir(name, cache)
    ckpt_dir = root / "checkpoint"
    tok_dir = tokenizer_dir(cache)
    imgs = test_images.ensure_images(cache, force=force, log=log) if images else None
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
            # image keys survive a text-only rebuild; _ensure_image_refs re-validates them
            old_images = {k: man[k] for k in (*IMAGE_MANIFEST_KEYS, *SESSION_MANIFEST_KEYS)
                          if man and k in man}
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
                **old_images,
            }
            write_json(man_path, man)
            built_text = True
        built_image_refs = built_session_refs = False
        if imgs is not None:
            man, built_image_refs = _ensure_image_refs(name, root, ck, imgs, man, man_path,
                                                       force, log)
            # The multi-turn references are made by the 4.57 line only (the session
            # suite runs on tiny_a and tiny_b; the single-turn suites cover both lines).
            if tiny_configs.transformers_major(name) < 5:
                man, built_session_refs = _ensure_session_refs(name, root, ck, imgs, man, man_path,
                                                               force, log)
    return {**man, "built_checkpoint": ck["built"], "built_text": built_text,
            "built_images": bool(imgs and imgs["built"]), "built_image_refs": built_image_refs,
            "built_session_refs": built_session_refs, "seconds": time.perf_counter() - t0}


def _ensure_in_other_venv(name: str, cache, force: bool, log, images: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    major = tiny_configs.transformers_major(name)
    py = python_for_major(major)
    if not py.is_file():
        raise RuntimeError(f"{name} is built by transformers {major}.x, whose interpreter {py} is missing "
                           f"(run scripts/setup.sh, or set QHX_PY{'_TF5' if major == 5 else ''})")
    cmd = [str(py), str(Path(__file__).resolve()), "--configs", name]
    if cache is not None:
        cmd += ["--cache", str(cache)]
    if force:
        cmd.append("--force")
    if not images:
        cmd.append("--no-images")
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building {name} with {py} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout}{proc.stderr}")
    for line in proc.stdout.splitlines():
        log(line)
    man = _read_manifest(reference_dir(name, cache) / MANIFEST)
    if man is None:
        raise RuntimeError(f"{py} built {name} but wrote no readable {reference_dir(name, cache) / MANIFEST}")
    return {**man, "built_checkpoint": None, "built_text": None, "built_images": None,
            "built_image_refs": None, "seconds": time.perf_counter() - t0, "delegated": str(py)}


def _image_hash(ck: dict[str, Any], imgs: dict[str, Any]) -> str:
    return sha256_json({"checkpoint": ck["hash"], "images": imgs["hash"],
                        "pixels": {k: v["pixels_sha256"] for k, v in imgs["files"].items()},
                        "image": make_image_reference.reference_hash_inputs()})


def _ensure_image_refs(name: str, root: Path, ck: dict[str, Any], imgs: dict[str, Any],
                       man: dict[str, Any], man_path: Path, force: bool,
                       log) -> tuple[dict[str, Any], bool]:
    """Image references for config `name` (caller holds the config lock; the text part of the
    manifest is complete). The image keys are dropped from the manifest before a rebuild and
    written back last, so an interrupted build is redone and never leaves the text stale."""
    want = _image_hash(ck, imgs)
    cases = list(make_image_reference.CASES)
    files_ok = all((root / f"image_{c}.{ext}").is_file() for c in cases for ext in ("safetensors", "json"))
    if not force and man.get("image_hash") == want and files_ok:
        return man, False
    man = {k: v for k, v in man.items() if k not in IMAGE_MANIFEST_KEYS}
    write_json(man_path, man)
    with test_images.reading(Path(imgs["dir"]).parent.parent):
        now = read_stamp(Path(imgs["dir"]))
        if now is None or now.get("hash") != imgs["hash"]:
            raise RuntimeError(f"{imgs['dir']} changed while building {name}; run again")
        results = make_image_reference.make_image_reference(root / "checkpoint", root, imgs["dir"],
                                                            cases, log=log)
    man = {
        **man,
        "image_hash": want,
        "image_script_version": make_image_reference.SCRIPT_VERSION,
        "images": {"dir": "../images", "hash": imgs["hash"],
                   "files": {k: {"height": v["height"], "width": v["width"],
                                 "pixels_sha256": v["pixels_sha256"]}
                             for k, v in imgs["files"].items()}},
        "image_cases": {
            c: {
                "safetensors": f"image_{c}.safetensors",
                "json": f"image_{c}.json",
                "images": r["images"],
                "image_grid_thw": r["image_grid_thw"],
                "num_patches": r["num_patches"],
                "num_prompt_tokens": r["num_prompt_tokens"],
                "rope_delta": r["rope_delta"],
                "num_generated": r["num_generated"],
                "min_top2_margin": r["min_top2_margin"],
                "step0_vs_prompt_last_max_abs": r["step0_vs_prompt_last_max_abs"],
                "step_vs_teacher_forced_max_abs": r["step_vs_teacher_forced_max_abs"],
            }
            for c, r in results.items()
        },
    }
    write_json(man_path, man)
    return man, True


IMAGE_MANIFEST_KEYS = ("image_hash", "image_script_version", "images", "image_cases")
SESSION_MANIFEST_KEYS = ("session_hash", "session_script_version", "session_cases")


def _session_hash(ck: dict[str, Any], imgs: dict[str, Any]) -> str:
    return sha256_json({"checkpoint": ck["hash"], "images": imgs["hash"],
                        "pixels": {k: v["pixels_sha256"] for k, v in imgs["files"].items()},
                        "session": make_session_reference.reference_hash_inputs()})


def _session_files(case: str) -> list[str]:
    n = len(make_session_reference.CASES[case])
    return [f"session_{case}.safetensors", f"session_{case}.json",
            f"session_{case}.replay.messages.json",
            *[f"session_{case}.turn{k}.messages.json" for k in range(n)]]


def _ensure_session_refs(name: str, root: Path, ck: dict[str, Any], imgs: dict[str, Any],
                         man: dict[str, Any], man_path: Path, force: bool,
                         log) -> tuple[dict[str, Any], bool]:
    """Multi-turn references for config `name` (caller holds the config lock), by the same
    rule as the image references: the session keys leave the manifest before a rebuild and
    come back last, so an interrupted build is redone."""
    want = _session_hash(ck, imgs)
    cases = list(make_session_reference.CASES)
    files_ok = all((root / f).is_file() for c in cases for f in _session_files(c))
    if not force and man.get("session_hash") == want and files_ok:
        return man, False
    man = {k: v for k, v in man.items() if k not in SESSION_MANIFEST_KEYS}
    write_json(man_path, man)
    with test_images.reading(Path(imgs["dir"]).parent.parent):
        now = read_stamp(Path(imgs["dir"]))
        if now is None or now.get("hash") != imgs["hash"]:
            raise RuntimeError(f"{imgs['dir']} changed while building {name}; run again")
        results = make_session_reference.make_session_reference(root / "checkpoint", root,
                                                                imgs["dir"], cases, log=log)
    man = {
        **man,
        "session_hash": want,
        "session_script_version": make_session_reference.SCRIPT_VERSION,
        "session_cases": {
            c: {
                "files": _session_files(c),
                "num_turns": r["num_turns"],
                "num_prompt_tokens": [t["num_prompt_tokens"] for t in r["turns"]],
                "num_generated": [t["num_generated"] for t in r["turns"]],
                "min_top2_margin": min(t["min_top2_margin"] for t in r["turns"]),
                "step_vs_teacher_forced_max_abs": max(t["step_vs_teacher_forced_max_abs"]
                                                      for t in r["turns"]),
            }
            for c, r in results.items()
        },
    }
    write_json(man_path, man)
    return man, True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=None, help="cache root (default $QHX_CACHE or ~/.cache/qhexrt)")
    line = tiny_configs.TF5_NAMES if installed_transformers_major() >= 5 else tiny_configs.TINY_NAMES
    ap.add_argument("--configs", default=",".join(line),
                    help=f"comma-separated, from {', '.join(tiny_configs.ALL_NAMES)} "
                         f"(default: this interpreter's line, {','.join(line)})")
    ap.add_argument("--force", action="store_true", help="rebuild even when the stamps match")
    ap.add_argument("--no-images", action="store_true",
                    help="skip the test images and image references")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = [n for n in args.configs.split(",") if n]
    for n in names:
        if n not in tiny_configs.ALL_NAMES:
            ap.error(f"unknown config {n!r}; known: {', '.join(tiny_configs.ALL_NAMES)}")
    t0 = time.perf_counter()
    for n in names:
        man = ensure_reference(n, args.cache, force=args.force, images=not args.no_images)
        if man.get("delegated"):  # the other interpreter printed its own summary
            print(f"[{n}] by {man['delegated']} ({man['seconds']:.1f} s)")
            continue
        what = []
        what.append("built checkpoint" if man["built_checkpoint"] else "checkpoint cached")
        what.append("built text references" if man["built_text"] else "text references cached")
        if not args.no_images:
            what.append("built image references" if man["built_image_refs"]
                        else "image references cached")
            what.append("built session references" if man["built_session_refs"]
                        else "session references cached")
        print(f"[{n}] {', '.join(what)} ({man['seconds']:.1f} s) -> {reference_dir(n, args.cache)}")
        for c, info in man["cases"].items():
            print(f"    {c:<13} L={info['num_prompt_tokens']:<4} N={info['num_generated']:<3}"
                  f" min top2 margin {info['min_top2_margin']:.4g}")
        for c, info in ({} if args.no_images else man.get("image_cases", {})).items():
            print(f"    image_{c:<17} patches={info['num_patches']:<5} L={info['num_prompt_tokens']:<4}"
                  f" N={info['num_generated']:<3} min top2 margin {info['min_top2_margin']:.4g}")
        for c, info in ({} if args.no_images else man.get("session_cases", {})).items():
            print(f"    session_{c:<15} L={info['num_prompt_tokens']} N={info['num_generated']}"
                  f" min top2 margin {info['min_top2_margin']:.4g}")
    print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
