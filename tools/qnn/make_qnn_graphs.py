#!/usr/bin/env python3
"""Build-time generator of QNN context binaries for the qnn-htp backend (never the hot path).

    make_qnn_graphs.py --checkpoint DIR --out DIR [--force]

Run with the QNN venv ($QHX_CACHE/qnn/venv, scripts/setup_qnn.sh): it needs onnx and ONNX
Runtime with the onnxruntime-qnn plugin EP, and nothing from the project venv (no torch).

From a Qwen3-VL checkpoint (a tiny one from tests/reference) it writes, into --out:

    lm_head.onnx / .bin / .json    y[1,V] = x[1,H] . W^T, W int8 per output row (weight-only)
    layer0.onnx / .bin / .json     decoder layer 0 over a fixed T-token block starting at 0
                                   (causal), rope cos/sin as inputs; outputs hidden, K, V
    lm_head_v75.bin                the lm-head prepared for HTP v75 (SM8650): the wrong-arch case
    weights_dq.safetensors         the int8 weights dequantized to f32 (q * scale, exact), so
                                   the CPU backend and the Python reference use the same weights
    qhx_stamp.json                 what was built, with the QAIRT and package versions

Each .bin is the QNN context binary that ONNX Runtime's QNN EP embeds in its EPContext model
(`ep_cache_context`); QHexRT loads it with QnnContext_createFromBinary. Each .json records the
graph name inside the binary and the ONNX graph's inputs and outputs (names, shapes, dtypes),
which the tests compare with what the QNN System API reads out of the binary.

Weight-only int8: ORT's QNN EP refuses a standalone per-channel DequantizeLinear (activations
are float, so there is no QDQ node unit to fold it into: "QNN EP does not support a standalone
DQ op with per-channel quantization"). A per-tensor DequantizeLinear is accepted, so each
projection is written as the equivalent

    y = (x . DQ(Wq, s0)^T) * (s / s0),    s0 = max(s), per-row s / s0 in (0, 1] as fp16

which is exactly x . (Wq * s)^T up to the fp16 rounding of s0 and s / s0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qnn_onnx import read_bundle_file

SCRIPT_VERSION = 1
HTP_ARCH = "79"       # Hexagon v79 ...
SOC_MODEL = "69"      # ... on SM8750 (Snapdragon 8 Elite): QNN's Qnn_SocModel_t value 69
WRONG_ARCH, WRONG_SOC = "75", "57"  # v75 on SM8650, for the arch-mismatch test
SEQ = 8               # the decoder layer's fixed block length
F16 = TensorProto.FLOAT16


# --- checkpoint reading (safetensors by hand: the QNN venv has no torch) -------------------

def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """A checkpoint's tensors as float32 (bf16, f16 or f32 on disk)."""
    return {k: v.astype(np.float32) for k, v in read_bundle_file(path).items()}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, np.float32)
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per output row: w ~ q * s[:, None]."""
    s = np.abs(w).max(axis=1) / 127.0
    s = np.where(s == 0, 1.0, s).astype(np.float32)
    q = np.clip(np.rint(w / s[:, None]), -127, 127).astype(np.int8)
    return q, s


# --- ONNX building ----------------------------------------------------------------------

class Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0
        self.dq: dict[str, np.ndarray] = {}  # name -> dequantized f32 weight (q * s)

    def tmp(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op: str, ins: list[str], base: str, **attrs) -> str:
        out = self.tmp(base)
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def linear(self, x: str, w: np.ndarray, name: str) -> str:
        """x[T, in] . W^T with W[out, in] as weight-only int8 (see the module docstring)."""
        q, s = quantize_rows(w)
        self.dq[name] = q.astype(np.float32) * s[:, None]
        s0 = np.float32(s.max())
        wq = self.const(f"{name}.wq", q)
        sc = self.const(f"{name}.s0", np.array(s0, np.float16))
        ratio = self.const(f"{name}.ratio", (s / s0).astype(np.float16))
        wf = self.op("DequantizeLinear", [wq, sc], f"{name}.w")
        y = self.op("Gemm", [x, wf], f"{name}.y", transB=1)
        return self.op("Mul", [y, ratio], f"{name}.out")

    def rms_norm(self, x: str, w: np.ndarray, eps: float, name: str) -> str:
        sq = self.op("Mul", [x, x], f"{name}.sq")
        ms = self.op("ReduceMean", [sq, self.const(f"{name}.axes", np.array([-1], np.int64))], f"{name}.ms",
                     keepdims=1)
        r = self.op("Sqrt", [self.op("Add", [ms, self.const(f"{name}.eps", np.array(eps, np.float16))],
                                     f"{name}.mse")], f"{name}.rms")
        n = self.op("Div", [x, r], f"{name}.n")
        return self.op("Mul", [n, self.const(f"{name}.w", w.astype(np.float16))], f"{name}.out")

    def reshape(self, x: str, shape: list[int], name: str) -> str:
        return self.op("Reshape", [x, self.const(self.tmp(f"{name}.shape"), np.array(shape, np.int64))], name)

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, name,
                              [helper.make_tensor_value_info(n, F16, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, F16, s) for n, s in outputs],
                              initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], producer_name="qhexrt")
        m.ir_version = 10
        onnx.checker.check_model(m)
        return m


def rename_output(b: Builder, tensor: str, name: str) -> None:
    b.nodes.append(helper.make_node("Identity", [tensor], [name]))


def lm_head_model(ckpt: dict[str, np.ndarray], H: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    w = ckpt.get("lm_head.weight", ckpt["model.language_model.embed_tokens.weight"])  # tied
    b = Builder()
    rename_output(b, b.linear("x", w, "lm_head"), "y")
    return b.model("lm_head", [("x", [1, H])], [("y", [1, w.shape[0]])]), b.dq


def layer_model(ckpt: dict[str, np.ndarray], cfg: dict) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Qwen3 decoder layer 0 over SEQ tokens at positions 0..SEQ-1, causal, no KV history."""
    H, nh, nkv, D = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, T = cfg["rms_norm_eps"], SEQ
    p = "model.language_model.layers.0."
    W = lambda n: ckpt[p + n]  # noqa: E731
    b = Builder()
    h = b.rms_norm("x", W("input_layernorm.weight"), eps, "in_norm")
    q = b.reshape(b.linear(h, W("self_attn.q_proj.weight"), p + "self_attn.q_proj.weight"), [T, nh, D], "q")
    k = b.reshape(b.linear(h, W("self_attn.k_proj.weight"), p + "self_attn.k_proj.weight"), [T, nkv, D], "k")
    v = b.reshape(b.linear(h, W("self_attn.v_proj.weight"), p + "self_attn.v_proj.weight"), [T, nkv, D], "v")
    q = b.rms_norm(q, W("self_attn.q_norm.weight"), eps, "q_norm")
    k = b.rms_norm(k, W("self_attn.k_norm.weight"), eps, "k_norm")
    cos = b.reshape("cos", [T, 1, D], "cos3")
    sin = b.reshape("sin", [T, 1, D], "sin3")

    def rope(t: str, name: str) -> str:
        half = D // 2
        lo = b.op("Slice", [t, b.const(b.tmp("s0"), np.array([0], np.int64)),
                            b.const(b.tmp("s1"), np.array([half], np.int64)),
                            b.const(b.tmp("ax"), np.array([2], np.int64))], f"{name}.lo")
        hi = b.op("Slice", [t, b.const(b.tmp("s0"), np.array([half], np.int64)),
                            b.const(b.tmp("s1"), np.array([D], np.int64)),
                            b.const(b.tmp("ax"), np.array([2], np.int64))], f"{name}.hi")
        rot = b.op("Concat", [b.op("Neg", [hi], f"{name}.nhi"), lo], f"{name}.rot", axis=2)
        return b.op("Add", [b.op("Mul", [t, cos], f"{name}.c"), b.op("Mul", [rot, sin], f"{name}.s")], name)

    q, k = rope(q, "q_rope"), rope(k, "k_rope")
    rename_output(b, k, "k")
    rename_output(b, v, "v")
    qh = b.op("Transpose", [q], "qh", perm=[1, 0, 2])                      # [nh, T, D]
    kh = b.op("Transpose", [k], "kh", perm=[1, 2, 0])                      # [nkv, D, T]
    vh = b.op("Transpose", [v], "vh", perm=[1, 0, 2])                      # [nkv, T, D]
    rep = nh // nkv  # GQA: query head i reads kv head i // rep
    kh = b.reshape(b.op("Expand", [b.reshape(kh, [nkv, 1, D, T], "kh4"),
                                   b.const("k_rep", np.array([nkv, rep, D, T], np.int64))], "khe"), [nh, D, T], "khr")
    vh = b.reshape(b.op("Expand", [b.reshape(vh, [nkv, 1, T, D], "vh4"),
                                   b.const("v_rep", np.array([nkv, rep, T, D], np.int64))], "vhe"), [nh, T, D], "vhr")
    scores = b.op("Mul", [b.op("MatMul", [qh, kh], "qk"),
                          b.const("scale", np.array(D ** -0.5, np.float16))], "scores")
    # Causal mask: a large negative rather than -inf (fp16 softmax of -inf rows is NaN-prone).
    mask = np.triu(np.full((T, T), -30000.0, np.float16), k=1)
    probs = b.op("Softmax", [b.op("Add", [scores, b.const("mask", mask)], "masked")], "probs", axis=-1)
    ctx = b.reshape(b.op("Transpose", [b.op("MatMul", [probs, vh], "ctx")], "ctxt", perm=[1, 0, 2]), [T, nh * D], "ctx2")
    x1 = b.op("Add", ["x", b.linear(ctx, W("self_attn.o_proj.weight"), p + "self_attn.o_proj.weight")], "x1")
    h2 = b.rms_norm(x1, W("post_attention_layernorm.weight"), eps, "post_norm")
    gate = b.linear(h2, W("mlp.gate_proj.weight"), p + "mlp.gate_proj.weight")
    up = b.linear(h2, W("mlp.up_proj.weight"), p + "mlp.up_proj.weight")
    act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate], "sig")], "silu"), up], "act")
    y = b.op("Add", [x1, b.linear(act, W("mlp.down_proj.weight"), p + "mlp.down_proj.weight")], "y0")
    rename_output(b, y, "y")
    m = b.model("layer0", [("x", [T, H]), ("cos", [T, D]), ("sin", [T, D])],
                [("y", [T, H]), ("k", [T, nkv, D]), ("v", [T, nkv, D])])
    return m, b.dq


# --- preparing for the HTP with ONNX Runtime's QNN EP ------------------------------------

def prepare(model: onnx.ModelProto, out_dir: Path, name: str, arch: str, soc: str) -> dict:
    """ONNX -> EPContext model (embedded) -> the raw QNN context binary `name`.bin."""
    import onnxruntime as ort
    import onnxruntime_qnn as qnn_ep

    ep_name = "QNNExecutionProvider"
    if ep_name not in {d.ep_name for d in ort.get_ep_devices()}:
        ort.register_execution_provider_library(ep_name, qnn_ep.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == ep_name]
    ctx_path = out_dir / f"{name}.ctx.onnx"
    ctx_path.unlink(missing_ok=True)  # ORT refuses to overwrite an EP-context model
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")  # all of it on the HTP, or fail
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_embed_mode", "1")
    so.add_session_config_entry("ep.context_file_path", str(ctx_path))
    so.add_provider_for_devices(devices, {"backend_path": qnn_ep.get_qnn_htp_path(), "htp_arch": arch,
                                          "soc_model": soc, "enable_htp_prepare_only": "1"})
    t0 = time.perf_counter()
    ort.InferenceSession(model.SerializeToString(), sess_options=so)
    seconds = time.perf_counter() - t0
    ctx = onnx.load(str(ctx_path))
    nodes = [n for n in ctx.graph.node if n.op_type == "EPContext"]
    if len(ctx.graph.node) != 1 or len(nodes) != 1:
        sys.exit(f"{name}: expected the whole graph in one EPContext node, got "
                 f"{[n.op_type for n in ctx.graph.node]}")
    attrs = {a.name: a for a in nodes[0].attribute}
    blob = attrs["ep_cache_context"].s
    (out_dir / f"{name}.bin").write_bytes(blob)
    ctx_path.unlink()
    return {"graph": attrs["partition_name"].s.decode(), "prepare_seconds": round(seconds, 3),
            "ep_sdk_version": attrs["ep_sdk_version"].s.decode(), "bytes": len(blob),
            "sha256": hashlib.sha256(blob).hexdigest(), "htp_arch": int(arch), "soc_model": int(soc)}


def io_json(model: onnx.ModelProto) -> dict:
    def conv(vs):
        return [{"name": v.name, "dtype": TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower(),
                 "shape": [d.dim_value for d in v.type.tensor_type.shape.dim]} for v in vs]
    return {"inputs": conv(model.graph.input), "outputs": conv(model.graph.output)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args()

    import onnxruntime as ort
    import onnxruntime_qnn as qnn_ep
    import onnxruntime_qnn.build_and_package_info as info

    ckpt_file = a.checkpoint / "model.safetensors"
    cfg_all = json.loads((a.checkpoint / "config.json").read_text())
    cfg = cfg_all.get("text_config", cfg_all)
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(hashlib.sha256(ckpt_file.read_bytes()).digest())
    h.update(f"{ort.__version__} {qnn_ep.__version__} {onnx.__version__} {info.qnn_version}".encode())
    stamp_hash = h.hexdigest()
    stamp_path = a.out / "qhx_stamp.json"
    if not a.force and stamp_path.exists():
        try:
            if json.loads(stamp_path.read_text()).get("hash") == stamp_hash:
                print(f"qnn graphs up to date in {a.out}")
                return
        except ValueError:
            pass
    a.out.mkdir(parents=True, exist_ok=True)
    stamp_path.unlink(missing_ok=True)  # written last: its presence marks a complete set

    ckpt = read_safetensors(ckpt_file)
    stamp = {"hash": stamp_hash, "script_version": SCRIPT_VERSION, "onnxruntime": ort.__version__,
             "onnxruntime_qnn": qnn_ep.__version__, "onnx": onnx.__version__, "qairt": info.qnn_version,
             "seq": SEQ, "graphs": {}}
    dq_all: dict[str, np.ndarray] = {}
    for name, (model, dq) in {"lm_head": lm_head_model(ckpt, cfg["hidden_size"]),
                              "layer0": layer_model(ckpt, cfg)}.items():
        onnx.save(model, str(a.out / f"{name}.onnx"))
        meta = prepare(model, a.out, name, HTP_ARCH, SOC_MODEL) | io_json(model)
        (a.out / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
        stamp["graphs"][name] = meta
        dq_all.update(dq)
        print(f"{name}: graph {meta['graph']}, {meta['bytes']} bytes, prepared in {meta['prepare_seconds']} s")
    model, _ = lm_head_model(ckpt, cfg["hidden_size"])
    meta = prepare(model, a.out, "lm_head_v75", WRONG_ARCH, WRONG_SOC) | io_json(model)
    (a.out / "lm_head_v75.json").write_text(json.dumps(meta, indent=1) + "\n")
    write_safetensors(a.out / "weights_dq.safetensors", dq_all)
    stamp_path.write_text(json.dumps(stamp, indent=1) + "\n")


if __name__ == "__main__":
    main()
