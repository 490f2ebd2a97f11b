"""Shared pieces of the QNN generators: reading a QHexRT bundle, building fp16 ONNX graphs
whose matrices stay int8 or 4-bit on the HTP, and preparing them with ONNX Runtime's QNN EP.

Run with the QNN venv ($QHX_CACHE/qnn/venv, scripts/setup_qnn.sh): onnx, numpy and ONNX
Runtime with the onnxruntime-qnn plugin EP; no torch.

Weights come from a CPU bundle written by `qhx_export --weights w8` or `w4` (docs/bundle.md),
so the HTP graphs and the CPU backend run the very same quantized weights. On the HTP a matrix
is `com.microsoft::MatMulNBits`: a w8 one with `bits=8` and `block_size=K` (one block per row:
the bundle's per-row scale), a w4 one with `bits=4` and the bundle's block (64 or 32); zero
points the default, so q is stored as q + 128 (q + 8). The scales travel as fp16 (the
activations' type, which MatMulNBits requires): a rounding of at most 2^-11 for w8, none for w4,
whose block scales have at most 8 significant bits.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F16 = TensorProto.FLOAT16
OPSET = 23          # RMSNormalization, LayerNormalization (one HTP op each)
MS_DOMAIN = "com.microsoft"
MAX_NODE_WEIGHTS = 1 << 22  # weights per MatMulNBits node (see Builder.linear)
SOC_MODELS = {"SM8650": ("75", "57"), "SM8750": ("79", "69"), "SM8850": ("81", "87")}  # soc -> (htp_arch, soc_model)


# --- bundle reading -------------------------------------------------------------------------

_DT = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "U8": np.uint8, "I32": np.int32, "I64": np.int64}


PANEL_PARTS = (".panels", ".row_sums", ".scale", ".shape")


def unpack_panels(panels: np.ndarray, scale: np.ndarray, shape: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A w8 matrix in the panel form (docs/bundle.md, "Panel form": q[r, c] at
    [r // 16, c // 4, r % 16, c % 4]) as row-major (q int8 [rows, cols], scale f32 [rows])."""
    rows, cols = (int(v) for v in shape)
    n, k4 = panels.shape[0], panels.shape[1]
    q = panels.transpose(0, 2, 1, 3).reshape(n * 16, k4 * 4)[:rows, :cols]
    return np.ascontiguousarray(q), scale[:rows].copy()


def read_bundle_file(path: Path, keep=None) -> dict[str, np.ndarray]:
    """All tensors of a bundle .bin (a safetensors file), padding entries left out; with
    keep(name) -> bool only those it keeps (a part of a large bundle). A w8 matrix in the
    panel form (bundle format 2) comes back as its row-major NAME and NAME.scale, as a
    format-1 file holds it."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        panel_names = {k[: -len(".panels")] for k in header if k.endswith(".panels")}

        def matrix_of(name: str):
            for suffix in PANEL_PARTS:
                if name.endswith(suffix) and name[: -len(suffix)] in panel_names:
                    return name[: -len(suffix)]
            return None

        def wanted(name: str) -> bool:
            m = matrix_of(name)
            if m is not None:  # every part of a panel matrix, if the matrix or its scale is kept
                return keep is None or keep(m) or keep(m + ".scale")
            return keep is None or keep(name)

        out = {}
        for name, meta in header.items():
            if name == "__metadata__" or name.startswith("__pad.") or not wanted(name):
                continue
            a, b = meta["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            dt = meta["dtype"]
            if dt == "BF16":
                arr = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                arr = np.frombuffer(raw, _DT[dt])
            out[name] = arr.reshape(meta["shape"])
    for m in panel_names:
        if m + ".panels" in out:
            out[m], out[m + ".scale"] = unpack_panels(out[m + ".panels"], out[m + ".scale"], out[m + ".shape"])
            for suffix in (".panels", ".row_sums", ".shape"):
                del out[m + suffix]
    return {k: v for k, v in out.items() if keep is None or keep(k)}


def read_bundle_metadata(path: Path) -> dict[str, str]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


@dataclass
class Matrix:
    """A quantized matrix of the bundle: value (r, c) = q[r, c] * scale[r, c // block].
    w8: q in [-127, 127], one block per row (scale [N]); w4: q in [-8, 7], scale [N, K / block]."""
    q: np.ndarray      # int8 [N, K]
    scale: np.ndarray  # f32 [N] (bits 8) or [N, K / block] (bits 4)
    bits: int

    @property
    def block(self) -> int:
        return self.q.shape[1] if self.bits == 8 else self.q.shape[1] // self.scale.shape[1]

    def rows(self, a: int, b: int) -> "Matrix":
        return Matrix(self.q[a:b], self.scale[a:b], self.bits)

    def dequantized(self) -> np.ndarray:  # exact in f32: one product per value
        s = self.scale[:, None] if self.bits == 8 else np.repeat(self.scale, self.block, axis=1)
        return self.q.astype(np.float32) * s


def unpack_w4(packed: np.ndarray) -> np.ndarray:
    """U8 [N, K/2] (column 2j in the low nibble of byte j, two's complement) -> int8 [N, K]."""
    nib = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1).astype(np.int8)
    return np.where(nib >= 8, nib - 16, nib).astype(np.int8)


class Weights:
    """A bundle's tensors by Hugging Face name; quantized matrices as Matrix (w8 or w4)."""

    def __init__(self, bundle: Path, files: list[str], keep=None):
        self.t: dict[str, np.ndarray] = {}
        self.w4_block: dict[str, int] = {}  # w4 matrix -> its block (docs/bundle.md, "w4")
        for f in files:
            got = read_bundle_file(bundle / f, keep)
            # Files written before "w4_block" hold groups of 32 with a scale each.
            meta = read_bundle_metadata(bundle / f)
            if meta.get("w4_scales") == "free" and any(v.dtype == np.uint8 for v in got.values()):
                sys.exit(f"{bundle / f}: its w4 matrices have free scales (qhx_export's CPU default); the HTP takes "
                         "LPBQ blocks: export with --w4-scales lpbq (or --target qnn-htp)")
            block = int(meta.get("w4_block", "32"))
            self.w4_block.update({k: block for k, v in got.items() if v.dtype == np.uint8})
            self.t.update(got)

    def matrix(self, name: str) -> Matrix:
        q = self.t.get(name)
        if q is None or name + ".scale" not in self.t or q.dtype not in (np.int8, np.uint8):
            sys.exit(f"{name}: expected a w8 (int8) or w4 (uint8) matrix with a .scale; export the bundle with "
                     "--weights w8 or w4")
        scale = self.t[name + ".scale"].astype(np.float32)
        if q.dtype == np.int8:
            return Matrix(q, scale, 8)
        block = self.w4_block[name]
        per_block = block // 32
        blocks = scale.reshape(scale.shape[0], -1, per_block)
        if not np.all(blocks == blocks[:, :, :1]):
            sys.exit(f"{name}: its w4 scales differ within a block of {block} columns (the file says w4_block {block})")
        return Matrix(unpack_w4(q), np.ascontiguousarray(blocks[:, :, 0]), 4)

    def vector(self, name: str) -> np.ndarray:
        return self.t[name].astype(np.float32)

    def has(self, name: str) -> bool:
        return name in self.t


# --- ONNX building --------------------------------------------------------------------------

class Builder:
    """An fp16 ONNX graph under construction; every intermediate gets a readable name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0
        self.weight_bytes = 0  # bytes of matrices as int8 (what the binary should hold)

    def tmp(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def ints(self, vals: list[int], base: str = "c") -> str:
        return self.const(self.tmp(base), np.array(vals, np.int64))

    def f16(self, arr, name: str) -> str:
        return self.const(name, np.asarray(arr, np.float32).astype(np.float16))

    def op(self, op: str, ins: list[str], base: str, domain: str = "", **attrs) -> str:
        out = self.tmp(base)
        self.nodes.append(helper.make_node(op, ins, [out], domain=domain or None, **attrs))
        return out

    def output(self, tensor: str, name: str) -> None:
        self.nodes.append(helper.make_node("Identity", [tensor], [name]))

    def linear(self, x: str, m: Matrix, name: str, bias: np.ndarray | None = None) -> str:
        """x[1, T, K] . W^T -> [1, T, N] as MatMulNBits: w8 with bits 8 and one block per row
        (block_size K, the bundle's per-row scale), w4 with bits 4 and the bundle's blocks;
        zero points the default (128, 8), so q is stored as q + 128 (q + 8 in each nibble).

        A matrix over MAX_NODE_WEIGHTS is split by rows into a power-of-two number of
        MatMulNBits nodes concatenated along N (initializers `name.<i>.q`): finalization mode 3
        prepares a 151936x96 lm-head in 4 pieces in 2.9 s, whole in 21 s. Exactly 3 pieces failed
        to finalize every time (QNN_COMMON_ERROR_MEM_ALLOC: 6144x2048, 2048x6144, 151936x64;
        2, 4, 5, 6, 8, 16 passed), and mode 1 fails on many shapes whole or split [probed, QAIRT 2.51].
        With fp16 activations the QNN EP gives 4-bit weights per-block float scales (BW_FLOAT_BLOCK;
        its LPBQ encoding needs 16-bit quantized activations: docs/qnn.md)."""
        N, K = m.q.shape
        if K % 4 != 0:
            sys.exit(f"{name}: K = {K} is not a multiple of 4 (MatMulNBits' block size must be)")
        pieces = 1 << max(0, -(-N * K // MAX_NODE_WEIGHTS) - 1).bit_length()   # next power of two
        if pieces > 1:
            cut = [N * i // pieces for i in range(pieces + 1)]        # exactly `pieces` row ranges
            ys = [self.linear(x, m.rows(a, b), f"{name}.{i}", None if bias is None else bias[a:b])
                  for i, (a, b) in enumerate(zip(cut, cut[1:]))]
            return self.op("Concat", ys, name, axis=-1)
        if m.bits == 8:
            packed = (m.q.astype(np.int16) + 128).astype(np.uint8).reshape(N, 1, K)
        else:
            u = (m.q.astype(np.int16) + 8).astype(np.uint8)
            packed = (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8).reshape(N, K // m.block, m.block // 2)
        self.weight_bytes += packed.size + 2 * m.scale.size  # the weights and their fp16 scales
        ins = [x, self.const(f"{name}.q", packed), self.f16(m.scale, f"{name}.scale")]
        y = self.op("MatMulNBits", ins, name, domain=MS_DOMAIN, K=K, N=N, bits=m.bits, block_size=m.block)
        if bias is None:
            return y
        # A separate Add: the QNN EP (2.7.0) refuses MatMulNBits with its bias input.
        return self.op("Add", [y, self.f16(bias, f"{name}.bias")], f"{name}.biased")

    def rms_norm(self, x: str, w: np.ndarray, eps: float, name: str) -> str:
        return self.op("RMSNormalization", [x, self.f16(w, f"{name}.weight")], name, axis=-1, epsilon=float(eps))

    def layer_norm(self, x: str, w: np.ndarray, b: np.ndarray, eps: float, name: str) -> str:
        return self.op("LayerNormalization", [x, self.f16(w, f"{name}.weight"), self.f16(b, f"{name}.bias")], name,
                       axis=-1, epsilon=float(eps))

    def gelu_tanh(self, x: str, name: str) -> str:
        return self.op("Gelu", [x], name, approximate="tanh")

    def reshape(self, x: str, shape: list[int], name: str) -> str:
        return self.op("Reshape", [x, self.ints(shape, f"{name}.shape")], name)

    def transpose(self, x: str, perm: list[int], name: str) -> str:
        return self.op("Transpose", [x], name, perm=perm)

    def slice(self, x: str, start: int, end: int, axis: int, name: str) -> str:
        return self.op("Slice", [x, self.ints([start]), self.ints([end]), self.ints([axis])], name)

    def model(self, name: str, inputs: list[tuple[str, list[int]]], outputs: list[tuple[str, list[int]]]) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, name,
                              [helper.make_tensor_value_info(n, F16, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, F16, s) for n, s in outputs],
                              initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)],
                              producer_name="qhexrt")
        m.ir_version = 10
        onnx.checker.check_model(m)
        return m


def io_json(model: onnx.ModelProto) -> dict:
    def conv(vs):
        return [{"name": v.name, "dtype": TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower(),
                 "shape": [d.dim_value for d in v.type.tensor_type.shape.dim]} for v in vs]
    return {"inputs": conv(model.graph.input), "outputs": conv(model.graph.output)}


# --- preparing for the HTP with ONNX Runtime's QNN EP ---------------------------------------

def _qnn_devices():
    import onnxruntime as ort
    import onnxruntime_qnn as qnn_ep
    ep_name = "QNNExecutionProvider"
    if ep_name not in {d.ep_name for d in ort.get_ep_devices()}:
        ort.register_execution_provider_library(ep_name, qnn_ep.get_library_path())
    return [d for d in ort.get_ep_devices() if d.ep_name == ep_name]


def _session_options(ctx_path: Path, arch: str, soc: str, embed: bool, share: bool, last: bool, opt_mode: str):
    import onnxruntime as ort
    import onnxruntime_qnn as qnn_ep
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")  # all of it on the HTP, or fail
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_embed_mode", "1" if embed else "0")
    so.add_session_config_entry("ep.context_file_path", str(ctx_path))
    if share:
        so.add_session_config_entry("ep.share_ep_contexts", "1")
        if last:
            so.add_session_config_entry("ep.stop_share_ep_contexts", "1")
    so.add_provider_for_devices(_qnn_devices(), {
        "backend_path": qnn_ep.get_qnn_htp_path(), "htp_arch": arch, "soc_model": soc,
        "enable_htp_prepare_only": "1", "htp_graph_finalization_optimization_mode": opt_mode})
    return so


def _ep_context_nodes(ctx_path: Path, name: str) -> dict:
    ctx = onnx.load(str(ctx_path), load_external_data=False)
    nodes = [n for n in ctx.graph.node if n.op_type == "EPContext"]
    if len(ctx.graph.node) != 1 or len(nodes) != 1:
        sys.exit(f"{name}: expected the whole graph in one EPContext node (nothing on the CPU), got "
                 f"{[n.op_type for n in ctx.graph.node]}")
    return {a.name: a for a in nodes[0].attribute}


def prepare(model: onnx.ModelProto, out_dir: Path, name: str, arch: str, soc: str, opt_mode: str = "1") -> dict:
    """One graph -> the QNN context binary `name`.bin (one graph in it)."""
    import onnxruntime as ort
    ctx_path = out_dir / f"{name}.ctx.onnx"
    ctx_path.unlink(missing_ok=True)  # ORT refuses to overwrite an EP-context model
    so = _session_options(ctx_path, arch, soc, embed=True, share=False, last=False, opt_mode=opt_mode)
    t0 = time.perf_counter()
    ort.InferenceSession(model.SerializeToString(), sess_options=so)
    seconds = time.perf_counter() - t0
    attrs = _ep_context_nodes(ctx_path, name)
    blob = attrs["ep_cache_context"].s
    (out_dir / f"{name}.bin").write_bytes(blob)
    ctx_path.unlink()
    return {"file": f"{name}.bin", "graphs": [attrs["partition_name"].s.decode()],
            "prepare_seconds": round(seconds, 3), "ep_sdk_version": attrs["ep_sdk_version"].s.decode(),
            "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest(), "htp_arch": int(arch),
            "soc_model": int(soc)}


def prepare_shared(models: list[tuple[str, onnx.ModelProto]], out_dir: Path, name: str, arch: str, soc: str,
                   opt_mode: str = "1") -> dict:
    """Several graphs over one weight set -> one weight-shared context binary `name`.bin.

    Sessions created one after another in this process with identical provider options,
    ep.share_ep_contexts=1 (the last also ep.stop_share_ep_contexts=1) and embed mode 0: ORT
    writes one .bin that every EP-context model names in its ep_cache_context attribute.
    The graphs must name their shared initializers identically.

    [probed, ORT 1.32 + onnxruntime-qnn 2.7.0] The .bin lands next to the FIRST session's
    EP-context model as `<its file name minus .onnx>_qnn.bin` (here `name.<graph>.ctx_qnn.bin`),
    and every later EP-context model names that same file; it is renamed to `name`.bin here.
    Graph names are each session's partition_name (`QNNExecutionProvider_QNNExecutionProvider_
    <model hash>_1_0`), the same as a non-shared prepare of the same model gives.
    """
    import onnxruntime as ort
    graphs, seconds, cache = [], 0.0, None
    ctx_paths = []
    for i, (gname, model) in enumerate(models):
        ctx_path = out_dir / f"{name}.{gname}.ctx.onnx"
        ctx_path.unlink(missing_ok=True)
        so = _session_options(ctx_path, arch, soc, embed=False, share=True, last=i == len(models) - 1,
                              opt_mode=opt_mode)
        t0 = time.perf_counter()
        ort.InferenceSession(model.SerializeToString(), sess_options=so)
        seconds += time.perf_counter() - t0
        attrs = _ep_context_nodes(ctx_path, gname)
        file = attrs["ep_cache_context"].s.decode()
        if cache is not None and file != cache:
            sys.exit(f"{name}: graph {gname} went to {file}, not to the shared {cache}")
        cache = file
        graphs.append(attrs["partition_name"].s.decode())
        sdk = attrs["ep_sdk_version"].s.decode()
        ctx_paths.append(ctx_path)
    src = out_dir / cache
    dst = out_dir / f"{name}.bin"
    src.replace(dst)
    for p in ctx_paths:
        p.unlink()
    blob = dst.read_bytes()
    return {"file": dst.name, "graphs": graphs, "prepare_seconds": round(seconds, 3), "ep_sdk_version": sdk,
            "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest(), "htp_arch": int(arch),
            "soc_model": int(soc)}
