#!/usr/bin/env python3
"""Trains the toy Qwen3-VL on the synthetic task of scripts/toy_task.py (issue 18).

    scripts/toy_train.py [--out DIR] [--steps N] [--force] [--set KEY=JSON ...]

transformers' own Qwen3VLForConditionalGeneration on a small config with the real architecture
(DeepStack, M-RoPE, the real Qwen3 vocabulary and chat template, embeddings tied as in the real
model), trained from transformers' own initialization with a fixed seed on 2 CPU threads, then
saved with save_pretrained in bfloat16 like the real checkpoint, with the real tokenizer files:
a checkpoint any Qwen3-VL loader reads. Default DIR: $QHX_CACHE/toy/checkpoint. `--set` changes
a RECIPE value (for recipe work; QHX_TOY_EVAL_EVERY=N logs a validation every N steps).

Idempotent: a checkpoint whose qhx_stamp.json holds the hash of (recipe, this file, the task
generator, the tokenizer, package versions) is reused; built in a sibling folder and renamed into
place, so an interrupted run never leaves half a checkpoint.

The recipe (docs/toy.md says why each part is there):
  - stage 1 trains the vision tower alone, a linear probe per merged token reading what its cell
    holds (CellProbe); stage 2 the language model on the questions, the vision frozen;
  - every step draws fresh scenes (no epoch, no overfitting) and one question per scene, its
    kind by kind_weights among the kinds the scene has; training scenes carry a sign more often
    than the task's (sign_share), since the digits are the slowest thing the captions learn;
  - the loss is the cross-entropy of the answer and its <|im_end|> only (the prompt is given),
    plus the look-up probe's (LookupProbe) at the question's shape word;
  - the output softmax runs over a sampled subset of the real 151,936-token vocabulary: every
    token the task's answers use plus 4,096 others drawn afresh each step. Logits for the whole
    vocabulary at each answer position would cost 30x the rest of the step on this CPU; the
    sampled negatives still push every other token down, and greedy decoding at test time
    takes the argmax over the whole vocabulary (the accuracy tests measure exactly that);
  - the weights are float32 while training (the config's bfloat16 is the saved dtype only).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "reference"))

import toy_task  # noqa: E402
import tiny_configs  # noqa: E402
from common import (STAMP_FILE, package_versions, read_stamp, replace_dir, sha256_file,  # noqa: E402
                    sha256_json, tokenizer_dir, write_json, write_tokenizer_and_processor_files)

SCRIPT_VERSION = 1
SEED = 0
IMAGE_SIZE = toy_task.SIZE
IM_END = tiny_configs.EOS_TOKEN_ID
IMAGE_PAD = "<|image_pad|>"

# The recipe (the stamp hashes it; change a value and the checkpoint is rebuilt).
RECIPE: dict[str, Any] = {
    "vision_steps": 500, "steps": 1200, "batch": 32, "lr": 2e-3, "freeze_vision": True, "warmup": 60,
    "weight_decay": 0.01, "betas": [0.9, 0.98], "grad_clip": 1.0, "negatives": 4096, "aux_weight": 0.5,
    "seed": SEED, "lookup_weight": 1.0, "lookup_layer": 2, "sign_share": 0.6,
    "kind_weights": {"caption": 0.3, "colour": 0.175, "where": 0.175, "count": 0.1, "sign": 0.1, "background": 0.15},
    "split_captions": True,
}


def toy_config() -> dict[str, Any]:
    """The toy's Qwen3-VL config: tiny widths, the real vocabulary, ids and preprocessing constants."""
    cfg = tiny_configs._top(
        tiny_configs._text(hidden=256, inter=768, layers=4, heads=4, kv_heads=2, head_dim=64,
                           mrope_section=[12, 10, 10]),
        tiny_configs._vision(depth=3, hidden=128, heads=2, inter=256, out_hidden=256, deepstack=[1, 2]),
    )
    return cfg


def preprocessor_config() -> dict[str, Any]:
    """The hub's processor file with min_pixels lowered to one toy image, so transformers keeps the
    96 x 96 pixels as they are (QHexRT's fixed resize to the bundle's --image-size 96 does too)."""
    from common import PREPROCESSOR_CONFIG
    px = IMAGE_SIZE * IMAGE_SIZE
    return {**PREPROCESSOR_CONFIG, "size": {"longest_edge": 16777216, "shortest_edge": px}, "min_pixels": px}


def default_out() -> Path:
    return Path(os.environ.get("QHX_CACHE", Path.home() / ".cache" / "qhexrt")) / "toy" / "checkpoint"


def recipe_hash(tok_dir: Path, recipe: dict[str, Any]) -> str:
    here = Path(__file__).resolve()
    return sha256_json({
        "config": toy_config(), "recipe": recipe, "script_version": SCRIPT_VERSION,
        "sources": [sha256_file(here), sha256_file(here.parent / "toy_task.py")],
        "tokenizer_json_sha256": sha256_file(tok_dir / "tokenizer.json"),
        "preprocessor": preprocessor_config(), "versions": package_versions(),
    })


class Prompts:
    """Token ids of a user turn [image, text] rendered by the checkpoint's chat template, as a
    user of transformers gets them (apply_chat_template, then one <|image_pad|> per merged token)."""

    def __init__(self, ckpt_dir: Path, n_pads: int):
        from tokenizers import Tokenizer
        from make_text_reference import load_tokenizer

        self.tok = load_tokenizer(ckpt_dir)
        self.bare = Tokenizer.from_file(str(ckpt_dir / "tokenizer.json"))
        self.n_pads = n_pads
        self._cache: dict[str, list[int]] = {}

    def prompt(self, text: str) -> list[int]:
        if text not in self._cache:
            msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
            rendered = self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            assert rendered.count(IMAGE_PAD) == 1, rendered
            rendered = rendered.replace(IMAGE_PAD, IMAGE_PAD * self.n_pads)
            self._cache[text] = self.bare.encode(rendered, add_special_tokens=False).ids
        return self._cache[text]

    def positions(self, model, text: str, length: int, grid: int):
        """[3, length] M-RoPE positions of the prompt of `text` followed by length - len(prompt)
        answer tokens: transformers' get_rope_index on the prompt (cached), then the text
        positions that follow it (all three rows advance together after the image)."""
        import torch
        key = ("pos", text)
        if key not in self._cache:
            ids = torch.tensor([self.prompt(text)])
            pos, _ = model.model.get_rope_index(ids, torch.tensor([[1, grid, grid]]), None, torch.ones_like(ids))
            self._cache[key] = pos[:, 0]
        pos = self._cache[key]
        extra = length - pos.shape[1]
        tail = pos[:, -1:].amax() + 1 + torch.arange(extra)
        return torch.cat([pos, tail.expand(3, extra)], dim=1)

    def answer(self, text: str) -> list[int]:
        return self.bare.encode(text, add_special_tokens=False).ids + [IM_END]


def pixel_rows(img):
    """[patches, 1536] f32 of a 96 x 96 RGB image: the processor's normalization and flattening."""
    import numpy as np
    from make_image_reference import flatten_patches, normalize_fast

    return flatten_patches(normalize_fast(np.asarray(img, dtype=np.uint8)))


def answer_vocabulary(prompts: Prompts) -> list[int]:
    """Every token id any answer of the task can use (by enumerating the answer parts)."""
    words = set()
    for c in list(toy_task.SHAPE_COLOURS) + list(toy_task.BACKGROUNDS):
        words |= {c, c.capitalize(), " " + c}
    words |= {" " + s for s in toy_task.SHAPES} | {p + "." for p in toy_task.PLACES.values()}
    words |= {w + "." for w in toy_task.NUMBER_WORDS.values()} | {f"{n}." for n in range(100)}
    words |= {"A", "An", " a", " an", " and", " on", " background.", ",", " sign", " saying", "."}
    ids = {IM_END}
    for w in words:
        ids.update(prompts.bare.encode(w, add_special_tokens=False).ids)
    return sorted(ids)


def speed_up_for_training(model) -> None:
    """Two rewrites of the vision tower's forward for training only, each the same arithmetic as
    transformers' (the saved weights do not depend on them): every image of a batch has the same
    size, so the per-image attention loop becomes one batched call, and the patch embedding's
    Conv3d, whose kernel equals its stride, becomes the matrix product it is."""
    import types

    import torch
    import torch.nn.functional as F
    from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb_vision

    def attention(self, hidden_states, cu_seqlens, rotary_pos_emb=None, position_embeddings=None, **kwargs):
        n_all = hidden_states.shape[0]
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
        n = lengths[0]
        assert all(x == n for x in lengths), lengths
        q, k, v = self.qkv(hidden_states).reshape(n_all, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb_vision(q, k, cos, sin)
        b = len(lengths)
        q, k, v = (t.reshape(b, n, self.num_heads, -1).transpose(1, 2) for t in (q, k, v))  # [B, heads, n, d]
        o = F.scaled_dot_product_attention(q, k, v, scale=self.scaling)
        return self.proj(o.transpose(1, 2).reshape(n_all, -1))

    def patch_embed(self, hidden_states):
        w = self.proj.weight
        return F.linear(hidden_states.view(-1, w[0].numel()).to(w.dtype), w.view(w.shape[0], -1), self.proj.bias)

    # The position tables depend on the grid alone, and every image of a batch has one grid: one
    # image's table, repeated (the learned pos_embed keeps its gradient through the repeat).
    visual = model.model.visual

    def once_per_grid(fn):
        def wrapped(grid_thw):
            assert bool((grid_thw == grid_thw[:1]).all()), grid_thw
            return fn(grid_thw[:1]).repeat(len(grid_thw), 1)
        return wrapped

    visual.fast_pos_embed_interpolate = once_per_grid(visual.fast_pos_embed_interpolate)
    visual.rot_pos_emb = once_per_grid(visual.rot_pos_emb)
    for blk in visual.blocks:
        blk.attn.forward = types.MethodType(attention, blk.attn)
    pe = model.model.visual.patch_embed
    pe.forward = types.MethodType(patch_embed, pe)


class CellProbe:
    """The auxiliary vision targets: a linear read-out of each merged vision token (one grid cell)
    predicting what the cell holds (kind, colour, the sign's two digits, the background there) and
    which cell it is. Without it the language model's loss reaches the vision tower only through
    attention that is still diffuse, and 700 steps teach it the background colour and little
    else; with it the tokens carry the scene from the first steps. Not part of the checkpoint."""

    SIZES = (len(toy_task.CELL_KINDS), len(toy_task.CELL_COLOURS), len(toy_task.CELL_DIGITS),
             len(toy_task.CELL_DIGITS), len(toy_task.CELL_BACKGROUNDS), toy_task.GRID ** 2)

    def __init__(self, dim: int, n_outputs: int):
        import torch
        # one read-out per feature the language model receives: the merger's and each DeepStack tap's
        self.linear = torch.nn.ModuleList(torch.nn.Linear(dim, sum(self.SIZES)) for _ in range(n_outputs))

    def loss(self, outputs, labels):
        """outputs: the vision tower's (tokens [B*9, dim], [DeepStack tokens [B*9, dim], ...]);
        labels [B*9, 6] (the five cell labels and the cell index)."""
        import torch
        total = 0.0
        for head, tokens in zip(self.linear, [outputs[0], *outputs[1]]):
            logits = head(tokens).split(self.SIZES, dim=1)
            total = total + sum(torch.nn.functional.cross_entropy(lg, labels[:, k]) for k, lg in enumerate(logits))
        return total


def cell_targets(scenes) -> "Any":
    import torch
    return torch.tensor([[*lab, c] for sc in scenes for c, lab in enumerate(toy_task.cell_labels(sc))])


class LazyAdam:
    """Adam for the tied embedding, updating only the rows a step touched (the prompt's tokens and
    the sampled softmax's candidates), from those rows' gradient: an update of all 151,936 rows
    would cost more than the rest of the step, and the untouched rows' gradient is zero."""

    def __init__(self, weight, lr: float, betas: tuple[float, float], eps: float = 1e-8):
        import torch
        self.w, self.lr, self.b1, self.b2, self.eps = weight, lr, betas[0], betas[1], eps
        self.m = torch.zeros_like(weight)
        self.v = torch.zeros_like(weight)
        self.t = torch.zeros(weight.shape[0])

    def step(self, rows, g, lr_scale: float) -> None:
        """rows [U] sorted ids; g [U, H] their gradient."""
        import torch
        with torch.no_grad():
            self.t[rows] += 1
            t = self.t[rows].unsqueeze(1)
            m = self.m[rows].mul_(self.b1).add_(g, alpha=1 - self.b1)
            v = self.v[rows].mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            self.m[rows], self.v[rows] = m, v
            upd = (m / (1 - self.b1 ** t)) / ((v / (1 - self.b2 ** t)).sqrt() + self.eps)
            self.w[rows] -= self.lr * lr_scale * upd


class Example(NamedTuple):
    scene: Any
    img: Any
    kind: str
    question: str
    answer: str


def draw_example(recipe: dict[str, Any], step: int, j: int, tag: str = "toy-train") -> Example:
    """Training example j of a step: a fresh scene and one of its questions, the kind first (by
    kind_weights, renormalized over the kinds the scene has)."""
    rng = random.Random(f"{tag}:{recipe['seed']}:{step}:{j}")
    scene, img = toy_task.scene_and_image(f"{tag}-scene:{recipe['seed']}:{step}:{j}",
                                          sign_share=recipe["sign_share"])
    qs = toy_task.questions(scene)
    kinds = [k for k in toy_task.KINDS if qs[k]]
    kind = rng.choices(kinds, weights=[recipe["kind_weights"][k] for k in kinds])[0]
    question, answer = rng.choice(qs[kind])
    return Example(scene, img, kind, question, answer)


def lm_batch(prompts: Prompts, model, examples: list[Example], grid: int) -> dict[str, Any]:
    """The language model's inputs for a batch (right-padded), and where its answer tokens are:
    rows/cols index the positions that predict answer token `want` (teacher forcing)."""
    import numpy as np
    import torch

    seqs = [(prompts.prompt(e.question), prompts.answer(e.answer)) for e in examples]
    length = max(len(p) + len(a) for p, a in seqs)
    input_ids = torch.full((len(seqs), length), tiny_configs.PAD_TOKEN_ID, dtype=torch.long)  # [B, T]
    mask = torch.zeros((len(seqs), length), dtype=torch.long)                                 # [B, T]
    rows, cols, want = [], [], []
    for b, (p, a) in enumerate(seqs):
        input_ids[b, :len(p) + len(a)] = torch.tensor(p + a)
        mask[b, :len(p) + len(a)] = 1
        for k, t in enumerate(a):  # position len(p)+k-1 predicts answer token k
            rows.append(b)
            cols.append(len(p) + k - 1)
            want.append(t)
    return {
        "input_ids": input_ids, "attention_mask": mask,
        "pixel_values": torch.from_numpy(np.concatenate([pixel_rows(e.img) for e in examples])),  # [B*36, 1536]
        "image_grid_thw": torch.tensor([[1, grid, grid]] * len(seqs)),
        "position_ids": torch.stack([prompts.positions(model, e.question, length, grid) for e in examples], dim=1),  # [3, B, T]
        "rows": rows, "cols": cols, "want": want,
    }


class LookupProbe:
    """The auxiliary target of the look-ups ("What colour is the star?", "Where is the star?"): a
    linear read-out of the hidden state at the question's shape word, a few layers in, predicting
    that shape's colour and cell. The answer needs two hops (the word finds its shape's vision
    token; the answer position reads the word), and without a signal for the first the model
    answers with the colour of any shape present. Not part of the checkpoint."""

    SIZES = (len(toy_task.SHAPE_COLOURS), toy_task.GRID ** 2)

    def __init__(self, dim: int, prompts: Prompts):
        import torch
        self.linear = torch.nn.Linear(dim, sum(self.SIZES))
        self.word_ids = {s: prompts.bare.encode(" " + s, add_special_tokens=False).ids for s in toy_task.SHAPES}
        assert all(len(v) == 1 for v in self.word_ids.values()), self.word_ids

    def loss(self, hidden, targets):
        """hidden [B, T, H]; targets the (rows, cols, colour, cell) lists of lookup_targets."""
        import torch
        rows, cols, colour, cell = (torch.tensor(t) for t in targets)
        logits = self.linear(hidden[rows, cols]).split(self.SIZES, dim=1)
        return sum(torch.nn.functional.cross_entropy(lg, t) for lg, t in zip(logits, (colour, cell)))


def lookup_targets(prompts: Prompts, probe: LookupProbe, examples: list[Example]):
    rows, cols, colour, cell = [], [], [], []
    colours = list(toy_task.SHAPE_COLOURS)
    for b, e in enumerate(examples):
        if e.kind not in ("colour", "where"):
            continue
        shape = next(s for s in e.scene.shapes() if f" {s.kind}?" in " " + e.question)
        ids = prompts.prompt(e.question)
        word = probe.word_ids[shape.kind][0]
        rows.append(b)
        cols.append(len(ids) - 1 - ids[::-1].index(word))
        colour.append(colours.index(shape.colour))
        cell.append(shape.cell[0] * toy_task.GRID + shape.cell[1])
    return (rows, cols, colour, cell) if rows else None


def validate(model, prompts: Prompts, grid: int, recipe: dict[str, Any], n_scenes: int = 64) -> dict[str, float]:
    """Teacher-forced exact match per kind (every answer token the argmax over the whole
    vocabulary) on scenes no step draws: a cheap view of greedy accuracy while training."""
    import torch

    examples = []
    for i in range(n_scenes):
        scene, img = toy_task.scene_and_image(f"toy-validate-scene:{recipe['seed']}:{i}")
        for kind, question, answer in toy_task.held_out_tasks(-1, i, toy_task.questions(scene)):
            examples.append(Example(scene, img, kind, question, answer))
    right: dict[str, list[int]] = {}
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for k in range(0, len(examples), 64):
            chunk = examples[k:k + 64]
            batch = lm_batch(prompts, model, chunk, grid)
            rows, cols, want = batch.pop("rows"), batch.pop("cols"), batch.pop("want")
            hidden = model.model(**batch).last_hidden_state
            ok = (model.lm_head(hidden[torch.tensor(rows), torch.tensor(cols)]).argmax(-1) == torch.tensor(want)).tolist()
            per_row: dict[int, bool] = {}
            for r, good in zip(rows, ok):
                per_row[r] = per_row.get(r, True) and bool(good)
            for r, good in per_row.items():
                right.setdefault(chunk[r].kind, []).append(int(good))
    model.train(was_training)
    return {kind: round(sum(v) / len(v), 3) for kind, v in right.items()}


def vision_stage(model, probe: CellProbe, recipe: dict[str, Any], grid: int, seen: list[Any]) -> None:
    """Stage 1: the vision tower and the probe alone, on the cell targets (no language model)."""
    import numpy as np
    import torch
    from tqdm import tqdm

    params = list(model.model.visual.parameters()) + list(probe.linear.parameters())
    opt = torch.optim.AdamW(params, lr=recipe["lr"], betas=tuple(recipe["betas"]), weight_decay=0.0)
    steps, warm = recipe["vision_steps"], recipe["warmup"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    bar = tqdm(range(steps), desc="toy training, stage 1 (vision)", unit="step", mininterval=2.0, file=sys.stderr)
    recent: list[float] = []
    for step in bar:
        scenes, pix = [], []
        for j in range(recipe["batch"]):
            scene, img = toy_task.scene_and_image(f"toy-vision-scene:{recipe['seed']}:{step}:{j}")
            scenes.append(scene)
            pix.append(pixel_rows(img))
        seen.clear()
        model.model.visual(torch.from_numpy(np.concatenate(pix)), grid_thw=torch.tensor([[1, grid, grid]] * len(pix)))
        loss = probe.loss(seen[0], cell_targets(scenes))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, recipe["grad_clip"])
        opt.step()
        sched.step()
        recent = (recent + [float(loss.detach())])[-20:]
        if step % 20 == 0:
            bar.set_postfix(loss=f"{sum(recent) / len(recent):.3f}")
    bar.close()


def train(out: Path, recipe: dict[str, Any], log=print) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch
    from tqdm import tqdm
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    t0 = time.perf_counter()
    torch.set_num_threads(int(os.environ.get("QHX_TOY_THREADS", "2")))
    torch.manual_seed(recipe["seed"])
    tok_dir = tokenizer_dir()
    stage = out.parent / (out.name + ".tmp")
    if stage.exists():
        import shutil
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    write_tokenizer_and_processor_files(stage, tok_dir)
    write_json(stage / "preprocessor_config.json", preprocessor_config(), indent=4, final_newline=False)

    config = Qwen3VLConfig(**toy_config())
    config._attn_implementation = "eager"  # CPU sdpa with a padding mask is 10x slower in backward
    # The config says bfloat16 (the real checkpoint's dtype), and transformers builds the language
    # model in it: Adam's small steps would round away in bf16 weights, so train in float32 and
    # save as bf16.
    model = Qwen3VLForConditionalGeneration(config).float()
    emb = model.model.language_model.embed_tokens.weight
    assert model.lm_head.weight is emb, "lm_head is not tied to embed_tokens"
    grid = IMAGE_SIZE // 16                       # patches per side
    prompts = Prompts(stage, n_pads=grid * grid // 4)
    task_vocab = torch.tensor(answer_vocabulary(prompts))
    vocab = emb.shape[0]

    speed_up_for_training(model)
    probe = CellProbe(config.vision_config.out_hidden_size, 1 + len(config.vision_config.deepstack_visual_indexes))
    seen: list[Any] = []  # the vision tower's output (merged tokens, DeepStack tokens) of the current step
    model.model.visual.register_forward_hook(lambda _m, _a, out: seen.append(out))
    vision_stage(model, probe, recipe, grid, seen)
    lookup_probe = LookupProbe(config.text_config.hidden_size, prompts)

    if recipe["freeze_vision"]:  # stage 2 trains the language model on the stage-1 features
        model.model.visual.requires_grad_(False)
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # the tied embedding is visited once, and left to LazyAdam
        if p is emb or not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": recipe["weight_decay"]},
                             {"params": no_decay + list(probe.linear.parameters()) + list(lookup_probe.linear.parameters()),
                              "weight_decay": 0.0}],
                            lr=recipe["lr"], betas=tuple(recipe["betas"]), foreach=True)
    emb_opt = LazyAdam(emb, recipe["lr"], tuple(recipe["betas"]))
    steps, warm = recipe["steps"], recipe["warmup"]
    schedule = lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    gen = torch.Generator().manual_seed(recipe["seed"] + 1)
    model.train()
    eval_every = int(os.environ.get("QHX_TOY_EVAL_EVERY", "0"))  # a learning curve, for recipe work
    losses: list[float] = []
    bar = tqdm(range(steps), desc="toy training", unit="step", mininterval=2.0, file=sys.stderr)
    for step in bar:
        examples = [draw_example(recipe, step, j) for j in range(recipe["batch"])]
        # Captions are the long answers: with split_captions the captions and the other questions
        # go through the model as two batches, each padded to its own length (a fifth fewer
        # tokens), their gradients summed into the one step.
        groups = [examples]
        if recipe["split_captions"]:
            groups = [g for g in ([e for e in examples if e.kind == "caption"],
                                  [e for e in examples if e.kind != "caption"]) if g]
        batches = [lm_batch(prompts, model, g, grid) for g in groups]
        want_all = [t for b in batches for t in b["want"]]
        n_lookup = sum(e.kind in ("colour", "where") for e in examples)
        negatives = torch.randint(0, vocab, (recipe["negatives"],), generator=gen)
        cand = torch.unique(torch.cat([task_vocab, negatives, torch.tensor(want_all)]))  # sorted
        # The step reads U rows of the 151,936-row tied embedding (the inputs and the softmax's
        # candidates): a leaf of those rows takes the gradient, so backward never fills a dense
        # [151936, H] gradient (that fill alone was a third of the step).
        touched = torch.unique(torch.cat([cand] + [b["input_ids"].flatten() for b in batches]))  # [U] sorted
        rows_emb = emb.detach()[touched].requires_grad_()                   # [U, H]
        cand_in_touched = torch.searchsorted(touched, cand)                  # [|cand|]
        opt.zero_grad(set_to_none=True)
        answer_loss = 0.0
        for group, batch in zip(groups, batches):
            rows, cols, want = batch.pop("rows"), batch.pop("cols"), batch.pop("want")
            batch["inputs_embeds"] = rows_emb[torch.searchsorted(touched, batch.pop("input_ids"))]  # [B, T, H]
            seen.clear()
            fwd = model.model(**batch, output_hidden_states=recipe["lookup_weight"] > 0)
            h = fwd.last_hidden_state[torch.tensor(rows), torch.tensor(cols)]           # [M, H]
            logits = h @ rows_emb[cand_in_touched].T                                    # [M, |cand|]
            # each term a sum over this group, divided by the step's count: the step's mean
            ce = torch.nn.functional.cross_entropy(logits, torch.searchsorted(cand, torch.tensor(want)),
                                                   reduction="sum") / len(want_all)
            loss = ce
            targets = lookup_targets(prompts, lookup_probe, group)
            if recipe["lookup_weight"] > 0 and targets is not None:
                loss = loss + recipe["lookup_weight"] * len(targets[0]) / n_lookup * lookup_probe.loss(
                    fwd.hidden_states[recipe["lookup_layer"]], targets)
            if not recipe["freeze_vision"]:
                loss = loss + recipe["aux_weight"] * len(group) / len(examples) * probe.loss(
                    seen[0], cell_targets([e.scene for e in group]))
            loss.backward()
            answer_loss += float(ce.detach())
        g = rows_emb.grad                                                      # [U, H]
        params = [p for group in opt.param_groups for p in group["params"] if p.grad is not None]
        norms = torch.stack([p.grad.norm() for p in params] + [g.norm()])
        scale = min(1.0, recipe["grad_clip"] / (float(norms.norm()) + 1e-6))
        if scale < 1.0:
            for p in params:
                p.grad.mul_(scale)
            g.mul_(scale)
        emb_opt.step(touched, g, schedule(step))
        opt.step()
        sched.step()
        losses.append(answer_loss)
        if step % 20 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
        if eval_every and (step + 1) % eval_every == 0:
            log(f"toy: step {step + 1} validation {validate(model, prompts, grid, recipe)}")
    bar.close()
    train_s = time.perf_counter() - t0
    validation = validate(model, prompts, grid, recipe)

    model = model.to(torch.bfloat16)  # the real checkpoint's dtype
    model.config.text_config.dtype = "bfloat16"
    model.save_pretrained(str(stage), safe_serialization=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    summary = {
        "hash": recipe_hash(tok_dir, recipe), "recipe": recipe, "train_seconds": round(train_s, 1),
        "peak_rss_mb": round(peak_mb), "final_loss": round(sum(losses[-50:]) / len(losses[-50:]), 4),
        "threads": torch.get_num_threads(), "image_size": IMAGE_SIZE,
        "parameters": sum(p.numel() for p in model.parameters()),
        "validation_teacher_forced": validation,
    }
    write_json(stage / STAMP_FILE, summary)
    replace_dir(stage, out)
    log(f"toy: trained {steps} steps in {train_s:.0f} s (peak RSS {peak_mb:.0f} MB, final loss "
        f"{summary['final_loss']}) -> {out}")
    return summary


def ensure_toy_checkpoint(out: Path | None = None, force: bool = False, recipe: dict[str, Any] | None = None,
                          log=print) -> Path:
    """The trained checkpoint's folder, trained now unless a matching one is cached.

    One process trains a folder at a time: the others wait on its lock file and then find the
    checkpoint cached (scripts/test.sh trains in the background while the tests run, and the
    accuracy test's fixture waits here until that training is done)."""
    out = out or default_out()
    recipe = recipe or RECIPE
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        stamp = read_stamp(out)
        if not force and stamp is not None and stamp.get("hash") == recipe_hash(tokenizer_dir(), recipe) \
                and (out / "model.safetensors").is_file():
            return out
        train(out, recipe, log)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="checkpoint folder (default $QHX_CACHE/toy/checkpoint)")
    ap.add_argument("--steps", type=int, default=None, help=f"training steps (default {RECIPE['steps']})")
    ap.add_argument("--force", action="store_true", help="train even if a matching checkpoint is cached")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="override a recipe value, for recipe work (e.g. --set lookup_weight=0.5)")
    a = ap.parse_args(argv)
    recipe = dict(RECIPE)
    for item in a.set:
        key, sep, value = item.partition("=")
        if not sep or key not in RECIPE:
            ap.error(f"--set {item!r}: expected KEY=JSON with KEY one of {', '.join(RECIPE)}")
        try:
            recipe[key] = json.loads(value)
        except json.JSONDecodeError as e:
            ap.error(f"--set {item!r}: the value is not JSON ({e})")
    if a.steps is not None:
        if a.steps < 1:
            ap.error("--steps must be positive")
        recipe["steps"] = a.steps
    out = ensure_toy_checkpoint(a.out, a.force, recipe)
    print(json.dumps({k: v for k, v in read_stamp(out).items() if k != "hash"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
