"""Int8 activations on a checkpoint with planted outlier channels (issue 17, part 4).

tests/reference/make_outlier_checkpoint.py plants what real Qwen checkpoints carry: a few hidden
channels with very large activations (norm gains x50-100, large embedding dimensions, one large MLP
channel). Its w8 bundles are run against the transformers fp32 prompt logits of two text cases,
with int8 activations (the default arithmetic: one scale per activation row) and with f32
activations, with and without the export's outlier smoothing (export/outlier_smoothing.hpp).

What is asserted:
  - the plant is real: without smoothing, int8 activations fall far under the export gate's 0.999
    (one scale per row crushes the ordinary channels) and `qhx_export --verify` refuses the bundle;
  - smoothing lifts the int8-activation logits' worst-row cosine on both cases;
  - smoothing is exact arithmetic: an f32 bundle smoothed on purpose meets the fp32 bounds;
  - a checkpoint without outliers (tiny_a) is exported byte for byte as without smoothing.
The figures are printed (pytest -s) and gathered in docs/bundle.md, "Outlier smoothing".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import REPO_ROOT, bundle_manifest, rowwise_cosine, tool_path
import export_util  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
import build_all  # noqa: E402
import make_outlier_checkpoint  # noqa: E402

CASES = make_outlier_checkpoint.CASES
GATE = 0.999  # the w8 export gate (src/export/verify_bundle.cpp)


@pytest.fixture(scope="module")
def reference() -> Path:
    return make_outlier_checkpoint.ensure_outlier_reference(log=lambda *a: None)


def export(ckpt: Path, out: Path, weights: str, smoothing: str, verify: bool = False) -> subprocess.CompletedProcess:
    args = [str(tool_path("qhx_export")), "--hf", str(ckpt), "--out", str(out), "--weights", weights,
            "--smoothing", smoothing, "--quiet"]
    return subprocess.run(args + (["--verify"] if verify else []), capture_output=True, text=True, timeout=600)


def with_activations(bundle: Path, activations: str) -> Path:
    """The bundle's text manifest with every graph's "activations" set (a copy beside it)."""
    return export_util.with_activations(bundle_manifest(bundle, "text"), activations,
                                        bundle / f"text-{activations}.json")


def prompt_logits(manifest: Path, ref_dir: Path, case: str, tmp: Path) -> np.ndarray:
    meta = json.loads((ref_dir / f"text_{case}.json").read_text())
    out = tmp / f"{manifest.stem}-{case}.npy"
    args = [str(tool_path("qhx_generate")), "-m", str(manifest), "-p", meta["prompt"], "-n", "1", "--temp", "0",
            "--json", "--dump-prompt-logits", str(out)]
    if meta.get("system"):
        args += ["--system", meta["system"]]
    proc = subprocess.run(args, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return np.load(out)


def worst_cosines(bundle: Path, ref_dir: Path, activations: str, tmp: Path) -> dict[str, float]:
    manifest = with_activations(bundle, activations)
    out = {}
    for case in CASES:
        ref = load_file(str(ref_dir / f"text_{case}.safetensors"))["prompt_logits"]
        ours = prompt_logits(manifest, ref_dir, case, tmp)
        out[case] = float(rowwise_cosine(ours.reshape(ref.shape), ref).min())
    return out


def test_smoothing_lifts_int8_activations(reference: Path, tmp_path: Path) -> None:
    ckpt = reference / "checkpoint"
    figures = {}
    for smoothing in ("off", "on"):
        bundle = tmp_path / f"w8-{smoothing}"
        proc = export(ckpt, bundle, "w8", smoothing)
        assert proc.returncode == 0, proc.stderr
        assert ("outlier smoothing:" in proc.stdout) == (smoothing == "on"), proc.stdout
        for act in ("int8", "f32"):
            figures[(smoothing, act)] = worst_cosines(bundle, reference, act, tmp_path)
    print("\nworst-row prompt-logits cosine against transformers fp32 (w8 bundle):")
    for (smoothing, act), cos in figures.items():
        print(f"  smoothing {smoothing:3} activations {act:4}: " + ", ".join(f"{c} {v:.6f}" for c, v in cos.items()))
    for case in CASES:
        assert figures[("off", "int8")][case] < 0.99, "the planted outliers do not crush per-row int8 scales"
        assert figures[("on", "int8")][case] > figures[("off", "int8")][case] + 0.05, case


def test_export_gate_refuses_unsmoothed_bundle(reference: Path, tmp_path: Path) -> None:
    proc = export(reference / "checkpoint", tmp_path / "w8", "w8", "off", verify=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "fails the export gate" in proc.stderr


def test_smoothing_is_exact_in_f32(reference: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "f32-on"
    proc = export(reference / "checkpoint", bundle, "f32", "on")
    assert proc.returncode == 0, proc.stderr
    assert "outlier smoothing:" in proc.stdout
    cos = worst_cosines(bundle, reference, "f32", tmp_path)
    print(f"\nf32 bundle, smoothing on: worst-row cosine {cos}")
    for case, c in cos.items():
        assert c >= 0.99999, case  # the fp32 path's bound (tests/python/test_text_parity.py)


def test_no_outliers_no_change(tmp_path: Path) -> None:
    assert build_all.ensure_reference("tiny_a", log=lambda *a: None)
    ckpt = build_all.reference_dir("tiny_a") / "checkpoint"
    sums = {}
    for smoothing in ("off", "auto"):
        proc = export(ckpt, tmp_path / smoothing, "w8", smoothing)
        assert proc.returncode == 0, proc.stderr
        assert "outlier smoothing:" not in proc.stdout
        sums[smoothing] = json.loads((tmp_path / smoothing / "checksums.json").read_text())
    assert sums["off"] == sums["auto"]
