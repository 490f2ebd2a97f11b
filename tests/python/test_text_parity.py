"""The text path against Hugging Face transformers in fp32 (issue: text path).

For every tiny config and every text case of tests/reference, qhx_generate runs greedy on the
checkpoint directory that transformers wrote, and must match the fp32 reference:
  - the prompt ids (our chat template + tokenizer == HF's processor);
  - the logits at every prompt position: cosine >= 0.99999 per row, max abs error <= 1e-4;
  - the 32-token greedy continuation, token for token;
  - the logits of every decode step within the same bounds (this proves the KV cache and positions).
Chunked prefill (chunk 5 over the 13-token prompt) and the seed's decode-over-prompt mode must give
the same logits as a single pass, bit for bit, with the KV cache in f32 and in f16.
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
import make_text_reference  # noqa: E402

CONFIGS = ["tiny_a", "tiny_b", "tiny_a_tf5", "tiny_b_tf5"]  # _tf5: written and computed by transformers 5.x
CASES = list(make_text_reference.CASES)
COSINE_MIN = 0.99999
MAX_ABS = 1e-4


@pytest.fixture(scope="session")
def references() -> dict[str, Path]:
    return {name: build_all.reference_dir(name) for name in CONFIGS if build_all.ensure_reference(name, log=lambda *a: None)}


def run_generate(args: list[str], tmp: Path) -> tuple[dict, np.ndarray, np.ndarray]:
    step, prompt = tmp / "step.npy", tmp / "prompt.npy"
    proc = subprocess.run([str(tool_path("qhx_generate")), *args, "--json", "--dump-logits", str(step),
                           "--dump-prompt-logits", str(prompt)], capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return result, np.load(prompt), np.load(step)


def case_args(meta: dict) -> list[str]:
    if meta["mode"] == "raw":
        return ["--raw", "-p", meta["prompt"]]
    args = ["-p", meta["prompt"]]
    if meta.get("system"):
        args += ["--system", meta["system"]]
    return args


def check_logits(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    check_close(ours, ref, what, COSINE_MIN, MAX_ABS)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("case", CASES)
def test_matches_transformers(references, config, case, tmp_path):
    root = references[config]
    meta = json.loads((root / f"text_{case}.json").read_text())
    ref = load_file(str(root / f"text_{case}.safetensors"))
    n = int(meta["max_new_tokens"])
    result, prompt_logits, step_logits = run_generate(
        ["-m", str(root / "checkpoint"), *case_args(meta), "-n", str(n), "--temp", "0"], tmp_path)

    assert result["prompt_tokens"] == ref["input_ids"].tolist(), "prompt ids differ from HF's"
    check_logits(prompt_logits, ref["prompt_logits"], f"{config}/{case} prompt logits")
    assert result["tokens"] == ref["greedy_tokens"].tolist(), "greedy continuation differs"
    check_logits(step_logits, ref["step_logits"], f"{config}/{case} decode-step logits")


@pytest.mark.parametrize("kv_cache", ["f32", "f16"])
@pytest.mark.parametrize("config", CONFIGS)
def test_chunked_prefill_equals_single_pass(references, config, kv_cache, tmp_path):
    root = references[config]
    meta = json.loads((root / "text_raw_13.json").read_text())
    assert meta["num_prompt_tokens"] == 13
    ckpt = root / "checkpoint"
    outputs = []
    # One pass, chunks of 5, and the seed's decode-over-prompt mode (one token per call).
    for chunk, mode in ((320, "chunked"), (5, "chunked"), (320, "decode_over_prompt")):
        plan = json.loads(subprocess.run([str(tool_path("qhx_generate")), "--print-plan", "-m", str(ckpt)],
                                         capture_output=True, check=True).stdout)
        plan["prefill_chunk"] = chunk
        plan["graphs"]["llm"]["kv_cache"] = kv_cache
        for stage in plan["stages"]:
            if stage["op"] == "prefill":
                stage["mode"] = mode
        name = f"{chunk}_{mode}"
        manifest = tmp_path / f"plan_{name}.json"
        manifest.write_text(json.dumps(plan))
        (tmp_path / name).mkdir()
        outputs.append(run_generate(["-m", str(manifest), *case_args(meta), "-n", "8", "--temp", "0"],
                                    tmp_path / name))
    r1, p1, s1 = outputs[0]
    for r, p, s in outputs[1:]:
        assert r1["tokens"] == r["tokens"]
        assert np.array_equal(p1, p), f"prompt logits differ by {np.abs(p1 - p).max()}"
        assert np.array_equal(s1, s), f"step logits differ by {np.abs(s1 - s).max()}"
