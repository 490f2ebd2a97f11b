#!/usr/bin/env python3
"""Prepare the vision graph (vision_graph.py) for the HTP, run the binary in x86 emulation
through ONNX Runtime's QNN EP, and compare it with the CPU backend's own intermediates.

The dump comes from the CPU backend on the same w8 bundle with f32 activations on the vision
graph (the HTP runs fp16 activations over the same int8 weights):

    qhx_generate -m VLM_MANIFEST_WITH_F32_VISION -p "Describe this image." --image IMG -n 1 \
        --temp 0 --dump-dir DUMP

It reads from DUMP (all f32 .npy):
    vision.patch_embed [n, Hv] + vision.pos_embed [n, Hv]  = stage F's output, the graph's `hidden`
    vision.rope_cos / vision.rope_sin [n, hd]               first hd/2 columns = `rope_cos` / `rope_sin`
    vision.merger [m, H]                                    expected `image_embeds`
    vision.deepstack{k} [m, H], k = 0..n_ds-1               expected `deepstack[k]`

    vision.block{i} [n, Hv], i = 0..depth-1                 each block's output (checked through the twin)

Writes BINARY_DIR/vis_native_<S>.bin (the QNN context binary) and .json (prepare figures, I/O),
and vis_native_<S>_blocks.bin, a test twin that also outputs every block's residual stream.
Prints cosine and relative L2 per output and per block update (output - input); exits 1 if any
cosine is under --min-cosine or a block update's relative L2 over --max-update-rel-l2.

    ~/.cache/qhexrt/qnn/venv/bin/python tools/qnn/check_vision_graph.py \
        --bundle /work/snap/bundles/tiny_a-w8 --dump DUMP --binary-dir OUT
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
from qnn_onnx import SOC_MODELS, F16, Weights, _qnn_devices, io_json, prepare  # noqa: E402
from vision_graph import build_vision_model  # noqa: E402


def ep_context_model(blob: bytes, meta: dict) -> onnx.ModelProto:
    """A one-node EPContext model around a QNN context binary, so ORT can execute it."""
    node = helper.make_node("EPContext", [i["name"] for i in meta["inputs"]], [o["name"] for o in meta["outputs"]],
                            domain="com.microsoft", main_context=1, embed_mode=1, ep_cache_context=blob,
                            source="QNNExecutionProvider", partition_name=meta["graphs"][0],
                            ep_sdk_version=meta["ep_sdk_version"])
    vi = lambda ios: [helper.make_tensor_value_info(t["name"], F16, t["shape"]) for t in ios]  # noqa: E731
    g = helper.make_graph([node], "vision_ctx", vi(meta["inputs"]), vi(meta["outputs"]))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m


def run_binary(blob: bytes, meta: dict, arch: str, soc: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Execute the context binary on the emulated HTP (no CPU fallback)."""
    import onnxruntime as ort
    import onnxruntime_qnn as qnn_ep
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices(_qnn_devices(), {"backend_path": qnn_ep.get_qnn_htp_path(), "htp_arch": arch,
                                                 "soc_model": soc})
    sess = ort.InferenceSession(ep_context_model(blob, meta).SerializeToString(), sess_options=so)
    return sess.run(None, feeds)


def compare(name: str, got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    cos = float(g @ w / (np.linalg.norm(g) * np.linalg.norm(w)))
    rel = float(np.linalg.norm(g - w) / np.linalg.norm(w))
    print(f"  {name:14s} {str(list(got.shape)):14s} cosine {cos:.8f}  rel L2 {rel:.3e}  max abs err "
          f"{np.abs(g - w).max():.3e}")
    return cos, rel


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", type=Path, required=True, help="a CPU w8 bundle (vis_native_<S>.bin, config.json)")
    ap.add_argument("--dump", type=Path, help="the CPU backend's --dump-dir (omit: prepare only)")
    ap.add_argument("--binary-dir", type=Path, required=True, help="where vis_native_<S>.bin/.json go")
    ap.add_argument("--soc", default="SM8750", choices=sorted(SOC_MODELS))
    ap.add_argument("--min-cosine", type=float, default=0.9999)
    ap.add_argument("--max-update-rel-l2", type=float, default=16 * 2.0 ** -11,
                    help="bound on each block update's rel L2 (default 16 fp16 unit roundoffs; measured <= 7u, "
                         "a graph without rope gives 20-40u on tiny_a)")
    ap.add_argument("--reuse", action="store_true", help="run an existing binary instead of preparing again")
    a = ap.parse_args()

    weights_files = sorted(a.bundle.glob("vis_native_*.bin"))
    if len(weights_files) != 1:
        sys.exit(f"{a.bundle}: expected one vis_native_<S>.bin, found {[f.name for f in weights_files]}")
    name = weights_files[0].stem                        # vis_native_<S>
    size = int(name.rsplit("_", 1)[1])
    cfg = json.loads((a.bundle / "config.json").read_text())
    vcfg, text_hidden = cfg["vision_config"], cfg["text_config"]["hidden_size"]
    arch, soc = SOC_MODELS[a.soc]
    a.binary_dir.mkdir(parents=True, exist_ok=True)
    bin_path, meta_path = a.binary_dir / f"{name}.bin", a.binary_dir / f"{name}.json"

    def build(block_outputs: bool) -> onnx.ModelProto:
        return build_vision_model(Weights(a.bundle, [weights_files[0].name]), vcfg, text_hidden, size, block_outputs)

    if not (a.reuse and bin_path.exists()):
        model = build(False)
        int8_bytes = sum(t.dims[0] * t.dims[2] for t in model.graph.initializer if t.name.endswith(".q"))
        meta = prepare(model, a.binary_dir, name, arch, soc) | io_json(model)
        meta["int8_weight_bytes"] = int8_bytes
        meta_path.write_text(json.dumps(meta, indent=1) + "\n")
        print(f"{name}: S={size}, {len(model.graph.node)} ONNX nodes, prepared for v{arch}/{a.soc} in "
              f"{meta['prepare_seconds']:.2f} s: binary {meta['bytes']:,} B; int8 weights {int8_bytes:,} B "
              f"(as fp16 {2 * int8_bytes:,} B); binary / fp16 = {meta['bytes'] / (2 * int8_bytes):.3f}")
    meta = json.loads(meta_path.read_text())
    if a.dump is None:
        return 0

    d = lambda t: np.load(a.dump / f"{t}.npy")  # noqa: E731
    hd2 = vcfg["hidden_size"] // vcfg["num_heads"] // 2
    hidden = d("vision.patch_embed") + d("vision.pos_embed")         # [n, Hv] f32: stage F's output
    feeds = {"hidden": hidden.astype(np.float16),
             "rope_cos": d("vision.rope_cos")[:, :hd2].astype(np.float16),  # [n, hd/2]
             "rope_sin": d("vision.rope_sin")[:, :hd2].astype(np.float16)}
    t0 = time.perf_counter()
    embeds, deepstack = run_binary(bin_path.read_bytes(), meta, arch, soc, feeds)
    print(f"{name}.bin executed in emulation in {time.perf_counter() - t0:.2f} s (session load included); "
          f"vs the CPU dump:")
    cosines = [compare("image_embeds", embeds, d("vision.merger"))[0]]
    for k in range(len(vcfg["deepstack_visual_indexes"])):
        cosines.append(compare(f"deepstack[{k}]", deepstack[k], d(f"vision.deepstack{k}"))[0])

    # The twin with every block's output: each block's update (output - input) against the
    # CPU's, which a wrong rope, attention or MLP detail moves far more than the final outputs.
    twin = build(True)
    twin_meta = prepare(twin, a.binary_dir, f"{name}_blocks", arch, soc) | io_json(twin)
    got = run_binary((a.binary_dir / f"{name}_blocks.bin").read_bytes(), twin_meta, arch, soc, feeds)[2:]
    print(f"{name}_blocks.bin (test twin, block outputs): each block's update vs the CPU dump:")
    prev_got, prev_want = feeds["hidden"].astype(np.float32), hidden
    rels = []
    for i, g in enumerate(got):
        want = d(f"vision.block{i}")
        cos, rel = compare(f"block{i} update", g.astype(np.float32) - prev_got, want - prev_want)
        cosines.append(cos)
        rels.append(rel)
        prev_got, prev_want = g.astype(np.float32), want
    ok = min(cosines) >= a.min_cosine and max(rels) <= a.max_update_rel_l2
    print(f"{'PASS' if ok else 'FAIL'}: min cosine {min(cosines):.8f} (bound {a.min_cosine}), max block-update "
          f"rel L2 {max(rels):.3e} (bound {a.max_update_rel_l2:.3e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
