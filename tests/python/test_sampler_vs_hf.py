"""qhx::Sampler against transformers' own logits processors.

The processor list comes from GenerationMixin._get_logits_processor itself, so
HF decides the order and the min_tokens_to_keep. Our presence penalty (not an
HF option) is passed as a custom processor, which HF places after its built-in
processors (repetition penalty) and before the sampling warpers: the order
sampler.hpp documents.

build/bin/sampler_probe (QHX_BIN) returns the softmax of our processed logits
and the greedy token; both are compared with HF's on random logits.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList
from transformers.generation.utils import GenerationMixin

from conftest import run_tool, stderr_text, tool_path

VOCAB = 1000
ATOL = 1e-6


class _PresencePenalty(LogitsProcessor):
    """Subtracts `penalty` once from every distinct token of input_ids."""

    def __init__(self, penalty: float):
        self.penalty = penalty

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        seen = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, input_ids, True)
        return torch.where(seen, scores - self.penalty, scores)


class _Generator(GenerationMixin):
    """Just enough of a model for _get_logits_processor, which reads no model state."""


def _f32(x: float) -> float:
    """The value the C++ side sees after parsing into a float."""
    return float(np.float32(x))


def _hf_processors(params: dict, do_sample: bool) -> LogitsProcessorList:
    config = GenerationConfig(
        do_sample=do_sample,
        temperature=_f32(params.get("temperature", 1.0)),
        top_k=params.get("top_k", 0),  # GenerationConfig defaults to 50; the sampler's 0 is off
        top_p=_f32(params.get("top_p", 1.0)),
        min_p=_f32(params["min_p"]) if "min_p" in params else None,
        repetition_penalty=_f32(params.get("repetition_penalty", 1.0)),
    )
    custom = LogitsProcessorList()
    if params.get("presence_penalty", 0.0) != 0.0:
        custom.append(_PresencePenalty(_f32(params["presence_penalty"])))
    generator = _Generator.__new__(_Generator)
    return generator._get_logits_processor(generation_config=config, logits_processor=custom, device="cpu")


def _hf(logits: np.ndarray, history: list[int], params: dict) -> tuple[np.ndarray, np.ndarray, int]:
    """(probs, processed scores, greedy id) as transformers computes them."""
    input_ids = torch.tensor([history], dtype=torch.long).reshape(1, -1)
    scores = _hf_processors(params, do_sample=True)(input_ids, torch.from_numpy(logits.copy()).unsqueeze(0))
    probs = torch.softmax(scores, dim=-1)[0]
    greedy_scores = _hf_processors(params, do_sample=False)(input_ids, torch.from_numpy(logits.copy()).unsqueeze(0))
    greedy = int(torch.argmax(greedy_scores, dim=-1)[0])
    return probs.numpy(), scores[0].numpy(), greedy


def _ours(logits: np.ndarray, history: list[int], params: dict) -> tuple[np.ndarray, int]:
    request = {"logits": [float(x) for x in logits], "history": history, "params": params}
    proc = run_tool("sampler_probe", [], json.dumps(request).encode(), timeout=60)
    assert proc.returncode == 0, stderr_text(proc)
    out = json.loads(proc.stdout)
    return np.asarray(out["probs"], dtype=np.float64), int(out["greedy"])


@pytest.fixture(scope="module", autouse=True)
def sampler_probe() -> None:
    path = tool_path("sampler_probe")
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} not built: cmake --build build --target sampler_probe (or set QHX_BIN)")


def _random_case(seed: int, quantize: float | None = None) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(VOCAB) * 3.0).astype(np.float32)
    if quantize is not None:  # many exact ties
        logits = (np.round(logits / quantize) * quantize).astype(np.float32)
    history = [int(x) for x in rng.integers(0, VOCAB, size=60)]
    history += history[:20]  # repeats must not compound
    return logits, history


CASES = {
    "plain": {},
    "temperature": {"temperature": 0.6},
    "hot": {"temperature": 1.7},
    "top_k_1": {"top_k": 1},
    "top_k_50": {"top_k": 50},
    "top_k_over_vocab": {"top_k": 5000},
    "top_p_0.9": {"top_p": 0.9},
    "top_p_0.3_temp": {"top_p": 0.3, "temperature": 0.5},
    "top_p_tiny": {"top_p": 1e-4},
    "min_p": {"min_p": 0.05},
    "min_p_temp": {"min_p": 0.2, "temperature": 2.0},
    "repetition": {"repetition_penalty": 1.3},
    "repetition_below_1": {"repetition_penalty": 0.7},
    "presence": {"presence_penalty": 1.5},
    "qwen3_vl_defaults": {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.0,
                          "presence_penalty": 1.5},
    "all": {"repetition_penalty": 1.1, "presence_penalty": 0.5, "temperature": 0.8, "top_k": 200,
            "top_p": 0.9, "min_p": 0.02},
    "all_tight": {"repetition_penalty": 1.5, "presence_penalty": 2.0, "temperature": 1.3, "top_k": 40,
                  "top_p": 0.5, "min_p": 0.3},
}


def _compare(logits: np.ndarray, history: list[int], params: dict) -> None:
    hf_probs, hf_scores, hf_greedy = _hf(logits, history, params)
    probs, greedy = _ours(logits, history, params)
    assert probs.shape == (VOCAB,)
    kept_hf = np.isfinite(hf_scores)
    kept = probs > 0
    diff = np.flatnonzero(kept_hf != kept)
    assert diff.size == 0, f"kept sets differ at {diff[:10].tolist()} (HF keeps {int(kept_hf.sum())}, we {int(kept.sum())})"
    worst = int(np.argmax(np.abs(probs - hf_probs)))
    assert abs(probs[worst] - hf_probs[worst]) <= ATOL, f"token {worst}: {probs[worst]} vs HF {hf_probs[worst]}"
    assert abs(probs.sum() - 1.0) < 1e-5
    assert greedy == hf_greedy


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", list(CASES))
def test_distribution_matches_hf(name: str, seed: int) -> None:
    logits, history = _random_case(seed)
    _compare(logits, history, CASES[name])


@pytest.mark.parametrize("params", [{"top_k": 10}, {"top_k": 3, "temperature": 0.9}, {"min_p": 0.3},
                                    {"top_k": 25, "min_p": 0.1, "repetition_penalty": 1.2}])
def test_ties_match_hf(params: dict) -> None:
    # Logits on a 0.5 grid: the k-th value is tied, and HF keeps every tie.
    logits, history = _random_case(11, quantize=0.5)
    _compare(logits, history, params)
    if set(params) <= {"top_k", "temperature"}:  # nothing else filters: the ties must show
        probs, _ = _ours(logits, history, params)
        assert (probs > 0).sum() > params["top_k"], "expected ties beyond the k-th token"


def test_greedy_params_give_one_hot_argmax() -> None:
    logits, history = _random_case(5)
    params = {"greedy": True, "repetition_penalty": 1.4, "presence_penalty": 0.3}
    _, _, hf_greedy = _hf(logits, history, params)
    probs, greedy = _ours(logits, history, params)
    assert greedy == hf_greedy
    assert probs[hf_greedy] == 1.0 and (probs > 0).sum() == 1


@pytest.mark.parametrize("params,name", [({"temperature": -1.0}, "temperature"), ({"top_k": -2}, "top_k"),
                                         ({"top_p": 0.0}, "top_p"), ({"min_p": 1.5}, "min_p"),
                                         ({"repetition_penalty": 0.0}, "repetition_penalty")])
def test_probe_rejects_bad_params(params: dict, name: str) -> None:
    request = {"logits": [0.0, 1.0], "history": [], "params": params}
    proc = run_tool("sampler_probe", [], json.dumps(request).encode(), timeout=60)
    assert proc.returncode == 1
    assert name in stderr_text(proc)
