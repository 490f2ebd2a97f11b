#!/usr/bin/env python3
"""Tokenizer benchmark: qhx::Tokenizer (build/bin/bench_tokenizer) vs Hugging Face
`tokenizers`, both single-threaded, on the tokenizer test corpus.

    .venv/bin/python bench/tokenizer_vs_hf.py [--corpus FILE.jsonl] [--repeat N] [--json]

Measures, best of N repetitions each:
  - load time of tokenizer.json (HF: Tokenizer.from_file; ours: Tokenizer::load);
  - encode throughput in MB/s = 10^6 UTF-8 bytes of corpus text per second,
    HF both as one encode_batch over the corpus and as a Python loop of encode()
    (add_special_tokens=False, as the runtime does).
HF runs with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false. This is not a test.

Environment: QHX_TOKENIZER_JSON, QHX_BIN (as for the tests; see scripts/env.sh).
"""

from __future__ import annotations

import os

# Before `tokenizers` is imported: single-threaded HF.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests" / "python"))

import tokenizer_corpus  # noqa: E402


def default_tokenizer_json() -> Path:
    env = os.environ.get("QHX_TOKENIZER_JSON")
    if env:
        return Path(env)
    cache = Path(os.environ.get("QHX_CACHE", str(Path.home() / ".cache" / "qhexrt")))
    return cache / "tokenizer" / "tokenizer.json"


def default_bin_dir() -> Path:
    env = os.environ.get("QHX_BIN")
    return Path(env) if env else REPO_ROOT / "build" / "bin"


def read_jsonl(path: Path) -> list[str]:
    out = []
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            s = json.loads(raw.decode("utf-8"))
            if not isinstance(s, str):
                raise SystemExit(f"{path}: line {n}: expected a JSON string")
            out.append(s)
    return out


def best_of(n: int, fn) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_hf(tokenizer_json: Path, corpus: list[str], repeat: int, loads: int) -> dict:
    import tokenizers

    holder = {}

    def load():
        holder["tok"] = tokenizers.Tokenizer.from_file(str(tokenizer_json))

    load_s = best_of(loads, load)
    tok = holder["tok"]
    nbytes = sum(len(s.encode("utf-8")) for s in corpus)
    tokens = sum(len(e.ids) for e in tok.encode_batch(corpus, add_special_tokens=False))  # also a warm-up

    batch_s = best_of(repeat, lambda: tok.encode_batch(corpus, add_special_tokens=False))

    def loop():
        enc = tok.encode
        for s in corpus:
            enc(s, add_special_tokens=False)

    loop_s = best_of(repeat, loop)
    return {
        "version": tokenizers.__version__,
        "load_ms": load_s * 1e3,
        "encode_batch_s": batch_s,
        "encode_batch_mb_s": nbytes / batch_s / 1e6,
        "encode_loop_s": loop_s,
        "encode_loop_mb_s": nbytes / loop_s / 1e6,
        "bytes": nbytes,
        "tokens": tokens,
    }


def bench_qhx(binary: Path, tokenizer_json: Path, corpus_path: Path, repeat: int, loads: int) -> dict:
    cmd = [str(binary), "--tokenizer", str(tokenizer_json), "--corpus", str(corpus_path),
           "--repeat", str(repeat), "--loads", str(loads), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{binary} failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", type=Path, default=default_tokenizer_json(), help="tokenizer.json")
    ap.add_argument("--corpus", type=Path, help="JSON Lines corpus (default: build tests/python/tokenizer_corpus.py)")
    ap.add_argument("--repeat", type=int, default=10, help="encode repetitions, best is reported (default 10)")
    ap.add_argument("--loads", type=int, default=3, help="load repetitions, best is reported (default 3)")
    ap.add_argument("--bin", type=Path, default=default_bin_dir(), help="directory of bench_tokenizer")
    ap.add_argument("--hf-only", action="store_true", help="skip the C++ side")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = ap.parse_args()

    if not args.tokenizer.is_file():
        raise SystemExit(f"{args.tokenizer}: not found (run scripts/fetch_tokenizer.sh)")

    with tempfile.TemporaryDirectory() as tmp:
        if args.corpus:
            corpus_path = args.corpus
            corpus = read_jsonl(corpus_path)
        else:
            corpus = tokenizer_corpus.build_corpus()
            corpus_path = Path(tmp) / "tokenizer_corpus.jsonl"
            tokenizer_corpus.write_jsonl(corpus_path, corpus)

        hf = bench_hf(args.tokenizer, corpus, args.repeat, args.loads)
        qhx = None
        if not args.hf_only:
            binary = args.bin / "bench_tokenizer"
            if not os.access(binary, os.X_OK):
                raise SystemExit(f"{binary}: not built (cmake --build build --target bench_tokenizer), or use --hf-only")
            qhx = bench_qhx(binary, args.tokenizer, corpus_path, args.repeat, args.loads)

    q = qhx or {}
    result = {
        "corpus": {"strings": len(corpus), "bytes": hf["bytes"], "hf_tokens": hf["tokens"],
                   "path": str(args.corpus) if args.corpus else "tests/python/tokenizer_corpus.py"},
        "repeat": args.repeat,
        "loads": args.loads,
        "hf": hf,
        "qhx": qhx,
        "ratio_qhx_over_hf": {
            "load_ms": ratio(q.get("load_ms"), hf["load_ms"]),
            "encode_mb_s_vs_batch": ratio(q.get("encode_mb_s"), hf["encode_batch_mb_s"]),
            "encode_mb_s_vs_loop": ratio(q.get("encode_mb_s"), hf["encode_loop_mb_s"]),
        },
    }
    if qhx is not None and qhx.get("tokens") != hf["tokens"]:
        result["warning"] = f"token counts differ: qhx {qhx.get('tokens')} vs HF {hf['tokens']}"

    if args.json:
        print(json.dumps(result))
        return 0

    def f(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    r = result["ratio_qhx_over_hf"]
    print(f"corpus: {len(corpus)} strings, {hf['bytes']} UTF-8 bytes, {hf['tokens']} tokens (HF); "
          f"best of {args.repeat} encodes / {args.loads} loads; single thread; "
          f"HF tokenizers {hf['version']}")
    print(f"{'':26}{'qhx (C++)':>12}{'HF':>12}{'qhx/HF':>10}")
    print(f"{'load ms':26}{f(q.get('load_ms'), '.1f'):>12}{hf['load_ms']:>12.1f}{f(r['load_ms'], '.2f'):>10}")
    print(f"{'encode MB/s (encode_batch)':26}{f(q.get('encode_mb_s'), '.2f'):>12}"
          f"{hf['encode_batch_mb_s']:>12.2f}{f(r['encode_mb_s_vs_batch'], '.2f'):>10}")
    print(f"{'encode MB/s (encode loop)':26}{f(q.get('encode_mb_s'), '.2f'):>12}"
          f"{hf['encode_loop_mb_s']:>12.2f}{f(r['encode_mb_s_vs_loop'], '.2f'):>10}")
    print("(load: qhx/HF < 1 is faster; MB/s: qhx/HF > 1 is faster)")
    if "warning" in result:
        print("WARNING:", result["warning"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
