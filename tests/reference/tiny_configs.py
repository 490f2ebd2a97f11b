"""Tiny Qwen3-VL configurations for the HF reference harness (spec QWEN3VL.md §9.2).

Each entry is the full top-level config as a plain dict (text_config + vision_config), ready
for `Qwen3VLConfig(**cfg)`. Both keep the real vocabulary (151936), the real token ids, the
real preprocessing constants (patch 16, temporal 2, merge 2, 48x48 pos grid) and rope_theta
5e6; the widths are tiny.

tiny_a  spec §9.2 exactly: hidden 64 != 4 heads x head_dim 128, GQA 2, mrope [24,20,20],
        vision deepstack [0,2,3] (non-contiguous; block 1 not tapped; decoder layer 3 gets
        no injection).
tiny_b  a second shape family: hidden 96 != 8 heads x head_dim 32, GQA 4, 3 layers,
        mrope [6,5,5] (sums to head_dim/2 = 16; interleave limits are 3*5 = 15 for H and W,
        not 60), vision 1 head, depth 3, out_hidden 96, a single deepstack tap at block 1.
"""

from __future__ import annotations

import copy
from typing import Any

# Real token ids (spec §1.1, §1.5).
IMAGE_TOKEN_ID = 151655
VIDEO_TOKEN_ID = 151656
VISION_START_TOKEN_ID = 151652
VISION_END_TOKEN_ID = 151653
BOS_TOKEN_ID = 151643  # <|endoftext|>; never prepended
EOS_TOKEN_ID = 151645  # <|im_end|>
PAD_TOKEN_ID = 151643


def _text(hidden: int, inter: int, layers: int, heads: int, kv_heads: int, head_dim: int,
          mrope_section: list[int]) -> dict[str, Any]:
    assert sum(mrope_section) == head_dim // 2, (mrope_section, head_dim)
    return {
        "model_type": "qwen3_vl_text",
        "vocab_size": 151936,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 5000000.0,
        "rope_scaling": {
            "rope_type": "default",
            "mrope_section": list(mrope_section),
            "mrope_interleaved": True,
        },
        "max_position_embeddings": 262144,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "tie_word_embeddings": True,  # 4.57 ties on text_config's flag (spec §9.6)
        "bos_token_id": BOS_TOKEN_ID,
        "eos_token_id": EOS_TOKEN_ID,
        "dtype": "bfloat16",
    }


def _vision(depth: int, hidden: int, heads: int, inter: int, out_hidden: int,
            deepstack: list[int]) -> dict[str, Any]:
    return {
        "model_type": "qwen3_vl",
        "depth": depth,
        "hidden_size": hidden,
        "num_heads": heads,
        "intermediate_size": inter,
        "hidden_act": "gelu_pytorch_tanh",
        "in_channels": 3,
        "patch_size": 16,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "out_hidden_size": out_hidden,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": list(deepstack),
        "initializer_range": 0.02,
    }


def _top(text: dict[str, Any], vision: dict[str, Any]) -> dict[str, Any]:
    assert vision["out_hidden_size"] == text["hidden_size"]
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "model_type": "qwen3_vl",
        "image_token_id": IMAGE_TOKEN_ID,
        "video_token_id": VIDEO_TOKEN_ID,
        "vision_start_token_id": VISION_START_TOKEN_ID,
        "vision_end_token_id": VISION_END_TOKEN_ID,
        "tie_word_embeddings": True,  # 5.x ties on the top-level flag (spec §9.6): set both
        "text_config": text,
        "vision_config": vision,
    }


_CONFIGS: dict[str, dict[str, Any]] = {
    "tiny_a": _top(
        _text(hidden=64, inter=192, layers=4, heads=4, kv_heads=2, head_dim=128,
              mrope_section=[24, 20, 20]),
        _vision(depth=4, hidden=128, heads=2, inter=256, out_hidden=64, deepstack=[0, 2, 3]),
    ),
    "tiny_b": _top(
        _text(hidden=96, inter=160, layers=3, heads=8, kv_heads=2, head_dim=32,
              mrope_section=[6, 5, 5]),
        _vision(depth=3, hidden=64, heads=1, inter=128, out_hidden=96, deepstack=[1]),
    ),
}

# The exact Qwen3-VL-2B shapes (spec §1.1–§1.3), for make_random_2b.py (benchmarks, not CI).
QWEN3VL_2B: dict[str, Any] = _top(
    {**_text(hidden=2048, inter=6144, layers=28, heads=16, kv_heads=8, head_dim=128,
             mrope_section=[24, 20, 20])},
    _vision(depth=24, hidden=1024, heads=16, inter=4096, out_hidden=2048,
            deepstack=[5, 11, 17]),
)

TINY_NAMES: tuple[str, ...] = tuple(_CONFIGS)  # built by transformers 4.57 (.venv)

# The same configs built by transformers 5.x (.venv-tf5): checkpoint written by 5.x's
# save_pretrained (its config.json spelling), references computed by 5.x in fp32.
TF5_SUFFIX = "_tf5"
TF5_NAMES: tuple[str, ...] = tuple(n + TF5_SUFFIX for n in _CONFIGS)
# What a _tf5 twin changes in its base dict. tiny_b_tf5's vision RoPE theta is 20000 instead of
# 10000 (a 5.x config key, vision_config.rope_parameters, that 4.57 has no way to express): its
# parity proves QHexRT honours the value rather than the 10000 that 4.57 hard-codes.
TF5_VISION_ROPE: dict[str, dict[str, Any]] = {
    "tiny_b_tf5": {"rope_type": "axial", "rope_theta": 20000.0},
}
ALL_NAMES: tuple[str, ...] = TINY_NAMES + TF5_NAMES


def base_name(name: str) -> str:
    """"tiny_a_tf5" -> "tiny_a"; other names unchanged."""
    return name[:-len(TF5_SUFFIX)] if name.endswith(TF5_SUFFIX) else name


def transformers_major(name: str) -> int:
    """The transformers major version that builds config `name`: 5 for the _tf5 names, else 4."""
    return 5 if name.endswith(TF5_SUFFIX) else 4


def get(name: str) -> dict[str, Any]:
    """A deep copy of the named config dict ("tiny_a", "tiny_b", their "_tf5" twins, which
    take the same dict plus TF5_VISION_ROPE, or "qwen3vl_2b")."""
    if name == "qwen3vl_2b":
        return copy.deepcopy(QWEN3VL_2B)
    base = base_name(name)
    if base not in _CONFIGS or (name != base and name not in TF5_NAMES):
        raise KeyError(f"unknown tiny config {name!r}; known: {', '.join(ALL_NAMES)}")
    cfg = copy.deepcopy(_CONFIGS[base])
    if name in TF5_VISION_ROPE:
        cfg["vision_config"]["rope_parameters"] = dict(TF5_VISION_ROPE[name])
    return cfg
