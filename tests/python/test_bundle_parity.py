"""Exported bundles against Hugging Face transformers fp32 (issue: bundle and export).

Each tiny checkpoint is exported with qhx_export to f32, w8 and w4 bundles (the transformers 5.x
configs, tiny_a_tf5 and tiny_b_tf5, to f32 only), and the bundles'
manifests run the reference cases of tests/reference:
  - f32: the bounds of the fp32 path (prompt logits cosine >= 0.99999 per row, max abs <= 1e-4,
    greedy continuation identical);
  - w8: prompt logits cosine >= 0.999 per row, top-1 agreement >= 97% over the 32 teacher-forced
    steps (the fp32 model's own greedy tokens are fed back), vision features cosine >= 0.999;
  - w4: the same figures are measured and printed (no bound is promised; a sanity floor catches
    a broken format);
  - w8+kv8: a w8 bundle with the 8-bit KV cache (`--kv-cache i8`), held to the w8 bounds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

from conftest import REPO_ROOT, bundle_manifest, model_name, rowwise_cosine, tool_path

sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
import build_all  # noqa: E402

CONFIGS = ["tiny_a", "tiny_b"]
# Checkpoints written (and references computed) by transformers 5.x: their f32 export, held to the
# fp32 bounds, proves qhx_export reads them; the quantized formats are the same code over the same
# tensors (tiny_a_tf5's weights equal tiny_a's), so only the 4.57 configs run them.
TF5_CONFIGS = ["tiny_a_tf5", "tiny_b_tf5"]
FORMATS = {**{c: ("f32", "w8", "w4", "w8+kv8") for c in CONFIGS}, **{c: ("f32",) for c in TF5_CONFIGS}}
EXPORT_ARGS = {"w8+kv8": ["--weights", "w8", "--kv-cache", "i8"]}  # others: --weights FORMAT
CONFIG_FORMATS = [(c, w) for c, ws in FORMATS.items() for w in ws]
TEXT_CASES = ["chat_capital", "long_chat"]
IMAGE_CASES = ["img256x320", "two_images"]
BOUNDS = {  # format: (prompt cosine, top-1 agreement, vision cosine)
    "f32": (0.99999, 1.0, 0.99999),
    "w8": (0.999, 0.97, 0.999),
    "w8+kv8": (0.999, 0.97, 0.999),
}
W4_FLOOR = 0.9  # not a quality bound: only catches a broken format


@pytest.fixture(scope="session")
def bundles(tmp_path_factory) -> dict[tuple[str, str], Path]:
    out = {}
    for config, formats in FORMATS.items():
        assert build_all.ensure_reference(config, log=lambda *a: None)
        ckpt = build_all.reference_dir(config) / "checkpoint"
        for weights in formats:
            dest = tmp_path_factory.mktemp(f"{config}_{weights.replace('+', '_')}")
            proc = subprocess.run([str(tool_path("qhx_export")), "--hf", str(ckpt), "--out", str(dest),
                                   *EXPORT_ARGS.get(weights, ["--weights", weights]), "--quiet"],
                                  capture_output=True, timeout=600)
            assert proc.returncode == 0, proc.stderr.decode(errors="replace")
            out[(config, weights)] = dest
    return out


def run(args: list[str], tmp: Path) -> tuple[dict, Path]:
    dumps = tmp / "dumps"
    proc = subprocess.run([str(tool_path("qhx_generate")), *args, "--temp", "0", "--json", "--dump-dir", str(dumps),
                           "--dump-logits", str(tmp / "step.npy"), "--dump-prompt-logits", str(tmp / "prompt.npy")],
                          capture_output=True, timeout=900)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1]), dumps


def figures(kind: str, case: str, meta: dict, ref: dict, bundle: Path, tmp: Path) -> dict:
    """Runs one case teacher-forced along the fp32 greedy tokens; returns the measured figures."""
    forced = ",".join(str(t) for t in ref["greedy_tokens"].tolist())
    n = str(len(ref["greedy_tokens"]))
    if kind == "text":
        args = ["-m", str(bundle_manifest(bundle, "text")), "-p", meta["prompt"], "-n", n]
        if meta["mode"] == "raw":
            args.append("--raw")
        if meta.get("system"):
            args += ["--system", meta["system"]]
    else:
        images_dir = build_all.reference_dir("tiny_a").parent / "images"
        prompt, images = "", []
        for item in meta["content"]:
            if item["type"] == "image":
                prompt += "<image>"
                images += ["-i", str(images_dir / item["image"])]
            else:
                prompt += item["text"]
        args = ["-m", str(bundle_manifest(bundle, "vlm")), "-p", prompt, *images, "--resize", "native", "-n", n]
    result, dumps = run([*args, "--force-tokens", forced], tmp)
    assert result["prompt_tokens"] == ref["input_ids"].tolist()
    prompt_logits, step_logits = np.load(tmp / "prompt.npy"), np.load(tmp / "step.npy")
    f = {
        "prompt_cosine": float(rowwise_cosine(prompt_logits, ref["prompt_logits"]).min()),
        "prompt_max_abs": float(np.abs(prompt_logits - ref["prompt_logits"]).max()),
        "top1_agreement": float((step_logits.argmax(1) == ref["greedy_tokens"]).mean()),
    }
    if kind == "image":
        f["vision_cosine"] = min(float(rowwise_cosine(np.load(dumps / f"{name}.npy"), ref[name]).min())
                                 for name in ref if name == "vision.merger" or name.startswith("vision.deepstack"))
    return f


def load_case(config: str, kind: str, case: str) -> tuple[dict, dict]:
    root = build_all.reference_dir(config)
    stem = f"{kind}_{case}"
    return json.loads((root / f"{stem}.json").read_text()), load_file(str(root / f"{stem}.safetensors"))


@pytest.mark.parametrize("config,weights", CONFIG_FORMATS)
@pytest.mark.parametrize("kind,case", [("text", c) for c in TEXT_CASES] + [("image", c) for c in IMAGE_CASES])
def test_bundle_against_transformers(bundles, config, weights, kind, case, tmp_path):
    meta, ref = load_case(config, kind, case)
    f = figures(kind, case, meta, ref, bundles[(config, weights)], tmp_path)
    print(f"{config} {weights} {kind}/{case}: " + ", ".join(f"{k} {v:.6g}" for k, v in f.items()))
    if weights == "w4":
        assert f["prompt_cosine"] >= W4_FLOOR and f.get("vision_cosine", 1.0) >= W4_FLOOR
        return
    cos_bound, agree_bound, vision_bound = BOUNDS[weights]
    assert f["prompt_cosine"] >= cos_bound
    assert f["top1_agreement"] >= agree_bound
    assert f.get("vision_cosine", 1.0) >= vision_bound
    if weights == "f32":
        assert f["prompt_max_abs"] <= 1e-4


@pytest.mark.parametrize("kind,case", [("text", "long_chat"), ("image", "img256x320")])
def test_row_layout_equals_the_panel_form(bundles, kind, case, tmp_path):
    """docs/bundle.md "Panel form": `--layout rows` (format 1, repacked at open) and the default
    panel form (format 2, mapped in place) are the same numbers: logits and vision features bit
    for bit; the default's w8 files say version 2, the rows bundle's say 1."""
    rows = tmp_path / "rows_bundle"
    ckpt = build_all.reference_dir("tiny_a") / "checkpoint"
    proc = subprocess.run([str(tool_path("qhx_export")), "--hf", str(ckpt), "--out", str(rows), "--weights", "w8",
                           "--layout", "rows", "--quiet"], capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    panels = bundles[("tiny_a", "w8")]
    for name in ("vis_native_512.bin", "llm_shared_512.bin", "lmhead_wqo.bin"):
        with safe_open(str(panels / name), "np") as f:
            assert f.metadata()["qhexrt_bundle"] == "2", name
            assert any(k.endswith(".panels") for k in f.keys()), name
        with safe_open(str(rows / name), "np") as f:
            assert f.metadata()["qhexrt_bundle"] == "1", name
            assert not any(k.endswith(".panels") for k in f.keys()), name
    meta, ref = load_case("tiny_a", kind, case)
    got = {}
    for label, bundle in (("panels", panels), ("rows", rows)):
        d = tmp_path / f"run_{label}"
        d.mkdir()
        figures(kind, case, meta, ref, bundle, d)
        got[label] = {"prompt": np.load(d / "prompt.npy"), "step": np.load(d / "step.npy"),
                      **{p.stem: np.load(p) for p in (d / "dumps").glob("vision.*.npy")}}
    assert got["panels"].keys() == got["rows"].keys()
    if kind == "image":
        assert "vision.merger" in got["panels"]
    for k in got["panels"]:
        assert np.array_equal(got["panels"][k], got["rows"][k]), k


@pytest.mark.parametrize("config", CONFIGS + TF5_CONFIGS)
def test_f32_bundle_generates_the_fp32_continuation(bundles, config, tmp_path):
    meta, ref = load_case(config, "text", "chat_capital")
    result, _ = run(["-m", str(bundle_manifest(bundles[(config, "f32")], "text")), "-p", meta["prompt"],
                     "-n", str(len(ref["greedy_tokens"]))], tmp_path)
    assert result["tokens"] == ref["greedy_tokens"].tolist()


def test_bundle_files_and_sizes(bundles):
    for (config, weights), bundle in bundles.items():
        names = sorted(p.name for p in bundle.iterdir())
        model = model_name(build_all.reference_dir(config) / "checkpoint")
        for want in ("vis_native_512.bin", "llm_shared_512.bin", "lmhead_wqo.bin", "vis_patch_embed_f32.bin",
                     "vis_patch_embed_bias_f32.bin", "vis_pos_embed_f32.bin", "tokenizer.json",
                     f"{model}-vlm-512.json", f"{model}-text-512.json"):
            assert want in names, (config, weights, want)
        assert ("embed_f32.bin" if weights == "f32" else "embed_f16.bin") in names
        plan = json.loads(bundle_manifest(bundle, "text").read_text())
        want_kv = {"w8+kv8": "i8", "w8": "f16", "w4": "f16"}.get(weights)
        assert plan["graphs"]["llm"].get("kv_cache") == want_kv, (config, weights)
    for config in CONFIGS:
        size = {w: sum(p.stat().st_size for p in bundles[(config, w)].glob("llm_shared_512.bin")) for w in ("f32", "w8", "w4")}
        assert size["w4"] < size["w8"] < size["f32"], size
