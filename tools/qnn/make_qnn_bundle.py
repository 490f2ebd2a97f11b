#!/usr/bin/env python3
"""Build-time driver: a QHexRT CPU w8 bundle -> QNN context binaries for the Hexagon HTP.

    make_qnn_bundle.py --bundle CPU_W8_BUNDLE --out DIR --soc SM8750|SM8650|SM8850 --context CL
                       --prefill-chunk AR --image-size S [--parts N] [--no-twins]
                       [--graphs text,lm_head,vision] [--opt-mode 1] [--keep-onnx]

Run with the QNN venv ($QHX_CACHE/qnn/venv). The binaries hold the bundle's own int8 weights
(MatMulNBits, fp16 activations), so the HTP and the CPU backend compute with the same matrices.

Written into --out (which must not be the CPU bundle: both have an lmhead_wqo.bin):
    llm_shared_<S>[_<k>_of_<N>].bin   the decoder part k: graphs prefill (AR) and decode (AR=1)
                                      over ONE weight set (ORT EP-context weight sharing)
    llm_prefill_<S>[...].bin, llm_decode_<S>[...].bin
                                      non-shared twins of the same graphs (the x86 emulator refuses
                                      weight-shared multi-graph binaries; these run the numerics)
    lmhead_wqo.bin                    the int8 lm-head, x[1,H] -> y[1,V]
    vis_native_<S>.bin                the vision encoder (tools/qnn/vision_graph.py), when built
    qnn_graphs.json                   what the C++ exporter reads; written last (tmp + rename),
                                      so its presence marks a complete set

The decoder is split into parts (about one per 400 MB of int8 layer weights) because preparing
costs roughly 10x the weights in RAM and a device's process domain holds a few GB.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qnn_onnx import SOC_MODELS, Weights, prepare, prepare_shared  # noqa: E402
import text_graphs as tg  # noqa: E402

PART_BYTES = 400e6  # int8 decoder weight bytes per part when --parts is not given


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def log(what: str, meta: dict, t0: float) -> None:
    print(f"{what}: {meta['file']} {meta['bytes'] / 1e6:.2f} MB, graphs {meta['graphs']}, prepare "
          f"{meta['prepare_seconds']} s, step {time.perf_counter() - t0:.1f} s, peak RSS {peak_rss_mb():.0f} MB",
          flush=True)


def split_layers(n_layers: int, n_parts: int) -> list[tuple[int, int]]:
    """[l0, l1) per part, sizes differing by at most one (the larger ones first)."""
    bounds, l0 = [], 0
    for k in range(n_parts):
        l1 = l0 + n_layers // n_parts + (1 if k < n_layers % n_parts else 0)
        bounds.append((l0, l1))
        l0 = l1
    return bounds


def decoder_int8_bytes(w: Weights, n_layers: int) -> int:
    return sum(a.size for n, a in w.t.items() if a.dtype.name == "int8" and n.startswith("model.language_model.layers.")
               and int(n.split(".")[3]) < n_layers)


def find_file(bundle: Path, prefix: str, size: int) -> str:
    """The bundle's `<prefix>_<size>.bin`, else its only `<prefix>_*.bin` (its image size may differ)."""
    if (bundle / f"{prefix}_{size}.bin").exists():
        return f"{prefix}_{size}.bin"
    found = sorted(p.name for p in bundle.glob(f"{prefix}_*.bin"))
    if len(found) != 1:
        sys.exit(f"{bundle}: expected one {prefix}_*.bin, found {found}")
    return found[0]


def entry(meta: dict) -> dict:
    return {"file": meta["file"], "graph": meta["graphs"][0], "bytes": meta["bytes"], "sha256": meta["sha256"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, type=Path, help="a CPU bundle exported with --weights w8")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--soc", required=True, choices=sorted(SOC_MODELS))
    ap.add_argument("--context", required=True, type=int, help="CL: KV rows a block attends over (past + block)")
    ap.add_argument("--prefill-chunk", required=True, type=int, help="AR of the prefill graph")
    ap.add_argument("--image-size", required=True, type=int)
    ap.add_argument("--parts", type=int, default=0, help="decoder parts (default: ~1 per 400 MB of int8 weights)")
    ap.add_argument("--no-twins", action="store_true", help="skip the non-shared twins (emulation numerics)")
    ap.add_argument("--graphs", default="text,lm_head,vision", help="comma list of text, lm_head, vision")
    ap.add_argument("--opt-mode", default="1", help="htp_graph_finalization_optimization_mode (3 for releases)")
    ap.add_argument("--keep-onnx", action="store_true", help="also save the .onnx graphs into --out/onnx")
    a = ap.parse_args()

    import onnxruntime_qnn as qnn_ep
    import onnxruntime_qnn.build_and_package_info as qnn_info

    graphs = set(a.graphs.split(","))
    if not graphs or graphs - {"text", "lm_head", "vision"}:
        sys.exit(f"--graphs: unknown {sorted(graphs - {'text', 'lm_head', 'vision'})}")
    if a.out.resolve() == a.bundle.resolve():
        sys.exit("--out must differ from --bundle (both hold an lmhead_wqo.bin)")
    AR, CL, S = a.prefill_chunk, a.context, a.image_size
    if not 1 <= AR < CL:
        sys.exit(f"--prefill-chunk {AR} must be in [1, --context {CL})")
    arch, soc = SOC_MODELS[a.soc]
    cfg = json.loads((a.bundle / "config.json").read_text())
    text_cfg = cfg.get("text_config", cfg)
    dims = tg.text_dims(text_cfg)
    n_ds = len(cfg.get("vision_config", {}).get("deepstack_visual_indexes", []))

    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "qnn_graphs.json").unlink(missing_ok=True)  # absent until the set is complete
    onnx_dir = a.out / "onnx" if a.keep_onnx else None
    if onnx_dir:
        onnx_dir.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".prep_", dir=a.out))  # EP-context models while preparing (same disk)

    def keep(model: onnx.ModelProto, name: str) -> None:
        if onnx_dir:
            onnx.save(model, str(onnx_dir / f"{name}.onnx"))

    def place(meta: dict) -> dict:  # a prepared .bin from the work dir into --out
        os.replace(work / meta["file"], a.out / meta["file"])
        return meta

    desc = {"qhexrt_qnn_graphs": 1, "soc": a.soc, "htp_arch": int(arch), "soc_model": int(soc),
            "qairt": qnn_info.qnn_version, "onnxruntime_qnn": qnn_ep.__version__, "context_length": CL,
            "prefill_chunk": AR, "image_size": S}
    int8_bytes, prepare_seconds = 0, 0.0

    if "text" in graphs:
        w = Weights(a.bundle, [find_file(a.bundle, "llm_shared", S)])
        layer_bytes = decoder_int8_bytes(w, dims["L"])
        n_parts = a.parts or max(1, math.ceil(layer_bytes / PART_BYTES))
        parts = split_layers(dims["L"], n_parts)
        if n_ds > parts[0][1]:
            sys.exit(f"deepstack adds after layers 0..{n_ds - 1}: the first part must hold them, has {parts[0]}")
        print(f"decoder: {dims['L']} layers, {layer_bytes / 1e6:.1f} MB int8, {n_parts} part(s) {parts}", flush=True)
        desc["llm_parts"] = []
        for k, layers in enumerate(parts, 1):
            suffix = f"{S}" if n_parts == 1 else f"{S}_{k}_of_{n_parts}"
            tag = "" if n_parts == 1 else f"_{k}_of_{n_parts}"
            t0 = time.perf_counter()
            pre = tg.build_block_model(w, dims, layers, AR, CL, n_ds if layers[0] == 0 else 0,
                                       f"prefill_ar{AR}_cl{CL}{tag}")
            dec = tg.build_block_model(w, dims, layers, 1, CL, 0, f"decode_ar1_cl{CL}{tag}")
            keep(pre, f"llm_prefill_{suffix}")
            keep(dec, f"llm_decode_{suffix}")
            part_bytes = int(pre.metadata_props[0].value)
            int8_bytes += part_bytes
            shared = place(prepare_shared([("prefill", pre), ("decode", dec)], work, f"llm_shared_{suffix}",
                                          arch, soc, a.opt_mode))
            prepare_seconds += shared["prepare_seconds"]
            log(f"part {k}/{n_parts} layers {layers} shared", shared, t0)
            part = {"layers": list(layers), "int8_weight_bytes": part_bytes,
                    "shared": {"file": shared["file"], "bytes": shared["bytes"], "sha256": shared["sha256"],
                               "graphs": {"prefill": shared["graphs"][0], "decode": shared["graphs"][1]}}}
            if not a.no_twins:
                part["twins"] = {}
                for role, model in (("prefill", pre), ("decode", dec)):
                    t0 = time.perf_counter()
                    twin = place(prepare(model, work, f"llm_{role}_{suffix}", arch, soc, a.opt_mode))
                    prepare_seconds += twin["prepare_seconds"]
                    log(f"part {k}/{n_parts} {role} twin", twin, t0)
                    part["twins"][role] = entry(twin)
            desc["llm_parts"].append(part)
            del pre, dec
            gc.collect()
        del w
        gc.collect()

    if "lm_head" in graphs:
        t0 = time.perf_counter()
        model = tg.build_lm_head_model(Weights(a.bundle, ["lmhead_wqo.bin"]))
        keep(model, "lmhead_wqo")
        int8_bytes += int(model.metadata_props[0].value)
        meta = place(prepare(model, work, "lmhead_wqo", arch, soc, a.opt_mode))
        prepare_seconds += meta["prepare_seconds"]
        log("lm_head", meta, t0)
        desc["lm_head"] = entry(meta)
        del model
        gc.collect()

    if "vision" in graphs:
        from vision_graph import build_vision_model  # the vision builder, imported only when built
        t0 = time.perf_counter()
        model = build_vision_model(Weights(a.bundle, [find_file(a.bundle, "vis_native", S)]),
                                   cfg["vision_config"], dims["H"], S)
        keep(model, f"vis_native_{S}")
        meta = place(prepare(model, work, f"vis_native_{S}", arch, soc, a.opt_mode))
        prepare_seconds += meta["prepare_seconds"]
        log("vision", meta, t0)
        desc["vision"] = entry(meta)

    desc["int8_weight_bytes"] = int8_bytes        # matrices of the text graphs built (decoder + lm-head)
    desc["fp16_weight_bytes"] = 2 * int8_bytes    # the same matrices as fp16
    desc["prepare_seconds"] = round(prepare_seconds, 3)
    desc["peak_rss_mb"] = round(peak_rss_mb())
    tmp = a.out / "qnn_graphs.json.tmp"
    tmp.write_text(json.dumps(desc, indent=1) + "\n")
    os.replace(tmp, a.out / "qnn_graphs.json")
    os.rmdir(work)
    print(f"wrote {a.out / 'qnn_graphs.json'}: prepare {prepare_seconds:.1f} s, peak RSS {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
