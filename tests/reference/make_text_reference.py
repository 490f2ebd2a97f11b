"""Text-only Hugging Face fp32 references for a checkpoint directory (spec QWEN3VL.md §9.3.6-7).

    make_text_reference(ckpt_dir, out_dir, cases=None)

The checkpoint is reloaded with from_pretrained(dir, torch_dtype=float32,
attn_implementation="eager"), .eval(), under torch.no_grad(). Per case it writes

  <out>/text_<case>.safetensors   (F32 / I64)
    input_ids          [L]     I64  prompt token ids
    prompt_logits      [L, V]  F32  logits at every prompt position, one full forward
    greedy_tokens      [N]     I64  model.generate(do_sample=False, max_new_tokens=32),
                                    eos 151645/151643; includes the EOS token if one stopped it
    step_logits        [N, V]  F32  raw logits (generate(output_logits=True)) that chose each
                                    generated token; row 0 = logits at the last prompt position
                                    (from generate's own prefill), row i>0 from a KV-cache step
    top2_margin        [N]     F32  top-1 minus top-2 of each step_logits row
    hidden.embed       [L, H]  F32  inputs_embeds (input of decoder layer 0)
    hidden.layer{l}    [L, H]  F32  return value of decoder layer l (cloned in the hook, i.e.
                                    before any deepstack addition; text-only has none)
    hidden.final_norm  [L, H]  F32  output of the final RMSNorm (logits = this @ embed_tokens^T)
  <out>/text_<case>.json          {"prompt", "mode": "chat"|"raw", "system"?, "max_new_tokens",
                                   "rendered", "messages"?, counts, margins, checks}

Hidden states come from forward hooks on the prompt forward, not from output_hidden_states.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import EOS_TOKEN_IDS, source_digest, write_json  # noqa: E402

SCRIPT_VERSION = 1
MAX_NEW_TOKENS = 32
PAD_TOKEN_ID = 151643

LONG_TEXT = (
    "Please read these notes and summarize them in one sentence. "
    "First, the weather in Paris on 14 July 2023 was mild: 24°C, light wind, no rain. "
    "Deuxièmement, le musée du Louvre a accueilli 8,9 millions de visiteurs. "
    "Drittens: Die Straßenbahn fährt alle 7 Minuten über die Brücke. "
    "第四，北京的秋天天气很好，适合去长城散步。"
    "五つ目に、東京の電車はとても正確です。 "
    "Sixth, `x = [i**2 for i in range(10)]` lists squares; "
    "café, naïve and 🙂 must survive."
)

# name -> {"mode": "chat"|"raw", "prompt": str, "system": str (optional), "expect_len": int?}
CASES: dict[str, dict[str, Any]] = {
    "chat_capital": {"mode": "chat", "prompt": "What is the capital of France?"},
    "raw_13": {"mode": "raw", "prompt": "In 2024, the quick brown fox jumps over", "expect_len": 13},
    "chat_system": {"mode": "chat", "system": "You are terse.", "prompt": "Name three colors."},
    "long_chat": {"mode": "chat", "prompt": LONG_TEXT},
}


def case_messages(case: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = []
    if "system" in case:
        msgs.append({"role": "system", "content": case["system"]})
    msgs.append({"role": "user", "content": case["prompt"]})
    return msgs


def reference_hash_inputs() -> dict[str, Any]:
    """What the text references depend on besides the checkpoint (its stamp hash)."""
    return {"script_version": SCRIPT_VERSION, "sources": source_digest("make_text_reference.py"),
            "cases": CASES, "max_new_tokens": MAX_NEW_TOKENS, "eos": EOS_TOKEN_IDS}


def _tokenize(tok, fast_tok, case: dict[str, Any]) -> tuple[list[int], str]:
    """Returns (ids, rendered prompt string)."""
    if case["mode"] == "raw":
        rendered = case["prompt"]
        ids = tok(rendered, add_special_tokens=False)["input_ids"]
    else:
        msgs = case_messages(case)
        rendered = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        enc = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
        # 5.x returns a BatchEncoding (return_dict defaults to True there), 4.57 the id list
        ids = list(enc["input_ids"] if hasattr(enc, "keys") else enc)
        again = tok(rendered, add_special_tokens=False)["input_ids"]
        if ids != again:
            raise AssertionError("apply_chat_template(tokenize=True) != tokenize(rendered)")
    # Cross-check with the bare `tokenizers` library on the same tokenizer.json (guards against
    # transformers-side surprises such as the 4.57.x fix_mistral_regex path).
    bare = fast_tok.encode(rendered, add_special_tokens=False).ids
    if bare != ids:
        raise AssertionError(f"transformers and tokenizers disagree on {rendered!r}")
    if "expect_len" in case and len(ids) != case["expect_len"]:
        raise AssertionError(f"{rendered!r} tokenizes to {len(ids)} tokens, expected {case['expect_len']}")
    return ids, rendered


def load_tokenizer(ckpt_dir: Path):
    from transformers import AutoTokenizer

    from common import installed_transformers_major

    if installed_transformers_major() >= 5:
        return AutoTokenizer.from_pretrained(str(ckpt_dir))
    # fix_mistral_regex=False only silences a false-positive "incorrect regex pattern" warning
    # (4.57.6 warns for any local config.json whose transformers_version is in (4.57.2, 5.0));
    # it changes nothing, and _tokenize cross-checks every prompt against bare `tokenizers`.
    return AutoTokenizer.from_pretrained(str(ckpt_dir), fix_mistral_regex=False)


def load_model(ckpt_dir: Path):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    # dtype= is 4.57's spelling; torch_dtype= still works there but logs a deprecation warning.
    model = Qwen3VLForConditionalGeneration.from_pretrained(
        str(ckpt_dir), dtype=torch.float32, attn_implementation="eager")
    model.eval()
    lm = model.lm_head.weight
    emb = model.model.language_model.embed_tokens.weight
    if lm is not emb:
        raise AssertionError("reloaded model: lm_head is not tied to embed_tokens")
    if emb.dtype != torch.float32:
        raise AssertionError(f"reloaded model dtype {emb.dtype}, expected float32")
    return model


def _prompt_forward(model, input_ids) -> tuple[Any, dict[str, Any]]:
    """One full forward over the prompt; returns (logits [L,V], hidden dict) via hooks."""
    import torch

    lm = model.model.language_model
    captured: dict[str, Any] = {}
    handles = []

    def pre_layer0(_mod, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        captured["hidden.embed"] = h.detach()[0].clone()

    def post_layer(idx):
        def hook(_mod, _args, output):
            out = output[0] if isinstance(output, tuple) else output
            captured[f"hidden.layer{idx}"] = out.detach()[0].clone()
        return hook

    def post_norm(_mod, _args, output):
        captured["hidden.final_norm"] = output.detach()[0].clone()

    handles.append(lm.layers[0].register_forward_pre_hook(pre_layer0, with_kwargs=True))
    for i, layer in enumerate(lm.layers):
        handles.append(layer.register_forward_hook(post_layer(i)))
    handles.append(lm.norm.register_forward_hook(post_norm))
    try:
        with torch.no_grad():
            out = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                        use_cache=False)
    finally:
        for h in handles:
            h.remove()
    n_layers = len(lm.layers)
    want = ["hidden.embed", *[f"hidden.layer{i}" for i in range(n_layers)], "hidden.final_norm"]
    missing = [k for k in want if k not in captured]
    if missing:
        raise AssertionError(f"hooks did not capture {missing}")
    return out.logits[0].float().clone(), {k: captured[k].float().contiguous() for k in want}


def _generate(model, input_ids) -> tuple[Any, Any, bool]:
    """Greedy generation; returns (tokens [N], raw step logits [N,V], scores_equal_logits)."""
    import torch

    with torch.no_grad():
        g = model.generate(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
            do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
            eos_token_id=list(EOS_TOKEN_IDS), pad_token_id=PAD_TOKEN_ID,
            # the shipped generation_config samples with these; unset so greedy warns nothing
            temperature=None, top_k=None, top_p=None,
            output_logits=True, output_scores=True, return_dict_in_generate=True)
    L = input_ids.shape[1]
    tokens = g.sequences[0, L:].clone()
    if g.logits is None:
        raise AssertionError("generate(output_logits=True) returned no logits")
    logits = torch.stack([x[0] for x in g.logits]).float().contiguous()
    scores = torch.stack([x[0] for x in g.scores]).float()
    if logits.shape[0] != tokens.shape[0]:
        raise AssertionError(f"{logits.shape[0]} logit rows for {tokens.shape[0]} tokens")
    return tokens, logits, bool(torch.equal(scores, logits))


def make_case(model, tok, fast_tok, name: str, case: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    import torch
    from safetensors.torch import save_file

    ids, rendered = _tokenize(tok, fast_tok, case)
    input_ids = torch.tensor([ids], dtype=torch.int64)
    prompt_logits, hidden = _prompt_forward(model, input_ids)
    tokens, step_logits, scores_equal = _generate(model, input_ids)
    # Teacher-forced full forward over prompt + generated tokens: its logits at positions
    # L-1 .. L+N-2 should match the KV-cache step logits up to summation order.
    with torch.no_grad():
        full_ids = torch.cat([input_ids, tokens[None, :-1]], dim=1)
        full = model(input_ids=full_ids, attention_mask=torch.ones_like(full_ids),
                     use_cache=False).logits[0, input_ids.shape[1] - 1:].float()
    step_vs_full = float((full - step_logits).abs().max())

    top2 = torch.topk(step_logits, 2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).contiguous()
    argmax_ok = bool(torch.equal(step_logits.argmax(dim=-1), tokens))
    if not argmax_ok:
        raise AssertionError(f"{name}: argmax(step_logits) != greedy tokens")
    ptop2 = torch.topk(prompt_logits, 2, dim=-1).values
    pmargin = ptop2[:, 0] - ptop2[:, 1]

    tensors = {
        "input_ids": input_ids[0].contiguous(),
        "prompt_logits": prompt_logits.contiguous(),
        "greedy_tokens": tokens.to(torch.int64).contiguous(),
        "step_logits": step_logits,
        "top2_margin": margin,
        **hidden,
    }
    save_file(tensors, str(out_dir / f"text_{name}.safetensors"), metadata={"format": "pt"})

    n = int(tokens.shape[0])
    meta: dict[str, Any] = {"prompt": case["prompt"], "mode": case["mode"]}
    if "system" in case:
        meta["system"] = case["system"]
    meta.update({
        "max_new_tokens": MAX_NEW_TOKENS,
        "rendered": rendered,
        "messages": case_messages(case) if case["mode"] == "chat" else None,
        "add_generation_prompt": case["mode"] == "chat",
        "eos_token_ids": list(EOS_TOKEN_IDS),
        "num_prompt_tokens": len(ids),
        "num_generated": n,
        "stopped_on_eos": n > 0 and int(tokens[-1]) in EOS_TOKEN_IDS,
        "min_top2_margin": float(margin.min()),
        "argmin_top2_margin": int(margin.argmin()),
        "min_prompt_top2_margin": float(pmargin.min()),
        # generate's prefill computes lm_head on the last position only: how far that row is
        # from the full-forward row (summation order), a floor for C++ tolerances
        "step0_vs_prompt_last_max_abs": float((step_logits[0] - prompt_logits[-1]).abs().max()),
        "step_vs_teacher_forced_max_abs": step_vs_full,
        "scores_equal_raw_logits": scores_equal,
        "hidden_size": int(hidden["hidden.embed"].shape[1]),
        "num_layers": sum(1 for k in hidden if k.startswith("hidden.layer")),
        "vocab_size": int(prompt_logits.shape[1]),
    })
    write_json(out_dir / f"text_{name}.json", meta)
    return meta


def make_text_reference(ckpt_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                        cases: list[str] | None = None, log=print) -> dict[str, dict[str, Any]]:
    """Writes text_<case>.{safetensors,json} for every case (default: all of CASES)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from tokenizers import Tokenizer
    ckpt = Path(ckpt_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = list(CASES) if cases is None else cases
    torch.set_num_threads(int(os.environ.get("QHX_REF_THREADS", "1")))  # tiny: 1 thread is best, esp. under CI load
    t0 = time.perf_counter()
    tok = load_tokenizer(ckpt)
    fast_tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    model = load_model(ckpt)
    results = {}
    for name in names:
        t = time.perf_counter()
        results[name] = make_case(model, tok, fast_tok, name, CASES[name], out)
        r = results[name]
        log(f"  {name}: L={r['num_prompt_tokens']} N={r['num_generated']} "
            f"min top2 margin {r['min_top2_margin']:.3g} ({time.perf_counter() - t:.1f} s)")
    log(f"  text references in {time.perf_counter() - t0:.1f} s -> {out}")
    return results


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="HF fp32 text references for a checkpoint dir")
    ap.add_argument("ckpt_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args(argv)
    make_text_reference(args.ckpt_dir, args.out_dir, [c for c in args.cases.split(",") if c])
    return 0


if __name__ == "__main__":
    sys.exit(main())
