#!/usr/bin/env python3
"""A synthetic captioning task for the toy Qwen3-VL (issue 18): simple scenes, true captions.

    scripts/toy_task.py --seed S --count N --out DIR [--size 96]

writes DIR/NNNN.png (N images) and DIR/tasks.jsonl, one line per question:
    {"image": "0000.png", "prompt": "How many shapes are there?", "answer": "Two.", "kind": "count"}
The prompt is what a user would type; the answer is the exact expected text. `qhx_generate
--batch DIR/tasks.jsonl` runs the file as it is (it ignores "answer" and "kind").

A scene is a 3 x 3 grid of cells (one merged vision token each at the default 96 px: patch 16,
merge 2): one to three shapes of distinct kinds (circle, square, triangle, star) in distinct
cells, sometimes a sign with a number drawn as seven-segment digits (no font files, so the
pixels are the same on every machine), on a plain or two-tone background. Sizes and offsets
within a cell vary. Everything is drawn without anti-aliasing from random.Random seeded by a
string, so a (seed, index) pair always gives the same image and text.

Kinds of question (each image gets one of each that applies; training draws from the same set):
  caption     "Describe this image."          "A red circle and a sign saying 42 on a grey background."
  count       "How many shapes are there?"    "Two."      (the sign is not a shape)
  sign        "What does the sign say?"       "42."
  colour      "What colour is the star?"      "Yellow."
  where       "Where is the star?"            "Top left."
  background  "What colour is the background?"  "Blue and white."  (top half first)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

SIZE = 96
GRID = 3

SHAPE_COLOURS = {
    "red": (215, 40, 40), "green": (40, 165, 60), "blue": (45, 85, 215), "yellow": (240, 205, 30),
    "purple": (135, 60, 180), "orange": (245, 135, 25), "white": (245, 245, 245), "black": (20, 20, 20),
}
BACKGROUNDS = {
    "white": (245, 245, 245), "grey": (128, 128, 128), "black": (20, 20, 20),
    "blue": (45, 85, 215), "green": (40, 165, 60), "yellow": (240, 205, 30),
}
SHAPES = ("circle", "square", "triangle", "star")
PLACES = {(0, 0): "Top left", (0, 1): "Top", (0, 2): "Top right",
          (1, 0): "Left", (1, 1): "Centre", (1, 2): "Right",
          (2, 0): "Bottom left", (2, 1): "Bottom", (2, 2): "Bottom right"}
NUMBER_WORDS = {1: "One", 2: "Two", 3: "Three"}
KINDS = ("caption", "count", "sign", "colour", "where", "background")

# Seven-segment digits: segments a (top), b (top right), c (bottom right), d (bottom),
# e (bottom left), f (top left), g (middle).
SEGMENTS = {"0": "abcdef", "1": "bc", "2": "abdeg", "3": "abcdg", "4": "bcfg", "5": "acdfg",
            "6": "acdefg", "7": "abc", "8": "abcdefg", "9": "abcdfg"}


@dataclass
class Item:
    kind: str          # a shape name, or "sign"
    colour: str        # shape colour name ("" for the sign)
    cell: tuple[int, int]  # (row, column)
    number: int = 0    # the sign's number


@dataclass
class Scene:
    background: tuple[str, ...]  # one colour, or (top, bottom)
    items: list[Item] = field(default_factory=list)

    def shapes(self) -> list[Item]:
        return [i for i in self.items if i.kind != "sign"]

    def sign(self) -> Item | None:
        return next((i for i in self.items if i.kind == "sign"), None)


SIGN_SHARE = 0.35  # scenes with a sign


def random_scene(rng: random.Random, sign_share: float = SIGN_SHARE) -> Scene:
    bg_names = list(BACKGROUNDS)
    if rng.random() < 0.3:
        top, bottom = rng.sample(bg_names, 2)
        background: tuple[str, ...] = (top, bottom)
    else:
        background = (rng.choice(bg_names),)
    colours = [c for c in SHAPE_COLOURS if c not in background]
    n_shapes = rng.randint(1, 3)
    cells = rng.sample(sorted(PLACES), n_shapes + 1)
    kinds = rng.sample(SHAPES, n_shapes)
    scene = Scene(background)
    for kind, cell in zip(kinds, cells):
        scene.items.append(Item(kind, rng.choice(colours), cell))
    if rng.random() < sign_share:
        scene.items.append(Item("sign", "", cells[-1], rng.randint(1, 99)))
    scene.items.sort(key=lambda i: i.cell)  # reading order: what the caption lists
    return scene


def _star(cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    pts = []
    for k in range(10):
        rad = r if k % 2 == 0 else r * 0.45
        a = -math.pi / 2 + k * math.pi / 5
        pts.append((cx + rad * math.cos(a), cy + rad * math.sin(a)))
    return pts


def _digit(draw, x: int, y: int, ch: str, w: int = 9, h: int = 17, t: int = 3) -> None:
    half = h // 2
    boxes = {"a": (x, y, x + w - 1, y + t - 1), "d": (x, y + h - t, x + w - 1, y + h - 1),
             "g": (x, y + half - t // 2, x + w - 1, y + half - t // 2 + t - 1),
             "f": (x, y, x + t - 1, y + half), "b": (x + w - t, y, x + w - 1, y + half),
             "e": (x, y + half, x + t - 1, y + h - 1), "c": (x + w - t, y + half, x + w - 1, y + h - 1)}
    for seg in SEGMENTS[ch]:
        draw.rectangle(boxes[seg], fill=(15, 15, 15))


def render(scene: Scene, rng: random.Random, size: int = SIZE):
    """The scene as an RGB PIL image of size x size."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), BACKGROUNDS[scene.background[0]])
    draw = ImageDraw.Draw(img)
    if len(scene.background) == 2:
        draw.rectangle((0, size // 2, size - 1, size - 1), fill=BACKGROUNDS[scene.background[1]])
    cell = size / GRID
    for item in scene.items:
        row, col = item.cell
        if item.kind == "sign":
            text = str(item.number)
            sw, sh = 4 + len(text) * 11, 23
            x0 = int(col * cell + (cell - sw) / 2) + rng.randint(-1, 1)
            y0 = int(row * cell + (cell - sh) / 2) + rng.randint(-1, 1)
            draw.rectangle((x0, y0, x0 + sw - 1, y0 + sh - 1), fill=(250, 250, 250), outline=(15, 15, 15))
            for k, ch in enumerate(text):
                _digit(draw, x0 + 3 + k * 11, y0 + 3, ch)
            continue
        r = rng.uniform(0.30, 0.43) * cell
        slack = cell / 2 - r - 1
        cx = col * cell + cell / 2 + rng.uniform(-slack, slack)
        cy = row * cell + cell / 2 + rng.uniform(-slack, slack)
        fill = SHAPE_COLOURS[item.colour]
        if item.kind == "circle":
            draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
        elif item.kind == "square":
            s = r * 0.85
            draw.rectangle((cx - s, cy - s, cx + s, cy + s), fill=fill)
        elif item.kind == "triangle":
            draw.polygon([(cx, cy - r), (cx + r * 0.95, cy + r * 0.8), (cx - r * 0.95, cy + r * 0.8)], fill=fill)
        else:
            draw.polygon(_star(cx, cy, r * 1.1), fill=fill)
    return img


def _phrase(item: Item) -> str:
    if item.kind == "sign":
        return f"a sign saying {item.number}"
    return f"{'an' if item.colour[0] in 'aeiou' else 'a'} {item.colour} {item.kind}"


def caption(scene: Scene) -> str:
    parts = [_phrase(i) for i in scene.items]
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    text = f"{listed} on a {' and '.join(scene.background)} background."
    return text[0].upper() + text[1:]


def questions(scene: Scene) -> dict[str, list[tuple[str, str]]]:
    """Every (prompt, answer) the scene supports, by kind."""
    qs: dict[str, list[tuple[str, str]]] = {
        "caption": [("Describe this image.", caption(scene))],
        "count": [("How many shapes are there?", NUMBER_WORDS[len(scene.shapes())] + ".")],
        "sign": [],
        "colour": [(f"What colour is the {s.kind}?", s.colour.capitalize() + ".") for s in scene.shapes()],
        "where": [(f"Where is the {s.kind}?", PLACES[s.cell] + ".") for s in scene.shapes()],
        "background": [("What colour is the background?", " and ".join(scene.background).capitalize() + ".")],
    }
    if (sign := scene.sign()) is not None:
        qs["sign"].append(("What does the sign say?", f"{sign.number}."))
    return qs


def example(seed: str, size: int = SIZE):
    """(PIL image, {kind: [(prompt, answer), ...]}) for a seed string."""
    scene, img = scene_and_image(seed, size)
    return img, questions(scene)


def scene_and_image(seed: str, size: int = SIZE, sign_share: float = SIGN_SHARE):
    rng = random.Random(seed)
    scene = random_scene(rng, sign_share)
    return scene, render(scene, rng, size)


# What each cell holds, as class indices (the training's auxiliary vision targets).
CELL_KINDS = ("empty",) + SHAPES + ("sign",)
CELL_COLOURS = ("none",) + tuple(SHAPE_COLOURS)
CELL_DIGITS = ("none",) + tuple("0123456789")
CELL_BACKGROUNDS = tuple(BACKGROUNDS)


def cell_labels(scene: Scene) -> list[tuple[int, int, int, int, int]]:
    """Per cell in reading order: (kind, colour, tens digit, units digit, background colour at
    the cell's centre), indices into the CELL_* tuples."""
    out = []
    for row in range(GRID):
        for col in range(GRID):
            item = next((i for i in scene.items if i.cell == (row, col)), None)
            bg = scene.background[-1] if len(scene.background) == 2 and (row + 0.5) / GRID >= 0.5 \
                else scene.background[0]
            kind, colour, tens, units = 0, 0, 0, 0
            if item is not None:
                kind = CELL_KINDS.index(item.kind)
                if item.kind == "sign":
                    digits = f"{item.number:02d}" if item.number >= 10 else " " + str(item.number)
                    tens = CELL_DIGITS.index(digits[0]) if digits[0] != " " else 0
                    units = CELL_DIGITS.index(digits[1])
                else:
                    colour = CELL_COLOURS.index(item.colour)
            out.append((kind, colour, tens, units, CELL_BACKGROUNDS.index(bg)))
    return out


def scene_seed(seed: int, index: int) -> str:
    return f"toy-scene:{seed}:{index}"


def held_out_tasks(seed: int, index: int, qs: dict[str, list[tuple[str, str]]]) -> list[tuple[str, str, str]]:
    """One question of each kind that applies (a seeded pick among the shapes), as (kind, prompt, answer)."""
    rng = random.Random(f"toy-pick:{seed}:{index}")
    return [(kind, *rng.choice(qs[kind])) for kind in KINDS if qs[kind]]


def write_task(seed: int, count: int, out: Path, size: int = SIZE) -> list[dict[str, str]]:
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        img, qs = example(scene_seed(seed, i), size)
        name = f"{i:04d}.png"
        img.save(out / name)
        for kind, prompt, answer in held_out_tasks(seed, i, qs):
            rows.append({"image": name, "prompt": prompt, "answer": answer, "kind": kind})
    tmp = out / "tasks.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(out / "tasks.jsonl")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, required=True, help="the task's seed (same seed, same files)")
    ap.add_argument("--count", type=int, required=True, help="number of images")
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--size", type=int, default=SIZE, help=f"image side in pixels (default {SIZE})")
    a = ap.parse_args(argv)
    if a.count < 1 or a.count > 100000:
        ap.error("--count must be in 1..100000")
    if a.size < 64 or a.size % 32:
        ap.error("--size must be a multiple of 32, at least 64")
    rows = write_task(a.seed, a.count, a.out, a.size)
    print(f"{a.count} images, {len(rows)} questions -> {a.out}/tasks.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
