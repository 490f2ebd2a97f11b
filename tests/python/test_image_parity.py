"""The image path against Hugging Face transformers in fp32 (issue: image path).

For every tiny config and image case of tests/reference (a 512x512 image, a non-square one that
needs no resize, one resized in native mode, text before and after an image, two images in one
prompt), qhx_generate runs greedy on the checkpoint directory and must match:
  - pixel values bit-exact (the fast processor's formula, spec §3.4), the resized image included;
  - the vision tower output and each DeepStack feature: cosine >= 0.99999 per row;
  - for the transformers 5.x configs, the vision RoPE tables within 1e-6 (5.x reads their theta
    from the config; tiny_b_tf5's is 20000, not the 10000 4.57 hard-codes; the random towers'
    outputs are too insensitive to the RoPE to show a wrong theta within their bounds);
  - position ids and rope_delta identical;
  - prompt logits cosine >= 0.99999 per row (and max abs error <= 1e-4);
  - the 32-token greedy continuation identical, and every decode step's logits within the bounds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import REPO_ROOT, check_close, tool_path

sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
import build_all  # noqa: E402

CONFIGS = ["tiny_a", "tiny_b", "tiny_a_tf5", "tiny_b_tf5"]  # _tf5: written and computed by transformers 5.x
CASES = ["img512", "img256x320", "img300x200_native", "text_around", "two_images"]
COSINE_MIN = 0.99999
MAX_ABS = 1e-4
ROPE_MAX_ABS = 1e-6  # cos/sin of the same f32 angles: a few f32 ulps apart at most


@pytest.fixture(scope="session")
def references() -> dict[str, Path]:
    return {name: build_all.reference_dir(name) for name in CONFIGS
            if build_all.ensure_reference(name, log=lambda *a: None)}


def check(ours: np.ndarray, ref: np.ndarray, what: str, max_abs: float | None = MAX_ABS) -> None:
    check_close(ours, ref, what, COSINE_MIN, max_abs)


def prompt_and_images(meta: dict, images_dir: Path) -> tuple[str, list[str]]:
    """The case's user turn as qhx_generate's prompt (an <image> marker per image) and image paths."""
    prompt, images = "", []
    for item in meta["content"]:
        if item["type"] == "image":
            prompt += "<image>"
            images.append(str(images_dir / item["image"]))
        else:
            prompt += item["text"]
    return prompt, images


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("case", CASES)
def test_matches_transformers(references, config, case, tmp_path):
    root = references[config]
    meta = json.loads((root / f"image_{case}.json").read_text())
    ref = load_file(str(root / f"image_{case}.safetensors"))
    prompt, images = prompt_and_images(meta, root.parent / "images")
    dumps = tmp_path / "dumps"
    args = [str(tool_path("qhx_generate")), "-m", str(root / "checkpoint"), "-p", prompt, "--resize", "native",
            "-n", str(meta["max_new_tokens"]), "--temp", "0", "--json", "--dump-dir", str(dumps),
            "--dump-logits", str(tmp_path / "step.npy"), "--dump-prompt-logits", str(tmp_path / "prompt.npy")]
    for im in images:
        args += ["-i", im]
    proc = subprocess.run(args, capture_output=True, timeout=900)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    d = lambda name: np.load(dumps / f"{name}.npy")  # noqa: E731

    assert result["prompt_tokens"] == ref["input_ids"].tolist(), "prompt ids differ (template or pad expansion)"
    grid = ref["image_grid_thw"]
    assert result["timings"]["image_tokens"] == int((grid.prod(1) // 4).sum())
    # Bit-exact also after a resize: our bicubic reproduces Pillow's (the reference processor's) exactly.
    px = d("vision.pixel_values")
    assert np.array_equal(px, ref["pixel_values_fast"]), \
        f"pixel values differ by {np.abs(px - ref['pixel_values_fast']).max()}"
    if config.endswith("_tf5"):
        for t in ("vision.rope_cos", "vision.rope_sin"):
            ours, want = d(t), ref[t]
            assert ours.shape == want.shape, f"{t}: shape {ours.shape}, transformers {want.shape}"
            err = float(np.abs(ours.astype(np.float64) - want).max())
            assert err <= ROPE_MAX_ABS, f"{config}/{case} {t}: max abs error {err:.3g} > {ROPE_MAX_ABS}"
    check(d("vision.merger"), ref["vision.merger"], f"{config}/{case} vision tower", max_abs=None)
    k = 0
    while f"vision.deepstack{k}" in ref:
        check(d(f"vision.deepstack{k}"), ref[f"vision.deepstack{k}"], f"{config}/{case} deepstack {k}",
                    max_abs=None)
        k += 1
    assert k > 0
    assert np.array_equal(d("rope.position_ids").astype(np.int64), ref["position_ids"]), "position ids differ"
    assert int(d("rope.delta")[0]) == int(ref["rope_delta"][0]), "rope_delta differs"
    check(np.load(tmp_path / "prompt.npy"), ref["prompt_logits"], f"{config}/{case} prompt logits")
    assert result["tokens"] == ref["greedy_tokens"].tolist(), "greedy continuation differs"
    check(np.load(tmp_path / "step.npy"), ref["step_logits"], f"{config}/{case} decode-step logits")
