#!/usr/bin/env python3
"""Checks what make_qnn_bundle.py wrote for the text side, in x86 HTP emulation; exits non-zero
on failure and prints the figures.

    check_text_graphs.py --bundle CPU_W8_BUNDLE --graphs QNN_DIR [--seed 0] [--load-only]

--load-only (for the 2B, whose graphs take hours to execute in emulation): the sharing and
storage checks, then each twin and the lm-head is loaded (QnnContext_createFromBinary through
the EP), not executed.

Run with the QNN venv. The x86 emulator refuses weight-shared multi-graph binaries, so the
numerics run the non-shared twins (the same ONNX graphs prepared alone) and the shared binaries
are checked by content: both graph names inside, and one weight set (prefill + decode - shared
is the size of one weight set, which must be the int8 bytes, not fp16's twice that).

Numerics: each twin .bin is wrapped in an embed-mode-1 EPContext model and executed by ONNX
Runtime's QNN EP on contract inputs (real embedding rows, a mask with V valid past rows, a
causal block with padded rows, DeepStack rows, RoPE tables of the real positions), and compared
with a float32 numpy reference of the same math on the dequantized int8 weights (q * scale),
written the Hugging Face way (repeat_kv, rotate_half). Parts are chained as the runtime chains
them: part k's hidden is part k+1's inputs_embeds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qnn_onnx import MS_DOMAIN, Weights, _qnn_devices, read_bundle_file  # noqa: E402
import text_graphs as tg  # noqa: E402

MIN_COSINE = 0.9999
MAX_REL_L2 = 1.5e-2  # the rel L2 a cosine of 0.9999 allows (sqrt(2 (1 - cos))); fp16 error grows with depth:
                     # the 2B decode chain measured 4.5e-3 after 7 layers, 6.3e-3 after 14, 7.7e-3 after 21


# --- running a context binary in emulation --------------------------------------------------

def session(bin_path: Path, graph: str, inputs: list, outputs: list):
    """An ORT session executing the context binary through the QNN EP (embed-mode-1 wrapper)."""
    import onnxruntime as ort
    import onnxruntime_qnn as qnn_ep
    f16 = onnx.TensorProto.FLOAT16
    node = helper.make_node("EPContext", [n for n, _ in inputs], [n for n, _ in outputs], domain=MS_DOMAIN,
                            main_context=1, embed_mode=1, ep_cache_context=bin_path.read_bytes(),
                            partition_name=graph, source="QNNExecutionProvider")
    g = helper.make_graph([node], graph, [helper.make_tensor_value_info(n, f16, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, f16, s) for n, s in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid(MS_DOMAIN, 1)])
    m.ir_version = 10
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices(_qnn_devices(), {"backend_path": qnn_ep.get_qnn_htp_path()})
    return ort.InferenceSession(m.SerializeToString(), sess_options=so)


def run(sess, feeds: dict) -> dict:
    outs = sess.run(None, {k: v.astype(np.float16) for k, v in feeds.items()})
    return {o.name: r.astype(np.float32) for o, r in zip(sess.get_outputs(), outs)}


# --- the float32 reference ------------------------------------------------------------------

class Reference:
    def __init__(self, w: Weights, dims: dict):
        self.w, self.d = w, dims

    def mat(self, name: str) -> np.ndarray:  # W [N, K] = q * scale, exact in f32
        return self.w.matrix(name).dequantized()

    def rms(self, x: np.ndarray, weight: str) -> np.ndarray:
        x64 = x.astype(np.float64)
        r = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + self.d["eps"])
        return (r * self.w.vector(weight)).astype(np.float32)

    @staticmethod
    def rope(t: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:  # t [T, h, D], cos [T, D/2]
        half = t.shape[-1] // 2
        rot = np.concatenate([-t[..., half:], t[..., :half]], -1)          # rotate_half
        c, s = np.concatenate([cos, cos], -1)[:, None], np.concatenate([sin, sin], -1)[:, None]
        return t * c + rot * s

    def qkv(self, layer: int, x: np.ndarray, cos, sin):
        d, p = self.d, tg.LAYER.format(layer)
        h = self.rms(x, p + "input_layernorm.weight")
        q = (h @ self.mat(p + "self_attn.q_proj.weight").T).reshape(len(x), d["nh"], d["D"])
        k = (h @ self.mat(p + "self_attn.k_proj.weight").T).reshape(len(x), d["kv"], d["D"])
        v = (h @ self.mat(p + "self_attn.v_proj.weight").T).reshape(len(x), d["kv"], d["D"])
        q = self.rope(self.rms(q, p + "self_attn.q_norm.weight"), cos, sin)
        k = self.rope(self.rms(k, p + "self_attn.k_norm.weight"), cos, sin)
        return q, k, v

    def layer(self, layer: int, x, cos, sin, past_k, past_v, mask):
        d, p = self.d, tg.LAYER.format(layer)
        q, k, v = self.qkv(layer, x, cos, sin)
        rep = d["nh"] // d["kv"]
        keys = np.repeat(np.concatenate([past_k, k]), rep, axis=1)        # [CL, nh, D] (repeat_kv)
        values = np.repeat(np.concatenate([past_v, v]), rep, axis=1)
        scores = np.einsum("thd,chd->htc", q, keys) * d["D"] ** -0.5 + mask[None]
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = np.einsum("htc,chd->thd", probs, values).reshape(len(x), -1)
        x = x + ctx @ self.mat(p + "self_attn.o_proj.weight").T
        h = self.rms(x, p + "post_attention_layernorm.weight")
        g, u = h @ self.mat(p + "mlp.gate_proj.weight").T, h @ self.mat(p + "mlp.up_proj.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ self.mat(p + "mlp.down_proj.weight").T
        return x, k, v


# --- contract inputs ------------------------------------------------------------------------

def f16(a) -> np.ndarray:
    """Rounded to fp16 and back: what the graph receives, so both sides see the same inputs."""
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


def rope_tables(positions: np.ndarray, D: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    inv_freq = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)                # [D/2]
    ang = positions[:, None].astype(np.float64) * inv_freq[None]                   # [T, D/2]
    return f16(np.cos(ang)), f16(np.sin(ang))


def make_mask(ar: int, cl: int, valid_past: int, valid_block: int) -> np.ndarray:
    """[AR, CL] additive: valid past rows, causal block; padded block rows see only themselves."""
    mask = np.full((ar, cl), tg.MASK_MIN, np.float32)
    past = cl - ar
    mask[:, :valid_past] = 0
    for r in range(ar):
        mask[r, past:past + min(r, valid_block - 1) + 1] = 0
        mask[r, past + r] = 0
    return mask


def make_past(ref: Reference, layers, rows: int, valid: int, rng, theta: float):
    """Past K/V [rows, Lp, kv, D] the way the graphs made them (projections of normed random
    hidden states at positions 0..valid-1); rows past `valid` hold stale garbage (masked)."""
    d = ref.d
    pos = np.arange(rows)
    cos, sin = rope_tables(pos, d["D"], theta)
    ks, vs = [], []
    for layer in range(*layers):
        _, k, v = ref.qkv(layer, rng.standard_normal((rows, d["H"]), np.float32), cos, sin)
        k[valid:], v[valid:] = 3 * rng.standard_normal(k[valid:].shape), 3 * rng.standard_normal(v[valid:].shape)
        ks.append(k)
        vs.append(v)
    return f16(np.stack(ks, 1)), f16(np.stack(vs, 1))


def compare(name: str, got: np.ndarray, want: np.ndarray, failures: list) -> None:
    g, r = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    cos = g @ r / (np.linalg.norm(g) * np.linalg.norm(r))
    rel = np.linalg.norm(g - r) / np.linalg.norm(r)
    ok = np.isfinite(g).all() and cos >= MIN_COSINE and rel <= MAX_REL_L2
    print(f"  {name:<28} cosine {cos:.8f}  rel L2 {rel:.2e}  max abs {np.abs(g - r).max():.2e}  {'ok' if ok else 'FAIL'}")
    if not ok:
        failures.append(name)


# --- the checks -----------------------------------------------------------------------------

def check_block(role: str, ar: int, desc: dict, ref: Reference, cfg: dict, n_ds: int, gdir: Path, rng,
                failures: list) -> np.ndarray:
    """Runs the role's twins of all parts chained on one block; returns the reference hidden of
    the last valid row [1, H] (what the lm-head gets)."""
    d, cl = ref.d, desc["context_length"]
    theta = float(cfg["text_config"].get("rope_theta", 1e6))
    past_rows = cl - ar
    valid_past = past_rows * 2 // 3 if ar > 1 else past_rows - 7
    valid_block = ar - min(5, ar // 4) if ar > 1 else 1
    tokens = rng.integers(0, ref.embed.shape[0], ar)
    x_ref = f16(ref.embed[tokens])                                                 # [AR, H]
    x_htp = x_ref
    cos, sin = rope_tables(valid_past + np.arange(ar), d["D"], theta)
    mask = make_mask(ar, cl, valid_past, valid_block)
    deepstack = np.zeros((n_ds, ar, d["H"]), np.float32)
    deepstack[:, ar // 8: ar // 8 + ar // 2] = rng.standard_normal((n_ds, ar // 2, d["H"])) * x_ref.std() * 4
    deepstack = f16(deepstack)
    print(f"{role} (AR={ar}, CL={cl}: {valid_past} valid past rows, {valid_block} valid block rows)")
    for k, part in enumerate(desc["llm_parts"]):
        layers = tuple(part["layers"])
        ds = n_ds if role in ("prefill", "short") and layers[0] < n_ds else 0  # parts holding a DeepStack layer
        past_k, past_v = make_past(ref, layers, past_rows, valid_past, rng, theta)
        twin = part["twins"][role]
        inputs, outputs = tg.block_io(d, layers, ar, cl, ds)
        feeds = {"inputs_embeds": x_htp, "attention_mask": mask, "rope_cos": cos, "rope_sin": sin,
                 "past_key": past_k, "past_value": past_v}
        if ds:
            feeds["deepstack"] = deepstack
        t0 = time.perf_counter()
        sess = session(gdir / twin["file"], twin["graph"], inputs, outputs)
        t1 = time.perf_counter()
        got = run(sess, feeds)
        t2 = time.perf_counter()
        new_k, new_v = [], []
        for j, layer in enumerate(range(*layers)):
            x_ref, kk, vv = ref.layer(layer, x_ref, cos, sin, past_k[:, j], past_v[:, j], mask)
            if layer < ds:
                x_ref = x_ref + deepstack[layer]
            new_k.append(kk)
            new_v.append(vv)
        if layers[1] == d["L"]:
            x_ref = ref.rms(x_ref, "model.language_model.norm.weight")
        print(f" part {k + 1}/{len(desc['llm_parts'])} layers {list(layers)} {twin['file']}: "
              f"load {t1 - t0:.2f} s, execute {t2 - t1:.2f} s")
        compare(f"{role} hidden" + ("" if layers[1] == d["L"] else " (residual)"), got["hidden"], x_ref, failures)
        compare(f"{role} new_key", got["new_key"], np.stack(new_k, 1), failures)
        compare(f"{role} new_value", got["new_value"], np.stack(new_v, 1), failures)
        x_htp = got["hidden"]
    return x_ref[valid_block - 1:valid_block]


def block_of(desc: dict, role: str) -> int:
    """A role's AR (bundles before "blocks" had prefill and decode only)."""
    return desc.get("blocks", {"prefill": desc["prefill_chunk"], "decode": 1})[role]


def check_sharing(desc: dict, gdir: Path, failures: list) -> None:
    """Every block graph inside its part's shared binary, and the binary one weight set: the N
    twins hold N weight sets, the shared binary one, so (sum of twins - shared) / (N - 1) is one
    weight set, which must be the quantized bytes (fp16 would be twice the int8 bytes)."""
    print("sharing and quantized storage")
    for k, part in enumerate(desc["llm_parts"]):
        shared = (gdir / part["shared"]["file"]).read_bytes()
        names = list(part["shared"]["graphs"].values())
        inside = all(n.encode() in shared for n in names) and len(set(names)) == len(names) >= 2
        line = f"  part {k + 1}: {part['shared']['file']} {len(shared)} bytes, graphs {names} inside: {inside}"
        if not inside:
            failures.append(f"part {k + 1} shared graphs")
        if "twins" in part:
            twins = {r: t["bytes"] for r, t in part["twins"].items()}
            weight_set = (sum(twins.values()) - len(shared)) / (len(twins) - 1)
            ratio = weight_set / part["int8_weight_bytes"]
            ok = 0.9 <= ratio <= 1.3
            line += (f"\n    twins {twins}; shared / largest twin {len(shared) / max(twins.values()):.3f}; "
                     f"one weight set (twins - shared) / {len(twins) - 1} = {weight_set:.0f} = {ratio:.3f} x quantized "
                     f"bytes {part['int8_weight_bytes']} {'ok' if ok else 'FAIL'}")
            if not ok:
                failures.append(f"part {k + 1} weight set")
        print(line)


def load_only(desc: dict, gdir: Path, dims: dict, n_ds: int, failures: list) -> None:
    import resource
    cl, ar = desc["context_length"], desc["prefill_chunk"]
    contexts = []
    for part in desc.get("llm_parts", []):
        layers = tuple(part["layers"])
        for role, twin in part.get("twins", {}).items():
            io = tg.block_io(dims, layers, block_of(desc, role), cl,
                             n_ds if role in ("prefill", "short") and layers[0] < n_ds else 0)
            contexts.append((twin, io))
    if "lm_head" in desc:
        contexts.append((desc["lm_head"], ([("x", [1, dims["H"]])], [("y", [1, desc["lm_head"]["vocab"]])])))
    for meta, io in contexts:
        t0 = time.perf_counter()
        try:
            sess = session(gdir / meta["file"], meta["graph"], *io)
            del sess
            print(f"  load {meta['file']} ({meta['bytes'] / 1e6:.1f} MB): {time.perf_counter() - t0:.1f} s, "
                  f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB", flush=True)
        except Exception as e:  # noqa: BLE001 - report and go on to the next binary
            print(f"  load {meta['file']}: FAILED {type(e).__name__}: {e}", flush=True)
            failures.append(f"load {meta['file']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, type=Path)
    ap.add_argument("--graphs", required=True, type=Path, help="the directory make_qnn_bundle.py wrote")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--load-only", action="store_true", help="create each twin's and the lm-head's context, no execution")
    ap.add_argument("--roles", default="prefill,short,verify,decode",
                    help="block graphs to execute, those the bundle has (decode alone for the 2B)")
    a = ap.parse_args()
    t_start = time.perf_counter()
    desc = json.loads((a.graphs / "qnn_graphs.json").read_text())
    cfg = json.loads((a.bundle / "config.json").read_text())
    dims = tg.text_dims(cfg["text_config"])
    n_ds = len(cfg.get("vision_config", {}).get("deepstack_visual_indexes", []))
    rng = np.random.default_rng(a.seed)
    failures: list[str] = []
    hidden = None
    if a.load_only:
        if "llm_parts" in desc:
            check_sharing(desc, a.graphs, failures)
        if "lm_head" in desc:
            desc["lm_head"]["vocab"] = read_bundle_file(a.bundle / "lmhead_wqo.bin", lambda n: n.endswith(".scale"))[
                "lm_head.weight.scale"].shape[0]                                    # V, without reading W
        load_only(desc, a.graphs, dims, n_ds, failures)
        print(f"loaded in {time.perf_counter() - t_start:.1f} s: " + ("FAILED " + ", ".join(failures) if failures else "all ok"))
        sys.exit(1 if failures else 0)
    if "llm_parts" in desc:
        layer_file = next(a.bundle.glob("llm_shared_*.bin"))
        ref = Reference(Weights(a.bundle, [layer_file.name]), dims)
        embed_file = next(a.bundle.glob("embed_f*.bin"))
        ref.embed = read_bundle_file(embed_file)["model.language_model.embed_tokens.weight"].astype(np.float32)
        check_sharing(desc, a.graphs, failures)
        if all("twins" in p for p in desc["llm_parts"]):
            roles = [r for r in a.roles.split(",") if r in desc["llm_parts"][0]["twins"]]
            for role in roles:
                h = check_block(role, block_of(desc, role), desc, ref, cfg, n_ds, a.graphs, rng, failures)
                hidden = hidden if hidden is not None else h
        else:
            print("no twins: numerics not checked")
            failures.append("no twins")
    if "lm_head" in desc:
        lw = Weights(a.bundle, ["lmhead_wqo.bin"])
        head = lw.matrix("lm_head.weight")
        V, H = head.q.shape
        lm = desc["lm_head"]
        ok = lm["bytes"] <= 1.2 * V * H
        print(f"lm_head: {lm['file']} {lm['bytes']} bytes = {lm['bytes'] / (V * H):.3f} x int8 bytes {V * H} "
              f"{'ok' if ok else 'FAIL (not int8?)'}")
        if not ok:
            failures.append("lm_head size")
        x = f16(hidden if hidden is not None else rng.standard_normal((1, H)))   # [1, H]
        t0 = time.perf_counter()
        sess = session(a.graphs / lm["file"], lm["graph"], [("x", [1, H])], [("y", [1, V])])
        got = run(sess, {"x": x})["y"]
        print(f"  load + execute {time.perf_counter() - t0:.2f} s")
        want = x.astype(np.float64) @ head.dequantized().T.astype(np.float64)
        compare("lm_head y", got, want, failures)
    print(f"checked in {time.perf_counter() - t_start:.1f} s: " + ("FAILED " + ", ".join(failures) if failures else "all ok"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
