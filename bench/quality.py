#!/usr/bin/env python3
"""How close QHexRT's bundles come to the fp32 model, beside llama.cpp's Q8_0 and Q4_0 on the same weights.

    bench/quality.py --hf CHECKPOINT [--name LABEL] [--bundle FORMAT=DIR ...] [--llama-cpp] [--image]
                     [--ctx 128] [--json OUT]

Every scored position's logits against the fp32 plan of the same runtime, the table llama.cpp's
`llama-perplexity --kl-divergence` prints: mean and 99th-percentile KL divergence (nats,
KL(fp32 || quantized) of the softmax distributions), top-1 agreement (the same most likely next
token) and the worst cosine of the logits.

The text: bench/quality/text.txt, tokenized once by the reference tokenizer (HF `tokenizers`) and
cut into chunks of --ctx tokens, each run as a raw prompt (no chat template) from an empty cache,
every position scored. QHexRT's rows run the bundle's text manifest through qhx_generate (its
prompt tokens are checked to be the same ids); llama.cpp's rows feed the same ids to the
llama-cpp-python bindings of the bench/peer source (bench/peer/llama_cpp_env.sh), its GGUF files
converted from the same checkpoint (F32 as its fp32, Q8_0 by the converter, Q4_0 by
llama_model_quantize from F32 with its default mix: the tied output matrix at Q6_K).

QHexRT's variants: each bundle (exported here into --work unless given by --bundle) with each
activation precision its manifests can take (int8, f16, f32: the manifest copied with
"activations" set, file paths made absolute). With --image, the image prompt too (QHexRT only:
llama.cpp's image path is a separate tool), every prompt position scored.

A benchmark, not a test: it prints figures (docs/quality.md gathers them).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("QHX_CACHE", Path.home() / ".cache" / "qhexrt"))
BIN = Path(os.environ.get("QHX_BIN", ROOT / "build" / "bin"))
ACTIVATIONS = {"w8": ["int8", "f16", "f32"], "w4": ["int8", "f32"], "f16": ["f32"]}


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


# ---- statistics -------------------------------------------------------------------------------

def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def position_stats(ref: np.ndarray, got: np.ndarray) -> dict[str, np.ndarray]:
    """Per position: KL(ref || got), top-1 agreement, cosine of the logits."""
    lp, lq = log_softmax(ref), log_softmax(got)
    kld = np.maximum((np.exp(lp) * (lp - lq)).sum(axis=-1), 0.0)
    top1 = ref.argmax(axis=-1) == got.argmax(axis=-1)
    r, g = ref.astype(np.float64), got.astype(np.float64)
    cos = (r * g).sum(-1) / np.sqrt((r * r).sum(-1) * (g * g).sum(-1))
    return {"kld": kld, "top1": top1, "cos": cos}


def summarize(parts: list[dict[str, np.ndarray]]) -> dict[str, float]:
    kld = np.concatenate([p["kld"] for p in parts])
    return {"positions": int(kld.size), "kld_mean": float(kld.mean()), "kld_p99": float(np.percentile(kld, 99)),
            "top1": float(np.concatenate([p["top1"] for p in parts]).mean()),
            "cos_worst": float(np.concatenate([p["cos"] for p in parts]).min())}


# ---- the prompts ------------------------------------------------------------------------------

def text_chunks(hf: Path, text_file: Path, ctx: int) -> list[tuple[str, list[int]]]:
    """(text, ids) of each chunk of ctx tokens whose text the tokenizer gives back as the same ids."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(hf / "tokenizer.json"))
    ids = tok.encode(text_file.read_text(), add_special_tokens=False).ids
    chunks = []
    for s in range(0, len(ids) - ctx + 1, ctx):
        piece = ids[s:s + ctx]
        text = tok.decode(piece, skip_special_tokens=False)
        if tok.encode(text, add_special_tokens=False).ids == piece:
            chunks.append((text, piece))
        else:
            log(f"  chunk at token {s} does not round-trip through the tokenizer: left out")
    if not chunks:
        sys.exit(f"quality.py: {text_file} gives no chunk of {ctx} tokens")
    return chunks


def toy_text(seed: int, work: Path) -> Path:
    """The toy task's prompts and answers for 60 scenes of `seed`, one pair a line."""
    scenes = work / f"toy-{seed}"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "toy_task.py"), "--seed", str(seed), "--count", "60",
                    "--out", str(scenes)], check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (scenes / "tasks.jsonl").read_text().splitlines()]
    out = work / f"toy-{seed}.txt"
    out.write_text("".join(f"{r['prompt']} {r['answer']}\n" for r in rows))
    return out


# ---- QHexRT -----------------------------------------------------------------------------------

def manifest_of(bundle: Path, kind: str) -> Path:
    found = sorted(bundle.glob(f"*-{kind}-*.json"))
    if not found:
        sys.exit(f"quality.py: {bundle} holds no *-{kind}-*.json manifest")
    return found[0]


def variant_manifest(manifest: Path, activations: str | None, out: Path) -> Path:
    """`manifest` with every graph's "activations" set, its file paths absolute (written to out)."""
    base = manifest.parent

    def absolute(o):
        if isinstance(o, dict):
            return {k: str(base / v) if isinstance(v, str) and (base / v).is_file() else absolute(v) for k, v in o.items()}
        if isinstance(o, list):
            return [absolute(x) for x in o]
        return o

    m = absolute(json.loads(manifest.read_text()))
    if activations is not None:
        for g in m["graphs"].values():
            if "activations" in g:
                g["activations"] = activations
        if activations == "f16":  # the value manifest version 8 added
            m["qhexrt_manifest"] = max(m.get("qhexrt_manifest", 1), 8)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(m, indent=1))
    return out


def qhx_logits(model: Path, prompt: str, out: Path, raw: bool, image: Path | None = None) -> tuple[np.ndarray, list[int]]:
    args = [str(BIN / "qhx_generate"), "-m", str(model), "-p", prompt, "-n", "1", "--temp", "0", "--json",
            "--dump-prompt-logits", str(out)]
    if raw:
        args.append("--raw")
    if image is not None:
        args += ["-i", str(image), "--resize", "native"]  # a side multiple of 32 is kept as it is, on both sides
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"quality.py: {' '.join(args)} failed:\n{proc.stderr}")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    logits = np.load(out)
    out.unlink()
    return logits, info["prompt_tokens"]


def qhx_run(model: Path, chunks: list[tuple[str, list[int]]], work: Path, image: Path | None) -> dict:
    """The logits of every chunk (and of the image prompt) on one model."""
    texts = []
    for i, (text, ids) in enumerate(chunks):
        logits, got = qhx_logits(model, text, work / f"chunk{i}.npy", raw=True)
        if got != ids:
            sys.exit(f"quality.py: {model}: chunk {i} tokenized differently ({len(got)} ids, not {len(ids)})")
        texts.append(logits)
    out = {"text": texts}
    if image is not None:
        out["image"] = [qhx_logits(model, "Describe this image.", work / "image.npy", raw=False, image=image)[0]]
    return out


def export(hf: Path, fmt: str, out: Path, image_size: int) -> Path:
    if (out / "checksums.json").is_file():
        return out
    log(f"== qhx_export --weights {fmt} -> {out}")
    args = [str(BIN / "qhx_export"), "--hf", str(hf), "--out", str(out), "--weights", fmt, "--quiet",
            "--image-size", str(image_size)]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return out


# ---- llama.cpp --------------------------------------------------------------------------------

def llama_env() -> tuple[Path, Path]:
    """(the llama_cpp package folder, the llama.cpp source), built by bench/peer/llama_cpp_env.sh."""
    script = ("source scripts/env.sh >/dev/null && source bench/peer/llama_cpp_env.sh >&2 && "
              "py=$(llama_cpp_python) && echo \"$py\" && echo \"$llama\"")
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"quality.py: setting up llama.cpp failed:\n{proc.stderr[-3000:]}")
    py, src = proc.stdout.strip().splitlines()[-2:]
    return Path(py), Path(src)


def gguf_files(hf: Path, work: Path, src: Path, pylib: Path) -> dict[str, Path]:
    env = dict(os.environ, PYTHONPATH=f"{src / 'gguf-py'}:{CACHE / 'peer' / 'pydeps'}", NO_LOCAL_GGUF="1")
    subprocess.run(["bash", "-c", "source scripts/env.sh >/dev/null && source bench/peer/llama_cpp_env.sh >/dev/null"
                    " && ensure_converter_deps"], cwd=ROOT, check=True)
    files = {}
    for name, outtype in (("F32", "f32"), ("Q8_0", "q8_0")):
        out = work / f"{name}.gguf"
        if not out.is_file():
            log(f"== convert_hf_to_gguf.py --outtype {outtype} -> {out}")
            subprocess.run([sys.executable, str(src / "convert_hf_to_gguf.py"), str(hf), "--outfile", f"{out}.part",
                            "--outtype", outtype], env=env, check=True, stdout=subprocess.DEVNULL)
            os.rename(f"{out}.part", out)
        files[name] = out
    out = work / "Q4_0.gguf"
    if not out.is_file():
        log(f"== llama_model_quantize F32 -> Q4_0 ({out})")
        code = ("import sys, llama_cpp as l; p = l.llama_model_quantize_default_params(); p.ftype = l.LLAMA_FTYPE_MOSTLY_Q4_0;"
                " sys.exit(l.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))")
        subprocess.run([sys.executable, "-c", code, str(files["F32"]), f"{out}.part"],
                       env=dict(os.environ, PYTHONPATH=str(pylib)), check=True, stdout=subprocess.DEVNULL)
        os.rename(f"{out}.part", out)
    files["Q4_0"] = out
    return files


LLAMA_LOGITS = r"""
import sys, numpy as np, llama_cpp
model, ids_file, out, threads = sys.argv[1:5]
chunks = np.load(ids_file)
llm = llama_cpp.Llama(model_path=model, n_ctx=chunks.shape[1], n_batch=chunks.shape[1], logits_all=True,
                      n_threads=int(threads), verbose=False)
res = []
for ids in chunks:
    llm.reset()
    llm.eval([int(t) for t in ids])
    res.append(np.array(llm.scores[: len(ids)], dtype=np.float32))
np.save(out, np.stack(res))
"""


def llama_run(gguf: Path, chunks: list[tuple[str, list[int]]], work: Path, pylib: Path) -> dict:
    ids = work / "ids.npy"
    np.save(ids, np.array([c[1] for c in chunks], dtype=np.int32))
    out = work / "llama_logits.npy"
    subprocess.run([sys.executable, "-c", LLAMA_LOGITS, str(gguf), str(ids), str(out), str(os.cpu_count() or 1)],
                   env=dict(os.environ, PYTHONPATH=str(pylib)), check=True)
    logits = np.load(out)
    out.unlink()
    return {"text": list(logits)}


# ---- the table --------------------------------------------------------------------------------

def compare(ref: dict, got: dict) -> dict:
    return {kind: summarize([position_stats(r, g) for r, g in zip(ref[kind], got[kind])]) for kind in got}


def print_table(title: str, rows: list[dict], kind: str) -> None:
    print(f"\n{title}")
    print(f"| runtime | weights | activations | positions | mean KLD | p99 KLD | top-1 | worst cosine |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if kind not in r["stats"]:
            continue
        s = r["stats"][kind]
        print(f"| {r['runtime']} | {r['weights']} | {r['activations']} | {s['positions']} | {s['kld_mean']:.3e} "
              f"| {s['kld_p99']:.3e} | {100 * s['top1']:.2f}% | {s['cos_worst']:.6f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hf", type=Path, required=True, help="the Hugging Face checkpoint (the fp32 plan's source)")
    ap.add_argument("--name", help="a label for the table (default: the checkpoint folder's name)")
    ap.add_argument("--work", type=Path, help="where bundles, GGUF files and results go "
                    "(default $QHX_CACHE/quality/NAME)")
    ap.add_argument("--bundle", action="append", default=[], metavar="FORMAT=DIR",
                    help="a bundle already exported (e.g. w8=~/.cache/qhexrt/bundles/random_2b-w8); repeatable")
    ap.add_argument("--formats", default="f16,w8,w4", help="the bundles' weight formats (default f16,w8,w4)")
    ap.add_argument("--text", type=Path, default=ROOT / "bench" / "quality" / "text.txt")
    ap.add_argument("--ctx", type=int, default=128, help="tokens per chunk (default 128)")
    ap.add_argument("--image", type=Path, nargs="?", const=ROOT / "assets" / "sample.png",
                    help="also the image prompt (default picture assets/sample.png); its sides multiples of 32")
    ap.add_argument("--toy-task", type=int, metavar="SEED",
                    help="the text: the toy task's questions and answers of scenes of SEED (scripts/toy_task.py), "
                         "not bench/quality/text.txt")
    ap.add_argument("--llama-cpp", action="store_true", help="llama.cpp's F32, Q8_0 and Q4_0 rows")
    ap.add_argument("--json", type=Path, help="write the figures here as well")
    a = ap.parse_args()
    name = a.name or a.hf.name
    work = a.work or CACHE / "quality" / name
    work.mkdir(parents=True, exist_ok=True)
    given = dict(b.split("=", 1) for b in a.bundle)
    t0 = time.time()

    if a.toy_task is not None:
        a.text = toy_text(a.toy_task, work)
    image_size = 512
    if a.image is not None:
        from PIL import Image
        w, h = Image.open(a.image).size
        if w != h or w % 32:
            sys.exit(f"quality.py: {a.image} is {w}x{h}: the image prompt takes a square whose side is a multiple of 32")
        image_size = w
    chunks = text_chunks(a.hf, a.text, a.ctx)
    log(f"{name}: {len(chunks)} chunks of {a.ctx} tokens from {a.text.name}")
    rows = []
    log("== QHexRT fp32 plan (the checkpoint)")
    ref = qhx_run(a.hf, chunks, work, a.image)
    for fmt in a.formats.split(","):
        bundle = (Path(given[fmt]).expanduser() if fmt in given else
                  export(a.hf, fmt, work / "bundles" / fmt, image_size))
        for act in ACTIVATIONS[fmt]:
            log(f"== QHexRT {fmt}, activations {act}")
            text = variant_manifest(manifest_of(bundle, "text"), act, work / "manifests" / f"{fmt}-{act}-text.json")
            got = qhx_run(text, chunks, work, None)
            if a.image is not None:
                vlm = variant_manifest(manifest_of(bundle, "vlm"), act, work / "manifests" / f"{fmt}-{act}-vlm.json")
                got["image"] = qhx_run(vlm, chunks[:0], work, a.image)["image"]
            rows.append({"runtime": "QHexRT", "weights": fmt, "activations": act, "stats": compare(ref, got)})
            del got
    if a.llama_cpp:
        pylib, src = llama_env()
        files = gguf_files(a.hf, work, src, pylib)
        log("== llama.cpp F32")
        lref = llama_run(files["F32"], chunks, work, pylib)
        rows.append({"runtime": "llama.cpp F32 vs QHexRT fp32", "weights": "f32", "activations": "f32",
                     "stats": compare(ref, lref)})
        for q in ("Q8_0", "Q4_0"):
            log(f"== llama.cpp {q}")
            got = llama_run(files[q], chunks, work, pylib)
            acts = "q8_0 blocks of 32" if q == "Q8_0" else "q8_0 blocks of 32 (Q4_0 x Q8_0 dot)"
            rows.append({"runtime": "llama.cpp", "weights": q, "activations": acts, "stats": compare(lref, got)})

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"\n{name}: each row against its runtime's own fp32 ({len(chunks)} x {a.ctx} tokens of {a.text.name}); "
          f"{cpu}, {time.time() - t0:.0f} s")
    print_table("text (raw chunks, every position)", rows, "text")
    if a.image is not None:
        print_table(f"image prompt ({a.image.name}, 'Describe this image.', every prompt position)", rows, "image")
    if a.json:
        a.json.write_text(json.dumps({"name": name, "ctx": a.ctx, "chunks": len(chunks), "cpu": cpu, "rows": rows},
                                     indent=1))


if __name__ == "__main__":
    main()
