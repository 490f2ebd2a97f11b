#!/usr/bin/env python3
"""Build-time driver: a QHexRT CPU w8 or w4 bundle -> QNN context binaries for the Hexagon HTP.

    make_qnn_bundle.py --bundle CPU_BUNDLE --out DIR --soc SM8750|SM8650|SM8850 --context CL
                       --prefill-chunk AR --image-size S [--short-chunk 32] [--verify-block 5]
                       [--parts N] [--no-twins]
                       [--graphs text,lm_head,vision] [--opt-mode 3] [--keep-onnx]

Run with the QNN venv ($QHX_CACHE/qnn/venv). The binaries hold the bundle's own int8 or 4-bit
weights (MatMulNBits, fp16 activations; the lm-head int8 either way), so the HTP and the CPU backend compute with the same matrices.

Written into --out (which must not be the CPU bundle: both have an lmhead_wqo.bin):
    llm_shared_<S>[_<k>_of_<N>].bin   the decoder part k: graphs prefill (AR), short (--short-chunk),
                                      verify (--verify-block) and decode (AR=1) over ONE weight set
                                      (ORT EP-context weight sharing)
    llm_<role>_<S>[...].bin
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
import importlib.util
import json
import math
import multiprocessing as mp
import os
import resource
import struct
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qnn_onnx import SOC_MODELS, Weights, prepare, prepare_shared, read_bundle_metadata  # noqa: E402
import text_graphs as tg  # noqa: E402

PART_BYTES = 400e6  # int8 decoder weight bytes per part when --parts is not given
PROMPT_ROLES = ("prefill", "short")  # the graphs that take a prompt's tokens (and DeepStack)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def split_layers(n_layers: int, n_parts: int) -> list[tuple[int, int]]:
    """[l0, l1) per part, sizes differing by at most one (the larger ones first)."""
    bounds, l0 = [], 0
    for k in range(n_parts):
        l1 = l0 + n_layers // n_parts + (1 if k < n_layers % n_parts else 0)
        bounds.append((l0, l1))
        l0 = l1
    return bounds


def layer_of(name: str) -> int:
    """The decoder layer of a tensor model.language_model.layers.<i>.*"""
    return int(name.split(".")[3])


def layer_weight_bytes(path: Path) -> int:
    """Bytes of the quantized (int8 or 4-bit) decoder matrices in a bundle file, from its
    safetensors header alone."""
    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    return sum(m["data_offsets"][1] - m["data_offsets"][0] for n, m in header.items()
               if n.startswith(tg.LAYER[:-3]) and m.get("dtype") in ("I8", "U8"))


def find_file(bundle: Path, prefix: str, size: int) -> str:
    """The bundle's `<prefix>_<size>.bin`, else its only `<prefix>_*.bin` (its image size may differ)."""
    if (bundle / f"{prefix}_{size}.bin").exists():
        return f"{prefix}_{size}.bin"
    found = sorted(p.name for p in bundle.glob(f"{prefix}_*.bin"))
    if len(found) != 1:
        sys.exit(f"{bundle}: expected one {prefix}_*.bin, found {found}")
    return found[0]


def step(job: dict) -> dict:
    """One binary, built and prepared from the bundle: runs in a fresh child process (see main)."""
    bundle, arch, soc, opt, work = Path(job["bundle"]), job["arch"], job["soc"], job["opt_mode"], Path(job["work"])
    if job["kind"] == "vision":
        from vision_graph import build_vision_model  # the vision builder, imported only when built
        w = Weights(bundle, [job["file"]])
        models = [("vision", build_vision_model(w, job["vision_cfg"], job["dims"]["H"], job["image_size"]))]
    elif job["kind"] == "lm_head":
        models = [("lm_head", tg.build_lm_head_model(Weights(bundle, [job["file"]])))]
    else:  # a decoder part: "shared" (prefill + decode) or "twin" (job["role"] alone)
        l0, l1 = job["layers"]
        last = l1 == job["dims"]["L"]
        w = Weights(bundle, [job["file"]], keep=lambda n: l0 <= (layer_of(n) if n.startswith(tg.LAYER[:-3]) else -1) < l1
                    or (last and n == "model.language_model.norm.weight"))          # this part's tensors only
        cl, n_ds, tag, blocks = job["context"], job["n_ds"], job["tag"], job["blocks"]
        roles = list(blocks) if job["kind"] == "shared" else [job["role"]]
        # Image tokens go through the prompt's graphs (prefill, short): only they take DeepStack.
        models = [(r, tg.build_block_model(w, job["dims"], (l0, l1), blocks[r], cl,
                                           n_ds if r in PROMPT_ROLES and l0 < n_ds else 0,
                                           f"{r}_ar{blocks[r]}_cl{cl}{tag}"))
                  for r in roles]
    if job["onnx_dir"]:
        for role, m in models:
            onnx.save(m, str(Path(job["onnx_dir"]) / f"{job['name'].replace('shared', role)}.onnx"))
    if job["kind"] == "shared":
        meta = prepare_shared(models, work, job["name"], arch, soc, opt)
    else:
        meta = prepare(models[0][1], work, job["name"], arch, soc, opt)
    meta["int8_weight_bytes"] = int(models[0][1].metadata_props[0].value) if models[0][1].metadata_props else 0
    meta["peak_rss_mb"] = round(peak_rss_mb())
    return meta


def run_step(job: dict) -> dict:
    """step(job) in a fresh spawned process: the memory a 2B part's preparation takes (~5.5 GB for a
    shared part) goes back to the OS after each binary, its peak RSS is measured per binary, and no
    QNN EP state (shared contexts) carries over from one binary to the next."""
    t0 = time.perf_counter()
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        meta = ex.submit(step, job).result()
    os.replace(Path(job["work"]) / meta["file"], Path(job["out"]) / meta["file"])
    print(f"{job['name']}: {meta['bytes'] / 1e6:.2f} MB, graphs {meta['graphs']}, prepare {meta['prepare_seconds']} s, "
          f"step {time.perf_counter() - t0:.1f} s, peak RSS {meta['peak_rss_mb']} MB", flush=True)
    return meta


def entry(meta: dict) -> dict:
    return {"file": meta["file"], "graph": meta["graphs"][0], "bytes": meta["bytes"], "sha256": meta["sha256"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, type=Path, help="a CPU bundle exported with --weights w8 or w4")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--soc", required=True, choices=sorted(SOC_MODELS))
    ap.add_argument("--context", required=True, type=int, help="CL: KV rows a block attends over (past + block)")
    ap.add_argument("--prefill-chunk", required=True, type=int, help="AR of the prefill graph")
    ap.add_argument("--short-chunk", type=int, default=32,
                    help="AR of the short prefill graph for prompt remainders (0: none)")
    ap.add_argument("--verify-block", type=int, default=5,
                    help="AR of the verify graph, the token and its drafts (0: none; 5 = 4 drafts)")
    ap.add_argument("--image-size", required=True, type=int)
    ap.add_argument("--parts", type=int, default=0, help="decoder parts (default: ~1 per 400 MB of int8 weights)")
    ap.add_argument("--no-twins", action="store_true", help="skip the non-shared twins (emulation numerics)")
    ap.add_argument("--graphs", default="text,lm_head,vision", help="comma list of text, lm_head, vision")
    ap.add_argument("--opt-mode", default="3", help="htp_graph_finalization_optimization_mode (default 3: mode 1 "
                    "fails to finalize many MatMulNBits shapes with QNN_COMMON_ERROR_MEM_ALLOC, QAIRT 2.51)")
    ap.add_argument("--keep-onnx", action="store_true", help="also save the .onnx graphs into --out/onnx")
    a = ap.parse_args()

    import onnxruntime_qnn as qnn_ep
    import onnxruntime_qnn.build_and_package_info as qnn_info

    graphs = set(a.graphs.split(","))
    if not graphs or graphs - {"text", "lm_head", "vision"}:
        sys.exit(f"--graphs: unknown {sorted(graphs - {'text', 'lm_head', 'vision'})}")
    if a.out.resolve() == a.bundle.resolve():
        sys.exit("--out must differ from --bundle (both hold an lmhead_wqo.bin)")
    if "vision" in graphs and importlib.util.find_spec("vision_graph") is None:
        sys.exit("--graphs vision needs tools/qnn/vision_graph.py (build_vision_model); not found")
    AR, CL, S = a.prefill_chunk, a.context, a.image_size
    if not 1 <= AR < CL:
        sys.exit(f"--prefill-chunk {AR} must be in [1, --context {CL})")
    blocks = {"prefill": AR}  # role -> AR, all in one weight-shared context per part
    if a.short_chunk:
        if not 1 < a.short_chunk < AR:
            sys.exit(f"--short-chunk {a.short_chunk} must be in (1, --prefill-chunk {AR})")
        blocks["short"] = a.short_chunk
    if a.verify_block:
        if not 1 < a.verify_block < CL or a.verify_block in blocks.values():
            sys.exit(f"--verify-block {a.verify_block} must be in (1, --context {CL}) and differ from the other blocks")
        blocks["verify"] = a.verify_block
    blocks["decode"] = 1
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

    desc = {"qhexrt_qnn_graphs": 1, "soc": a.soc, "htp_arch": int(arch), "soc_model": int(soc),
            "qairt": qnn_info.qnn_version, "onnxruntime_qnn": qnn_ep.__version__, "context_length": CL,
            "prefill_chunk": AR, "image_size": S, "blocks": blocks}
    base = {"bundle": str(a.bundle), "out": str(a.out), "work": str(work), "arch": arch, "soc": soc,
            "opt_mode": a.opt_mode, "onnx_dir": str(onnx_dir) if onnx_dir else None, "dims": dims,
            "context": CL, "prefill_chunk": AR, "n_ds": n_ds, "image_size": S, "blocks": blocks}
    int8_bytes, prepare_seconds, peak = 0, 0.0, 0
    weights = read_bundle_metadata(a.bundle / find_file(a.bundle, "llm_shared", S)).get("weights", "w8")
    if weights not in ("w8", "w4"):
        sys.exit(f"{a.bundle}: a {weights} bundle; the HTP graphs take a w8 or w4 one")

    def run(**job) -> dict:
        nonlocal prepare_seconds, peak
        meta = run_step(base | job)
        prepare_seconds += meta["prepare_seconds"]
        peak = max(peak, meta["peak_rss_mb"])
        return meta

    if "text" in graphs:
        layer_file = find_file(a.bundle, "llm_shared", S)
        layer_bytes = layer_weight_bytes(a.bundle / layer_file)
        n_parts = a.parts or max(1, math.ceil(layer_bytes / PART_BYTES))
        parts = split_layers(dims["L"], n_parts)
        print(f"decoder: {dims['L']} layers, {layer_bytes / 1e6:.1f} MB {weights}, {n_parts} part(s) {parts}", flush=True)
        desc["llm_parts"] = []
        for k, layers in enumerate(parts, 1):
            suffix = f"{S}" if n_parts == 1 else f"{S}_{k}_of_{n_parts}"
            part_job = {"file": layer_file, "layers": layers, "tag": "" if n_parts == 1 else f"_{k}_of_{n_parts}"}
            shared = run(kind="shared", name=f"llm_shared_{suffix}", **part_job)
            int8_bytes += shared["int8_weight_bytes"]
            part = {"layers": list(layers), "int8_weight_bytes": shared["int8_weight_bytes"],
                    "shared": {"file": shared["file"], "bytes": shared["bytes"], "sha256": shared["sha256"],
                               "graphs": dict(zip(blocks, shared["graphs"]))}}
            if not a.no_twins:
                part["twins"] = {role: entry(run(kind="twin", role=role, name=f"llm_{role}_{suffix}", **part_job))
                                 for role in blocks}
            desc["llm_parts"].append(part)

    if "lm_head" in graphs:
        meta = run(kind="lm_head", name="lmhead_wqo", file="lmhead_wqo.bin")
        int8_bytes += meta["int8_weight_bytes"]
        desc["lm_head"] = entry(meta)

    if "vision" in graphs:
        desc["vision"] = entry(run(kind="vision", name=f"vis_native_{S}", file=find_file(a.bundle, "vis_native", S),
                                   vision_cfg=cfg["vision_config"]))

    desc["weights"] = weights                     # the bundle's: w8, or w4 (the lm-head stays int8)
    desc["int8_weight_bytes"] = int8_bytes        # quantized matrices of the text graphs built (decoder + lm-head)
    if weights == "w8":
        desc["fp16_weight_bytes"] = 2 * int8_bytes    # the same matrices as fp16
    desc["prepare_seconds"] = round(prepare_seconds, 3)
    desc["peak_rss_mb"] = peak  # the largest child's (one binary's build and preparation)
    tmp = a.out / "qnn_graphs.json.tmp"
    tmp.write_text(json.dumps(desc, indent=1) + "\n")
    os.replace(tmp, a.out / "qnn_graphs.json")
    os.rmdir(work)
    print(f"wrote {a.out / 'qnn_graphs.json'}: prepare {prepare_seconds:.1f} s, peak RSS {peak} MB (one binary), "
          f"driver {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
