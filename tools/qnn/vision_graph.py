"""The Qwen3-VL vision encoder as one fp16 ONNX graph for the Hexagon HTP (ONNX Runtime's QNN EP).

Why this shape: the HTP wants static shapes and one graph per image size, so the graph covers a
single S x S image (n = (S/16)^2 patches, one attention segment). What is cheap and
data-dependent stays on the host: stage F (patch embedding + interpolated position embedding,
f32) and the 2-D rope tables, so the graph takes `hidden [n, Hv]`, `rope_cos [n, hd/2]` and
`rope_sin [n, hd/2]` (the half tables: the full rotation is cat(cos, cos), cat(sin, sin) with
rotate_half, so one half carries everything). Every matrix is int8 per output row
(`Builder.linear`, MatMulNBits bits 8 or 4), everything else fp16 ops that map to single HTP ops
(LayerNormalization, Gelu, Softmax, MatMul, elementwise, Slice/Concat/Reshape/Transpose).

The math follows the CPU encoder src/backends/cpu/models/qwen3vl/vision_encoder.cpp (HF-exact):
  block:  x += proj(attn(rope(q), rope(k), v)),  q|k|v = qkv(LN1(x));   x += fc2(gelu_tanh(fc1(LN2(x))))
  deepstack merger k (after block deepstack_visual_indexes[k]): fc2(gelu_erf(fc1(LN_4Hv(group4(x)))))
  final merger (after the last block):                              fc2(gelu_erf(fc1(group4(LN_Hv(x)))))
group4 concatenates 4 consecutive patch rows (the patch order puts each 2x2 window together).
All LayerNorms use eps 1e-6; attention scale hd^-0.5, no mask (one image).

Outputs: `image_embeds [m, H]` and `deepstack [n_ds, m, H]` (m = n/4, H = out_hidden_size).
"""

from __future__ import annotations

import numpy as np
import onnx

from qnn_onnx import Builder, Weights

EPS = 1e-6
P = "model.visual."


def _linear(b: Builder, w: Weights, x: str, name: str) -> str:
    """x [1, T, K] -> [1, T, N] with the bundle's int8 matrix `name`.weight and its bias."""
    return b.linear(x, w.matrix(name + ".weight"), name, bias=w.vector(name + ".bias"))


def _layer_norm(b: Builder, w: Weights, x: str, name: str) -> str:
    return b.layer_norm(x, w.vector(name + ".weight"), w.vector(name + ".bias"), EPS, name)


def _rope(b: Builder, x: str, cos: str, sin: str, half: int, name: str) -> str:
    """rotate-half rope on x [n, heads, hd] with cos/sin [n, 1, hd/2] (the halves of the full tables)."""
    lo = b.slice(x, 0, half, 2, f"{name}.lo")                       # [n, heads, hd/2]
    hi = b.slice(x, half, 2 * half, 2, f"{name}.hi")                # [n, heads, hd/2]
    new_lo = b.op("Sub", [b.op("Mul", [lo, cos], f"{name}.lo_cos"), b.op("Mul", [hi, sin], f"{name}.hi_sin")],
                  f"{name}.new_lo")                                 # lo*cos - hi*sin  [n, heads, hd/2]
    new_hi = b.op("Add", [b.op("Mul", [hi, cos], f"{name}.hi_cos"), b.op("Mul", [lo, sin], f"{name}.lo_sin")],
                  f"{name}.new_hi")                                 # hi*cos + lo*sin  [n, heads, hd/2]
    return b.op("Concat", [new_lo, new_hi], name, axis=2)           # [n, heads, hd]


def _block(b: Builder, w: Weights, x: str, cos: str, sin: str, n: int, hv: int, heads: int, i: int) -> str:
    """One depth block on the residual stream x [1, n, Hv] -> [1, n, Hv]."""
    p = f"{P}blocks.{i}."
    hd = hv // heads
    qkv = _linear(b, w, _layer_norm(b, w, x, p + "norm1"), p + "attn.qkv")   # [1, n, 3*Hv]: q | k | v
    qk = b.reshape(b.slice(qkv, 0, 2 * hv, 2, p + "qk"), [n, 2 * heads, hd], p + "qk_heads")  # [n, 2*heads, hd]
    qk = _rope(b, qk, cos, sin, hd // 2, p + "qk_rope")                      # [n, 2*heads, hd]
    q = b.transpose(b.slice(qk, 0, heads, 1, p + "q"), [1, 0, 2], p + "q_t")          # [heads, n, hd]
    k_t = b.transpose(b.slice(qk, heads, 2 * heads, 1, p + "k"), [1, 2, 0], p + "k_t")  # [heads, hd, n]
    v = b.reshape(b.slice(qkv, 2 * hv, 3 * hv, 2, p + "v"), [n, heads, hd], p + "v_heads")  # [n, heads, hd]
    v = b.transpose(v, [1, 0, 2], p + "v_t")                                 # [heads, n, hd]
    q = b.op("Mul", [q, b.f16(np.float32(hd ** -0.5), p + "attn.scale")], p + "q_scaled")  # [heads, n, hd]
    probs = b.op("Softmax", [b.op("MatMul", [q, k_t], p + "scores")], p + "probs", axis=-1)  # [heads, n, n]
    attn = b.transpose(b.op("MatMul", [probs, v], p + "attn"), [1, 0, 2], p + "attn_t")  # [n, heads, hd]
    attn = b.reshape(attn, [1, n, hv], p + "attn_rows")                      # [1, n, Hv]
    x = b.op("Add", [x, _linear(b, w, attn, p + "attn.proj")], p + "res1")   # [1, n, Hv]
    mid = b.gelu_tanh(_linear(b, w, _layer_norm(b, w, x, p + "norm2"), p + "mlp.linear_fc1"), p + "mlp.act")  # [1, n, I]
    return b.op("Add", [x, _linear(b, w, mid, p + "mlp.linear_fc2")], p + "res2")  # [1, n, Hv]


def _merger(b: Builder, w: Weights, x: str, m: int, hv: int, prefix: str, postshuffle: bool) -> str:
    """x [1, n, Hv] -> [1, m, H]: group each 2x2 window's 4 rows, LayerNorm (after grouping for
    the deepstack mergers, per patch before it for the final one), fc1, exact GELU, fc2."""
    if not postshuffle:
        x = _layer_norm(b, w, x, prefix + "norm")                            # [1, n, Hv]
    grouped = b.reshape(x, [1, m, 4 * hv], prefix + "grouped")              # [1, m, 4*Hv]
    if postshuffle:
        grouped = _layer_norm(b, w, grouped, prefix + "norm")                # [1, m, 4*Hv]
    mid = b.op("Gelu", [_linear(b, w, grouped, prefix + "linear_fc1")], prefix + "act")  # [1, m, 4*Hv], erf GELU
    return _linear(b, w, mid, prefix + "linear_fc2")                         # [1, m, H]


def build_vision_model(weights: Weights, vision_cfg: dict, text_hidden: int, image_size: int,
                       block_outputs: bool = False) -> onnx.ModelProto:
    """The encoder for one image_size x image_size image: (hidden, rope_cos, rope_sin) -> (image_embeds, deepstack).

    block_outputs adds each block's residual stream as `block{i}` [n, Hv] (a test twin: the
    final outputs hardly notice a wrong attention on small random checkpoints, the blocks' updates do)."""
    hv, heads, depth = vision_cfg["hidden_size"], vision_cfg["num_heads"], vision_cfg["depth"]
    patch, merge = vision_cfg["patch_size"], vision_cfg["spatial_merge_size"]
    if merge != 2:
        raise ValueError(f"spatial_merge_size {merge}: the graph groups 2x2 windows")
    out_h = vision_cfg.get("out_hidden_size", text_hidden)
    if out_h != text_hidden:
        raise ValueError(f"vision out_hidden_size {out_h} != text hidden {text_hidden}")
    taps = list(vision_cfg["deepstack_visual_indexes"])
    hd = hv // heads
    n = (image_size // patch) ** 2                                            # patches
    m = n // 4                                                                # merged tokens
    b = Builder()
    cos = b.reshape("rope_cos", [n, 1, hd // 2], "rope_cos_b")                # [n, 1, hd/2] (broadcast over heads)
    sin = b.reshape("rope_sin", [n, 1, hd // 2], "rope_sin_b")                # [n, 1, hd/2]
    x = b.reshape("hidden", [1, n, hv], "x0")                                 # [1, n, Hv]
    deepstack = [None] * len(taps)
    blocks = []
    for i in range(depth):
        x = _block(b, weights, x, cos, sin, n, hv, heads, i)                  # [1, n, Hv]
        if block_outputs:
            b.output(b.reshape(x, [n, hv], f"block{i}_rows"), f"block{i}")   # [n, Hv]
            blocks.append((f"block{i}", [n, hv]))
        for k, tap in enumerate(taps):
            if tap == i:
                deepstack[k] = _merger(b, weights, x, m, hv, f"{P}deepstack_merger_list.{k}.", True)  # [1, m, H]
    if any(d is None for d in deepstack):
        raise ValueError(f"deepstack_visual_indexes {taps} name blocks beyond depth {depth}")
    embeds = _merger(b, weights, x, m, hv, f"{P}merger.", False)              # [1, m, H]
    b.output(b.reshape(embeds, [m, out_h], "image_embeds_rows"), "image_embeds")  # [m, H]
    stacked = deepstack[0] if len(taps) == 1 else b.op("Concat", deepstack, "deepstack_cat", axis=0)  # [n_ds, m, H]
    b.output(stacked, "deepstack")
    return b.model("vision", [("hidden", [n, hv]), ("rope_cos", [n, hd // 2]), ("rope_sin", [n, hd // 2])],
                   [("image_embeds", [m, out_h]), ("deepstack", [len(taps), m, out_h])] + blocks)
