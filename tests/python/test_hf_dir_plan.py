"""A Hugging Face checkpoint directory's own generation_config.json and preprocessor_config.json
set the plan (qhx_generate -m DIR, --print-plan) and the manifests qhx_export writes.

Each test copies a tiny checkpoint directory of tests/reference (links to its files) and writes
its own generation/preprocessor config into it:
  - generation_config.json: do_sample/temperature/top_k/top_p/min_p/repetition_penalty become the
    plan's sampling, eos_token_id (an id or a list) its stop_token_ids; greedy decoding then stops
    where transformers' greedy continuation first emits such an id (the reference's tokens, cut
    after it: generate() stops after emitting an eos id);
  - preprocessor_config.json: the native resize's pixel limits; the image-token count of a run
    equals what transformers' image processor makes with the same limits;
  - broken files stop qhx_generate and qhx_export with an error naming the file and the key.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import REPO_ROOT, bundle_manifest, tool_path

sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
import build_all  # noqa: E402

CONFIG = "tiny_a_tf5"  # written by transformers 5.x; the same logic reads every checkpoint
OWN_FILES = ("generation_config.json", "preprocessor_config.json")


@pytest.fixture(scope="session")
def reference() -> Path:
    assert build_all.ensure_reference(CONFIG, log=lambda *a: None)
    return build_all.reference_dir(CONFIG)


def checkpoint_copy(ref: Path, dest: Path, generation=None, preprocessor=None) -> Path:
    """dest/: links to every file of the reference checkpoint but the two configs, which are
    written from `generation` / `preprocessor` (a dict, or a str written verbatim) when given."""
    dest.mkdir()
    for f in (ref / "checkpoint").iterdir():
        if f.name not in OWN_FILES:
            (dest / f.name).symlink_to(f)
    for name, content in zip(OWN_FILES, (generation, preprocessor)):
        if content is not None:
            (dest / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return dest


def plan(ckpt: Path) -> dict:
    proc = subprocess.run([str(tool_path("qhx_generate")), "--print-plan", "-m", str(ckpt)],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return json.loads(proc.stdout)


def generate(args: list[str]) -> dict:
    proc = subprocess.run([str(tool_path("qhx_generate")), *args, "--json"], capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def test_generation_config_sets_sampling_and_stop_ids(reference, tmp_path):
    ckpt = checkpoint_copy(reference, tmp_path / "ckpt", generation={
        "do_sample": True, "temperature": 0.6, "top_k": 5, "top_p": 0.9, "min_p": 0.05,
        "repetition_penalty": 1.1, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
        "transformers_version": "5.24.0"})
    p = plan(ckpt)
    assert p["qhexrt_manifest"] >= 4
    assert p["sampling"] == {"greedy": False, "temperature": 0.6, "top_k": 5, "top_p": 0.9, "min_p": 0.05,
                             "repetition_penalty": 1.1}
    assert p["stop_token_ids"] == [151645, 151643]
    assert p["stop_tokens"] == []
    # A single id, and GenerationConfig's defaults for absent keys (do_sample false: greedy).
    p = plan(checkpoint_copy(reference, tmp_path / "one", generation={"eos_token_id": 151645}))
    assert p["stop_token_ids"] == [151645]
    assert p["sampling"] == {"greedy": True, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": 0.0,
                             "repetition_penalty": 1.0}


def test_without_the_files_the_defaults_stay(reference, tmp_path):
    p = plan(checkpoint_copy(reference, tmp_path / "ckpt"))
    assert p["sampling"] == {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.0}
    assert p["stop_tokens"] == ["<|im_end|>", "<|endoftext|>"]
    assert "stop_token_ids" not in p
    assert (p["image"]["min_pixels"], p["image"]["max_pixels"]) == (65536, 16777216)


def test_greedy_stops_on_the_generation_config_eos(reference, tmp_path):
    ref = load_file(str(reference / "text_chat_capital.safetensors"))
    meta = json.loads((reference / "text_chat_capital.json").read_text())
    tokens = ref["greedy_tokens"].tolist()
    assert len(tokens) == meta["max_new_tokens"] and not meta["stopped_on_eos"]
    # The first token that differs from its predecessor (random models repeat one token).
    cut = next((i for i in range(1, len(tokens)) if tokens[i] != tokens[i - 1]), 0)
    eos = tokens[cut]
    first = tokens.index(eos)
    ckpt = checkpoint_copy(reference, tmp_path / "ckpt", generation={"do_sample": False, "eos_token_id": [eos]})
    # no --temp: the plan itself is greedy (do_sample false)
    result = generate(["-m", str(ckpt), "-p", meta["prompt"], "-n", str(meta["max_new_tokens"])])
    assert result["tokens"] == tokens[:first + 1], \
        f"expected transformers' greedy tokens up to the first {eos} (index {first})"


def test_preprocessor_limits_set_the_native_resize(reference, tmp_path):
    min_pixels, max_pixels = 4096, 120000  # img512 (262144 pixels) must shrink
    ckpt = checkpoint_copy(reference, tmp_path / "ckpt", preprocessor={
        "size": {"shortest_edge": min_pixels, "longest_edge": max_pixels}, "patch_size": 16,
        "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "Qwen2VLImageProcessorPil"})
    p = plan(ckpt)
    assert (p["image"]["resize"], p["image"]["min_pixels"], p["image"]["max_pixels"]) == \
        ("native", min_pixels, max_pixels)
    # min_pixels / max_pixels override size.
    p = plan(checkpoint_copy(reference, tmp_path / "both", preprocessor={
        "size": {"shortest_edge": 65536, "longest_edge": 16777216}, "min_pixels": min_pixels,
        "max_pixels": max_pixels}))
    assert (p["image"]["min_pixels"], p["image"]["max_pixels"]) == (min_pixels, max_pixels)

    # The run resizes as transformers' processor does with these limits.
    from PIL import Image
    from transformers import Qwen2VLImageProcessor

    image = reference.parent / "images" / "img512.png"
    ip = Qwen2VLImageProcessor(min_pixels=min_pixels, max_pixels=max_pixels, patch_size=16, merge_size=2,
                               temporal_patch_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    grid = np.asarray(ip(images=[Image.open(image).convert("RGB")], return_tensors="np")["image_grid_thw"])
    want = int(grid.prod(1).sum() // 4)
    assert want < 256  # smaller than the unresized 512x512 image's 256 tokens
    result = generate(["-m", str(ckpt), "-p", "<image>Describe this image.", "-i", str(image), "-n", "1",
                       "--temp", "0"])
    assert result["timings"]["image_tokens"] == want


BAD_FILES = [
    ("generation_config.json", "{\"top_k\": 5,", ["not valid JSON"]),
    ("generation_config.json", {"top_k": "5"}, ["top_k", "expected an integer"]),
    ("generation_config.json", {"temperature": [0.6]}, ["temperature", "expected a number"]),
    ("generation_config.json", {"do_sample": 1}, ["do_sample", "expected a boolean"]),
    ("generation_config.json", {"eos_token_id": "<|im_end|>"}, ["eos_token_id", "token id"]),
    ("generation_config.json", {"eos_token_id": [151645, 1.5]}, ["eos_token_id[1]", "expected an integer"]),
    ("preprocessor_config.json", "[]", ["JSON object"]),
    ("preprocessor_config.json", {"size": {"shortest_edge": "65536", "longest_edge": 16777216}},
     ["size.shortest_edge", "expected an integer"]),
    ("preprocessor_config.json", {"patch_size": 14}, ["patch_size", "differs from", "config.json",
                                                      "vision_config.patch_size 16"]),
    ("preprocessor_config.json", {"image_mean": [0.48145466, 0.4578275, 0.40821073]}, ["image_mean"]),
]


@pytest.mark.parametrize("name,content,phrases", BAD_FILES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_FILES)])
def test_bad_files_name_the_file_and_key(reference, tmp_path, name, content, phrases):
    kwargs = {"generation" if name.startswith("generation") else "preprocessor": content}
    ckpt = checkpoint_copy(reference, tmp_path / "ckpt", **kwargs)
    for args in (["--print-plan", "-m", str(ckpt)], ["-m", str(ckpt), "-p", "hi", "-n", "1"]):
        proc = subprocess.run([str(tool_path("qhx_generate")), *args], capture_output=True, timeout=120)
        err = proc.stderr.decode(errors="replace")
        assert proc.returncode != 0, f"{args}: accepted a broken {name}"
        for phrase in [str(ckpt / name), *phrases]:
            assert phrase in err, f"error lacks {phrase!r}: {err}"
    out = tmp_path / "bundle"
    proc = subprocess.run([str(tool_path("qhx_export")), "--hf", str(ckpt), "--out", str(out), "--weights", "f32",
                           "--quiet"], capture_output=True, timeout=300)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode != 0 and str(ckpt / name) in err and phrases[0] in err, err


def test_export_records_both_files(reference, tmp_path):
    ckpt = checkpoint_copy(reference, tmp_path / "ckpt",
                           generation={"do_sample": True, "temperature": 0.6, "top_k": 5, "eos_token_id": [151645, 7]},
                           preprocessor={"size": {"shortest_edge": 4096, "longest_edge": 120000}})
    out = tmp_path / "bundle"
    proc = subprocess.run([str(tool_path("qhx_export")), "--hf", str(ckpt), "--out", str(out), "--weights", "f32",
                           "--quiet"], capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    for kind in ("vlm", "text"):
        m = json.loads(bundle_manifest(out, kind).read_text())
        assert m["sampling"] == {"greedy": False, "temperature": 0.6, "top_k": 5, "top_p": 1.0, "min_p": 0.0,
                                 "repetition_penalty": 1.0}, kind
        assert m["stop_token_ids"] == [151645, 7] and m["stop_tokens"] == [], kind
        if kind == "vlm":
            assert m["image"] == {"resize": "fixed", "size": 512, "min_pixels": 4096, "max_pixels": 120000}
    # The bundle's plan runs, and stops on the recorded ids.
    ref = load_file(str(reference / "text_chat_capital.safetensors"))
    meta = json.loads((reference / "text_chat_capital.json").read_text())
    result = generate(["-m", str(bundle_manifest(out, "text")), "-p", meta["prompt"], "-n", "4", "--temp", "0"])
    assert result["tokens"] == ref["greedy_tokens"].tolist()[:4]
