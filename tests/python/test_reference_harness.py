"""Invariants of the HF reference harness (tests/reference/): the tiny checkpoints that
transformers writes, and the text references computed from them.

Builds the references into $QHX_CACHE/reference/<name>/ on first use (about 10 s for both
configs), reuses them afterwards. Every check is a function returning a list of problems,
and each is also run on deliberately broken data to show it can fail.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO_ROOT, _missing, cache_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before anything imports transformers

REF_DIR = REPO_ROOT / "tests" / "reference"
if str(REF_DIR) not in sys.path:
    sys.path.insert(0, str(REF_DIR))

TINY = ("tiny_a", "tiny_b")
TF5 = ("tiny_a_tf5", "tiny_b_tf5")  # the same configs, written and computed by transformers 5.x
CASES = ("chat_capital", "raw_13", "chat_system", "long_chat")
EOS = (151645, 151643)
MAX_NEW = 32


# ---------------------------------------------------------------------------
# expected tensors, derived from the config by the rules of spec §2 (not from transformers)


def expected_tensor_shapes(cfg: dict[str, Any]) -> dict[str, list[int]]:
    t, v = cfg["text_config"], cfg["vision_config"]
    out: dict[str, list[int]] = {}
    hv, iv, o = v["hidden_size"], v["intermediate_size"], v["out_hidden_size"]
    m = hv * v["spatial_merge_size"] ** 2
    p = "model.visual."
    out[p + "patch_embed.proj.weight"] = [hv, v["in_channels"], v["temporal_patch_size"],
                                          v["patch_size"], v["patch_size"]]
    out[p + "patch_embed.proj.bias"] = [hv]
    out[p + "pos_embed.weight"] = [v["num_position_embeddings"], hv]
    for i in range(v["depth"]):
        b = f"{p}blocks.{i}."
        for n in ("norm1", "norm2"):
            out[b + n + ".weight"] = [hv]
            out[b + n + ".bias"] = [hv]
        out[b + "attn.qkv.weight"] = [3 * hv, hv]
        out[b + "attn.qkv.bias"] = [3 * hv]
        out[b + "attn.proj.weight"] = [hv, hv]
        out[b + "attn.proj.bias"] = [hv]
        out[b + "mlp.linear_fc1.weight"] = [iv, hv]
        out[b + "mlp.linear_fc1.bias"] = [iv]
        out[b + "mlp.linear_fc2.weight"] = [hv, iv]
        out[b + "mlp.linear_fc2.bias"] = [hv]
    mergers = [(p + "merger.", hv)] + [(f"{p}deepstack_merger_list.{k}.", m)
                                       for k in range(len(v["deepstack_visual_indexes"]))]
    for pre, norm_width in mergers:
        out[pre + "norm.weight"] = [norm_width]
        out[pre + "norm.bias"] = [norm_width]
        out[pre + "linear_fc1.weight"] = [m, m]
        out[pre + "linear_fc1.bias"] = [m]
        out[pre + "linear_fc2.weight"] = [o, m]
        out[pre + "linear_fc2.bias"] = [o]
    h, inter, hd = t["hidden_size"], t["intermediate_size"], t["head_dim"]
    q, kv = t["num_attention_heads"] * hd, t["num_key_value_heads"] * hd
    p = "model.language_model."
    out[p + "embed_tokens.weight"] = [t["vocab_size"], h]
    for i in range(t["num_hidden_layers"]):
        b = f"{p}layers.{i}."
        out[b + "input_layernorm.weight"] = [h]
        out[b + "self_attn.q_proj.weight"] = [q, h]
        out[b + "self_attn.k_proj.weight"] = [kv, h]
        out[b + "self_attn.v_proj.weight"] = [kv, h]
        out[b + "self_attn.o_proj.weight"] = [h, q]
        out[b + "self_attn.q_norm.weight"] = [hd]
        out[b + "self_attn.k_norm.weight"] = [hd]
        out[b + "post_attention_layernorm.weight"] = [h]
        out[b + "mlp.gate_proj.weight"] = [inter, h]
        out[b + "mlp.up_proj.weight"] = [inter, h]
        out[b + "mlp.down_proj.weight"] = [h, inter]
    out[p + "norm.weight"] = [h]
    return out


# ---------------------------------------------------------------------------
# checkers: each returns a list of problems (empty = fine)


def check_checkpoint(st_path: Path, cfg: dict[str, Any]) -> list[str]:
    """Key list (no lm_head.weight, exactly the spec tensors), shapes, all BF16, norms not all
    ones (and spread), biases not all zero."""
    import torch
    from safetensors import safe_open

    problems: list[str] = []
    want = expected_tensor_shapes(cfg)
    with safe_open(str(st_path), framework="pt") as f:
        keys = list(f.keys())
        if "lm_head.weight" in keys:
            problems.append("lm_head.weight is stored (the checkpoint must rely on tying)")
        missing = sorted(set(want) - set(keys))
        extra = sorted(set(keys) - set(want) - {"lm_head.weight"})
        if missing:
            problems.append(f"missing tensors: {missing[:5]} ({len(missing)})")
        if extra:
            problems.append(f"unexpected tensors: {extra[:5]} ({len(extra)})")
        for k in keys:
            sl = f.get_slice(k)
            if sl.get_dtype() != "BF16":
                problems.append(f"{k}: dtype {sl.get_dtype()}, expected BF16")
            if k in want and list(sl.get_shape()) != want[k]:
                problems.append(f"{k}: shape {sl.get_shape()}, expected {want[k]}")
            name = k.rsplit(".", 2)
            is_norm = k.endswith(".weight") and len(name) == 3 and "norm" in name[1]
            if is_norm or k.endswith(".bias"):
                x = f.get_tensor(k).float()
                if is_norm and (bool(torch.all(x == 1.0)) or float(x.std()) < 0.03):
                    problems.append(f"{k}: norm weight not re-randomized (all ones / no spread)")
                if k.endswith(".bias") and (bool(torch.all(x == 0.0)) or float(x.std()) < 0.005):
                    problems.append(f"{k}: bias not re-randomized (all zero / no spread)")
    return problems


def check_text_case(t: dict[str, Any], meta: dict[str, Any], case: str, hidden: int,
                    layers: int, vocab: int) -> list[str]:
    """Shapes/dtypes, argmax(step_logits) == greedy tokens, margins, prefix/suffix ids."""
    import torch

    problems: list[str] = []

    def shape_is(name: str, shape: list[int], dtype) -> None:
        if name not in t:
            problems.append(f"{name} missing")
            return
        if list(t[name].shape) != shape or t[name].dtype != dtype:
            problems.append(f"{name}: {list(t[name].shape)} {t[name].dtype}, expected {shape} {dtype}")

    want_keys = {"input_ids", "prompt_logits", "greedy_tokens", "step_logits", "top2_margin",
                 "hidden.embed", "hidden.final_norm", *[f"hidden.layer{i}" for i in range(layers)]}
    if set(t) != want_keys:
        problems.append(f"tensor names {sorted(t)} != {sorted(want_keys)}")
    ids = t.get("input_ids")
    gen = t.get("greedy_tokens")
    if ids is None or gen is None:
        return problems + ["input_ids/greedy_tokens missing"]
    L, N = int(ids.shape[0]), int(gen.shape[0])
    shape_is("input_ids", [L], torch.int64)
    shape_is("prompt_logits", [L, vocab], torch.float32)
    shape_is("greedy_tokens", [N], torch.int64)
    shape_is("step_logits", [N, vocab], torch.float32)
    shape_is("top2_margin", [N], torch.float32)
    for k in ["hidden.embed", "hidden.final_norm", *[f"hidden.layer{i}" for i in range(layers)]]:
        shape_is(k, [L, hidden], torch.float32)
    if problems:
        return problems
    if not 1 <= N <= MAX_NEW:
        problems.append(f"{N} generated tokens, expected 1..{MAX_NEW}")
    ended_eos = int(gen[-1]) in EOS
    if N < MAX_NEW and not ended_eos:
        problems.append(f"generation stopped after {N} tokens without EOS")
    if any(int(x) in EOS for x in gen[:-1]):
        problems.append("an EOS token before the last generated token")
    am = t["step_logits"].argmax(dim=-1)
    if not torch.equal(am, gen):
        bad = int((am != gen).nonzero()[0, 0])
        problems.append(f"argmax(step_logits[{bad}]) = {int(am[bad])} != greedy token {int(gen[bad])}")
    top2 = torch.topk(t["step_logits"], 2, dim=-1).values
    if not torch.equal(top2[:, 0] - top2[:, 1], t["top2_margin"]):
        problems.append("top2_margin != top1 - top2 of step_logits")
    if float((t["step_logits"][0] - t["prompt_logits"][-1]).abs().max()) > 1e-4:
        problems.append("step_logits[0] differs from prompt_logits[L-1] by more than 1e-4")
    if bool(torch.equal(t["step_logits"][0], t["step_logits"][-1])) and N > 1:
        problems.append("step_logits rows are identical (decode steps not recorded)")

    if meta.get("num_prompt_tokens") != L or meta.get("num_generated") != N:
        problems.append("json counts disagree with the tensors")
    if meta.get("max_new_tokens") != MAX_NEW:
        problems.append("json max_new_tokens != 32")
    idl = ids.tolist()
    if meta.get("mode") == "chat":
        if idl[-5:] != [151645, 198, 151644, 77091, 198]:
            problems.append(f"chat prompt does not end with <|im_end|>\\n<|im_start|>assistant\\n: {idl[-5:]}")
        first_role = 8948 if "system" in meta else 872
        if idl[:3] != [151644, first_role, 198]:
            problems.append(f"chat prompt starts with {idl[:3]}, expected [151644, {first_role}, 198]")
        if "<think>" in meta.get("rendered", "") or 151667 in idl:
            problems.append("the Instruct template must not add <think>")
    if case == "chat_capital" and (idl[:3] != [151644, 872, 198]
                                   or idl[-5:] != [151645, 198, 151644, 77091, 198]):
        problems.append("chat_capital prefix/suffix ids wrong")
    if case == "raw_13" and (L != 13 or meta.get("mode") != "raw"):
        problems.append(f"raw_13 has {L} tokens / mode {meta.get('mode')}")
    return problems


def check_hidden_semantics(t: dict[str, Any], embed: Any, final_norm_w: Any, eps: float,
                           layers: int) -> list[str]:
    """hidden.final_norm == RMSNorm(hidden.layer{last}) and prompt_logits == final_norm @ E^T:
    pins down what the hooks captured and that lm_head is the tied embedding."""
    import torch

    problems: list[str] = []
    last = t[f"hidden.layer{layers - 1}"].double()
    rms = last * torch.rsqrt(last.pow(2).mean(-1, keepdim=True) + eps) * final_norm_w.double()
    d = float((rms - t["hidden.final_norm"].double()).abs().max())
    if d > 1e-4:
        problems.append(f"hidden.final_norm != RMSNorm(hidden.layer{layers - 1}) (max diff {d:.3g})")
    logits = t["hidden.final_norm"].double() @ embed.double().T
    d = float((logits - t["prompt_logits"].double()).abs().max())
    if d > 1e-4:
        problems.append(f"prompt_logits != hidden.final_norm @ embed_tokens^T (max diff {d:.3g})")
    ids = t["input_ids"]
    d = float((embed[ids].float() - t["hidden.embed"]).abs().max())
    if d != 0.0:
        problems.append(f"hidden.embed != embed_tokens[input_ids] (max diff {d:.3g})")
    return problems


# ---------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def references(tokenizer_json: Path) -> dict[str, dict[str, Any]]:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        _missing(f"the reference venv is incomplete ({e}): run scripts/setup.sh")
    import build_all

    out = {}
    for name in TINY + TF5:
        man = build_all.ensure_reference(name, cache_dir(), log=lambda *_: None)
        out[name] = {"manifest": man, "dir": build_all.reference_dir(name, cache_dir())}
    return out


def _load_case(ref_dir: Path, case: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from safetensors.torch import load_file

    tensors = load_file(str(ref_dir / f"text_{case}.safetensors"))
    with open(ref_dir / f"text_{case}.json", encoding="utf-8") as f:
        meta = json.load(f)
    return tensors, meta


# ---------------------------------------------------------------------------
# tests on the real references


@pytest.mark.parametrize("name", TINY + TF5)
def test_checkpoint_tensors(references, name):
    import tiny_configs

    ck = references[name]["dir"] / "checkpoint"
    assert sorted(p.name for p in ck.glob("model*.safetensors*")) == ["model.safetensors"]
    problems = check_checkpoint(ck / "model.safetensors", tiny_configs.get(name))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", TINY)
def test_checkpoint_config_files(references, name):
    import tiny_configs

    ck = references[name]["dir"] / "checkpoint"
    cfg = json.loads((ck / "config.json").read_text())
    want = tiny_configs.get(name)
    assert cfg["tie_word_embeddings"] is True
    assert cfg["text_config"]["tie_word_embeddings"] is True
    for sub in ("text_config", "vision_config"):
        for k, v in want[sub].items():
            assert cfg[sub].get(k) == v, f"{sub}.{k}: {cfg[sub].get(k)!r} != {v!r}"
    gen = json.loads((ck / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [151645, 151643] and gen["do_sample"] is True
    pre = json.loads((ck / "preprocessor_config.json").read_text())
    assert pre["size"] == {"longest_edge": 16777216, "shortest_edge": 65536}
    assert (pre["min_pixels"], pre["max_pixels"]) == (65536, 16777216)
    tok_cfg = json.loads((ck / "tokenizer_config.json").read_text())
    tmpl = json.loads((ck / "chat_template.json").read_text())["chat_template"]
    assert tok_cfg["chat_template"] == tmpl and "<|vision_start|><|image_pad|><|vision_end|>" in tmpl
    assert (ck / "tokenizer.json").stat().st_size > 1_000_000


@pytest.mark.parametrize("name", TINY + TF5)
@pytest.mark.parametrize("case", CASES)
def test_text_case(references, name, case):
    import torch
    import tiny_configs
    from safetensors import safe_open

    cfg = tiny_configs.get(name)["text_config"]
    ref_dir = references[name]["dir"]
    t, meta = _load_case(ref_dir, case)
    problems = check_text_case(t, meta, case, cfg["hidden_size"], cfg["num_hidden_layers"],
                               cfg["vocab_size"])
    assert not problems, "\n".join(problems)
    with safe_open(str(ref_dir / "checkpoint" / "model.safetensors"), framework="pt") as f:
        embed = f.get_tensor("model.language_model.embed_tokens.weight").float()
        norm_w = f.get_tensor("model.language_model.norm.weight").float()
    problems = check_hidden_semantics(t, embed, norm_w, cfg["rms_norm_eps"], cfg["num_hidden_layers"])
    assert not problems, "\n".join(problems)
    assert torch.all(t["top2_margin"] > 0), "an exact tie in a greedy step"


@pytest.mark.parametrize("name", TF5)
def test_tf5_checkpoint_config_files(references, name):
    """What transformers 5.x's save_pretrained writes (the spellings QHexRT's config reader
    accepts, tests/cpp/test_hf_config.cpp), and the 5.x processor file."""
    import tiny_configs

    ck = references[name]["dir"] / "checkpoint"
    cfg = json.loads((ck / "config.json").read_text())
    want = tiny_configs.get(name)
    assert cfg["transformers_version"].startswith("5.")
    assert cfg["tie_word_embeddings"] is True and cfg["text_config"]["tie_word_embeddings"] is True
    assert cfg["dtype"] == "bfloat16" and cfg["text_config"]["dtype"] == "bfloat16"
    assert cfg["vision_config"]["model_type"] == "qwen3_vl_vision"
    assert cfg["text_config"]["model_type"] == "qwen3_vl_text"
    assert "rope_scaling" not in cfg["text_config"] and "rope_theta" not in cfg["text_config"]
    assert cfg["text_config"]["rope_parameters"] == {**want["text_config"]["rope_scaling"], "rope_theta": 5000000.0}
    theta = tiny_configs.TF5_VISION_ROPE.get(name, {}).get("rope_theta", 10000.0)
    assert cfg["vision_config"]["rope_parameters"] == {"rope_type": "axial", "rope_theta": theta}
    skip = {"model_type", "rope_scaling", "rope_theta", "rope_parameters"}
    for sub in ("text_config", "vision_config"):
        for k, v in want[sub].items():
            if k not in skip:
                assert cfg[sub].get(k) == v, f"{sub}.{k}: {cfg[sub].get(k)!r} != {v!r}"
    pre = json.loads((ck / "preprocessor_config.json").read_text())
    assert pre["size"] == {"longest_edge": 16777216, "shortest_edge": 65536}
    assert "min_pixels" not in pre and pre["image_processor_type"] == "Qwen2VLImageProcessorPil"
    assert references[name]["manifest"]["versions"]["transformers"].startswith("5.")


def test_tf5_tiny_a_has_tiny_a_weights(references):
    """Same config dict, seed and recipe: 5.x's save_pretrained wrote the very tensors 4.57 did."""
    from safetensors import safe_open

    files = [references[n]["dir"] / "checkpoint" / "model.safetensors" for n in ("tiny_a", "tiny_a_tf5")]
    with safe_open(str(files[0]), framework="pt") as a, safe_open(str(files[1]), framework="pt") as b:
        assert sorted(a.keys()) == sorted(b.keys())
        for k in a.keys():
            assert a.get_tensor(k).equal(b.get_tensor(k)), k


def test_chat_capital_ids(references):
    for name in TINY:
        t, meta = _load_case(references[name]["dir"], "chat_capital")
        ids = t["input_ids"].tolist()
        assert ids[:3] == [151644, 872, 198]
        assert ids[-5:] == [151645, 198, 151644, 77091, 198]
        assert meta["rendered"] == ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                                    "<|im_start|>assistant\n")


def test_cached_rebuild_is_a_noop(references):
    import build_all

    for name in TINY:
        man = build_all.ensure_reference(name, cache_dir(), log=lambda *_: None)
        assert not man["built_checkpoint"] and not man["built_text"]
        assert man["hash"] == references[name]["manifest"]["hash"]


def test_2b_shapes_match_spec_counts():
    import tiny_configs

    shapes = expected_tensor_shapes(tiny_configs.get("qwen3vl_2b"))
    n = {"vision": 0, "text": 0}
    for k, s in shapes.items():
        c = 1
        for d in s:
            c *= d
        n["vision" if k.startswith("model.visual.") else "text"] += c
    assert len(shapes) == 625
    assert n == {"vision": 406_957_056, "text": 1_720_574_976}


# ---------------------------------------------------------------------------
# the checkers catch broken data


def _write_st(path: Path, tensors: dict[str, Any]) -> Path:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    return path


def test_check_checkpoint_catches_breakage(references, tmp_path):
    import torch
    import tiny_configs
    from safetensors.torch import load_file

    cfg = tiny_configs.get("tiny_a")
    good = load_file(str(references["tiny_a"]["dir"] / "checkpoint" / "model.safetensors"))
    emb = "model.language_model.embed_tokens.weight"
    cases = {
        "lm_head.weight": {**good, "lm_head.weight": good[emb].clone()},
        "dtype": {**good, emb: good[emb].float()},
        "norm weight": {**good, "model.language_model.layers.0.self_attn.q_norm.weight":
                        torch.ones(128, dtype=torch.bfloat16)},
        "bias": {**good, "model.visual.blocks.1.attn.qkv.bias": torch.zeros(384, dtype=torch.bfloat16)},
        "missing": {k: v for k, v in good.items() if k != "model.visual.merger.norm.bias"},
        "shape": {**good, "model.visual.pos_embed.weight": torch.zeros(2304, 64, dtype=torch.bfloat16)},
    }
    for what, tensors in cases.items():
        problems = check_checkpoint(_write_st(tmp_path / f"{what}.safetensors", tensors), cfg)
        assert any(what.split()[0] in p for p in problems), (what, problems)


def test_check_text_case_catches_breakage(references):
    import torch
    import tiny_configs

    cfg = tiny_configs.get("tiny_a")["text_config"]
    args = (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"])
    t, meta = _load_case(references["tiny_a"]["dir"], "chat_capital")
    assert check_text_case(t, meta, "chat_capital", *args) == []

    bad = dict(t)
    g = t["greedy_tokens"].clone()
    g[3] = (g[3] + 1) % cfg["vocab_size"]
    bad["greedy_tokens"] = g
    assert any("argmax" in p for p in check_text_case(bad, meta, "chat_capital", *args))

    bad = dict(t)
    bad["input_ids"] = t["input_ids"][1:]
    assert check_text_case(bad, meta, "chat_capital", *args)

    bad = dict(t)
    bad["hidden.layer1"] = t["hidden.layer1"][:, :-1]
    assert any("hidden.layer1" in p for p in check_text_case(bad, meta, "chat_capital", *args))

    bad = dict(t)
    bad["input_ids"] = torch.cat([t["input_ids"][:-1], torch.tensor([151667])])
    assert check_text_case(bad, {**meta}, "chat_capital", *args)


def test_check_hidden_semantics_catches_breakage(references):
    import tiny_configs
    from safetensors import safe_open

    cfg = tiny_configs.get("tiny_b")["text_config"]
    ref_dir = references["tiny_b"]["dir"]
    t, _ = _load_case(ref_dir, "raw_13")
    with safe_open(str(ref_dir / "checkpoint" / "model.safetensors"), framework="pt") as f:
        embed = f.get_tensor("model.language_model.embed_tokens.weight").float()
        norm_w = f.get_tensor("model.language_model.norm.weight").float()
    layers = cfg["num_hidden_layers"]
    assert check_hidden_semantics(t, embed, norm_w, 1e-6, layers) == []
    bad = dict(t)
    bad["hidden.final_norm"] = t[f"hidden.layer{layers - 1}"]  # pre-norm instead of post-norm
    assert len(check_hidden_semantics(bad, embed, norm_w, 1e-6, layers)) == 2
    bad = dict(t)
    bad["hidden.embed"] = t["hidden.layer0"]
    assert any("hidden.embed" in p for p in check_hidden_semantics(bad, embed, norm_w, 1e-6, layers))


# ===========================================================================
# image references (tests/reference/test_images.py, make_image_reference.py): spec §3-§6, §8
#
# Everything expected below is derived from the spec, not from transformers: smart_resize
# (§3.2), Pillow's bicubic (§3.3), the fast normalization and patch flattening (§3.4-3.6), the
# position-embedding interpolation (§4.2), the mergers (§4.6), the pad expansion (§8) and the
# 3-D position ids (§6).

IMAGE_SIZES = {"img512.png": (512, 512), "img256x320.png": (256, 320), "img300x200.png": (300, 200)}
# spec §3.2 worked table: file -> grid_thw
IMAGE_GRIDS = {"img512.png": [1, 32, 32], "img256x320.png": [1, 16, 20], "img300x200.png": [1, 20, 14]}
# case -> (images in order, the exact rendered prompt with one <|image_pad|> per image)
_VIS = "<|vision_start|><|image_pad|><|vision_end|>"
_U, _A = "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"
IMAGE_CASES: dict[str, tuple[list[str], str]] = {
    "img512": (["img512.png"], f"{_U}{_VIS}Describe this image.{_A}"),
    "img256x320": (["img256x320.png"], f"{_U}{_VIS}Describe this image.{_A}"),
    "img300x200_native": (["img300x200.png"], f"{_U}{_VIS}What is in the picture?{_A}"),
    "text_around": (["img256x320.png"], f"{_U}Look at this: {_VIS} What is it?{_A}"),
    "two_images": (["img512.png", "img256x320.png"], f"{_U}{_VIS}and{_VIS}Compare them.{_A}"),
}
IMG_PAD, VIS_START, VIS_END = 151655, 151652, 151653
FAST_VS_SLOW_TOL = 6e-8


def spec_smart_resize(h: int, w: int, factor: int = 32, min_pixels: int = 65536,
                      max_pixels: int = 16777216) -> tuple[int, int]:
    """Spec §3.2 (Python round = half to even; doubles throughout)."""
    import math

    if max(h, w) / min(h, w) > 200:
        raise ValueError("aspect ratio > 200")
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb = math.ceil(h * beta / factor) * factor
        wb = math.ceil(w * beta / factor) * factor
    return hb, wb


def spec_pillow_bicubic(img, out_h: int, out_w: int):
    """Spec §3.3: Pillow's separable bicubic (a = -0.5) on uint8 [H, W, C], 22-bit fixed-point
    weights, horizontal pass first (rounded/clipped to uint8), then vertical."""
    import numpy as np

    def kernel(x: float) -> float:
        a, x = -0.5, abs(x)
        if x < 1.0:
            return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        if x < 2.0:
            return (((x - 5.0) * x + 8.0) * x - 4.0) * a
        return 0.0

    def one_pass(a, axis: int, n_out: int):
        a = np.moveaxis(a, axis, 0).astype(np.int64)
        n_in = a.shape[0]
        if n_in == n_out:
            return np.moveaxis(a, 0, axis).astype(np.uint8)
        scale = n_in / n_out
        fs = max(scale, 1.0)
        support = 2.0 * fs
        out = np.empty((n_out,) + a.shape[1:], dtype=np.int64)
        for i in range(n_out):
            center = (i + 0.5) * scale
            lo = max(int(center - support + 0.5), 0)
            hi = min(int(center + support + 0.5), n_in)
            w = [kernel((x + lo - center + 0.5) / fs) for x in range(hi - lo)]
            s = sum(w)
            acc = np.full(a.shape[1:], 1 << 21, dtype=np.int64)
            for j, v in enumerate(w):
                v /= s
                k = int(-0.5 + v * (1 << 22)) if v < 0 else int(0.5 + v * (1 << 22))
                acc += a[lo + j] * k
            out[i] = np.clip(acc >> 22, 0, 255)
        return np.moveaxis(out, 0, axis).astype(np.uint8)

    return one_pass(one_pass(img, 1, out_w), 0, out_h)


def spec_fast_pixel_values(rgb):
    """Spec §3.4 + §3.6 from a resized uint8 [H, W, 3] image, by the index formulas."""
    import numpy as np

    h, w, _ = rgb.shape
    gh, gw = h // 16, w // 16
    mw = gw // 2
    r = np.arange(gh * gw)
    q, j = r // 4, r % 4
    py = 2 * (q // mw) + j // 2
    px = 2 * (q % mw) + j % 2
    c = np.arange(1536)
    ch, y, x = c // 512, (c // 16) % 16, c % 16  # frame t = (c // 256) % 2 reads the same pixels
    vals = rgb[16 * py[:, None] + y[None, :], 16 * px[:, None] + x[None, :], ch[None, :]]
    return (vals.astype(np.float32) - np.float32(127.5)) / np.float32(127.5)


def spec_positions(ids: list[int], grids: list[list[int]], merge: int = 2) -> tuple[list[list[int]], int]:
    """Spec §6: 3-D positions [3][L] and rope_delta."""
    pos: list[tuple[int, int, int]] = []
    st, nxt = 0, 0
    for t, gh, gw in grids:
        ed = ids.index(IMG_PAD, st)
        pos += [(nxt + i,) * 3 for i in range(ed - st)]
        s = nxt + (ed - st)
        mh, mw = gh // merge, gw // merge
        pos += [(s + a, s + r, s + c) for a in range(t) for r in range(mh) for c in range(mw)]
        st = ed + t * mh * mw
        nxt = s + max(t - 1, mh - 1, mw - 1) + 1
    pos += [(nxt + i,) * 3 for i in range(len(ids) - st)]
    delta = max(max(p) for p in pos) + 1 - len(ids)
    return [[p[a] for p in pos] for a in range(3)], delta


def spec_pos_embed(table, grids: list[list[int]], side: int = 48):
    """Spec §4.2: align-corners bilinear interpolation of the side x side table (f32,
    torch's two-sided linspace, trunc corners, left-to-right sum), in merge-window order."""
    import numpy as np

    def linspace(n: int):
        if n == 1:
            return np.zeros(1, dtype=np.float32)
        step = np.float32((side - 1) / (n - 1))
        return np.array([np.float32(step * np.float32(i)) if i < n // 2 else
                         np.float32(np.float32(side - 1) - np.float32(step * np.float32(n - 1 - i)))
                         for i in range(n)], dtype=np.float32)

    out = []
    for t, gh, gw in grids:
        ys, xs = linspace(gh), linspace(gw)
        y0, x0 = ys.astype(np.int64), xs.astype(np.int64)
        y1, x1 = np.minimum(y0 + 1, side - 1), np.minimum(x0 + 1, side - 1)
        dy, dx = ys - y0.astype(np.float32), xs - x0.astype(np.float32)
        one = np.float32(1)

        def term(a, b, wa, wb):
            rows = table[(a[:, None] * side + b[None, :]).reshape(-1)]
            return rows * (wa[:, None] * wb[None, :]).reshape(-1, 1)

        p = ((term(y0, x0, one - dy, one - dx) + term(y0, x1, one - dy, dx))
             + term(y1, x0, dy, one - dx)) + term(y1, x1, dy, dx)
        p = p.reshape(gh // 2, 2, gw // 2, 2, -1).transpose(0, 2, 1, 3, 4).reshape(gh * gw, -1)
        out.append(np.tile(p, (t, 1)))
    return np.concatenate(out)


def expected_image_tensors(cfg: dict[str, Any], n_images: int, N: int, L: int, n: int, tf5: bool = False
                           ) -> dict[str, tuple[list[int] | None, str]]:
    """name -> (shape or None when image-dependent, dtype) for an image reference (tf5: one
    built by transformers 5.x, which also records the vision RoPE tables)."""
    t, v = cfg["text_config"], cfg["vision_config"]
    hv, o, h, V = v["hidden_size"], v["out_hidden_size"], t["hidden_size"], t["vocab_size"]
    out: dict[str, tuple[list[int] | None, str]] = {
        "pixel_values": ([N, 1536], "float32"), "pixel_values_fast": ([N, 1536], "float32"),
        "image_grid_thw": ([n_images, 3], "int64"),
        "input_ids": ([L], "int64"), "position_ids": ([3, L], "int64"), "rope_delta": ([1], "int64"),
        "vision.patch_embed": ([N, hv], "float32"), "vision.pos_embed": ([N, hv], "float32"),
        "vision.merger": ([N // 4, o], "float32"),
        "hidden.embed": ([L, h], "float32"), "hidden.final_norm": ([L, h], "float32"),
        "prompt_logits": ([L, V], "float32"), "greedy_tokens": ([n], "int64"),
        "step_logits": ([n, V], "float32"), "top2_margin": ([n], "float32"),
    }
    if tf5:
        hd = hv // v["num_heads"]
        out["vision.rope_cos"] = ([N, hd], "float32")
        out["vision.rope_sin"] = ([N, hd], "float32")
    for j in range(n_images):
        out[f"image{j}.input_rgb"] = (None, "uint8")
        out[f"image{j}.resized_rgb"] = (None, "uint8")
    for i in range(v["depth"]):
        out[f"vision.block{i}"] = ([N, hv], "float32")
    for k in range(len(v["deepstack_visual_indexes"])):
        out[f"vision.deepstack{k}"] = ([N // 4, o], "float32")
    for i in range(t["num_hidden_layers"]):
        out[f"hidden.layer{i}"] = ([L, h], "float32")
    return out


def check_image_case(t: dict[str, Any], meta: dict[str, Any], case: str, cfg: dict[str, Any],
                     images_dir: Path | None = None, tf5: bool = False) -> list[str]:
    """Names/shapes/dtypes, grids (§3.2 table), resized pixels, pads between vision_start and
    vision_end (§8), positions (§6), pixel_values_fast (§3.4/3.6) vs pixel_values,
    argmax(step_logits) == greedy tokens, JSON consistency. t holds numpy arrays."""
    import numpy as np

    problems: list[str] = []
    files, rendered = IMAGE_CASES[case]
    for k in ("input_ids", "greedy_tokens", "pixel_values"):
        if k not in t:
            return [f"{k} missing"]
    L, n = int(t["input_ids"].shape[0]), int(t["greedy_tokens"].shape[0])
    N = int(t["pixel_values"].shape[0])
    want = expected_image_tensors(cfg, len(files), N, L, n, tf5)
    if set(t) != set(want):
        problems.append(f"tensor names: missing {sorted(set(want) - set(t))}, "
                        f"extra {sorted(set(t) - set(want))}")
    for k, (shape, dtype) in want.items():
        if k in t and ((shape is not None and list(t[k].shape) != shape) or str(t[k].dtype) != dtype):
            problems.append(f"{k}: {list(t[k].shape)} {t[k].dtype}, expected {shape} {dtype}")
    if problems:
        return problems

    # grids: the §3.2 table, and smart_resize of the image sizes
    grid = t["image_grid_thw"].tolist()
    want_grid = [IMAGE_GRIDS[f] for f in files]
    if grid != want_grid:
        problems.append(f"image_grid_thw {grid} != {want_grid}")
    for j, f in enumerate(files):
        rh, rw = spec_smart_resize(*IMAGE_SIZES[f])
        if [1, rh // 16, rw // 16] != want_grid[j]:
            problems.append(f"spec_smart_resize{IMAGE_SIZES[f]} = {(rh, rw)} disagrees with the table")
        inp, res = t[f"image{j}.input_rgb"], t[f"image{j}.resized_rgb"]
        if list(inp.shape) != [*IMAGE_SIZES[f], 3]:
            problems.append(f"image{j}.input_rgb shape {list(inp.shape)}")
        if list(res.shape) != [grid[j][1] * 16, grid[j][2] * 16, 3]:
            problems.append(f"image{j}.resized_rgb shape {list(res.shape)} vs grid {grid[j]}")
        elif res.shape == inp.shape and not np.array_equal(res, inp):
            problems.append(f"image{j}: unchanged size but resized_rgb != input_rgb")
        if images_dir is not None:
            import test_images
            if not np.array_equal(test_images.load_rgb(images_dir / f), inp):
                problems.append(f"image{j}.input_rgb != decoded {f}")
    if N != sum(a * b * c for a, b, c in grid):
        problems.append(f"{N} patches for grids {grid}")

    # pixel values
    fast = np.concatenate([spec_fast_pixel_values(t[f"image{j}.resized_rgb"]) for j in range(len(files))])
    if fast.shape != t["pixel_values_fast"].shape or not np.array_equal(fast, t["pixel_values_fast"]):
        problems.append("pixel_values_fast != spec §3.4/§3.6 from resized_rgb")
    d = float(np.abs(t["pixel_values_fast"].astype(np.float64)
                     - t["pixel_values"].astype(np.float64)).max())
    if d > FAST_VS_SLOW_TOL:
        problems.append(f"pixel_values_fast vs pixel_values differ by {d:.3g} > {FAST_VS_SLOW_TOL}")

    # ids: exactly t·gh·gw/4 pads per image, each run between vision_start and vision_end
    ids = t["input_ids"].tolist()
    n_pads = [a * b * c // 4 for a, b, c in grid]
    if ids.count(IMG_PAD) != sum(n_pads):
        problems.append(f"{ids.count(IMG_PAD)} image pads, expected {sum(n_pads)}")
    starts = [i for i, x in enumerate(ids) if x == VIS_START]
    if len(starts) != len(files) or ids.count(VIS_END) != len(files):
        problems.append(f"{len(starts)} vision_start / {ids.count(VIS_END)} vision_end "
                        f"for {len(files)} images")
    else:
        for j, s in enumerate(starts):
            run = ids[s + 1:s + 1 + n_pads[j]]
            if run != [IMG_PAD] * n_pads[j] or s + 1 + n_pads[j] >= L or ids[s + 1 + n_pads[j]] != VIS_END:
                problems.append(f"image {j}: not vision_start + {n_pads[j]} pads + vision_end at {s}")
    if ids[:3] != [151644, 872, 198] or ids[-5:] != [151645, 198, 151644, 77091, 198]:
        problems.append(f"chat framing wrong: {ids[:3]} ... {ids[-5:]}")

    # positions (§6)
    try:
        pos, delta = spec_positions(ids, grid)
        if t["position_ids"].tolist() != pos:
            bad = next(i for i in range(L) if [p[i] for p in pos] != t["position_ids"][:, i].tolist())
            problems.append(f"position_ids differ from spec §6 first at index {bad}")
        if int(t["rope_delta"][0]) != delta:
            problems.append(f"rope_delta {int(t['rope_delta'][0])} != spec {delta}")
    except ValueError:
        problems.append("no image pad where spec §6 expects one")

    # generation
    if not 1 <= n <= MAX_NEW:
        problems.append(f"{n} generated tokens")
    gen = t["greedy_tokens"]
    if n < MAX_NEW and int(gen[-1]) not in EOS:
        problems.append(f"generation stopped after {n} tokens without EOS")
    am = t["step_logits"].argmax(axis=-1)
    if not np.array_equal(am, gen):
        bad = int(np.nonzero(am != gen)[0][0])
        problems.append(f"argmax(step_logits[{bad}]) = {int(am[bad])} != greedy token {int(gen[bad])}")
    top2 = -np.sort(-t["step_logits"], axis=-1)[:, :2]
    if not np.array_equal(top2[:, 0] - top2[:, 1], t["top2_margin"]):
        problems.append("top2_margin != top1 - top2 of step_logits")
    if float(np.abs(t["step_logits"][0] - t["prompt_logits"][-1]).max()) > 1e-4:
        problems.append("step_logits[0] differs from prompt_logits[L-1] by more than 1e-4")

    # JSON
    checks = {"images": files, "rendered": rendered, "image_grid_thw": grid, "num_prompt_tokens": L,
              "num_patches": N, "num_generated": n, "num_image_tokens": n_pads,
              "max_new_tokens": MAX_NEW, "resize": "native", "add_generation_prompt": True,
              "min_top2_margin": float(t["top2_margin"].min()),
              "rope_delta": int(t["rope_delta"][0])}
    for k, v in checks.items():
        if meta.get(k) != v:
            problems.append(f"json {k} = {meta.get(k)!r}, expected {v!r}")
    if meta.get("resized") != any(list(t[f"image{j}.resized_rgb"].shape[:2]) != list(IMAGE_SIZES[f])
                                  for j, f in enumerate(files)):
        problems.append(f"json resized = {meta.get('resized')!r}")
    content = meta.get("content") or []
    if [c.get("image") for c in content if c.get("type") == "image"] != files or content != meta.get("parts"):
        problems.append("json content/parts do not list the case's images in order")
    if meta.get("rendered", "").count("<|image_pad|>") != len(files):
        problems.append("json rendered prompt is not the unexpanded template output")
    return problems


def spec_vision_rope(grids: list[list[int]], head_dim: int, theta: float):
    """Spec §4.3's cos/sin tables [N, head_dim] in float64: inv_freq[k] = theta^(-4k/head_dim),
    angles [row·inv_freq, col·inv_freq] twice, rows in the 2x2 merge-window order."""
    import numpy as np

    q = head_dim // 4
    inv = 1.0 / theta ** (np.arange(q, dtype=np.float64) * 4 / head_dim)
    rows = []
    for t, gh, gw in grids:
        r, c = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
        r = r.reshape(gh // 2, 2, gw // 2, 2).transpose(0, 2, 1, 3).reshape(-1)
        c = c.reshape(gh // 2, 2, gw // 2, 2).transpose(0, 2, 1, 3).reshape(-1)
        ang = np.concatenate([r[:, None] * inv, c[:, None] * inv], axis=1)
        rows.append(np.tile(np.concatenate([ang, ang], axis=1), (t, 1)))
    a = np.concatenate(rows)
    return np.cos(a), np.sin(a)


# transformers 5.24 interpolates the position embedding with a closed-form source coordinate
# instead of torch.linspace and sums the four weighted taps in one reduction: on these checkpoints
# it is within 7.2e-7 of spec §4.2's (4.57's) f32 result, not bit-equal.
TF5_POS_EMBED_MAX_ABS = 1e-6
TF5_ROPE_MAX_ABS = 1e-6  # f32 angles and cos/sin against float64


def check_image_semantics(t: dict[str, Any], cfg: dict[str, Any], w: dict[str, Any], tf5: bool = False
                          ) -> list[str]:
    """What the hooks captured, recomputed from the checkpoint weights (w: name -> f32 torch
    tensor) in float64: patch embedding (§4.1), pos-embed (§4.2, bit-exact; tf5: within
    TF5_POS_EMBED_MAX_ABS, and the vision RoPE tables of §4.3 with the config's theta), which block
    feeds which merger (§4.6), the visual scatter (§5.1), final norm and logits. t: torch tensors."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    problems: list[str] = []
    v, tc = cfg["vision_config"], cfg["text_config"]
    hv = v["hidden_size"]
    p = "model.visual."

    def close(name: str, got, ref, tol: float) -> None:
        d = float((got.double() - ref).abs().max())
        scale = 1.0 + float(ref.abs().max())
        if d > tol * scale:
            problems.append(f"{name}: max diff {d:.3g} (scale {scale:.3g})")

    X = t["pixel_values"].double()
    Wp = w[p + "patch_embed.proj.weight"].double().reshape(hv, -1)
    close("vision.patch_embed", t["vision.patch_embed"],
          X @ Wp.T + w[p + "patch_embed.proj.bias"].double(), 1e-5)
    pe = spec_pos_embed(w[p + "pos_embed.weight"].float().numpy(), t["image_grid_thw"].tolist())
    got = t["vision.pos_embed"].numpy()
    if pe.shape != got.shape:
        problems.append(f"vision.pos_embed: shape {got.shape}, spec §4.2 {pe.shape}")
    elif tf5:
        d = float(np.abs(got.astype(np.float64) - pe).max())
        if d > TF5_POS_EMBED_MAX_ABS:
            problems.append(f"vision.pos_embed: {d:.3g} from spec §4.2 (> {TF5_POS_EMBED_MAX_ABS})")
    elif not np.array_equal(pe, got):
        problems.append("vision.pos_embed != spec §4.2 interpolation (bit-exact expected)")
    if tf5:
        theta = (v.get("rope_parameters") or {}).get("rope_theta", 10000.0)
        cos, sin = spec_vision_rope(t["image_grid_thw"].tolist(), hv // v["num_heads"], theta)
        for name, ref in (("vision.rope_cos", cos), ("vision.rope_sin", sin)):
            got = t[name].double().numpy()
            d = float(np.abs(got - ref).max()) if got.shape == ref.shape else float("inf")
            if d > TF5_ROPE_MAX_ABS:
                problems.append(f"{name}: {d:.3g} from spec §4.3 with theta {theta} (> {TF5_ROPE_MAX_ABS})")

    def merger(pre: str, x, postshuffle: bool):
        x = x.double()
        nw, nb = w[pre + "norm.weight"].double(), w[pre + "norm.bias"].double()
        if postshuffle:  # deepstack: group 4 rows, then LayerNorm over 4·Hv
            x = F.layer_norm(x.reshape(-1, 4 * hv), (4 * hv,), nw, nb, 1e-6)
        else:  # main merger: LayerNorm over Hv per patch, then group
            x = F.layer_norm(x, (hv,), nw, nb, 1e-6)
            x = x.reshape(-1, 4 * hv)
        x = F.linear(x, w[pre + "linear_fc1.weight"].double(), w[pre + "linear_fc1.bias"].double())
        x = F.gelu(x)  # exact erf GELU
        return F.linear(x, w[pre + "linear_fc2.weight"].double(), w[pre + "linear_fc2.bias"].double())

    for k, b in enumerate(v["deepstack_visual_indexes"]):
        close(f"vision.deepstack{k} from vision.block{b}", t[f"vision.deepstack{k}"],
              merger(f"{p}deepstack_merger_list.{k}.", t[f"vision.block{b}"], True), 1e-5)
    close("vision.merger", t["vision.merger"],
          merger(p + "merger.", t[f"vision.block{v['depth'] - 1}"], False), 1e-5)

    E = w["model.language_model.embed_tokens.weight"]
    ids = t["input_ids"]
    emb = E[ids].clone()
    emb[ids == IMG_PAD] = t["vision.merger"]
    if not torch.equal(emb, t["hidden.embed"]):
        problems.append("hidden.embed != embed_tokens with vision.merger rows at the image pads")
    layers, n_ds = tc["num_hidden_layers"], len(v["deepstack_visual_indexes"])
    last = t[f"hidden.layer{layers - 1}"].double().clone()
    if layers - 1 < n_ds:
        last[ids == IMG_PAD] += t[f"vision.deepstack{layers - 1}"].double()
    rms = last * torch.rsqrt(last.pow(2).mean(-1, keepdim=True) + tc["rms_norm_eps"]) \
        * w["model.language_model.norm.weight"].double()
    close("hidden.final_norm", t["hidden.final_norm"], rms, 1e-5)
    close("prompt_logits", t["prompt_logits"], t["hidden.final_norm"].double() @ E.double().T, 1e-5)
    return problems


def _load_image_case(ref_dir: Path, case: str,
                     framework: str = "np") -> tuple[dict[str, Any], dict[str, Any]]:
    if framework == "np":
        from safetensors.numpy import load_file
    else:
        from safetensors.torch import load_file
    tensors = load_file(str(ref_dir / f"image_{case}.safetensors"))
    with open(ref_dir / f"image_{case}.json", encoding="utf-8") as f:
        meta = json.load(f)
    return tensors, meta


def _checkpoint_f32(ref_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return {k: v.float() for k, v in load_file(str(ref_dir / "checkpoint" / "model.safetensors")).items()}


def _images_dir() -> Path:
    return cache_dir() / "reference" / "images"


def test_smart_resize_spec_table():
    table = {(512, 512): (512, 512), (256, 320): (256, 320), (300, 200): (320, 224),
             (272, 400): (256, 384), (100, 100): (256, 256), (1080, 1920): (1088, 1920),
             (4000, 6000): (3328, 4992)}
    for (h, w), want in table.items():
        assert spec_smart_resize(h, w) == want, (h, w)


def test_test_images_match_their_formulas(references):
    import numpy as np
    import test_images

    d = _images_dir()
    stamp = json.loads((d / "qhx_stamp.json").read_text())
    assert stamp["hash"] == test_images.images_hash()
    for f, (h, w) in IMAGE_SIZES.items():
        arr = test_images.load_rgb(d / f)
        assert arr.shape == (h, w, 3) and arr.dtype == np.uint8
        assert np.array_equal(arr, test_images.generate(f)), f
        for c in range(3):
            assert len(np.unique(arr[..., c])) == 256, (f, c)
        # not symmetric under flips/transposes (ordering bugs must show)
        assert not np.array_equal(arr, arr[::-1]) and not np.array_equal(arr, arr[:, ::-1])
        if h == w:
            assert not np.array_equal(arr, arr.transpose(1, 0, 2))


@pytest.mark.parametrize("name", TINY + TF5)
@pytest.mark.parametrize("case", list(IMAGE_CASES))
def test_image_case(references, name, case):
    import numpy as np
    import tiny_configs

    cfg = tiny_configs.get(name)
    t, meta = _load_image_case(references[name]["dir"], case)
    problems = check_image_case(t, meta, case, cfg, _images_dir(), tf5=name in TF5)
    assert not problems, "\n".join(problems)
    assert np.all(t["top2_margin"] > 0), "an exact tie in a greedy step"


@pytest.mark.parametrize("name", TINY + TF5)
@pytest.mark.parametrize("case", ["img512", "img300x200_native", "two_images"])
def test_image_semantics(references, name, case):
    import tiny_configs

    ref_dir = references[name]["dir"]
    t, _ = _load_image_case(ref_dir, case, "pt")
    problems = check_image_semantics(t, tiny_configs.get(name), _checkpoint_f32(ref_dir), tf5=name in TF5)
    assert not problems, "\n".join(problems)


def test_img512_worked_example(references):
    """Spec §6 worked example: ids and rope_delta -240 for the 512x512 prompt (any config)."""
    t, _ = _load_image_case(references["tiny_a"]["dir"], "img512")
    want = [151644, 872, 198, 151652] + [151655] * 256 + \
        [151653, 74785, 419, 2168, 13, 151645, 198, 151644, 77091, 198]
    assert t["input_ids"].tolist() == want
    assert int(t["rope_delta"][0]) == -240
    pos = t["position_ids"]
    assert pos[:, 260].tolist() == [20, 20, 20] and pos[:, 269].tolist() == [29, 29, 29]
    assert pos[:, 4 + 37].tolist() == [4, 4 + 37 // 16, 4 + 37 % 16]


def test_resize_matches_pillow_algorithm(references):
    """The 300x200 image reached normalization as spec §3.3's Pillow bicubic makes it."""
    import numpy as np

    for name in TINY:
        t, _ = _load_image_case(references[name]["dir"], "img300x200_native")
        res = spec_pillow_bicubic(t["image0.input_rgb"], 320, 224)
        assert np.array_equal(res, t["image0.resized_rgb"]), name


def test_image_references_are_identical_across_configs(references):
    """Preprocessing and ids do not depend on the model."""
    import numpy as np

    for case in IMAGE_CASES:
        a, _ = _load_image_case(references["tiny_a"]["dir"], case)
        b, _ = _load_image_case(references["tiny_b"]["dir"], case)
        for k in ("pixel_values", "pixel_values_fast", "image_grid_thw", "input_ids", "position_ids",
                  "rope_delta"):
            assert np.array_equal(a[k], b[k]), (case, k)


def test_image_manifest_and_cached_rebuild(references):
    import build_all

    for name in TINY:
        man = references[name]["manifest"]
        assert set(man["image_cases"]) == set(IMAGE_CASES)
        assert set(man["cases"]) == set(CASES)  # the text part is still there
        again = build_all.ensure_reference(name, cache_dir(), log=lambda *_: None)
        assert not again["built_checkpoint"] and not again["built_text"]
        assert not again["built_images"] and not again["built_image_refs"]
        assert again["image_hash"] == man["image_hash"] and again["hash"] == man["hash"]
        for case, info in man["image_cases"].items():
            assert info["images"] == IMAGE_CASES[case][0]
            assert (references[name]["dir"] / info["safetensors"]).is_file()


def test_check_image_case_catches_breakage(references):
    import numpy as np
    import tiny_configs

    cfg = tiny_configs.get("tiny_a")
    t, meta = _load_image_case(references["tiny_a"]["dir"], "img256x320")
    assert check_image_case(t, meta, "img256x320", cfg) == []

    def broken(**changes):
        return check_image_case({**t, **changes}, meta, "img256x320", cfg)

    swapped = t["image_grid_thw"][:, [0, 2, 1]].copy()
    assert any("image_grid_thw" in p for p in broken(image_grid_thw=swapped))
    g = t["greedy_tokens"].copy()
    g[5] += 1
    assert any("argmax" in p for p in broken(greedy_tokens=g))
    ids = t["input_ids"].copy()
    ids[10] = 198  # one pad fewer
    assert any("pads" in p for p in broken(input_ids=ids))
    pos = t["position_ids"].copy()
    pos[1], pos[2] = t["position_ids"][2], t["position_ids"][1]  # H and W swapped
    assert any("position_ids" in p for p in broken(position_ids=pos))
    assert any("rope_delta" in p for p in broken(rope_delta=t["rope_delta"] + 1))
    pv = t["pixel_values_fast"].copy()
    pv[7, 100] += np.float32(1e-7)
    assert any("pixel_values_fast" in p for p in broken(pixel_values_fast=pv))
    pv = t["pixel_values"].copy()
    pv[3, 3] += np.float32(1e-6)
    assert any("differ by" in p for p in broken(pixel_values=pv))
    flipped = t["image0.resized_rgb"][::-1].copy()
    assert any("resized_rgb" in p for p in broken(**{"image0.resized_rgb": flipped}))
    assert any("vision.block0" in p for p in broken(**{"vision.block0": t["vision.block0"][:, :-1]}))
    extra = {**t, "vision.block9": t["vision.block0"]}
    assert any("tensor names" in p for p in check_image_case(extra, meta, "img256x320", cfg))


def test_check_image_semantics_catches_breakage(references):
    import tiny_configs

    cfg = tiny_configs.get("tiny_a")
    ref_dir = references["tiny_a"]["dir"]
    t, _ = _load_image_case(ref_dir, "img256x320", "pt")
    w = _checkpoint_f32(ref_dir)
    assert check_image_semantics(t, cfg, w) == []
    # deepstack 1 taps block 2 (indexes [0, 2, 3]); block 1 is not tapped
    bad = {**t, "vision.block2": t["vision.block1"]}
    assert any("deepstack1" in p for p in check_image_semantics(bad, cfg, w))
    # pos-embed rows left in raster order instead of the 2x2 merge-window order (grid 16x20)
    raster = t["vision.pos_embed"].reshape(8, 10, 2, 2, -1).permute(0, 2, 1, 3, 4).reshape(320, -1)
    bad = {**t, "vision.pos_embed": raster}
    assert any("pos_embed" in p for p in check_image_semantics(bad, cfg, w))
    # hidden.embed without the scatter
    bad = {**t, "hidden.embed": w["model.language_model.embed_tokens.weight"][t["input_ids"]]}
    assert any("hidden.embed" in p for p in check_image_semantics(bad, cfg, w))
    # merger fed by the wrong block
    bad = {**t, f"vision.block{cfg['vision_config']['depth'] - 1}": t["vision.block0"]}
    assert any("vision.merger" in p for p in check_image_semantics(bad, cfg, w))
