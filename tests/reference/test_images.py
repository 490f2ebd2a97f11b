"""Deterministic synthetic RGB test images for the image path (spec QWEN3VL.md §3, §9.2).

    ensure_images(cache=None) -> {"hash", "dir", "files": {name: {...}}}
    test_images.py [--cache DIR] [--force]

Every pixel is an integer formula of (y, x): no random generator, no floating point, so the
arrays are identical on every machine and numpy version. They are written as plain 8-bit RGB
PNGs (no alpha, no gamma/ICC chunks) into $QHX_CACHE/reference/images/:

  img512.png      512x512  (H x W) smart_resize leaves it unchanged: grid [1,32,32], 256 tokens
  img256x320.png  256x320  unchanged, h != w: grid [1,16,20], 80 tokens
  img300x200.png  300x200  smart_resize upscales it to 320x224 (min_pixels): grid [1,20,14],
                           70 tokens; hard black/white edges make PIL's bicubic overshoot, so
                           the resize also exercises the clamp to [0, 255]

The content is structured: gradients on different axes per channel, filled shapes placed
asymmetrically (nothing is symmetric under a flip or transpose), a checkerboard that is not
aligned to the 16-pixel patch grid, thin stripes and an integer-hash texture. Swapping rows
and columns, flipping, misordering patches or channels all change the pixels a model sees.
Every image contains all 256 byte values in every channel (the gradients), so normalization
is checked over the whole uint8 range.

Idempotent: the directory's qhx_stamp.json holds the hash of this file's source and
IMAGES_VERSION; the PNGs are rebuilt (in a temporary sibling, renamed into place) only when it
changes. Nothing here imports torch or transformers.

(The name starts with "test_" because the brief fixed it; it holds no pytest tests.)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (cache_root, locked, read_stamp, replace_dir, sha256_file,  # noqa: E402
                    sha256_json, source_digest, write_json)

__test__ = False  # not a pytest module

IMAGES_VERSION = 1
STAMP_FILE = "qhx_stamp.json"


def _grid(h: int, w: int):
    import numpy as np

    y = np.arange(h, dtype=np.int64)[:, None] * np.ones((1, w), dtype=np.int64)
    x = np.ones((h, 1), dtype=np.int64) * np.arange(w, dtype=np.int64)[None, :]
    return y, x


def _hash_noise(y, x, salt: int, bits: int):
    """A small integer-hash texture in [0, 2**bits): pure int64 arithmetic, masked to 32 bits."""
    m = 0xFFFFFFFF
    v = (y * 73856093 + x * 19349663 + salt * 83492791) & m
    v = ((v ^ (v >> 13)) * 1274126177) & m
    v = v ^ (v >> 16)
    return v & ((1 << bits) - 1)


def _ramp(v, n: int):
    """Maps 0..n-1 onto 0..255 (both ends hit, every byte value reached when n >= 256)."""
    return (v * 255) // (n - 1)


def _finish(r, g, b):
    import numpy as np

    img = np.stack([r, g, b], axis=-1)
    return np.clip(img, 0, 255).astype(np.uint8)


def img512():
    h, w = 512, 512
    y, x = _grid(h, w)
    r = _ramp(x, w)                        # left -> right
    g = _ramp(y, h)                        # top -> bottom
    b = ((x + 2 * y) // 3) % 256           # diagonal ramp, wraps
    # texture (+0..7) everywhere except the pure gradient strip at the bottom
    tex = _hash_noise(y, x, 1, 3)
    r, g, b = r + tex, g + (7 - tex), b + tex
    # filled disk, upper right (center y=150, x=360, radius 90)
    disk = (y - 150) ** 2 + (x - 360) ** 2 <= 90 ** 2
    r, g, b = _set(disk, (r, g, b), (250, 40, 30))
    # rectangle, lower left, with a hole
    rect = (y >= 300) & (y < 440) & (x >= 50) & (x < 230)
    hole = (y >= 340) & (y < 380) & (x >= 90) & (x < 130)
    r, g, b = _set(rect & ~hole, (r, g, b), (20, 210, 70))
    # right triangle, upper left: x - 20 < (y - 30) / 2 for y in [30, 230)
    tri = (y >= 30) & (y < 230) & (x >= 20) & (2 * (x - 20) < (y - 30))
    r, g, b = _set(tri, (r, g, b), (30, 60, 240))
    # checkerboard (12 px squares, offset 5: not aligned to the 16 px patches), lower right
    chk = (y >= 290) & (y < 470) & (x >= 280) & (x < 490)
    on = (((y + 5) // 12) + ((x + 5) // 12)) % 2 == 0
    r, g, b = _set(chk & on, (r, g, b), (255, 255, 255))
    r, g, b = _set(chk & ~on, (r, g, b), (0, 0, 0))
    # thin vertical bars (2 on / 3 off) in a band across the middle-left
    bars = (y >= 250) & (y < 280) & (x < 260) & (x % 5 < 2)
    r, g, b = _set(bars, (r, g, b), (255, 220, 0))
    return _finish(*_byte_strip(y, x, 496, (r, g, b)))


def img256x320():
    h, w = 256, 320
    y, x = _grid(h, w)
    r = _ramp(y, h)                        # top -> bottom (axes swapped vs img512)
    g = (x * 4) % 256                      # repeating horizontal ramp
    b = 255 - _ramp(x, w)                  # right -> left
    tex = _hash_noise(y, x, 2, 4)
    r, g, b = r, g + tex, b + (15 - tex)
    # ellipse, left half (center y=90, x=80; semi-axes 60 x 40)
    ell = 1600 * (y - 90) ** 2 + 3600 * (x - 80) ** 2 <= 3600 * 1600
    r, g, b = _set(ell, (r, g, b), (240, 240, 20))
    # diagonal band from top right towards the middle
    band = (abs((x - 200) - (y - 20)) < 12) & (y < 200) & (x >= 180)
    r, g, b = _set(band, (r, g, b), (200, 0, 200))
    # a small "L" in the lower right
    ell_v = (y >= 170) & (y < 240) & (x >= 250) & (x < 262)
    ell_h = (y >= 228) & (y < 240) & (x >= 250) & (x < 300)
    r, g, b = _set(ell_v | ell_h, (r, g, b), (0, 0, 0))
    # horizontal stripes (3 on / 4 off) in the lower left
    stripes = (y >= 180) & (y < 250) & (x >= 20) & (x < 140) & (y % 7 < 3)
    r, g, b = _set(stripes, (r, g, b), (255, 255, 255))
    return _finish(*_byte_strip(y, x, 250, (r, g, b)))


def img300x200():
    h, w = 300, 200
    y, x = _grid(h, w)
    r = _ramp(y, h)
    g = _ramp(x, w)
    b = (_ramp(y, h) + _ramp(x, w)) // 2
    # 10 px black/white checkerboard in the top band (hard edges: bicubic overshoot + clamp)
    top = y < 80
    on = ((y // 10) + (x // 10)) % 2 == 0
    r, g, b = _set(top & on, (r, g, b), (255, 255, 255))
    r, g, b = _set(top & ~on, (r, g, b), (0, 0, 0))
    # white disk on a black square, middle left
    sq = (y >= 110) & (y < 190) & (x >= 10) & (x < 90)
    disk = (y - 150) ** 2 + (x - 50) ** 2 <= 30 ** 2
    r, g, b = _set(sq, (r, g, b), (0, 0, 0))
    r, g, b = _set(disk, (r, g, b), (255, 255, 255))
    # red/cyan vertical stripes, 1 px wide, middle right
    st = (y >= 110) & (y < 190) & (x >= 120) & (x < 190)
    r, g, b = _set(st & (x % 2 == 0), (r, g, b), (255, 0, 0))
    r, g, b = _set(st & (x % 2 == 1), (r, g, b), (0, 255, 255))
    # textured gradient at the bottom
    bot = y >= 220
    tex = _hash_noise(y, x, 3, 5)
    r = _where(bot, r + tex, r)
    b = _where(bot, b + (31 - tex), b)
    return _finish(*_byte_strip(y, x, 292, (r, g, b)))


def _byte_strip(y, x, y0: int, chans):
    """Rows y >= y0 become a strip where every byte value occurs in every channel:
    v = ((y - y0) * W + x) mod 256, R = v, G = 255 - v, B = 7v mod 256 (a bijection)."""
    w = x.shape[1]
    strip = y >= y0
    v = ((y - y0) * w + x) % 256
    r, g, b = chans
    return _where(strip, v, r), _where(strip, 255 - v, g), _where(strip, (7 * v) % 256, b)


def _set(mask, chans, color):
    import numpy as np

    return tuple(np.where(mask, c, ch) for ch, c in zip(chans, color))


def _where(mask, a, b):
    import numpy as np

    return np.where(mask, a, b)


# file name -> (height, width, generator). Heights/widths are what the generator returns.
IMAGES: dict[str, tuple[int, int, Callable[[], Any]]] = {
    "img512.png": (512, 512, img512),
    "img256x320.png": (256, 320, img256x320),
    "img300x200.png": (300, 200, img300x200),
}


def images_dir(cache: str | os.PathLike[str] | None = None) -> Path:
    return cache_root(cache) / "reference" / "images"


def images_hash() -> str:
    return sha256_json({"version": IMAGES_VERSION, "sources": source_digest("test_images.py"),
                        "files": {k: [h, w] for k, (h, w, _) in IMAGES.items()}})


def generate(name: str):
    """The uint8 [H, W, 3] array of image `name` (a file name of IMAGES)."""
    h, w, fn = IMAGES[name]
    arr = fn()
    if arr.shape != (h, w, 3) or str(arr.dtype) != "uint8":
        raise AssertionError(f"{name}: generator gave {arr.shape} {arr.dtype}")
    return arr


def load_rgb(path: str | os.PathLike[str]):
    """Decodes a PNG as the HF path does (PIL, EXIF transpose is moot for PNG, convert RGB)."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as im:
        im.load()
        return np.asarray(im.convert("RGB")).copy()


def _lock_path(cache: str | os.PathLike[str] | None) -> Path:
    return images_dir(cache).parent / ".images.lock"


@contextlib.contextmanager
def reading(cache: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """A shared lock on the images directory: held while references read the PNGs, so a
    concurrent ensure_images(force=True) (exclusive) cannot swap the directory underneath."""
    lp = _lock_path(cache)
    lp.parent.mkdir(parents=True, exist_ok=True)
    with open(lp, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_images(cache: str | os.PathLike[str] | None = None, force: bool = False,
                  log=print) -> dict[str, Any]:
    """Writes the PNGs if missing or stale; returns the stamp plus {"dir", "built"}."""
    out = images_dir(cache)
    want = images_hash()
    with locked(_lock_path(cache)):
        stamp = read_stamp(out)
        if (not force and stamp is not None and stamp.get("hash") == want
                and all((out / n).is_file() for n in IMAGES)):
            return {**stamp, "dir": str(out), "built": False}
        from PIL import Image
        import numpy as np

        tmp = out.parent / f".images.tmp-{os.getpid()}"
        if tmp.exists():
            import shutil
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        try:
            files = {}
            for name, (h, w, _) in IMAGES.items():
                arr = generate(name)
                Image.fromarray(arr, "RGB").save(tmp / name, format="PNG", compress_level=6)
                back = load_rgb(tmp / name)
                if not np.array_equal(back, arr):
                    raise AssertionError(f"{name}: PNG round trip changed the pixels")
                for c in range(3):
                    n_vals = len(np.unique(arr[..., c]))
                    if n_vals != 256:
                        raise AssertionError(f"{name}: channel {c} has {n_vals} byte values, not 256")
                files[name] = {"height": h, "width": w,
                               "png_sha256": sha256_file(tmp / name),
                               "pixels_sha256": hashlib.sha256(arr.tobytes()).hexdigest()}
            new_stamp = {"hash": want, "version": IMAGES_VERSION, "files": files}
            write_json(tmp / STAMP_FILE, new_stamp)
            replace_dir(tmp, out)
        except BaseException:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    log(f"[images] wrote {', '.join(IMAGES)} -> {out}")
    return {**new_stamp, "dir": str(out), "built": True}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=None)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    info = ensure_images(args.cache, force=args.force)
    for n, f in info["files"].items():
        print(f"{n}: {f['height']}x{f['width']} pixels sha256 {f['pixels_sha256'][:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
