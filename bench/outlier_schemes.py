"""Int8 schemes on checkpoints with planted outlier channels, emulated in torch (prints figures).

Emulates QHexRT's w8 arithmetic on the language model of the planted-outlier recipe
(tests/reference/make_outlier_checkpoint.py) for several seeds, and prints the worst prompt-row
cosine of the logits against the same model in fp32, per scheme:

  - w8 weights, one scale per output row (what a w8 bundle stores), activations f32 or int8 with
    one scale per row (src/backends/cpu/int8_matmul.hpp), with and without the export's outlier
    smoothing (src/export/outlier_smoothing.cpp: factors (a / median)^0.5 from the checkpoint's
    norm gains and gate/up row norms, channels above 8x the median);
  - two schemes QHexRT does not have, to size the next step: the outlier input channels of each
    matrix kept in f32 beside the int8 product (their columns of W and of x taken out of the
    int8 operands, so neither per-row scale sees them), and w8 weights with a scale per group of
    32 columns.

The emulation rounds as QHexRT does (round half to even, amax / 127 scales) but keeps the KV
cache in f32 and runs attention in torch, so its figures follow the C++ runtime's closely, not
bit for bit (tests/python/test_outlier_activations.py measures the runtime itself on seed 0).
Seed 0's references are the recipe's own prompts; every seed is also run on an 80-token random
prompt. A benchmark of accuracy, not a test: it asserts nothing.

    .venv/bin/python bench/outlier_schemes.py [--seeds 0,1,2,3]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reference"))
import make_checkpoint  # noqa: E402
import make_outlier_checkpoint as recipe  # noqa: E402

RATIO, ALPHA = 8.0, 0.5  # the export's threshold and migration strength (outlier_smoothing.hpp)


def q8_rows(x: torch.Tensor) -> torch.Tensor:
    """x quantized and dequantized with one symmetric int8 scale per row (last dimension)."""
    amax = x.abs().amax(dim=-1, keepdim=True)
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    q = torch.round(x * (127 / safe)).clamp(-127, 127)
    return torch.where(amax > 0, q * (safe / 127), torch.zeros_like(x))


def q8_groups(w: torch.Tensor, group: int) -> torch.Tensor:
    rows, cols = w.shape
    return q8_rows(w.reshape(rows, cols // group, group)).reshape(rows, cols)


class EmulatedLinear(torch.nn.Module):
    def __init__(self, lin: torch.nn.Linear, act: str, group: int = 0, keep: torch.Tensor | None = None):
        super().__init__()
        w = lin.weight.detach().clone()
        self.keep = keep if keep is not None and keep.numel() else None
        if self.keep is not None:  # these input channels stay f32, out of the int8 operands
            self.w_keep = w[:, self.keep].clone()
            w[:, self.keep] = 0
        self.w = q8_groups(w, group) if group else q8_rows(w)
        self.bias, self.act = lin.bias, act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = None
        if self.keep is not None:
            kept = x[..., self.keep] @ self.w_keep.T
            x = x.clone()
            x[..., self.keep] = 0
        if self.act == "int8":
            x = q8_rows(x)
        elif self.act == "int8b32":  # a scale per block of 32 along K, as llama.cpp's Q8_0 activations
            x = q8_rows(x.reshape(*x.shape[:-1], x.shape[-1] // 32, 32)).reshape(x.shape)
        y = x @ self.w.T
        if kept is not None:
            y = y + kept
        return y if self.bias is None else y + self.bias


def upper_median(a: torch.Tensor) -> torch.Tensor:  # std::nth_element at size / 2, as the export takes it
    return torch.sort(a).values[a.numel() // 2]


def outliers(a: torch.Tensor) -> torch.Tensor:
    return a > RATIO * upper_median(a)


def smooth_(model) -> None:
    """The export's smoothing, folded into the weights in place (factors from the unsmoothed model)."""
    lm = model.model.language_model
    with torch.no_grad():
        mlp_a = [layer.mlp.gate_proj.weight.norm(dim=1) * layer.mlp.up_proj.weight.norm(dim=1) for layer in lm.layers]
        for layer, a_mlp in zip(lm.layers, mlp_a):
            attn, mlp = layer.self_attn, layer.mlp
            for norm, readers in ((layer.input_layernorm, (attn.q_proj, attn.k_proj, attn.v_proj)),
                                  (layer.post_attention_layernorm, (mlp.gate_proj, mlp.up_proj))):
                a = norm.weight.abs()
                s = torch.where(outliers(a), (a / upper_median(a)) ** ALPHA, torch.ones_like(a))
                norm.weight /= s
                for r in readers:
                    r.weight *= s
            s = torch.where(outliers(a_mlp), (a_mlp / upper_median(a_mlp)) ** ALPHA, torch.ones_like(a_mlp))
            mlp.up_proj.weight /= s[:, None]
            mlp.down_proj.weight *= s


def kept_channels(model) -> dict:
    """Per matrix, the input channels judged outliers from the weights alone (the export's estimates,
    and the embedding's large columns for every reader of the residual stream)."""
    lm = model.model.language_model
    idx = lambda a: torch.nonzero(outliers(a)).flatten()  # noqa: E731
    emb = idx(lm.embed_tokens.weight.norm(dim=0))
    keep = {"lm_head": emb}
    for layer in lm.layers:
        attn, mlp = layer.self_attn, layer.mlp
        c1 = torch.unique(torch.cat([idx(layer.input_layernorm.weight.abs()), emb]))
        c2 = torch.unique(torch.cat([idx(layer.post_attention_layernorm.weight.abs()), emb]))
        keep.update({id(attn.q_proj): c1, id(attn.k_proj): c1, id(attn.v_proj): c1, id(mlp.gate_proj): c2,
                     id(mlp.up_proj): c2, id(mlp.down_proj): idx(mlp.gate_proj.weight.norm(dim=1) *
                                                                 mlp.up_proj.weight.norm(dim=1))})
    return keep


def emulate_(model, act: str, group: int = 0, keep: dict | None = None) -> None:
    for layer in model.model.language_model.layers:
        for parent, names in ((layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                              (layer.mlp, ("gate_proj", "up_proj", "down_proj"))):
            for n in names:
                lin = getattr(parent, n)
                setattr(parent, n, EmulatedLinear(lin, act, group, (keep or {}).get(id(lin))))
    model.lm_head = EmulatedLinear(model.lm_head, act, group, (keep or {}).get("lm_head"))


SCHEMES = {  # name: (smoothing, weight group, f32 outlier channels)
    "w8 per row": (False, 0, False),
    "w8 per row, smoothing (the export's default)": (True, 0, False),
    "w8 per row, outlier channels in f32": (False, 0, True),
    "w8 per group of 32": (False, 32, False),
    "w8 per group of 32, smoothing": (True, 32, False),
}
ACTS = ("f32", "int8", "int8b32")  # int8b32: activations with a scale per block of 32 along K


def planted_model(seed: int):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(**recipe.CONFIG))
    make_checkpoint.randomize_(model)
    recipe.plant_outliers(model)
    model = model.to(torch.bfloat16).to(torch.float32).eval()  # the checkpoint is bf16
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())  # untied: quantized apart
    return model


def recipe_prompts() -> list[torch.Tensor]:
    """The token ids of the recipe's own reference prompts (built once, cached)."""
    from safetensors.numpy import load_file

    ref = recipe.ensure_outlier_reference(log=lambda *a: None)
    return [torch.tensor(load_file(str(ref / f"text_{case}.safetensors"))["input_ids"])[None]
            for case in recipe.CASES]


def random_prompt(seed: int) -> torch.Tensor:
    return torch.randint(0, 150000, (1, 80), generator=torch.Generator().manual_seed(1000 + seed))


def worst_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).min())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2,3")
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = recipe.CASES + ["random80"]
    print(f"worst prompt-row logits cosine against fp32; prompts {', '.join(names)}")
    print(f"{'seed':>4}  {'scheme':46} {'act':7} " + " ".join(f"{n:>12}" for n in names))
    fixed = recipe_prompts()
    for seed in (int(s) for s in args.seeds.split(",")):
        base = planted_model(seed)
        ids = fixed + [random_prompt(seed)]
        with torch.no_grad():
            refs = [base(input_ids=i).logits[0].numpy() for i in ids]
        for name, (smooth, group, keep) in SCHEMES.items():
            for act in ACTS:
                m = copy.deepcopy(base)
                if smooth:
                    smooth_(m)
                emulate_(m, act, group, kept_channels(m) if keep else None)
                with torch.no_grad():
                    cos = [worst_cosine(m(input_ids=i).logits[0].numpy(), r) for i, r in zip(ids, refs)]
                print(f"{seed:>4}  {name:46} {act:7} " + " ".join(f"{c:12.5f}" for c in cos), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
