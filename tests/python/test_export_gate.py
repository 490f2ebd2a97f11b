"""The export gate guards what it says it guards (issue 47, part 3): `qhx_export --verify` runs the
staged bundle against its fp32 source before publishing, so a failing bundle never replaces OUT.

The failing bundle: the planted-outlier checkpoint (tests/reference/make_outlier_checkpoint.py)
exported w8 with --smoothing off, whose int8 activations fall far under the gate (cosine ~0.80).
The passing one: tiny_a at w8. Also --activations (written into the manifests) and its errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, bundle_manifest, tool_path
from export_util import CHECKPOINT, check, leftovers, tree

sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
import make_outlier_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def outlier_checkpoint() -> Path:
    return make_outlier_checkpoint.ensure_outlier_reference(log=lambda *a: None) / "checkpoint"


def export(hf: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [str(tool_path("qhx_export")), "--hf", str(hf), "--out", str(out), "--weights", "w8", "-q", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


def failing(hf: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    proc = export(hf, out, "--smoothing", "off", "--verify", *extra)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "fails the export gate" in proc.stderr
    return proc


def test_a_failing_bundle_leaves_the_previous_one_byte_for_byte(outlier_checkpoint, tmp_path):
    out = tmp_path / "bundle"
    proc = export(CHECKPOINT, out, "--verify")
    assert proc.returncode == 0, proc.stderr
    assert "verify: passed" in proc.stdout
    before = tree(out)

    proc = failing(outlier_checkpoint, out)
    assert tree(out) == before, "a bundle that failed the gate replaced OUT"
    assert f"nothing was published, {out} is as it was before the export" in proc.stderr
    assert leftovers(out) == [], "the staging folder of the refused bundle was left"
    assert not (tmp_path / "bundle.failed").exists()
    assert check(out).returncode == 0


def test_a_failing_bundle_into_a_new_out_leaves_nothing(outlier_checkpoint, tmp_path):
    out = tmp_path / "new"
    failing(outlier_checkpoint, out)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_failure_says_by_how_much_and_what_to_try(outlier_checkpoint, tmp_path):
    proc = failing(outlier_checkpoint, tmp_path / "b")
    text = [line for line in proc.stdout.splitlines() if line.startswith("verify text")]
    assert text and "(bound 0.99900)" in text[0] and "KLD" in text[0], proc.stdout
    # The gate measured the alternative on the staged bundle: the same weights with f32 activations.
    advice = [line for line in proc.stderr.splitlines() if "--activations f32 give" in line]
    assert advice, proc.stderr
    assert "text cosine" in advice[0] and "image cosine" in advice[0]
    assert "--weights f16" in proc.stderr


def test_keep_failed_keeps_it_aside_and_out_as_it_was(outlier_checkpoint, tmp_path):
    out = tmp_path / "bundle"
    assert export(CHECKPOINT, out).returncode == 0
    before = tree(out)
    proc = failing(outlier_checkpoint, out, "--keep-failed")
    kept = tmp_path / "bundle.failed"
    assert tree(out) == before
    assert f"it is kept at {kept}" in proc.stderr
    assert check(kept).returncode == 0, "the kept bundle is not whole"
    assert not any(p.name.startswith(".gate-") for p in kept.iterdir()), "the gate's manifest copies were kept"
    # A second failure replaces the kept one whole.
    failing(outlier_checkpoint, out, "--keep-failed")
    assert check(kept).returncode == 0
    assert leftovers(out) == [] and leftovers(kept) == []


def test_keep_failed_needs_verify(tmp_path):
    proc = export(CHECKPOINT, tmp_path / "b", "--keep-failed")
    assert proc.returncode == 1
    assert "--keep-failed" in proc.stderr and "--verify" in proc.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("activations", ["int8", "f16", "f32"])
def test_activations_are_written_into_every_graph(activations, tmp_path):
    out = tmp_path / activations
    proc = export(CHECKPOINT, out, "--activations", activations)
    assert proc.returncode == 0, proc.stderr
    for kind in ("text", "vlm"):
        m = json.loads(bundle_manifest(out, kind).read_text())
        acts = {name: g.get("activations") for name, g in m["graphs"].items() if g.get("backend") == "cpu"}
        assert acts and set(acts.values()) == {activations}, acts


def test_f16_activations_run_and_differ_from_f32_and_int8(tmp_path):
    """Each precision is what the manifest asks for: three bundles, three sets of logits."""
    import numpy as np
    logits = {}
    for act in ("int8", "f16", "f32"):
        out = tmp_path / act
        assert export(CHECKPOINT, out, "--activations", act).returncode == 0
        npy = tmp_path / f"{act}.npy"
        proc = subprocess.run([str(tool_path("qhx_generate")), "-m", str(bundle_manifest(out, "text")), "-p",
                               "The quick brown fox", "--raw", "-n", "1", "--temp", "0", "--dump-prompt-logits",
                               str(npy)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        logits[act] = np.load(npy)
    assert not np.array_equal(logits["f16"], logits["f32"])
    assert not np.array_equal(logits["f16"], logits["int8"])
    # Rounding activations to fp16 costs far less than int8 rows do.
    d16 = np.abs(logits["f16"] - logits["f32"]).max()
    d8 = np.abs(logits["int8"] - logits["f32"]).max()
    assert 0 < d16 < d8, (d16, d8)


@pytest.mark.parametrize("args, message", [
    (["--weights", "f32", "--activations", "int8"], "--activations int8 is for w8 and w4 bundles"),
    (["--weights", "f16", "--activations", "int8"], "--activations int8 is for w8 and w4 bundles"),
    (["--target", "qnn-htp", "--activations", "int8"], "the qnn-htp graphs compute in fp16"),
    (["--activations", "int4"], "--activations"),
])
def test_bad_activation_choices_are_refused(args, message, tmp_path):
    out = tmp_path / "b"
    a = [str(tool_path("qhx_export")), "--hf", str(CHECKPOINT), "--out", str(out), "-q", *args]
    proc = subprocess.run(a, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert not out.exists()


def w4_metadata(bundle: Path) -> tuple[dict, list[str]]:
    from safetensors import safe_open
    with safe_open(str(bundle / "llm_shared_512.bin"), "np") as f:
        return f.metadata(), list(f.keys())


def test_w4_scales_free_on_the_cpu_lpbq_on_request(tmp_path):
    """The CPU's w4 takes free bf16 scales per 32 columns by default; --w4-scales lpbq writes the
    HTP's scheme (a channel scale per row beside each matrix)."""
    for scales, extra in (("free", []), ("lpbq", ["--w4-scales", "lpbq"])):
        out = tmp_path / scales
        proc = subprocess.run([str(tool_path("qhx_export")), "--hf", str(CHECKPOINT), "--out", str(out), "--weights",
                               "w4", "-q", *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        meta, names = w4_metadata(out)
        assert meta["w4_scales"] == scales
        assert meta["w4_block"] == ("32" if scales == "free" else "64")
        assert any(n.endswith(".channel_scale") for n in names) == (scales == "lpbq")


@pytest.mark.parametrize("args, message", [
    (["--w4-scales", "free", "--target", "qnn-htp"], "--w4-scales free is for --target cpu"),
    (["--w4-block", "64"], "--w4-block 64 is for --w4-scales lpbq"),
    (["--w4-scales", "free", "--w4-block", "128"], "--w4-block 128 is for --w4-scales lpbq"),
])
def test_bad_w4_choices_are_refused(args, message, tmp_path):
    out = tmp_path / "b"
    a = [str(tool_path("qhx_export")), "--hf", str(CHECKPOINT), "--out", str(out), "-q", "--weights", "w4", *args]
    proc = subprocess.run(a, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert not out.exists()
