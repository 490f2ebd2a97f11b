#!/usr/bin/env python3
"""QHexRT next to llama.cpp on the same random Qwen3-VL-2B weights: a ratio table.

    compare.py --llama-q8 LB_Q8.json [--llama-q4 LB_Q4.json] [--qhx-w8 QHX_W8.json]
               [--qhx-w4 QHX_W4.json] [--mtmd MTMD_LOG] [--threads N]

LB_*.json are `llama-bench -o json` outputs (tests pp320 and tg32); QHX_*.json are
`qhx_bench --json` objects. Pairs compared: QHexRT w8 with llama.cpp Q8_0, w4 with Q4_0
(both are weight-only 8-/4-bit formats; block sizes and scale layouts differ). The ratio is
QHexRT / llama.cpp in tokens per second, so > 1 means QHexRT is faster.

Caveats printed with the table: llama-bench's tg32 decodes from an empty context, while
qhx_bench's decode figure is at 512 tokens of context (its 1,024 figure is shown too);
llama-bench's pp320 is one batch of 320 tokens, as qhx_bench's prefill is (prefill_chunk 320).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def load_llama_bench(path: str | None) -> dict[int, dict]:
    """{threads: {"pp": tok/s, "tg": tok/s, "model": ..., ...}} from llama-bench -o json."""
    if not path or not Path(path).exists():
        return {}
    text = Path(path).read_text().strip()
    rows = json.loads(text) if text else []
    by_threads: dict[int, dict] = {}
    for r in rows:
        out = by_threads.setdefault(int(r.get("n_threads", 0)), {})
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            out["pp"] = r["avg_ts"]
            out["pp_sd"] = r.get("stddev_ts", 0.0)
            out["pp_n"] = r["n_prompt"]
        elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            out["tg"] = r["avg_ts"]
            out["tg_sd"] = r.get("stddev_ts", 0.0)
            out["tg_n"] = r["n_gen"]
        out["model"] = r.get("model_type", "?")
        out["size_mb"] = r.get("model_size", 0) / 1e6
        out["threads"] = r.get("n_threads")
        out["commit"] = r.get("build_commit", "?")
        out["build"] = r.get("build_number", "?")
    return by_threads


def load_qhx(path: str | None) -> dict:
    if not path or not Path(path).exists():
        return {}
    text = Path(path).read_text().strip()
    return json.loads(text.splitlines()[-1]) if text else {}


def parse_mtmd(path: str | None) -> dict:
    """Best effort: image encode ms and prompt eval figures from llama-mtmd-cli's log."""
    if not path or not Path(path).exists():
        return {}
    log = Path(path).read_text(errors="replace")
    out: dict = {}
    m = re.search(r"slice encoded in (\d+) ms", log) or re.search(r"mtmd batch encoding done in (\d+) ms", log)
    if m:
        out["image_encode_ms"] = float(m.group(1))
    m = re.search(r"image decoded \(batch \d+/\d+\) in (\d+) ms", log)
    if m:
        out["image_decode_ms"] = float(m.group(1))
    m = re.search(r"^mtmd_load: ([\d.]+) ms", log, re.M)
    if m:
        out["load_ms"] = float(m.group(1))
    m = re.search(r"^mtmd_ttft: ([\d.]+) ms", log, re.M)
    if m:
        out["ttft_ms"] = float(m.group(1))
    m = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", log)
    if m:
        out["prompt_eval_ms"] = float(m.group(1))
        out["prompt_tokens"] = int(m.group(2))
    return out


def fmt(v, unit="", nd=2) -> str:
    return "n/a" if v is None else f"{v:.{nd}f}{unit}"


def ratio(a, b) -> str:
    return "n/a" if a is None or b in (None, 0) else f"{a / b:.3f}x"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-q8")
    ap.add_argument("--llama-q4")
    ap.add_argument("--qhx-w8")
    ap.add_argument("--qhx-w4")
    ap.add_argument("--mtmd")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--json", action="store_true", help="also print the table as one JSON object")
    a = ap.parse_args()

    pairs = [("w8 vs Q8_0", load_qhx(a.qhx_w8), load_llama_bench(a.llama_q8)),
             ("w4 vs Q4_0", load_qhx(a.qhx_w4), load_llama_bench(a.llama_q4))]
    table = []
    print(f"QHexRT vs llama.cpp, same random Qwen3-VL-2B weights (--threads {a.threads}); ratio = QHexRT / llama.cpp")
    for name, q, lb in pairs:
        if not lb and not q:
            continue
        if q:
            print(f"QHexRT {name.split()[0]}: {q.get('bundle')}, {q.get('threads_used')} thread(s) used "
                  f"(--threads {q.get('threads')}), median of {q.get('runs')} run(s)")
        # llama.cpp at the requested thread count, and at QHexRT's actual one if it differs.
        wanted = [t for t in dict.fromkeys([a.threads, q.get("threads_used")]) if t in lb] or sorted(lb)
        for t in wanted:
            l = lb[t]
            print(f"  llama.cpp {l.get('model')} ({l.get('size_mb', 0):.0f} MB), build {l.get('build')} "
                  f"({l.get('commit')}), {t} thread(s)")
            q_pp = q.get("prefill_tok_s")
            q_tg = q.get("decode_tok_s")
            q_tg1k = (1000.0 / q["decode_ms_per_token_1024"]) if q.get("decode_ms_per_token_1024") else None
            rows = [
                (f"prefill tok/s (pp{l.get('pp_n', 320)} | 320-token prompt)", q_pp, l.get("pp")),
                (f"decode tok/s (tg{l.get('tg_n', 32)} from empty | at 512 ctx)", q_tg, l.get("tg")),
                (f"decode tok/s (tg{l.get('tg_n', 32)} from empty | at 1024 ctx)", q_tg1k, l.get("tg")),
            ]
            print(f"  {name + f', llama.cpp -t {t}':<50} {'QHexRT':>10} {'llama.cpp':>10} {'ratio':>9}")
            for label, qv, lv in rows:
                print(f"  {label:<50} {fmt(qv):>10} {fmt(lv):>10} {ratio(qv, lv):>9}")
                table.append({"pair": name, "llama_threads": t, "qhx_threads": q.get("threads_used"), "figure": label,
                              "qhexrt": qv, "llama_cpp": lv, "ratio": None if qv is None or not lv else qv / lv})
        print()
    m = parse_mtmd(a.mtmd)
    q8 = pairs[0][1]
    if m or q8:
        print("  vision, assets/sample.png (512x512; llama.cpp: Q8_0 mmproj, native resize, --threads; QHexRT: fixed 512)")
        print(f"  {'image encode ms':<52} {fmt(q8.get('vision_ms'), nd=1):>10} {fmt(m.get('image_encode_ms'), nd=1):>10} "
              f"{ratio(m.get('image_encode_ms'), q8.get('vision_ms')):>9}  (speed ratio)")
        label = 'TTFT ms, "Describe this image." (load excluded)'
        print(f"  {label:<52} {fmt(q8.get('ttft_ms'), nd=1):>10} {fmt(m.get('ttft_ms'), nd=1):>10} "
              f"{ratio(m.get('ttft_ms'), q8.get('ttft_ms')):>9}  (speed ratio)")
        label = "load ms, text model + vision"
        print(f"  {label:<52} {fmt(q8.get('load_ms'), nd=1):>10} {fmt(m.get('load_ms'), nd=1):>10} "
              f"{ratio(m.get('load_ms'), q8.get('load_ms')):>9}  (speed ratio)")
        print("    (QHexRT: Pipeline::open of the VLM plan; llama.cpp: from the CLI's start to its last line before")
        print("    the prompt, the model and mmproj loaded and its default warm-up run; both from the page cache)")
        if m.get("prompt_eval_ms") is not None:
            print(f"  llama-mtmd-cli prompt eval: {m['prompt_eval_ms']:.1f} ms for {m.get('prompt_tokens')} tokens; "
                  f"QHexRT TTFT {fmt(q8.get('ttft_ms'), ' ms', 1)}")
    if a.json:
        print(json.dumps({"threads": a.threads, "rows": table, "mtmd": m}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
