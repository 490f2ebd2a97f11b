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
