"""Image-path Hugging Face fp32 references for a checkpoint directory (spec QWEN3VL.md §3–§6,
§8, §9.3.6-7).

    make_image_reference(ckpt_dir, out_dir, images_dir, cases=None)

AutoProcessor cannot load without torchvision (AutoVideoProcessor raises), so the processor
is taken apart as Qwen3VLProcessor would use it:
  - images: the slow PIL `Qwen2VLImageProcessor.from_pretrained(ckpt_dir)` (its
    preprocessor_config.json carries min_pixels 65536 / max_pixels 16777216, see common.py),
    called on all images of the prompt in order -> pixel_values, image_grid_thw;
  - text: the chat template (chat_template.py) renders one user turn with
    add_generation_prompt=True; every "<|image_pad|>" is then replaced, in order, by
    t·gh·gw/4 copies (Qwen3VLProcessor.__call__'s loop) and the string is tokenized with
    add_special_tokens=False (cross-checked with the bare `tokenizers` library).
The model is reloaded with from_pretrained(dir, dtype=float32, attn_implementation="eager").

Per case it writes <out>/image_<case>.safetensors (F32 unless noted; N = Σ t·gh·gw patches,
Hv = vision hidden, O = out_hidden_size = H, L = prompt length, n = generated tokens):

  pixel_values           [N, 1536]   the slow processor's output (rescale then normalize, §3.4)
  pixel_values_fast      [N, 1536]   (float32(x) - 127.5f) / 127.5f on the same resized uint8
                                     pixels, same flattening (§3.6): what the fast processor
                                     and QHexRT compute; differs from pixel_values by <= 6e-8
  image_grid_thw         [I, 3] I64  per image (t, gh, gw) in patches
  image{j}.input_rgb     [H, W, 3] U8  image j as decoded from its PNG (before resizing)
  image{j}.resized_rgb   [h, w, 3] U8  image j as it reached rescale/normalize (after the
                                       processor's PIL bicubic resize; == input when unchanged)
  input_ids              [L] I64     prompt ids with the expanded image pads
  position_ids           [3, L] I64  model.model.get_rope_index(...) (T, H, W rows)
  rope_delta             [1] I64     its mrope delta: decode position of index p is p + delta
  vision.patch_embed     [N, Hv]     patch_embed output
  vision.pos_embed       [N, Hv]     fast_pos_embed_interpolate(grid) as added to it (captured
                                     from the model's own call; patch_embed + pos_embed is
                                     checked bit-equal to block 0's input)
  vision.rope_cos/_sin   [N, Hv/heads]  (5.x only) the vision RoPE tables handed to every block
  vision.block{i}        [N, Hv]     output of vision block i, i = 0..depth-1
  vision.deepstack{k}    [N/4, O]    deepstack merger k output (taps after block
                                     deepstack_visual_indexes[k])
  vision.merger          [N/4, O]    main merger output = image_embeds (all images concatenated)
  hidden.embed           [L, H]      inputs_embeds after the visual scatter (input of layer 0)
  hidden.layer{l}        [L, H]      return value of decoder layer l, cloned in the hook, i.e.
                                     BEFORE the deepstack addition (_deepstack_process writes in
                                     place); layer l+1's input is checked to equal this plus
                                     vision.deepstack{l} at the image-pad rows (l < #deepstack)
  hidden.final_norm      [L, H]      final RMSNorm output
  prompt_logits          [L, V]      logits of one full forward over the prompt
  greedy_tokens          [n] I64     generate(do_sample=False, max_new_tokens=32), eos
                                     151645/151643, EOS included if it stopped generation
  step_logits            [n, V]      raw logits (output_logits=True) that chose each token
  top2_margin            [n]         top-1 minus top-2 of each step_logits row

and <out>/image_<case>.json with the prompt parts, image file names, sizes, grids, the
rendered prompt, counts, margins and noise floors (see README.md).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (EOS_TOKEN_IDS, installed_transformers_major, source_digest,  # noqa: E402
                    write_json)

SCRIPT_VERSION = 1
MAX_NEW_TOKENS = 32
PAD_TOKEN_ID = 151643
IMAGE_PAD = "<|image_pad|>"
IMAGE_TOKEN_ID = 151655
VISION_START_ID = 151652
VISION_END_ID = 151653
RESIZE_MODE = "native"  # the processor's own smart_resize + PIL bicubic (spec §3.2-3.3)
FAST_VS_SLOW_TOL = 6e-8  # spec §3.4: the two normalizations differ by up to 5.9e-8


# transformers 5.x (the _tf5 configs): the PIL processor is Qwen2VLImageProcessorPil (channel-first
# inside), get_rope_index and forward take mm_token_type_ids, and the pos-embed interpolation is a
# module-level gather instead of the vision model's fast_pos_embed_interpolate.
TF5 = installed_transformers_major() >= 5


def processor_limits(ip) -> tuple[int, int]:
    """(min_pixels, max_pixels) the processor resizes with: 4.57's attributes, 5.x's size dict."""
    if TF5:
        return ip.size["shortest_edge"], ip.size["longest_edge"]
    return ip.min_pixels, ip.max_pixels


def _img(name: str) -> dict[str, str]:
    return {"type": "image", "image": name}


def _txt(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


# case -> the content items of its single user turn (add_generation_prompt=True)
CASES: dict[str, list[dict[str, str]]] = {
    "img512": [_img("img512.png"), _txt("Describe this image.")],
    "img256x320": [_img("img256x320.png"), _txt("Describe this image.")],
    "img300x200_native": [_img("img300x200.png"), _txt("What is in the picture?")],
    "text_around": [_txt("Look at this: "), _img("img256x320.png"), _txt(" What is it?")],
    "two_images": [_img("img512.png"), _txt("and"), _img("img256x320.png"), _txt("Compare them.")],
}


def case_messages(parts: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [dict(p) for p in parts]}]


def case_images(parts: list[dict[str, str]]) -> list[str]:
    return [p["image"] for p in parts if p["type"] == "image"]


def reference_hash_inputs() -> dict[str, Any]:
    """What the image references depend on besides the checkpoint and the images."""
    return {"script_version": SCRIPT_VERSION,
            "sources": source_digest("make_image_reference.py", "make_text_reference.py"),
            "cases": CASES, "max_new_tokens": MAX_NEW_TOKENS, "eos": EOS_TOKEN_IDS,
            "resize": RESIZE_MODE}


# ---------------------------------------------------------------------------
# preprocessing helpers (numpy)


def flatten_patches(chw, patch: int = 16, temporal: int = 2, merge: int = 2):
    """[C, H, W] float -> [gh·gw, C·temporal·patch²], exactly the reshape/transpose of
    Qwen2VLImageProcessor._preprocess for one still image (the frame repeated `temporal` times)."""
    import numpy as np

    c, h, w = chw.shape
    gh, gw = h // patch, w // patch
    frames = np.stack([chw] * temporal, axis=0)  # [T, C, H, W]
    p = frames.reshape(1, temporal, c, gh // merge, merge, patch, gw // merge, merge, patch)
    p = p.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(p.reshape(gh * gw, c * temporal * patch * patch))


def normalize_fast(rgb_hwc_u8):
    """(float32(x) - 127.5f) / 127.5f in f32 (spec §3.4, the fast processor), as [C, H, W]."""
    import numpy as np

    x = rgb_hwc_u8.astype(np.float32).transpose(2, 0, 1)
    return (x - np.float32(127.5)) / np.float32(127.5)


def normalize_slow(rgb_hwc_u8):
    """The slow processor's rescale (f64 multiply by 1/255, cast to f32) then normalize
    ((v - 0.5f) / 0.5f in f32), as [C, H, W]."""
    import numpy as np

    v = (rgb_hwc_u8.astype(np.float64) * (1 / 255)).astype(np.float32).transpose(2, 0, 1)
    return (v - np.float32(0.5)) / np.float32(0.5)


def expand_image_pads(text: str, grid_thw: list[list[int]], merge: int = 2) -> str:
    """Qwen3VLProcessor.__call__: each <|image_pad|>, in order, becomes t·gh·gw/merge² pads."""
    index = 0
    while IMAGE_PAD in text:
        t, h, w = grid_thw[index]
        text = text.replace(IMAGE_PAD, "<|placeholder|>" * (t * h * w // (merge * merge)), 1)
        index += 1
    if index != len(grid_thw):
        raise AssertionError(f"{index} image placeholders for {len(grid_thw)} images")
    return text.replace("<|placeholder|>", IMAGE_PAD)


# ---------------------------------------------------------------------------
# model side


def _prompt_forward(model, inputs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """One full forward over the prompt with hooks on the vision tower and the decoder;
    returns (logits [L, V], captured tensors). Also asserts what the hooks captured."""
    import torch

    visual = model.model.visual
    lm = model.model.language_model
    cap: dict[str, Any] = {}
    layer_in: dict[int, Any] = {}
    handles = []

    def keep(name):
        def hook(_mod, _args, output):
            out = output[0] if isinstance(output, tuple) else output
            cap[name] = out.detach().clone()
        return hook

    def block0_in(_mod, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        cap["_block0_in"] = h.detach().clone()
        if TF5:  # the vision RoPE tables every block gets (5.x reads their theta from the config)
            cos, sin = kwargs["position_embeddings"]
            cap["vision.rope_cos"] = cos.detach().clone()
            cap["vision.rope_sin"] = sin.detach().clone()

    tf5 = not hasattr(visual, "fast_pos_embed_interpolate")
    if not tf5:
        orig_pos = visual.fast_pos_embed_interpolate

        def pos_wrapper(grid_thw):
            out = orig_pos(grid_thw)
            cap["vision.pos_embed"] = out.detach().clone()
            return out
    else:
        # 5.x: forward gathers pos_embed at the module-level interpolation indices and sums
        # (pos_embed(idx) * w[:, :, None]).sum(1); capture the weights and the gathered rows and
        # form that same expression (block 0's input is checked bit-equal to patch + pos below).
        import transformers.models.qwen3_vl.modeling_qwen3_vl as qmod

        orig_interp = qmod.get_vision_interpolation_indices_and_weights

        def interp_wrapper(*a, **k):
            idx, w = orig_interp(*a, **k)
            cap["_interp_weights"] = w.detach().clone()
            return idx, w

        def pos_rows(_mod, _args, output):
            cap["_pos_rows"] = output.detach().clone()

    def layer_pre(idx):
        def hook(_mod, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            layer_in[idx] = h.detach()[0].clone()
        return hook

    def layer_post(idx):
        def hook(_mod, _args, output):
            out = output[0] if isinstance(output, tuple) else output
            cap[f"hidden.layer{idx}"] = out.detach()[0].clone()
        return hook

    def post_norm(_mod, _args, output):
        cap["hidden.final_norm"] = output.detach()[0].clone()

    handles.append(visual.patch_embed.register_forward_hook(keep("vision.patch_embed")))
    if tf5:
        handles.append(visual.pos_embed.register_forward_hook(pos_rows))
    handles.append(visual.blocks[0].register_forward_pre_hook(block0_in, with_kwargs=True))
    for i, blk in enumerate(visual.blocks):
        handles.append(blk.register_forward_hook(keep(f"vision.block{i}")))
    for k, m in enumerate(visual.deepstack_merger_list):
        handles.append(m.register_forward_hook(keep(f"vision.deepstack{k}")))
    handles.append(visual.merger.register_forward_hook(keep("vision.merger")))
    for i, layer in enumerate(lm.layers):
        handles.append(layer.register_forward_pre_hook(layer_pre(i), with_kwargs=True))
        handles.append(layer.register_forward_hook(layer_post(i)))
    handles.append(lm.norm.register_forward_hook(post_norm))
    if tf5:
        qmod.get_vision_interpolation_indices_and_weights = interp_wrapper
    else:
        visual.fast_pos_embed_interpolate = pos_wrapper
    try:
        with torch.no_grad():
            out = model(**inputs, use_cache=False)
    finally:
        for h in handles:
            h.remove()
        if tf5:
            qmod.get_vision_interpolation_indices_and_weights = orig_interp
        else:
            del visual.fast_pos_embed_interpolate  # back to the class method
    if not tf5 and "fast_pos_embed_interpolate" in vars(visual):
        raise AssertionError("could not restore fast_pos_embed_interpolate")
    if tf5:
        rows, w = cap.pop("_pos_rows"), cap.pop("_interp_weights")
        cap["vision.pos_embed"] = (rows * w[:, :, None]).sum(1)

    n_blocks = len(visual.blocks)
    n_ds = len(visual.deepstack_merger_list)
    n_layers = len(lm.layers)
    cap["hidden.embed"] = layer_in[0]
    want = ["vision.patch_embed", "vision.pos_embed", *(["vision.rope_cos", "vision.rope_sin"] if TF5 else []),
            *[f"vision.block{i}" for i in range(n_blocks)],
            *[f"vision.deepstack{k}" for k in range(n_ds)], "vision.merger", "hidden.embed",
            *[f"hidden.layer{i}" for i in range(n_layers)], "hidden.final_norm"]
    missing = [k for k in want if k not in cap]
    if missing or len(layer_in) != n_layers:
        raise AssertionError(f"hooks did not capture {missing} / {sorted(layer_in)}")

    # What the hooks captured, pinned down exactly:
    # block 0 sees patch_embed + pos_embed
    if not torch.equal(cap["_block0_in"], cap["vision.patch_embed"] + cap["vision.pos_embed"]):
        raise AssertionError("vision block 0 input != patch_embed + pos_embed")
    # hidden.embed: embed_tokens everywhere, image_embeds (merger rows, in order) at the pads
    ids = inputs["input_ids"][0]
    mask = ids == IMAGE_TOKEN_ID
    emb = lm.embed_tokens.weight[ids]
    expect = emb.clone()
    expect[mask] = cap["vision.merger"]
    if not torch.equal(cap["hidden.embed"], expect):
        raise AssertionError("hidden.embed != embed_tokens with image_embeds scattered at the pads")
    # layer l+1's input = layer l's output (+ deepstack l at the pads for l < n_ds)
    for l in range(n_layers - 1):
        nxt = cap[f"hidden.layer{l}"].clone()
        if l < n_ds:
            nxt[mask] = nxt[mask] + cap[f"vision.deepstack{l}"]
        if not torch.equal(layer_in[l + 1], nxt):
            raise AssertionError(f"decoder layer {l + 1} input != layer {l} output"
                                 f"{' + deepstack' if l < n_ds else ''}")
        if l < n_ds and torch.equal(layer_in[l + 1], cap[f"hidden.layer{l}"]):
            raise AssertionError(f"hidden.layer{l} was captured after the deepstack addition")
    del cap["_block0_in"]
    return out.logits[0].float().clone(), {k: cap[k].float().contiguous() for k in want}


def generate_greedy(model, inputs: dict[str, Any], max_new_tokens: int = MAX_NEW_TOKENS) -> tuple[Any, Any, bool]:
    """Greedy generate: (new tokens, the raw logits that chose them, whether scores == logits)."""
    import torch

    with torch.no_grad():
        g = model.generate(
            **inputs, do_sample=False, max_new_tokens=max_new_tokens,
            eos_token_id=list(EOS_TOKEN_IDS), pad_token_id=PAD_TOKEN_ID,
            temperature=None, top_k=None, top_p=None,
            output_logits=True, output_scores=True, return_dict_in_generate=True)
    L = inputs["input_ids"].shape[1]
    tokens = g.sequences[0, L:].clone()
    if g.logits is None:
        raise AssertionError("generate(output_logits=True) returned no logits")
    logits = torch.stack([x[0] for x in g.logits]).float().contiguous()
    scores = torch.stack([x[0] for x in g.scores]).float()
    if logits.shape[0] != tokens.shape[0]:
        raise AssertionError(f"{logits.shape[0]} logit rows for {tokens.shape[0]} tokens")
    return tokens, logits, bool(torch.equal(scores, logits))


def make_case(model, tok, fast_tok, ip, name: str, parts: list[dict[str, str]],
              images_dir: Path, out_dir: Path) -> dict[str, Any]:
    import numpy as np
    import torch
    from PIL import Image
    from safetensors.torch import save_file

    import test_images

    msgs = case_messages(parts)
    files = case_images(parts)
    rendered = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    if rendered.count(IMAGE_PAD) != len(files):
        raise AssertionError(f"{name}: {rendered.count(IMAGE_PAD)} pads in {rendered!r}")

    # --- images: the slow processor, recording what reached rescale (the resized uint8 HWC)
    inputs_rgb = [test_images.load_rgb(images_dir / f) for f in files]
    pil = [Image.fromarray(a, "RGB") for a in inputs_rgb]
    reached: list[Any] = []
    orig_rescale = ip.rescale

    def rec_rescale(image, *a, **k):
        arr = np.array(image, copy=True)
        if TF5:  # 5.x's PIL backend works channel-first
            arr = np.ascontiguousarray(arr.transpose(1, 2, 0))
        reached.append(arr)
        return orig_rescale(image, *a, **k)

    ip.rescale = rec_rescale
    try:
        proc = ip(images=pil, return_tensors="np")
    finally:
        del ip.rescale
    pixel_values = np.asarray(proc["pixel_values"])
    grid = np.asarray(proc["image_grid_thw"]).astype(np.int64)
    if pixel_values.dtype != np.float32 or pixel_values.shape[1] != 1536:
        raise AssertionError(f"{name}: pixel_values {pixel_values.shape} {pixel_values.dtype}")
    if len(reached) != len(files) or any(r.dtype != np.uint8 or r.ndim != 3 or r.shape[2] != 3
                                          for r in reached):
        raise AssertionError(f"{name}: rescale saw {[(r.shape, r.dtype) for r in reached]}")
    slow_rows, fast_rows = [], []
    for j, rgb in enumerate(reached):
        t, gh, gw = (int(v) for v in grid[j])
        if (t, gh * 16, gw * 16) != (1, rgb.shape[0], rgb.shape[1]):
            raise AssertionError(f"{name}: image {j} grid {grid[j]} vs resized {rgb.shape}")
        if rgb.shape == inputs_rgb[j].shape and not np.array_equal(rgb, inputs_rgb[j]):
            raise AssertionError(f"{name}: image {j}: an identity resize changed pixels")
        slow_rows.append(flatten_patches(normalize_slow(rgb)))
        fast_rows.append(flatten_patches(normalize_fast(rgb)))
    slow = np.concatenate(slow_rows)
    fast = np.concatenate(fast_rows)
    # our flattening + slow formula must reproduce the processor bit for bit, which pins down
    # both the captured resized pixels and the flattening used for pixel_values_fast
    if not np.array_equal(slow, pixel_values):
        raise AssertionError(f"{name}: re-flattened slow normalization != processor pixel_values")
    fast_vs_slow = float(np.abs(fast.astype(np.float64) - pixel_values.astype(np.float64)).max())
    if fast_vs_slow > FAST_VS_SLOW_TOL:
        raise AssertionError(f"{name}: pixel_values_fast vs pixel_values {fast_vs_slow:.3g}")
    n_fast_diff = int((fast != pixel_values).sum())

    # --- text: render, expand the pads, tokenize (cross-checked with bare `tokenizers`)
    grid_list = grid.tolist()
    expanded = expand_image_pads(rendered, grid_list)
    ids = tok(expanded, add_special_tokens=False)["input_ids"]
    bare = fast_tok.encode(expanded, add_special_tokens=False).ids
    if bare != ids:
        raise AssertionError(f"{name}: transformers and tokenizers disagree")
    n_pads = [t * h * w // 4 for t, h, w in grid_list]
    if ids.count(IMAGE_TOKEN_ID) != sum(n_pads):
        raise AssertionError(f"{name}: {ids.count(IMAGE_TOKEN_ID)} pads, expected {sum(n_pads)}")

    input_ids = torch.tensor([ids], dtype=torch.int64)
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
              "pixel_values": torch.from_numpy(pixel_values.copy()),
              "image_grid_thw": torch.from_numpy(grid.copy())}
    with torch.no_grad():
        if TF5:
            # 5.x: the processor also returns mm_token_type_ids (1 at image pads, else 0;
            # ProcessorMixin.create_mm_token_type_ids), and forward requires it with images
            inputs["mm_token_type_ids"] = (input_ids == IMAGE_TOKEN_ID).to(torch.int64)
            position_ids, rope_delta = model.model.get_rope_index(
                input_ids, inputs["mm_token_type_ids"], inputs["image_grid_thw"], None,
                attention_mask=inputs["attention_mask"])
        else:
            position_ids, rope_delta = model.model.get_rope_index(
                input_ids, inputs["image_grid_thw"], None, attention_mask=inputs["attention_mask"])
    position_ids = position_ids[:, 0, :].to(torch.int64).contiguous()
    rope_delta = rope_delta.reshape(-1).to(torch.int64).contiguous()
    if list(rope_delta.shape) != [1]:
        raise AssertionError(f"{name}: rope_delta shape {list(rope_delta.shape)}")

    model.model.rope_deltas = None
    prompt_logits, cap = _prompt_forward(model, inputs)
    if not torch.equal(model.model.rope_deltas.reshape(-1).to(torch.int64), rope_delta):
        raise AssertionError(f"{name}: forward cached rope_deltas {model.model.rope_deltas} != {rope_delta}")
    tokens, step_logits, scores_equal = generate_greedy(model, inputs)
    if not torch.equal(model.model.rope_deltas.reshape(-1).to(torch.int64), rope_delta):
        raise AssertionError(f"{name}: generate's rope_deltas != get_rope_index's")

    # teacher-forced full forward over prompt + generated tokens (with the image): its logits
    # at L-1 .. L+n-2 vs the KV-cache step logits = the summation-order noise floor
    L = len(ids)
    with torch.no_grad():
        full_ids = torch.cat([input_ids, tokens[None, :-1]], dim=1)
        extra = {"mm_token_type_ids": (full_ids == IMAGE_TOKEN_ID).to(torch.int64)} if TF5 else {}
        full = model(input_ids=full_ids, attention_mask=torch.ones_like(full_ids),
                     pixel_values=inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"],
                     use_cache=False, **extra).logits[0, L - 1:].float()
    step_vs_full = float((full - step_logits).abs().max())

    top2 = torch.topk(step_logits, 2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).contiguous()
    if not torch.equal(step_logits.argmax(dim=-1), tokens):
        raise AssertionError(f"{name}: argmax(step_logits) != greedy tokens")
    ptop2 = torch.topk(prompt_logits, 2, dim=-1).values
    pmargin = ptop2[:, 0] - ptop2[:, 1]

    tensors: dict[str, Any] = {
        "pixel_values": torch.from_numpy(pixel_values.copy()),
        "pixel_values_fast": torch.from_numpy(fast),
        "image_grid_thw": torch.from_numpy(grid.copy()),
    }
    for j in range(len(files)):
        tensors[f"image{j}.input_rgb"] = torch.from_numpy(np.ascontiguousarray(inputs_rgb[j]))
        tensors[f"image{j}.resized_rgb"] = torch.from_numpy(np.ascontiguousarray(reached[j]))
    tensors.update({
        "input_ids": input_ids[0].contiguous(),
        "position_ids": position_ids,
        "rope_delta": rope_delta,
        **cap,
        "prompt_logits": prompt_logits.contiguous(),
        "greedy_tokens": tokens.to(torch.int64).contiguous(),
        "step_logits": step_logits,
        "top2_margin": margin,
    })
    save_file(tensors, str(out_dir / f"image_{name}.safetensors"), metadata={"format": "pt"})

    vcfg = model.config.vision_config
    n = int(tokens.shape[0])
    meta: dict[str, Any] = {
        "case": name,
        "parts": [dict(p) for p in parts],
        "content": [dict(p) for p in parts],  # the same items, under the chat-message key
        "images": files,
        "messages": msgs,
        "add_generation_prompt": True,
        "resize": RESIZE_MODE,
        "max_new_tokens": MAX_NEW_TOKENS,
        "eos_token_ids": list(EOS_TOKEN_IDS),
        "rendered": rendered,
        "image_sizes": [list(a.shape[:2]) for a in inputs_rgb],
        "resized_sizes": [list(r.shape[:2]) for r in reached],
        # true when some image's size was changed by smart_resize (then resized_rgb != input_rgb
        # and pixel values depend on the resampler)
        "resized": any(r.shape != a.shape for r, a in zip(reached, inputs_rgb)),
        "image_grid_thw": grid_list,
        "num_image_tokens": n_pads,
        "num_patches": int(pixel_values.shape[0]),
        "num_prompt_tokens": L,
        "rope_delta": int(rope_delta[0]),
        "num_generated": n,
        "stopped_on_eos": n > 0 and int(tokens[-1]) in EOS_TOKEN_IDS,
        "min_top2_margin": float(margin.min()),
        "argmin_top2_margin": int(margin.argmin()),
        "min_prompt_top2_margin": float(pmargin.min()),
        "step0_vs_prompt_last_max_abs": float((step_logits[0] - prompt_logits[-1]).abs().max()),
        "step_vs_teacher_forced_max_abs": step_vs_full,
        "scores_equal_raw_logits": scores_equal,
        "pixel_values_fast_vs_slow_max_abs": fast_vs_slow,
        "pixel_values_fast_vs_slow_num_different": n_fast_diff,
        "processor": {"class": type(ip).__name__, "min_pixels": processor_limits(ip)[0],
                      "max_pixels": processor_limits(ip)[1], "resample": "PIL BICUBIC",
                      "normalization": "slow: f32(f64(x)/255) then (v-0.5f)/0.5f"},
        "vision_hidden_size": int(vcfg.hidden_size),
        "vision_depth": int(vcfg.depth),
        "deepstack_visual_indexes": list(vcfg.deepstack_visual_indexes),
        "out_hidden_size": int(vcfg.out_hidden_size),
        "hidden_size": int(cap["hidden.embed"].shape[1]),
        "num_layers": sum(1 for k in cap if k.startswith("hidden.layer")),
        "vocab_size": int(prompt_logits.shape[1]),
        "attn_implementation": {"vision": model.model.visual.config._attn_implementation,
                                "text": model.model.language_model.config._attn_implementation},
    }
    write_json(out_dir / f"image_{name}.json", meta)
    return meta


def make_image_reference(ckpt_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                         images_dir: str | os.PathLike[str], cases: list[str] | None = None,
                         log=print) -> dict[str, dict[str, Any]]:
    """Writes image_<case>.{safetensors,json} for every case (default: all of CASES)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from tokenizers import Tokenizer
    from make_text_reference import load_model, load_tokenizer
    if TF5:
        from transformers import Qwen2VLImageProcessorPil as SlowProcessor
    else:
        from transformers import Qwen2VLImageProcessor as SlowProcessor

    ckpt = Path(ckpt_dir)
    out = Path(out_dir)
    imgs = Path(images_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = list(CASES) if cases is None else cases
    torch.set_num_threads(int(os.environ.get("QHX_REF_THREADS", "1")))
    t0 = time.perf_counter()
    tok = load_tokenizer(ckpt)
    fast_tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    ip = SlowProcessor.from_pretrained(str(ckpt))
    if (*processor_limits(ip), ip.patch_size, ip.merge_size, ip.temporal_patch_size) != \
            (65536, 16777216, 16, 2, 2):
        raise AssertionError(f"image processor limits {processor_limits(ip)}, patch "
                             f"{ip.patch_size}, merge {ip.merge_size} (size bug? see common.py)")
    model = load_model(ckpt)
    for part in (model.model.visual, model.model.language_model):
        if part.config._attn_implementation != "eager":
            raise AssertionError(f"{type(part).__name__} uses {part.config._attn_implementation}")
    results = {}
    for name in names:
        t = time.perf_counter()
        results[name] = make_case(model, tok, fast_tok, ip, name, CASES[name], imgs, out)
        r = results[name]
        log(f"  image {name}: N={r['num_patches']} L={r['num_prompt_tokens']} "
            f"n={r['num_generated']} min top2 margin {r['min_top2_margin']:.3g} "
            f"({time.perf_counter() - t:.1f} s)")
    log(f"  image references in {time.perf_counter() - t0:.1f} s -> {out}")
    return results


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="HF fp32 image references for a checkpoint dir")
    ap.add_argument("ckpt_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--images", default=None, help="image dir (default: built by test_images.py)")
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args(argv)
    if args.images is None:
        import test_images
        args.images = test_images.ensure_images()["dir"]
    make_image_reference(args.ckpt_dir, args.out_dir, args.images,
                         [c for c in args.cases.split(",") if c])
    return 0


if __name__ == "__main__":
    sys.exit(main())
