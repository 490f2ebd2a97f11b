"""Invariants of the HF reference harness, image side (tests/reference/test_images.py,
make_image_reference.py): the test images and the image references computed from the tiny
checkpoints. The checkpoints, the text references and the `references` fixture that builds
them are test_reference_harness.py's. Every check is a function returning a list of problems,
and each is also run on deliberately broken data to show it can fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import cache_dir
from test_reference_harness import CASES, EOS, MAX_NEW, TF5, TINY, references  # noqa: F401 (a fixture)

# ===========================================================================
# image references (tests/reference/test_images.py, make_image_reference.py): spec §3-§6, §8
#
# Everything expected below is derived from the spec, not from transformers: smart_resize
# (§3.2), Pillow's bicubic (§3.3), the fast normalization and patch flattening (§3.4-3.6), the
# position-embedding interpolation (§4.2), the mergers (§4.6), the pad expansion (§8) and the
# 3-D position ids (§6).

IMAGE_SIZES = {"img512.png": (512, 512), "img256x320.png": (256, 320), "img300x200.png": (300, 200)}
# spec §3.2 worked table: file -> grid_thw
IMAGE_GRIDS = {"img512.png": [1, 32, 32], "img256x320.png": [1, 16, 20], "img300x200.png": [1, 20, 14]}
# case -> (images in order, the exact rendered prompt with one <|image_pad|> per image)
_VIS = "<|vision_start|><|image_pad|><|vision_end|>"
_U, _A = "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"
IMAGE_CASES: dict[str, tuple[list[str], str]] = {
    "img512": (["img512.png"], f"{_U}{_VIS}Describe this image.{_A}"),
    "img256x320": (["img256x320.png"], f"{_U}{_VIS}Describe this image.{_A}"),
    "img300x200_native": (["img300x200.png"], f"{_U}{_VIS}What is in the picture?{_A}"),
    "text_around": (["img256x320.png"], f"{_U}Look at this: {_VIS} What is it?{_A}"),
    "two_images": (["img512.png", "img256x320.png"], f"{_U}{_VIS}and{_VIS}Compare them.{_A}"),
}
IMG_PAD, VIS_START, VIS_END = 151655, 151652, 151653
FAST_VS_SLOW_TOL = 6e-8


def spec_smart_resize(h: int, w: int, factor: int = 32, min_pixels: int = 65536,
                      max_pixels: int = 16777216) -> tuple[int, int]:
    """Spec §3.2 (Python round = half to even; doubles throughout)."""
    import math

    if max(h, w) / min(h, w) > 200:
        raise ValueError("aspect ratio > 200")
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb = math.ceil(h * beta / factor) * factor
        wb = math.ceil(w * beta / factor) * factor
    return hb, wb


def spec_pillow_bicubic(img, out_h: int, out_w: int):
    """Spec §3.3: Pillow's separable bicubic (a = -0.5) on uint8 [H, W, C], 22-bit fixed-point
    weights, horizontal pass first (rounded/clipped to uint8), then vertical."""
    import numpy as np

    def kernel(x: float) -> float:
        a, x = -0.5, abs(x)
        if x < 1.0:
            return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        if x < 2.0:
            return (((x - 5.0) * x + 8.0) * x - 4.0) * a
        return 0.0

    def one_pass(a, axis: int, n_out: int):
        a = np.moveaxis(a, axis, 0).astype(np.int64)
        n_in = a.shape[0]
        if n_in == n_out:
            return np.moveaxis(a, 0, axis).astype(np.uint8)
        scale = n_in / n_out
        fs = max(scale, 1.0)
        support = 2.0 * fs
        out = np.empty((n_out,) + a.shape[1:], dtype=np.int64)
        for i in range(n_out):
            center = (i + 0.5) * scale
            lo = max(int(center - support + 0.5), 0)
            hi = min(int(center + support + 0.5), n_in)
            w = [kernel((x + lo - center + 0.5) / fs) for x in range(hi - lo)]
            s = sum(w)
            acc = np.full(a.shape[1:], 1 << 21, dtype=np.int64)
            for j, v in enumerate(w):
                v /= s
                k = int(-0.5 + v * (1 << 22)) if v < 0 else int(0.5 + v * (1 << 22))
                acc += a[lo + j] * k
            out[i] = np.clip(acc >> 22, 0, 255)
        return np.moveaxis(out, 0, axis).astype(np.uint8)

    return one_pass(one_pass(img, 1, out_w), 0, out_h)


def spec_fast_pixel_values(rgb):
    """Spec §3.4 + §3.6 from a resized uint8 [H, W, 3] image, by the index formulas."""
    import numpy as np

    h, w, _ = rgb.shape
    gh, gw = h // 16, w // 16
    mw = gw // 2
    r = np.arange(gh * gw)
    q, j = r // 4, r % 4
    py = 2 * (q // mw) + j // 2
    px = 2 * (q % mw) + j % 2
    c = np.arange(1536)
    ch, y, x = c // 512, (c // 16) % 16, c % 16  # frame t = (c // 256) % 2 reads the same pixels
    vals = rgb[16 * py[:, None] + y[None, :], 16 * px[:, None] + x[None, :], ch[None, :]]
    return (vals.astype(np.float32) - np.float32(127.5)) / np.float32(127.5)


def spec_positions(ids: list[int], grids: list[list[int]], merge: int = 2) -> tuple[list[list[int]], int]:
    """Spec §6: 3-D positions [3][L] and rope_delta."""
    pos: list[tuple[int, int, int]] = []
    st, nxt = 0, 0
    for t, gh, gw in grids:
        ed = ids.index(IMG_PAD, st)
        pos += [(nxt + i,) * 3 for i in range(ed - st)]
        s = nxt + (ed - st)
        mh, mw = gh // merge, gw // merge
        pos += [(s + a, s + r, s + c) for a in range(t) for r in range(mh) for c in range(mw)]
        st = ed + t * mh * mw
        nxt = s + max(t - 1, mh - 1, mw - 1) + 1
    pos += [(nxt + i,) * 3 for i in range(len(ids) - st)]
    delta = max(max(p) for p in pos) + 1 - len(ids)
    return [[p[a] for p in pos] for a in range(3)], delta


def spec_pos_embed(table, grids: list[list[int]], side: int = 48):
    """Spec §4.2: align-corners bilinear interpolation of the side x side table (f32,
    torch's two-sided linspace, trunc corners, left-to-right sum), in merge-window order."""
    import numpy as np

    def linspace(n: int):
        if n == 1:
            return np.zeros(1, dtype=np.float32)
        step = np.float32((side - 1) / (n - 1))
        return np.array([np.float32(step * np.float32(i)) if i < n // 2 else
                         np.float32(np.float32(side - 1) - np.float32(step * np.float32(n - 1 - i)))
                         for i in range(n)], dtype=np.float32)

    out = []
    for t, gh, gw in grids:
        ys, xs = linspace(gh), linspace(gw)
        y0, x0 = ys.astype(np.int64), xs.astype(np.int64)
        y1, x1 = np.minimum(y0 + 1, side - 1), np.minimum(x0 + 1, side - 1)
        dy, dx = ys - y0.astype(np.float32), xs - x0.astype(np.float32)
        one = np.float32(1)

        def term(a, b, wa, wb):
            rows = table[(a[:, None] * side + b[None, :]).reshape(-1)]
            return rows * (wa[:, None] * wb[None, :]).reshape(-1, 1)

        p = ((term(y0, x0, one - dy, one - dx) + term(y0, x1, one - dy, dx))
             + term(y1, x0, dy, one - dx)) + term(y1, x1, dy, dx)
        p = p.reshape(gh // 2, 2, gw // 2, 2, -1).transpose(0, 2, 1, 3, 4).reshape(gh * gw, -1)
        out.append(np.tile(p, (t, 1)))
    return np.concatenate(out)


def expected_image_tensors(cfg: dict[str, Any], n_images: int, N: int, L: int, n: int, tf5: bool = False
                           ) -> dict[str, tuple[list[int] | None, str]]:
    """name -> (shape or None when image-dependent, dtype) for an image reference (tf5: one
    built by transformers 5.x, which also records the vision RoPE tables)."""
    t, v = cfg["text_config"], cfg["vision_config"]
    hv, o, h, V = v["hidden_size"], v["out_hidden_size"], t["hidden_size"], t["vocab_size"]
    out: dict[str, tuple[list[int] | None, str]] = {
        "pixel_values": ([N, 1536], "float32"), "pixel_values_fast": ([N, 1536], "float32"),
        "image_grid_thw": ([n_images, 3], "int64"),
        "input_ids": ([L], "int64"), "position_ids": ([3, L], "int64"), "rope_delta": ([1], "int64"),
        "vision.patch_embed": ([N, hv], "float32"), "vision.pos_embed": ([N, hv], "float32"),
        "vision.merger": ([N // 4, o], "float32"),
        "hidden.embed": ([L, h], "float32"), "hidden.final_norm": ([L, h], "float32"),
        "prompt_logits": ([L, V], "float32"), "greedy_tokens": ([n], "int64"),
        "step_logits": ([n, V], "float32"), "top2_margin": ([n], "float32"),
    }
    if tf5:
        hd = hv // v["num_heads"]
        out["vision.rope_cos"] = ([N, hd], "float32")
        out["vision.rope_sin"] = ([N, hd], "float32")
    for j in range(n_images):
        out[f"image{j}.input_rgb"] = (None, "uint8")
        out[f"image{j}.resized_rgb"] = (None, "uint8")
    for i in range(v["depth"]):
        out[f"vision.block{i}"] = ([N, hv], "float32")
    for k in range(len(v["deepstack_visual_indexes"])):
        out[f"vision.deepstack{k}"] = ([N // 4, o], "float32")
    for i in range(t["num_hidden_layers"]):
        out[f"hidden.layer{i}"] = ([L, h], "float32")
    return out


def check_image_case(t: dict[str, Any], meta: dict[str, Any], case: str, cfg: dict[str, Any],
                     images_dir: Path | None = None, tf5: bool = False) -> list[str]:
    """Names/shapes/dtypes, grids (§3.2 table), resized pixels, pads between vision_start and
    vision_end (§8), positions (§6), pixel_values_fast (§3.4/3.6) vs pixel_values,
    argmax(step_logits) == greedy tokens, JSON consistency. t holds numpy arrays."""
    import numpy as np

    problems: list[str] = []
    files, rendered = IMAGE_CASES[case]
    for k in ("input_ids", "greedy_tokens", "pixel_values"):
        if k not in t:
            return [f"{k} missing"]
    L, n = int(t["input_ids"].shape[0]), int(t["greedy_tokens"].shape[0])
    N = int(t["pixel_values"].shape[0])
    want = expected_image_tensors(cfg, len(files), N, L, n, tf5)
    if set(t) != set(want):
        problems.append(f"tensor names: missing {sorted(set(want) - set(t))}, "
                        f"extra {sorted(set(t) - set(want))}")
    for k, (shape, dtype) in want.items():
        if k in t and ((shape is not None and list(t[k].shape) != shape) or str(t[k].dtype) != dtype):
            problems.append(f"{k}: {list(t[k].shape)} {t[k].dtype}, expected {shape} {dtype}")
    if problems:
        return problems

    # grids: the §3.2 table, and smart_resize of the image sizes
    grid = t["image_grid_thw"].tolist()
    want_grid = [IMAGE_GRIDS[f] for f in files]
    if grid != want_grid:
        problems.append(f"image_grid_thw {grid} != {want_grid}")
    for j, f in enumerate(files):
        rh, rw = spec_smart_resize(*IMAGE_SIZES[f])
        if [1, rh // 16, rw // 16] != want_grid[j]:
            problems.append(f"spec_smart_resize{IMAGE_SIZES[f]} = {(rh, rw)} disagrees with the table")
        inp, res = t[f"image{j}.input_rgb"], t[f"image{j}.resized_rgb"]
        if list(inp.shape) != [*IMAGE_SIZES[f], 3]:
            problems.append(f"image{j}.input_rgb shape {list(inp.shape)}")
        if list(res.shape) != [grid[j][1] * 16, grid[j][2] * 16, 3]:
            problems.append(f"image{j}.resized_rgb shape {list(res.shape)} vs grid {grid[j]}")
        elif res.shape == inp.shape and not np.array_equal(res, inp):
            problems.append(f"image{j}: unchanged size but resized_rgb != input_rgb")
        if images_dir is not None:
            import test_images
            if not np.array_equal(test_images.load_rgb(images_dir / f), inp):
                problems.append(f"image{j}.input_rgb != decoded {f}")
    if N != sum(a * b * c for a, b, c in grid):
        problems.append(f"{N} patches for grids {grid}")

    # pixel values
    fast = np.concatenate([spec_fast_pixel_values(t[f"image{j}.resized_rgb"]) for j in range(len(files))])
    if fast.shape != t["pixel_values_fast"].shape or not np.array_equal(fast, t["pixel_values_fast"]):
        problems.append("pixel_values_fast != spec §3.4/§3.6 from resized_rgb")
    d = float(np.abs(t["pixel_values_fast"].astype(np.float64)
                     - t["pixel_values"].astype(np.float64)).max())
    if d > FAST_VS_SLOW_TOL:
        problems.append(f"pixel_values_fast vs pixel_values differ by {d:.3g} > {FAST_VS_SLOW_TOL}")

    # ids: exactly t·gh·gw/4 pads per image, each run between vision_start and vision_end
    ids = t["input_ids"].tolist()
    n_pads = [a * b * c // 4 for a, b, c in grid]
    if ids.count(IMG_PAD) != sum(n_pads):
        problems.append(f"{ids.count(IMG_PAD)} image pads, expected {sum(n_pads)}")
    starts = [i for i, x in enumerate(ids) if x == VIS_START]
    if len(starts) != len(files) or ids.count(VIS_END) != len(files):
        problems.append(f"{len(starts)} vision_start / {ids.count(VIS_END)} vision_end "
                        f"for {len(files)} images")
    else:
        for j, s in enumerate(starts):
            run = ids[s + 1:s + 1 + n_pads[j]]
            if run != [IMG_PAD] * n_pads[j] or s + 1 + n_pads[j] >= L or ids[s + 1 + n_pads[j]] != VIS_END:
                problems.append(f"image {j}: not vision_start + {n_pads[j]} pads + vision_end at {s}")
    if ids[:3] != [151644, 872, 198] or ids[-5:] != [151645, 198, 151644, 77091, 198]:
        problems.append(f"chat framing wrong: {ids[:3]} ... {ids[-5:]}")

    # positions (§6)
    try:
        pos, delta = spec_positions(ids, grid)
        if t["position_ids"].tolist() != pos:
            bad = next(i for i in range(L) if [p[i] for p in pos] != t["position_ids"][:, i].tolist())
            problems.append(f"position_ids differ from spec §6 first at index {bad}")
        if int(t["rope_delta"][0]) != delta:
            problems.append(f"rope_delta {int(t['rope_delta'][0])} != spec {delta}")
    except ValueError:
        problems.append("no image pad where spec §6 expects one")

    # generation
    if not 1 <= n <= MAX_NEW:
        problems.append(f"{n} generated tokens")
    gen = t["greedy_tokens"]
    if n < MAX_NEW and int(gen[-1]) not in EOS:
        problems.append(f"generation stopped after {n} tokens without EOS")
    am = t["step_logits"].argmax(axis=-1)
    if not np.array_equal(am, gen):
        bad = int(np.nonzero(am != gen)[0][0])
        problems.append(f"argmax(step_logits[{bad}]) = {int(am[bad])} != greedy token {int(gen[bad])}")
    top2 = -np.sort(-t["step_logits"], axis=-1)[:, :2]
    if not np.array_equal(top2[:, 0] - top2[:, 1], t["top2_margin"]):
        problems.append("top2_margin != top1 - top2 of step_logits")
    if float(np.abs(t["step_logits"][0] - t["prompt_logits"][-1]).max()) > 1e-4:
        problems.append("step_logits[0] differs from prompt_logits[L-1] by more than 1e-4")

    # JSON
    checks = {"images": files, "rendered": rendered, "image_grid_thw": grid, "num_prompt_tokens": L,
              "num_patches": N, "num_generated": n, "num_image_tokens": n_pads,
              "max_new_tokens": MAX_NEW, "resize": "native", "add_generation_prompt": True,
              "min_top2_margin": float(t["top2_margin"].min()),
              "rope_delta": int(t["rope_delta"][0])}
    for k, v in checks.items():
        if meta.get(k) != v:
            problems.append(f"json {k} = {meta.get(k)!r}, expected {v!r}")
    if meta.get("resized") != any(list(t[f"image{j}.resized_rgb"].shape[:2]) != list(IMAGE_SIZES[f])
                                  for j, f in enumerate(files)):
        problems.append(f"json resized = {meta.get('resized')!r}")
    content = meta.get("content") or []
    if [c.get("image") for c in content if c.get("type") == "image"] != files or content != meta.get("parts"):
        problems.append("json content/parts do not list the case's images in order")
    if meta.get("rendered", "").count("<|image_pad|>") != len(files):
        problems.append("json rendered prompt is not the unexpanded template output")
    return problems


def spec_vision_rope(grids: list[list[int]], head_dim: int, theta: float):
    """Spec §4.3's cos/sin tables [N, head_dim] in float64: inv_freq[k] = theta^(-4k/head_dim),
    angles [row·inv_freq, col·inv_freq] twice, rows in the 2x2 merge-window order."""
    import numpy as np

    q = head_dim // 4
    inv = 1.0 / theta ** (np.arange(q, dtype=np.float64) * 4 / head_dim)
    rows = []
    for t, gh, gw in grids:
        r, c = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
        r = r.reshape(gh // 2, 2, gw // 2, 2).transpose(0, 2, 1, 3).reshape(-1)
        c = c.reshape(gh // 2, 2, gw // 2, 2).transpose(0, 2, 1, 3).reshape(-1)
        ang = np.concatenate([r[:, None] * inv, c[:, None] * inv], axis=1)
        rows.append(np.tile(np.concatenate([ang, ang], axis=1), (t, 1)))
    a = np.concatenate(rows)
    return np.cos(a), np.sin(a)


# transformers 5.24 interpolates the position embedding with a closed-form source coordinate
# instead of torch.linspace and sums the four weighted taps in one reduction: on these checkpoints
# it is within 7.2e-7 of spec §4.2's (4.57's) f32 result, not bit-equal.
TF5_POS_EMBED_MAX_ABS = 1e-6
TF5_ROPE_MAX_ABS = 1e-6  # f32 angles and cos/sin against float64


def check_image_semantics(t: dict[str, Any], cfg: dict[str, Any], w: dict[str, Any], tf5: bool = False
                          ) -> list[str]:
    """What the hooks captured, recomputed from the checkpoint weights (w: name -> f32 torch
    tensor) in float64: patch embedding (§4.1), pos-embed (§4.2, bit-exact; tf5: within
    TF5_POS_EMBED_MAX_ABS, and the vision RoPE tables of §4.3 with the config's theta), which block
    feeds which merger (§4.6), the visual scatter (§5.1), final norm and logits. t: torch tensors."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    problems: list[str] = []
    v, tc = cfg["vision_config"], cfg["text_config"]
    hv = v["hidden_size"]
    p = "model.visual."

    def close(name: str, got, ref, tol: float) -> None:
        d = float((got.double() - ref).abs().max())
        scale = 1.0 + float(ref.abs().max())
        if d > tol * scale:
            problems.append(f"{name}: max diff {d:.3g} (scale {scale:.3g})")

    X = t["pixel_values"].double()
    Wp = w[p + "patch_embed.proj.weight"].double().reshape(hv, -1)
    close("vision.patch_embed", t["vision.patch_embed"],
          X @ Wp.T + w[p + "patch_embed.proj.bias"].double(), 1e-5)
    pe = spec_pos_embed(w[p + "pos_embed.weight"].float().numpy(), t["image_grid_thw"].tolist())
    got = t["vision.pos_embed"].numpy()
    if pe.shape != got.shape:
        problems.append(f"vision.pos_embed: shape {got.shape}, spec §4.2 {pe.shape}")
    elif tf5:
        d = float(np.abs(got.astype(np.float64) - pe).max())
        if d > TF5_POS_EMBED_MAX_ABS:
            problems.append(f"vision.pos_embed: {d:.3g} from spec §4.2 (> {TF5_POS_EMBED_MAX_ABS})")
    elif not np.array_equal(pe, got):
        problems.append("vision.pos_embed != spec §4.2 interpolation (bit-exact expected)")
    if tf5:
        theta = (v.get("rope_parameters") or {}).get("rope_theta", 10000.0)
        cos, sin = spec_vision_rope(t["image_grid_thw"].tolist(), hv // v["num_heads"], theta)
        for name, ref in (("vision.rope_cos", cos), ("vision.rope_sin", sin)):
            got = t[name].double().numpy()
            d = float(np.abs(got - ref).max()) if got.shape == ref.shape else float("inf")
            if d > TF5_ROPE_MAX_ABS:
                problems.append(f"{name}: {d:.3g} from spec §4.3 with theta {theta} (> {TF5_ROPE_MAX_ABS})")

    def merger(pre: str, x, postshuffle: bool):
        x = x.double()
        nw, nb = w[pre + "norm.weight"].double(), w[pre + "norm.bias"].double()
        if postshuffle:  # deepstack: group 4 rows, then LayerNorm over 4·Hv
            x = F.layer_norm(x.reshape(-1, 4 * hv), (4 * hv,), nw, nb, 1e-6)
        else:  # main merger: LayerNorm over Hv per patch, then group
            x = F.layer_norm(x, (hv,), nw, nb, 1e-6)
            x = x.reshape(-1, 4 * hv)
        x = F.linear(x, w[pre + "linear_fc1.weight"].double(), w[pre + "linear_fc1.bias"].double())
        x = F.gelu(x)  # exact erf GELU
        return F.linear(x, w[pre + "linear_fc2.weight"].double(), w[pre + "linear_fc2.bias"].double())

    for k, b in enumerate(v["deepstack_visual_indexes"]):
        close(f"vision.deepstack{k} from vision.block{b}", t[f"vision.deepstack{k}"],
              merger(f"{p}deepstack_merger_list.{k}.", t[f"vision.block{b}"], True), 1e-5)
    close("vision.merger", t["vision.merger"],
          merger(p + "merger.", t[f"vision.block{v['depth'] - 1}"], False), 1e-5)

    E = w["model.language_model.embed_tokens.weight"]
    ids = t["input_ids"]
    emb = E[ids].clone()
    emb[ids == IMG_PAD] = t["vision.merger"]
    if not torch.equal(emb, t["hidden.embed"]):
        problems.append("hidden.embed != embed_tokens with vision.merger rows at the image pads")
    layers, n_ds = tc["num_hidden_layers"], len(v["deepstack_visual_indexes"])
    last = t[f"hidden.layer{layers - 1}"].double().clone()
    if layers - 1 < n_ds:
        last[ids == IMG_PAD] += t[f"vision.deepstack{layers - 1}"].double()
    rms = last * torch.rsqrt(last.pow(2).mean(-1, keepdim=True) + tc["rms_norm_eps"]) \
        * w["model.language_model.norm.weight"].double()
    close("hidden.final_norm", t["hidden.final_norm"], rms, 1e-5)
    close("prompt_logits", t["prompt_logits"], t["hidden.final_norm"].double() @ E.double().T, 1e-5)
    return problems


def _load_image_case(ref_dir: Path, case: str,
                     framework: str = "np") -> tuple[dict[str, Any], dict[str, Any]]:
    if framework == "np":
        from safetensors.numpy import load_file
    else:
        from safetensors.torch import load_file
    tensors = load_file(str(ref_dir / f"image_{case}.safetensors"))
    with open(ref_dir / f"image_{case}.json", encoding="utf-8") as f:
        meta = json.load(f)
    return tensors, meta


def _checkpoint_f32(ref_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return {k: v.float() for k, v in load_file(str(ref_dir / "checkpoint" / "model.safetensors")).items()}


def _images_dir() -> Path:
    return cache_dir() / "reference" / "images"


def test_smart_resize_spec_table():
    table = {(512, 512): (512, 512), (256, 320): (256, 320), (300, 200): (320, 224),
             (272, 400): (256, 384), (100, 100): (256, 256), (1080, 1920): (1088, 1920),
             (4000, 6000): (3328, 4992)}
    for (h, w), want in table.items():
        assert spec_smart_resize(h, w) == want, (h, w)


def test_test_images_match_their_formulas(references):
    import numpy as np
    import test_images

    d = _images_dir()
    stamp = json.loads((d / "qhx_stamp.json").read_text())
    assert stamp["hash"] == test_images.images_hash()
    for f, (h, w) in IMAGE_SIZES.items():
        arr = test_images.load_rgb(d / f)
        assert arr.shape == (h, w, 3) and arr.dtype == np.uint8
        assert np.array_equal(arr, test_images.generate(f)), f
        for c in range(3):
            assert len(np.unique(arr[..., c])) == 256, (f, c)
        # not symmetric under flips/transposes (ordering bugs must show)
        assert not np.array_equal(arr, arr[::-1]) and not np.array_equal(arr, arr[:, ::-1])
        if h == w:
            assert not np.array_equal(arr, arr.transpose(1, 0, 2))


@pytest.mark.parametrize("name", TINY + TF5)
@pytest.mark.parametrize("case", list(IMAGE_CASES))
def test_image_case(references, name, case):
    import numpy as np
    import tiny_configs

    cfg = tiny_configs.get(name)
    t, meta = _load_image_case(references[name]["dir"], case)
    problems = check_image_case(t, meta, case, cfg, _images_dir(), tf5=name in TF5)
    assert not problems, "\n".join(problems)
    assert np.all(t["top2_margin"] > 0), "an exact tie in a greedy step"


@pytest.mark.parametrize("name", TINY + TF5)
@pytest.mark.parametrize("case", ["img512", "img300x200_native", "two_images"])
def test_image_semantics(references, name, case):
    import tiny_configs

    ref_dir = references[name]["dir"]
    t, _ = _load_image_case(ref_dir, case, "pt")
    problems = check_image_semantics(t, tiny_configs.get(name), _checkpoint_f32(ref_dir), tf5=name in TF5)
    assert not problems, "\n".join(problems)


def test_img512_worked_example(references):
    """Spec §6 worked example: ids and rope_delta -240 for the 512x512 prompt (any config)."""
    t, _ = _load_image_case(references["tiny_a"]["dir"], "img512")
    want = [151644, 872, 198, 151652] + [151655] * 256 + \
        [151653, 74785, 419, 2168, 13, 151645, 198, 151644, 77091, 198]
    assert t["input_ids"].tolist() == want
    assert int(t["rope_delta"][0]) == -240
    pos = t["position_ids"]
    assert pos[:, 260].tolist() == [20, 20, 20] and pos[:, 269].tolist() == [29, 29, 29]
    assert pos[:, 4 + 37].tolist() == [4, 4 + 37 // 16, 4 + 37 % 16]


def test_resize_matches_pillow_algorithm(references):
    """The 300x200 image reached normalization as spec §3.3's Pillow bicubic makes it."""
    import numpy as np

    for name in TINY:
        t, _ = _load_image_case(references[name]["dir"], "img300x200_native")
        res = spec_pillow_bicubic(t["image0.input_rgb"], 320, 224)
        assert np.array_equal(res, t["image0.resized_rgb"]), name


def test_image_references_are_identical_across_configs(references):
    """Preprocessing and ids do not depend on the model."""
    import numpy as np

    for case in IMAGE_CASES:
        a, _ = _load_image_case(references["tiny_a"]["dir"], case)
        b, _ = _load_image_case(references["tiny_b"]["dir"], case)
        for k in ("pixel_values", "pixel_values_fast", "image_grid_thw", "input_ids", "position_ids",
                  "rope_delta"):
            assert np.array_equal(a[k], b[k]), (case, k)


def test_image_manifest_and_cached_rebuild(references):
    import build_all

    for name in TINY:
        man = references[name]["manifest"]
        assert set(man["image_cases"]) == set(IMAGE_CASES)
        assert set(man["cases"]) == set(CASES)  # the text part is still there
        again = build_all.ensure_reference(name, cache_dir(), log=lambda *_: None)
        assert not again["built_checkpoint"] and not again["built_text"]
        assert not again["built_images"] and not again["built_image_refs"]
        assert again["image_hash"] == man["image_hash"] and again["hash"] == man["hash"]
        for case, info in man["image_cases"].items():
            assert info["images"] == IMAGE_CASES[case][0]
            assert (references[name]["dir"] / info["safetensors"]).is_file()


def test_check_image_case_catches_breakage(references):
    import numpy as np
    import tiny_configs

    cfg = tiny_configs.get("tiny_a")
    t, meta = _load_image_case(references["tiny_a"]["dir"], "img256x320")
    assert check_image_case(t, meta, "img256x320", cfg) == []

    def broken(**changes):
        return check_image_case({**t, **changes}, meta, "img256x320", cfg)

    swapped = t["image_grid_thw"][:, [0, 2, 1]].copy()
    assert any("image_grid_thw" in p for p in broken(image_grid_thw=swapped))
    g = t["greedy_tokens"].copy()
    g[5] += 1
    assert any("argmax" in p for p in broken(greedy_tokens=g))
    ids = t["input_ids"].copy()
    ids[10] = 198  # one pad fewer
    assert any("pads" in p for p in broken(input_ids=ids))
    pos = t["position_ids"].copy()
    pos[1], pos[2] = t["position_ids"][2], t["position_ids"][1]  # H and W swapped
    assert any("position_ids" in p for p in broken(position_ids=pos))
    assert any("rope_delta" in p for p in broken(rope_delta=t["rope_delta"] + 1))
    pv = t["pixel_values_fast"].copy()
    pv[7, 100] += np.float32(1e-7)
    assert any("pixel_values_fast" in p for p in broken(pixel_values_fast=pv))
    pv = t["pixel_values"].copy()
    pv[3, 3] += np.float32(1e-6)
    assert any("differ by" in p for p in broken(pixel_values=pv))
    flipped = t["image0.resized_rgb"][::-1].copy()
    assert any("resized_rgb" in p for p in broken(**{"image0.resized_rgb": flipped}))
    assert any("vision.block0" in p for p in broken(**{"vision.block0": t["vision.block0"][:, :-1]}))
    extra = {**t, "vision.block9": t["vision.block0"]}
    assert any("tensor names" in p for p in check_image_case(extra, meta, "img256x320", cfg))


def test_check_image_semantics_catches_breakage(references):
    import tiny_configs

    cfg = tiny_configs.get("tiny_a")
    ref_dir = references["tiny_a"]["dir"]
    t, _ = _load_image_case(ref_dir, "img256x320", "pt")
    w = _checkpoint_f32(ref_dir)
    assert check_image_semantics(t, cfg, w) == []
    # deepstack 1 taps block 2 (indexes [0, 2, 3]); block 1 is not tapped
    bad = {**t, "vision.block2": t["vision.block1"]}
    assert any("deepstack1" in p for p in check_image_semantics(bad, cfg, w))
    # pos-embed rows left in raster order instead of the 2x2 merge-window order (grid 16x20)
    raster = t["vision.pos_embed"].reshape(8, 10, 2, 2, -1).permute(0, 2, 1, 3, 4).reshape(320, -1)
    bad = {**t, "vision.pos_embed": raster}
    assert any("pos_embed" in p for p in check_image_semantics(bad, cfg, w))
    # hidden.embed without the scatter
    bad = {**t, "hidden.embed": w["model.language_model.embed_tokens.weight"][t["input_ids"]]}
    assert any("hidden.embed" in p for p in check_image_semantics(bad, cfg, w))
    # merger fed by the wrong block
    bad = {**t, f"vision.block{cfg['vision_config']['depth'] - 1}": t["vision.block0"]}
    assert any("vision.merger" in p for p in check_image_semantics(bad, cfg, w))
