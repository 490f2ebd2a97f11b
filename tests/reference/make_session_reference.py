"""Multi-turn (session) Hugging Face fp32 references for a checkpoint directory.

    make_session_reference(ckpt_dir, out_dir, images_dir, cases=None)

A case is a conversation of user turns (images in some of them). For each user turn k,
transformers (fp32, eager, loaded as make_text_reference.load_model does) answers the whole
conversation so far: the messages are rendered with the checkpoint's chat template
(add_generation_prompt=True), each <|image_pad|> is expanded to t·gh·gw/4 pads
(make_image_reference.expand_image_pads), every image of the conversation so far goes through the
slow Qwen2VLImageProcessor in order, and generate() runs greedy for MAX_NEW_TOKENS (8) new tokens,
eos 151645/151643. The assistant turn that joins the history is transformers' own answer,
tok.decode(greedy_tokens, skip_special_tokens=True), so turn k+1's prompt is the conversation a
client that keeps the answers (QHexRT's Session) sees.

Per case it writes to <out>:
  session_<case>.safetensors          (little-endian; F32 unless noted)
    turn{k}.input_ids      [L_k] I64    prompt ids of turn k (whole conversation so far, pads expanded)
    turn{k}.greedy_tokens  [n_k] I64    generate(do_sample=False, max_new_tokens=8); EOS included
                                        if one stopped generation
    turn{k}.step_logits    [n_k, V]     the raw logits (output_logits=True) that chose each token
    turn{k}.top2_margin    [n_k]        top-1 minus top-2 of each step_logits row
  session_<case>.json                 per turn: the answer text, the conversation (with image
                                      paths), the rendered string, counts, margins, noise floor
  session_<case>.turn{k}.messages.json   the conversation up to user turn k, earlier assistant
                                      turns holding transformers' answers: the --messages file a
                                      fresh (non-replay) run of turn k is given
  session_<case>.replay.messages.json    all user turns, each followed (except the last) by an
                                      assistant placeholder: the --messages --replay file (the
                                      placeholders must be replaced by the generated answers)
Image parts are {"type": "image", "path": "../images/<file>"}: relative to <out>, the folder of
the messages files (the shared test images live in <cache>/reference/images).
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
MAX_NEW_TOKENS = 8
PAD_TOKEN_ID = 151643
IMAGES_REL = "../images"  # the test images, relative to the reference folder
PLACEHOLDER = "(placeholder: replaced by the generated answer)"


def _img(name: str) -> dict[str, str]:
    return {"type": "image", "path": f"{IMAGES_REL}/{name}"}


def _txt(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


# case -> its user turns (each a list of content parts), answered in order
CASES: dict[str, list[list[dict[str, str]]]] = {
    "three_turns": [
        [_img("img256x320.png"), _txt("Describe the picture.")],
        [_txt("What colour is the largest shape?")],
        [_img("img300x200.png"), _txt("And in this one?")],
    ],
}


def reference_hash_inputs() -> dict[str, Any]:
    """What the session references depend on besides the checkpoint and the images."""
    return {"script_version": SCRIPT_VERSION,
            "sources": source_digest("make_session_reference.py", "make_image_reference.py",
                                     "make_text_reference.py"),
            "cases": CASES, "max_new_tokens": MAX_NEW_TOKENS, "eos": EOS_TOKEN_IDS,
            "placeholder": PLACEHOLDER}


def conversation_images(messages: list[dict[str, Any]]) -> list[str]:
    """File names (relative to the reference folder) of the image parts, in order."""
    return [p["path"] for m in messages if isinstance(m["content"], list)
            for p in m["content"] if p["type"] == "image"]


def replay_messages(turns: list[list[dict[str, str]]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k, parts in enumerate(turns):
        if k > 0:
            out.append({"role": "assistant", "content": PLACEHOLDER})
        out.append({"role": "user", "content": [dict(p) for p in parts]})
    return out


def _turn(model, tok, fast_tok, ip, what: str, messages: list[dict[str, Any]], out_dir: Path
          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """transformers' greedy answer to `messages` (the last one a user turn)."""
    import numpy as np
    import torch
    from PIL import Image

    import test_images
    from make_image_reference import IMAGE_PAD, IMAGE_TOKEN_ID, expand_image_pads, generate_greedy

    files = conversation_images(messages)
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if rendered.count(IMAGE_PAD) != len(files):
        raise AssertionError(f"{what}: {rendered.count(IMAGE_PAD)} pads for {len(files)} images")
    inputs: dict[str, Any] = {}
    grid_list: list[list[int]] = []
    if files:
        pil = [Image.fromarray(test_images.load_rgb(out_dir / f), "RGB") for f in files]
        proc = ip(images=pil, return_tensors="np")
        pixel_values = np.asarray(proc["pixel_values"])
        grid = np.asarray(proc["image_grid_thw"]).astype(np.int64)
        if pixel_values.dtype != np.float32 or pixel_values.shape[1] != 1536:
            raise AssertionError(f"{what}: pixel_values {pixel_values.shape} {pixel_values.dtype}")
        grid_list = grid.tolist()
        inputs["pixel_values"] = torch.from_numpy(pixel_values.copy())
        inputs["image_grid_thw"] = torch.from_numpy(grid.copy())
    expanded = expand_image_pads(rendered, grid_list)
    ids = tok(expanded, add_special_tokens=False)["input_ids"]
    if fast_tok.encode(expanded, add_special_tokens=False).ids != ids:
        raise AssertionError(f"{what}: transformers and tokenizers disagree")
    n_pads = [t * h * w // 4 for t, h, w in grid_list]
    if ids.count(IMAGE_TOKEN_ID) != sum(n_pads):
        raise AssertionError(f"{what}: {ids.count(IMAGE_TOKEN_ID)} pads, expected {sum(n_pads)}")
    input_ids = torch.tensor([ids], dtype=torch.int64)
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), **inputs}

    model.model.rope_deltas = None  # generate recomputes it in its prefill anyway
    tokens, step_logits, scores_equal = generate_greedy(model, inputs, MAX_NEW_TOKENS)
    if not torch.equal(step_logits.argmax(dim=-1), tokens):
        raise AssertionError(f"{what}: argmax(step_logits) != greedy tokens")
    # teacher-forced full forward over prompt + answer: the summation-order noise floor
    L = len(ids)
    with torch.no_grad():
        full_ids = torch.cat([input_ids, tokens[None, :-1]], dim=1)
        extra = {k: v for k, v in inputs.items() if k in ("pixel_values", "image_grid_thw")}
        full = model(input_ids=full_ids, attention_mask=torch.ones_like(full_ids), use_cache=False,
                     **extra).logits[0, L - 1:].float()
    step_vs_full = float((full - step_logits).abs().max())
    top2 = torch.topk(step_logits, 2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).contiguous()
    answer = tok.decode(tokens.tolist(), skip_special_tokens=True)
    n = int(tokens.shape[0])
    tensors = {"input_ids": input_ids[0].contiguous(),
               "greedy_tokens": tokens.to(torch.int64).contiguous(),
               "step_logits": step_logits, "top2_margin": margin}
    meta = {"messages": messages, "rendered": rendered, "images": files,
            "image_grid_thw": grid_list, "num_image_tokens": n_pads,
            "num_prompt_tokens": L, "num_generated": n,
            "stopped_on_eos": n > 0 and int(tokens[-1]) in EOS_TOKEN_IDS,
            "answer": answer,
            "min_top2_margin": float(margin.min()), "argmin_top2_margin": int(margin.argmin()),
            "step_vs_teacher_forced_max_abs": step_vs_full,
            "scores_equal_raw_logits": scores_equal}
    return tensors, meta


def make_case(model, tok, fast_tok, ip, name: str, turns: list[list[dict[str, str]]],
              out_dir: Path) -> dict[str, Any]:
    from safetensors.torch import save_file

    history: list[dict[str, Any]] = []
    tensors: dict[str, Any] = {}
    metas: list[dict[str, Any]] = []
    for k, parts in enumerate(turns):
        history.append({"role": "user", "content": [dict(p) for p in parts]})
        msgs = [dict(m) for m in history]
        t, meta = _turn(model, tok, fast_tok, ip, f"{name} turn {k}", msgs, out_dir)
        meta["messages_file"] = f"session_{name}.turn{k}.messages.json"
        write_json(out_dir / meta["messages_file"], msgs)
        tensors.update({f"turn{k}.{key}": v for key, v in t.items()})
        metas.append(meta)
        history.append({"role": "assistant", "content": meta["answer"]})
    # the prompt of turn k is a prefix of turn k+1's when the answer re-tokenizes at the
    # boundary as it was generated (a cache that keeps turn k's keys then reuses all of them)
    for k in range(len(metas) - 1):
        a = tensors[f"turn{k}.input_ids"].tolist()
        b = tensors[f"turn{k + 1}.input_ids"].tolist()
        common = 0
        while common < min(len(a), len(b)) and a[common] == b[common]:
            common += 1
        metas[k + 1]["common_prefix_with_previous_prompt"] = common
        metas[k + 1]["previous_prompt_is_prefix"] = common == len(a)
    replay = replay_messages(turns)
    write_json(out_dir / f"session_{name}.replay.messages.json", replay)
    save_file({k: v.contiguous() for k, v in tensors.items()},
              str(out_dir / f"session_{name}.safetensors"), metadata={"format": "pt"})
    meta = {"case": name, "turns": metas, "num_turns": len(metas),
            "replay_messages_file": f"session_{name}.replay.messages.json",
            "placeholder": PLACEHOLDER, "max_new_tokens": MAX_NEW_TOKENS,
            "eos_token_ids": list(EOS_TOKEN_IDS), "resize": "native",
            "add_generation_prompt": True,
            "answer_decode": "skip_special_tokens=True",
            "vocab_size": int(tensors["turn0.step_logits"].shape[1]),
            "attn_implementation": {"vision": model.model.visual.config._attn_implementation,
                                    "text": model.model.language_model.config._attn_implementation}}
    write_json(out_dir / f"session_{name}.json", meta)
    return meta


def make_session_reference(ckpt_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                           images_dir: str | os.PathLike[str], cases: list[str] | None = None,
                           log=print) -> dict[str, dict[str, Any]]:
    """Writes session_<case>.* for every case (default: all of CASES). `images_dir` must be
    <out_dir>/../images (the messages files name the images relative to out_dir)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, Qwen2VLImageProcessor

    from make_text_reference import load_model

    ckpt = Path(ckpt_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if (out / IMAGES_REL).resolve() != Path(images_dir).resolve():
        raise AssertionError(f"the test images must be at {out / IMAGES_REL}, not {images_dir}")
    names = list(CASES) if cases is None else cases
    torch.set_num_threads(int(os.environ.get("QHX_REF_THREADS", "1")))
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(str(ckpt), fix_mistral_regex=False)
    fast_tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    ip = Qwen2VLImageProcessor.from_pretrained(str(ckpt))
    if (ip.min_pixels, ip.max_pixels) != (65536, 16777216):
        raise AssertionError(f"image processor limits {ip.min_pixels}/{ip.max_pixels} (size bug?)")
    model = load_model(ckpt)
    for part in (model.model.visual, model.model.language_model):
        if part.config._attn_implementation != "eager":
            raise AssertionError(f"{type(part).__name__} uses {part.config._attn_implementation}")
    results = {}
    for name in names:
        t = time.perf_counter()
        results[name] = make_case(model, tok, fast_tok, ip, name, CASES[name], out)
        turns = results[name]["turns"]
        log(f"  session {name}: L={[m['num_prompt_tokens'] for m in turns]} "
            f"n={[m['num_generated'] for m in turns]} "
            f"min top2 margin {min(m['min_top2_margin'] for m in turns):.3g} "
            f"({time.perf_counter() - t:.1f} s)")
    log(f"  session references in {time.perf_counter() - t0:.1f} s -> {out}")
    return results


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="HF fp32 multi-turn references for a checkpoint dir")
    ap.add_argument("ckpt_dir")
    ap.add_argument("out_dir", help="its ../images must hold the test images")
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args(argv)
    make_session_reference(args.ckpt_dir, args.out_dir, Path(args.out_dir) / IMAGES_REL,
                           [c for c in args.cases.split(",") if c])
    return 0


if __name__ == "__main__":
    sys.exit(main())
