"""ONNX builders for the text side of Qwen3-VL on the HTP: the decoder as block graphs and the
int8 lm-head, in the exact tensor names the C++ qnn-htp runtime binds (docs/qnn.md).

A block graph runs layers [l0, l1) of the decoder over AR new tokens against a fixed-size KV
history of CL - AR rows. The host owns everything stateful: it keeps the KV cache (sequence-major,
so prefill's past is a contiguous prefix of decode's buffer), writes the additive mask, computes
the M-RoPE cos/sin tables and scatters DeepStack features. The graph is a pure function:

    inputs   inputs_embeds [AR, H]            the residual stream entering layer l0
             attention_mask [AR, CL]          additive (0 attend, -1000 masked); columns
                                              0..CL-AR-1 the past, the last AR the block itself
             rope_cos, rope_sin [AR, D/2]     rotate-half tables (the rotation uses cat(t, t))
             past_key, past_value [CL-AR, Lp, kv, D]   keys post-norm post-rope
             deepstack [n_ds, AR, H]          prefill graphs of the parts holding a layer i < n_ds:
                                              deepstack[i] added to the residual right after layer i
    outputs  hidden [AR, H]                   final-normed in the last part, else the raw residual
             new_key, new_value [AR, Lp, kv, D]

All float tensors are fp16; matrices are int8 or 4-bit MatMulNBits (qnn_onnx.Builder.linear). Weight
initializers are named after the Hugging Face tensors only (never after AR or a counter), so the
prefill (AR=N) and decode (AR=1) graphs of one part name them identically and ORT's EP-context
sharing keeps one weight set for both.
"""

from __future__ import annotations

import numpy as np
import onnx

from qnn_onnx import Builder, Weights

MASK_MIN = -1000.0  # the host's value for a masked column (fp16-safe, as Genie / AI Hub use)
LAYER = "model.language_model.layers.{}."


def text_dims(text_cfg: dict) -> dict:
    """The text config's numbers the graphs depend on."""
    return {"H": text_cfg["hidden_size"], "nh": text_cfg["num_attention_heads"],
            "kv": text_cfg["num_key_value_heads"],
            "D": text_cfg.get("head_dim", text_cfg["hidden_size"] // text_cfg["num_attention_heads"]),
            "L": text_cfg["num_hidden_layers"], "eps": float(text_cfg["rms_norm_eps"])}


def block_io(dims: dict, layers: tuple[int, int], ar: int, cl: int, n_ds: int) -> tuple[list, list]:
    """The contract's (name, shape) inputs and outputs of one block graph; n_ds = 0: no deepstack."""
    H, kv, D = dims["H"], dims["kv"], dims["D"]
    lp = layers[1] - layers[0]
    inputs = [("inputs_embeds", [ar, H]), ("attention_mask", [ar, cl]),
              ("rope_cos", [ar, D // 2]), ("rope_sin", [ar, D // 2]),
              ("past_key", [cl - ar, lp, kv, D]), ("past_value", [cl - ar, lp, kv, D])]
    if n_ds:
        inputs.append(("deepstack", [n_ds, ar, H]))
    outputs = [("hidden", [ar, H]), ("new_key", [ar, lp, kv, D]), ("new_value", [ar, lp, kv, D])]
    return inputs, outputs


def _decoder_layer(b: Builder, w: Weights, dims: dict, layer: int, x: str, cos: str, sin_signed: str,
                   past_k: str, past_v: str, ar: int, cl: int) -> tuple[str, str, str]:
    """One Qwen3 layer on x [1, AR, H]; returns (x_out [1, AR, H], k [AR, kv, D], v [AR, kv, D])."""
    H, nh, kv, D, eps = dims["H"], dims["nh"], dims["kv"], dims["D"], dims["eps"]
    rep, half, p = nh // kv, D // 2, LAYER.format(layer)

    def lin(t: str, name: str) -> str:
        return b.linear(t, w.matrix(p + name + ".weight"), p + name)

    def rope(t: str, name: str) -> str:  # t [AR, heads, D]: t*cos + rotate_half(t)*sin
        swapped = b.op("Concat", [b.slice(t, half, D, 2, f"{name}.hi"), b.slice(t, 0, half, 2, f"{name}.lo")],
                       f"{name}.swap", axis=2)                                    # cat(x2, x1)
        return b.op("Add", [b.op("Mul", [t, cos], f"{name}.c"), b.op("Mul", [swapped, sin_signed], f"{name}.s")], name)

    def head_norm(t: str, heads: int, weight: np.ndarray, name: str) -> str:  # [1, AR, heads*D] -> [AR, heads, D]
        # Normed as [1, AR*heads, D]: the HTP's RmsNorm on [AR, heads, D] returned wrong rows for
        # few heads ([64, 2, 128], [16, 2, 128], [64, 8, 32]) in x86 emulation (QAIRT 2.51) [probed].
        t = b.rms_norm(b.reshape(t, [1, ar * heads, D], f"{name}.flat"), weight, eps, name)
        return b.reshape(t, [ar, heads, D], f"{name}.heads")

    h = b.rms_norm(x, w.vector(p + "input_layernorm.weight"), eps, p + "input_layernorm")   # [1, AR, H]
    # The softmax scale D^-0.5 is folded into q_norm's weight (RMSNorm and RoPE are linear in it).
    q = head_norm(lin(h, "self_attn.q_proj"), nh, w.vector(p + "self_attn.q_norm.weight") * D ** -0.5,
                  p + "self_attn.q_norm")                                         # [AR, nh, D]
    k = head_norm(lin(h, "self_attn.k_proj"), kv, w.vector(p + "self_attn.k_norm.weight"),
                  p + "self_attn.k_norm")                                         # [AR, kv, D]
    v = b.reshape(lin(h, "self_attn.v_proj"), [ar, kv, D], f"l{layer}.v")        # [AR, kv, D]
    q, k = rope(q, f"l{layer}.q_rope"), rope(k, f"l{layer}.k_rope")             # [AR, nh|kv, D]

    keys = b.op("Concat", [past_k, k], f"l{layer}.keys", axis=0)                  # [CL, kv, D]
    values = b.op("Concat", [past_v, v], f"l{layer}.values", axis=0)              # [CL, kv, D]
    # GQA without copying the KV: query head g*rep + r reads kv head g, so the rep query heads of
    # a group are stacked as rows of one matrix product per kv head.
    qg = b.reshape(b.transpose(b.reshape(q, [ar, kv, rep, D], f"l{layer}.q4"), [1, 2, 0, 3], f"l{layer}.qt"),
                   [kv, rep * ar, D], f"l{layer}.qg")                              # [kv, rep*AR, D]
    kt = b.transpose(keys, [1, 2, 0], f"l{layer}.kt")                             # [kv, D, CL]
    scores = b.reshape(b.op("MatMul", [qg, kt], f"l{layer}.qk"), [kv, rep, ar, cl], f"l{layer}.s4")
    probs = b.op("Softmax", [b.op("Add", [scores, "attention_mask"], f"l{layer}.masked")], f"l{layer}.p", axis=-1)
    ctx = b.op("MatMul", [b.reshape(probs, [kv, rep * ar, cl], f"l{layer}.p3"),
                          b.transpose(values, [1, 0, 2], f"l{layer}.vt")], f"l{layer}.ctx")   # [kv, rep*AR, D]
    ctx = b.reshape(b.transpose(b.reshape(ctx, [kv, rep, ar, D], f"l{layer}.c4"), [2, 0, 1, 3], f"l{layer}.ct"),
                    [1, ar, nh * D], f"l{layer}.ctx3")                             # [1, AR, nh*D]
    x = b.op("Add", [x, lin(ctx, "self_attn.o_proj")], f"l{layer}.x_attn")        # [1, AR, H]

    h = b.rms_norm(x, w.vector(p + "post_attention_layernorm.weight"), eps, p + "post_attention_layernorm")
    gate, up = lin(h, "mlp.gate_proj"), lin(h, "mlp.up_proj")                     # [1, AR, I]
    act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate], f"l{layer}.sig")], f"l{layer}.silu"), up],
               f"l{layer}.act")
    x = b.op("Add", [x, lin(act, "mlp.down_proj")], f"l{layer}.x_out")             # [1, AR, H]
    return x, k, v


def build_block_model(w: Weights, dims: dict, layers: tuple[int, int], ar: int, cl: int, n_ds: int,
                      name: str) -> onnx.ModelProto:
    """The block graph of layers [l0, l1) over AR tokens, context CL (see the module docstring).

    n_ds > 0 only for the prefill graphs of parts holding a layer below n_ds (each takes the
    whole [n_ds, AR, H] and adds the entries of its own layers)."""
    l0, l1 = layers
    H, kv, D, lp = dims["H"], dims["kv"], dims["D"], l1 - l0
    if n_ds and l0 >= n_ds:
        raise ValueError(f"deepstack ({n_ds} layers) given to a part of layers {layers}, past them")
    b = Builder()
    x = b.reshape("inputs_embeds", [1, ar, H], "x0")                                     # [1, AR, H]
    cos = b.reshape(b.op("Concat", ["rope_cos", "rope_cos"], "cos_full", axis=-1), [ar, 1, D], "cos")
    neg_sin = b.op("Neg", ["rope_sin"], "neg_sin")
    sin_signed = b.reshape(b.op("Concat", [neg_sin, "rope_sin"], "sin_full", axis=-1), [ar, 1, D], "sin")
    new_k, new_v = [], []
    for j, layer in enumerate(range(l0, l1)):
        past_k = b.reshape(b.slice("past_key", j, j + 1, 1, f"l{layer}.pk"), [cl - ar, kv, D], f"l{layer}.past_k")
        past_v = b.reshape(b.slice("past_value", j, j + 1, 1, f"l{layer}.pv"), [cl - ar, kv, D], f"l{layer}.past_v")
        x, k, v = _decoder_layer(b, w, dims, layer, x, cos, sin_signed, past_k, past_v, ar, cl)
        new_k.append(b.reshape(k, [ar, 1, kv, D], f"l{layer}.k_out"))
        new_v.append(b.reshape(v, [ar, 1, kv, D], f"l{layer}.v_out"))
        if layer < n_ds:
            ds = b.reshape(b.slice("deepstack", layer, layer + 1, 0, f"ds{layer}"), [1, ar, H], f"ds{layer}.x")
            x = b.op("Add", [x, ds], f"l{layer}.x_ds")
    if l1 == dims["L"]:
        x = b.rms_norm(x, w.vector("model.language_model.norm.weight"), dims["eps"], "model.language_model.norm")
    b.output(b.reshape(x, [ar, H], "hidden2"), "hidden")
    b.output(new_k[0] if lp == 1 else b.op("Concat", new_k, "new_k", axis=1), "new_key")
    b.output(new_v[0] if lp == 1 else b.op("Concat", new_v, "new_v", axis=1), "new_value")
    inputs, outputs = block_io(dims, layers, ar, cl, n_ds)
    model = b.model(name, inputs, outputs)
    _prefix_intermediates(model, f"{name}/")
    model.metadata_props.add(key="int8_weight_bytes", value=str(b.weight_bytes))
    return model


def _prefix_intermediates(model: onnx.ModelProto, prefix: str) -> None:
    """Gives the graph's intermediate tensors names of their own. Two graphs of one shared context
    with equal intermediate names (a 1-layer part's prefill and decode) failed to compose:
    "Failed to pre-register input: inputs_embeds ... error code: 7003" [probed, QNN EP 2.7.0].
    Graph inputs, outputs and initializers (the shared weights) keep their names."""
    g = model.graph
    fixed = {v.name for v in g.input} | {v.name for v in g.output} | {t.name for t in g.initializer} | {""}
    for node in g.node:
        node.input[:] = [t if t in fixed else prefix + t for t in node.input]
        node.output[:] = [t if t in fixed else prefix + t for t in node.output]


def build_lm_head_model(w: Weights, name: str = "lm_head") -> onnx.ModelProto:
    """y [1, V] = x [1, H] . W^T with W the bundle's int8 lm_head.weight."""
    m = w.matrix("lm_head.weight")
    V, H = m.q.shape
    b = Builder()
    y = b.linear(b.reshape("x", [1, 1, H], "x3"), m, "lm_head")                      # [1, 1, V]
    b.output(b.reshape(y, [1, V], "y2"), "y")
    model = b.model(name, [("x", [1, H])], [("y", [1, V])])
    model.metadata_props.add(key="int8_weight_bytes", value=str(b.weight_bytes))
    return model
