"""src/image against Pillow and transformers, through build/bin/image_probe (QHX_BIN).

Decoding: for every synthetic file (PNG of every colour type and depth, JPEG at several
qualities and subsamplings, progressive, grayscale, CMYK, WebP lossy/lossless/alpha/animated,
PGM/PPM, EXIF/XMP orientations 1-8) our RGB must equal
PIL.ImageOps.exif_transpose(Image.open(p)).convert("RGB") exactly, which is what
transformers' load_image produces. Truncated files must fail or succeed as Pillow does.
Resizing: our bicubic against Image.resize((w, h), Image.BICUBIC) on the same pixels; the
max and mean absolute error over all cases are printed and the max must be <= 1 (the
implementation aims at 0). smart_resize: against transformers' own function.

All images are formula-generated or come from fixed-seed generators: nothing is downloaded.
"""

from __future__ import annotations

import os
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from PIL import Image, ImageOps
from PIL.PngImagePlugin import PngInfo

from conftest import stderr_text, tool_path

PROBE_TIMEOUT_S = 120


# ------------------------------------------------------------------ the probe

@pytest.fixture(scope="module")
def probe() -> Path:
    path = tool_path("image_probe")
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} not built: cmake --build build --target image_probe (or set QHX_BIN)")
    return path


def _run(probe: Path, args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(probe), *args], input=stdin, capture_output=True,
                          timeout=PROBE_TIMEOUT_S, check=False)


def _read_rgb(proc: subprocess.CompletedProcess[bytes], out: Path) -> np.ndarray:
    w, h = (int(v) for v in proc.stdout.decode().split())
    data = np.frombuffer(out.read_bytes(), dtype=np.uint8)
    assert data.size == w * h * 3
    return data.reshape(h, w, 3)


def ours_load(probe: Path, path: Path) -> np.ndarray:
    out = path.with_suffix(path.suffix + ".rgb")
    proc = _run(probe, ["load", str(path), str(out)])
    assert proc.returncode == 0, stderr_text(proc)
    return _read_rgb(proc, out)


def ours_resize(probe: Path, path: Path, w: int, h: int) -> np.ndarray:
    out = path.with_suffix(path.suffix + f".{w}x{h}.rgb")
    proc = _run(probe, ["resize", str(path), str(w), str(h), str(out)])
    assert proc.returncode == 0, stderr_text(proc)
    return _read_rgb(proc, out)


def pillow_load(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(ImageOps.exif_transpose(im).convert("RGB"))


# ------------------------------------------------------------------ synthetic content

def _grid(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    return np.mgrid[0:h, 0:w]


def gradient(h: int, w: int) -> np.ndarray:
    y, x = _grid(h, w)
    r = x * 255 // max(w - 1, 1)
    g = y * 255 // max(h - 1, 1)
    b = (x + 2 * y) * 255 // max(w + 2 * h - 3, 1)
    return np.stack([r, g, b], -1).astype(np.uint8)


def checker(h: int, w: int, cell: int = 7) -> np.ndarray:
    y, x = _grid(h, w)
    on = ((x // cell) + (y // cell)) % 2 == 1
    rgb = np.zeros((h, w, 3), np.uint8)
    rgb[on] = (250, 245, 5)
    rgb[~on] = (3, 10, 240)
    return rgb


def noise(h: int, w: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def scene(h: int, w: int, seed: int) -> np.ndarray:
    """Gradient + an off-centre disc + a checker patch + mild noise: JPEG-like content
    that is asymmetric under every flip and transpose."""
    y, x = _grid(h, w)
    img = gradient(h, w).astype(np.int32)
    disc = (x - w * 0.3) ** 2 + (y - h * 0.35) ** 2 < (min(h, w) * 0.2) ** 2
    img[disc] = (220, 40, 60)
    patch = (x > w * 0.6) & (y > h * 0.55) & (((x // 4) + (y // 4)) % 2 == 0)
    img[patch] = (10, 200, 90)
    img += np.random.default_rng(seed).integers(-12, 13, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


# ------------------------------------------------------------------ hand-written PNGs
# Pillow cannot write 2/4-bit gray, 16-bit RGB(A)/LA, Adam7 or short palettes.

def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _pack_rows(samples: np.ndarray, bit_depth: int) -> list[bytes]:
    """samples: [h, w*channels] integer array -> filter-type-0 scanlines."""
    rows = []
    for row in samples:
        if bit_depth == 16:
            raw = row.astype(">u2").tobytes()
        elif bit_depth == 8:
            raw = row.astype(np.uint8).tobytes()
        else:
            per = 8 // bit_depth
            padded = np.zeros(-(-row.size // per) * per, np.uint8)
            padded[:row.size] = row
            packed = np.zeros(padded.size // per, np.uint8)
            for k in range(per):
                packed |= (padded[k::per] << (8 - bit_depth * (k + 1))).astype(np.uint8)
            raw = packed.tobytes()
        rows.append(b"\x00" + raw)
    return rows


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def write_png(path: Path, samples: np.ndarray, color_type: int, bit_depth: int,
              palette: bytes | None = None, interlace: bool = False,
              extra: list[tuple[bytes, bytes]] = ()) -> Path:
    """samples: [h, w, channels] unsigned integers in the PNG's own sample range."""
    h, w, c = samples.shape
    if interlace:
        rows: list[bytes] = []
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.size:
                rows += _pack_rows(sub.reshape(sub.shape[0], -1), bit_depth)
    else:
        rows = _pack_rows(samples.reshape(h, w * c), bit_depth)
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0)
    body = _chunk(b"IHDR", ihdr)
    if palette is not None:
        body += _chunk(b"PLTE", palette)
    for kind, data in extra:
        body += _chunk(kind, data)
    body += _chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + _chunk(b"IEND", b"")
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body)
    return path


# ------------------------------------------------------------------ EXIF helpers

def exif_bytes(orientation: int) -> bytes:
    ex = Image.Exif()
    ex[0x0112] = orientation
    return ex.tobytes()


def exif_big_endian(orientation: int) -> bytes:
    """A hand-made Motorola-order block: IFD0 with a single Orientation SHORT."""
    ifd = struct.pack(">H", 1) + struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack(">I", 0)
    return b"Exif\x00\x00" + b"MM\x00\x2a" + struct.pack(">I", 8) + ifd


def xmp_packet(orientation: int) -> str:
    return ('<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/'
            '22-rdf-syntax-ns#"><rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" '
            f'tiff:Orientation="{orientation}"/></rdf:RDF></x:xmpmeta>')


# ------------------------------------------------------------------ the decode corpus

Maker = Callable[[Path], Path]


def _pil(arr: np.ndarray, mode: str | None = None) -> Image.Image:
    return Image.fromarray(arr) if mode is None else Image.fromarray(arr).convert(mode)


def _save(im: Image.Image, fmt: str, **kw) -> Maker:
    def make(path: Path) -> Path:
        im.save(path, fmt, **kw)
        return path
    return make


def _rgba(h: int, w: int) -> np.ndarray:
    rgb = scene(h, w, 5)
    y, x = _grid(h, w)
    alpha = ((x * 7 + y * 3) % 256).astype(np.uint8)
    alpha[: h // 3, : w // 3] = 0  # fully transparent pixels keep their colour in convert("RGB")
    return np.dstack([rgb, alpha])


def _palette_image(h: int, w: int, colors: int) -> Image.Image:
    return _pil(scene(h, w, 9)).quantize(colors=colors, method=Image.Quantize.MEDIANCUT)


def _i16(h: int, w: int) -> Image.Image:
    y, x = _grid(h, w)
    v = (x * 977 + y * 131) % 65536
    v[:, : w // 4] = (x[:, : w // 4] * 9 + y[:, : w // 4]) % 300  # some values below 256
    im = Image.fromarray(v.astype(np.uint16))
    assert im.mode == "I;16"
    return im


def _animated_webp(path: Path) -> Path:
    frames = [_pil(scene(40, 56, 1)), _pil(checker(40, 56, 5))]
    frames[0].save(path, "WEBP", save_all=True, append_images=frames[1:], duration=100, lossless=True)
    return path


def _ppm(header: bytes, samples: np.ndarray, sixteen: bool) -> Maker:
    def make(path: Path) -> Path:
        data = samples.astype(">u2").tobytes() if sixteen else samples.astype(np.uint8).tobytes()
        path.write_bytes(header + data)
        return path
    return make


def _png_short_palette(path: Path) -> Path:
    y, x = _grid(19, 23)
    idx = ((x + y) % 16).astype(np.uint8)[..., None]  # indices 4..15 lie past the 4-entry PLTE
    return write_png(path, idx, 3, 4, palette=bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 200, 200, 200]))


def decode_corpus() -> dict[str, Maker]:
    c: dict[str, Maker] = {}
    # PNG, every Pillow mode that convert("RGB") treats differently
    c["png_rgb_37x23"] = _save(_pil(scene(23, 37, 1)), "PNG")
    c["png_rgba"] = _save(_pil(_rgba(29, 41)), "PNG")
    c["png_gray"] = _save(_pil(scene(17, 33, 2), "L"), "PNG")
    c["png_gray_alpha"] = _save(_pil(_rgba(21, 26)).convert("LA"), "PNG")
    c["png_1bit"] = _save(_pil(checker(15, 22, 3), "1"), "PNG")
    c["png_palette_8bit"] = _save(_palette_image(30, 50, 200), "PNG")
    c["png_palette_4bit"] = _save(_palette_image(31, 45, 12), "PNG", bits=4)
    c["png_palette_trns"] = _save(_palette_image(24, 36, 64), "PNG", transparency=3)
    c["png_palette_short"] = _png_short_palette
    c["png_gray16"] = _save(_i16(27, 40), "PNG")
    y, x = _grid(18, 21)
    c["png_gray2"] = lambda p: write_png(p, ((x + 2 * y) % 4)[..., None], 0, 2)
    c["png_gray4"] = lambda p: write_png(p, ((3 * x + y) % 16)[..., None], 0, 4)
    rgb16 = gradient(18, 21).astype(np.int64) * 256 + (x * 97 % 256)[..., None]  # low bytes vary too
    c["png_rgb16"] = lambda p: write_png(p, rgb16, 2, 16)
    c["png_rgba16"] = lambda p: write_png(p, np.dstack([rgb16, (x * y * 300) % 65536]), 6, 16)
    c["png_la16"] = lambda p: write_png(p, np.dstack([(x * 3000 + y * 7) % 65536, (y * 4000) % 65536]), 4, 16)
    c["png_adam7_rgb"] = lambda p: write_png(p, scene(29, 35, 3), 2, 8, interlace=True)
    c["png_adam7_gray4"] = lambda p: write_png(p, ((x * 5 + y) % 16)[..., None], 0, 4, interlace=True)
    c["png_1x57"] = _save(_pil(scene(1, 57, 4)), "PNG")
    c["png_57x1"] = _save(_pil(scene(57, 1, 4)), "PNG")
    c["png_exif_6"] = _save(_pil(scene(20, 32, 6)), "PNG", exif=exif_bytes(6))
    xmp_info = PngInfo()
    xmp_info.add_itxt("XML:com.adobe.xmp", xmp_packet(8))
    c["png_xmp_8"] = _save(_pil(scene(20, 32, 7)), "PNG", pnginfo=xmp_info)
    raw = exif_bytes(3)
    raw_info = PngInfo()
    raw_info.add_text("Raw profile type exif", f"\nexif\n{len(raw):8}\n{raw.hex()}\n")
    c["png_raw_profile_3"] = _save(_pil(scene(20, 32, 8)), "PNG", pnginfo=raw_info)
    # JPEG
    c["jpeg_q95_444"] = _save(_pil(scene(48, 64, 10)), "JPEG", quality=95, subsampling=0)
    c["jpeg_q75_420_odd"] = _save(_pil(scene(67, 101, 11)), "JPEG", quality=75, subsampling=2)
    c["jpeg_q50_422"] = _save(_pil(scene(45, 77, 12)), "JPEG", quality=50, subsampling=1)
    c["jpeg_q30_noise"] = _save(_pil(noise(33, 47, 13)), "JPEG", quality=30)
    c["jpeg_progressive"] = _save(_pil(scene(61, 83, 14)), "JPEG", quality=85, progressive=True)
    c["jpeg_gray"] = _save(_pil(scene(39, 52, 15), "L"), "JPEG", quality=80)
    cmyk = np.dstack([scene(35, 44, 16), gradient(35, 44)[..., :1]])
    cmyk_image = Image.frombytes("CMYK", (44, 35), cmyk.astype(np.uint8).tobytes())
    c["jpeg_cmyk"] = _save(cmyk_image, "JPEG", quality=90)  # Adobe-inverted, as Pillow writes CMYK
    c["jpeg_large_2000x1500"] = _save(_pil(scene(1500, 2000, 17)), "JPEG", quality=85)
    for k in range(1, 9):
        c[f"jpeg_exif_{k}"] = _save(_pil(scene(32, 48, 20 + k)), "JPEG", quality=90, exif=exif_bytes(k))
    c["jpeg_exif_be_6"] = _save(_pil(scene(32, 48, 30)), "JPEG", quality=90, exif=exif_big_endian(6))
    c["jpeg_xmp_5"] = _save(_pil(scene(32, 48, 31)), "JPEG", quality=90, xmp=xmp_packet(5).encode())
    # EXIF says 1, XMP says 6: the EXIF tag wins and hides the XMP
    c["jpeg_exif1_xmp6"] = _save(_pil(scene(32, 48, 32)), "JPEG", quality=90, exif=exif_bytes(1),
                                 xmp=xmp_packet(6).encode())
    # WebP
    c["webp_lossy"] = _save(_pil(scene(45, 61, 40)), "WEBP", quality=80)
    c["webp_lossless"] = _save(_pil(scene(45, 61, 41)), "WEBP", lossless=True)
    c["webp_lossy_alpha"] = _save(_pil(_rgba(37, 52)), "WEBP", quality=70)
    c["webp_lossless_alpha"] = _save(_pil(_rgba(37, 52)), "WEBP", lossless=True)
    c["webp_exif_5"] = _save(_pil(scene(30, 44, 42)), "WEBP", quality=90, exif=exif_bytes(5))
    c["webp_animated"] = _animated_webp
    # PGM/PPM
    sc = scene(13, 17, 50)
    c["ppm_p6_255"] = _save(_pil(sc), "PPM")
    c["pgm_p5_255"] = _save(_pil(sc, "L"), "PPM")
    c["pgm_p5_65535"] = _save(_i16(13, 17), "PPM")
    y2, x2 = _grid(13, 17)
    sc16 = sc.astype(np.int64) * 256 + (x2 * 31)[..., None] % 256
    c["ppm_p6_65535"] = _ppm(b"P6 17 13 65535\n", sc16, True)
    c["ppm_p6_1000"] = _ppm(b"P6\n# a comment\n17 13\n1000\n", sc.astype(np.int64) * 1000 // 255, True)
    c["pgm_p5_7"] = _ppm(b"P5 17 13 7\n", (x2 + y2) % 8, False)
    c["pgm_p5_300"] = _ppm(b"P5 17 13 300\n", (x2 * 19 + y2) % 301, True)
    return c


CORPUS = decode_corpus()


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("images")
    for name, make in CORPUS.items():
        make(d / name)
    return d


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_decode_matches_pillow(probe: Path, corpus_dir: Path, name: str) -> None:
    path = corpus_dir / name
    want = pillow_load(path)
    got = ours_load(probe, path)
    assert got.shape == want.shape
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    assert diff.max() == 0, f"{name}: {np.count_nonzero(diff)} values differ, max {diff.max()}"


def test_orientations_really_transpose(corpus_dir: Path) -> None:
    """Guards the corpus itself: each EXIF orientation gives Pillow a distinct image."""
    seen = set()
    for k in range(1, 9):
        with Image.open(corpus_dir / f"jpeg_exif_{k}") as im:
            assert im.getexif().get(0x0112) == k
        seen.add(pillow_load(corpus_dir / f"jpeg_exif_{k}").shape)
    assert seen == {(32, 48, 3), (48, 32, 3)}


def test_corpus_covers_pillow_modes(corpus_dir: Path) -> None:
    modes = set()
    for name in CORPUS:
        with Image.open(corpus_dir / name) as im:
            modes.add(im.mode)
    assert {"RGB", "RGBA", "L", "LA", "1", "P", "I;16", "I", "CMYK"} <= modes, modes


# ------------------------------------------------------------------ truncation parity

TRUNCATED = {
    "jpeg_q75_420_odd": [2, 3, 40, 400],
    "jpeg_progressive": [2, 3, 300],
    "jpeg_q30_noise": [2],
    "png_rgb_37x23": [12, 200],
    "png_adam7_rgb": [12, 100],
    "webp_lossy": [1, 100],
}


@pytest.mark.parametrize("name,cut", [(n, c) for n, cuts in TRUNCATED.items() for c in cuts])
def test_truncated_like_pillow(probe: Path, corpus_dir: Path, tmp_path: Path, name: str, cut: int) -> None:
    """Pillow either decodes a shortened file (e.g. a JPEG that only lacks its EOI) or
    raises; we must do the same, with the same pixels when it decodes."""
    data = (corpus_dir / name).read_bytes()
    path = tmp_path / f"{name}_cut{cut}"
    path.write_bytes(data[:-cut])
    try:
        want = pillow_load(path)
    except (OSError, SyntaxError, ValueError, EOFError):
        want = None
    out = tmp_path / "out.rgb"
    proc = _run(probe, ["load", str(path), str(out)])
    if want is None:
        assert proc.returncode == 1, f"Pillow rejects {path.name}, we decoded it"
        assert str(path) in stderr_text(proc)
    else:
        assert proc.returncode == 0, f"Pillow decodes {path.name}, we fail: {stderr_text(proc)}"
        np.testing.assert_array_equal(_read_rgb(proc, out), want)


# ------------------------------------------------------------------ resize

def _resize_cases() -> list[tuple[str, Maker, int, int]]:
    """(name, source maker, target W, target H)."""
    png = lambda arr: _save(_pil(arr), "PNG")  # noqa: E731
    big = png(scene(1500, 2000, 60))
    return [
        ("spec_300x200_up", png(scene(300, 200, 61)), 224, 320),
        ("spec_272x400_down", png(scene(272, 400, 62)), 384, 256),
        ("spec_1080x1920_h_only", png(scene(1080, 1920, 63)), 1920, 1088),
        ("large_2000x1500", big, 1984, 1504),
        ("large_2000x1500_to_448", big, 448, 336),
        ("tiny_1x57_up", png(scene(1, 57, 64)), 1952, 64),
        ("tiny_57x1_up", png(scene(57, 1, 65)), 64, 1952),
        ("odd_37x23_down", png(scene(23, 37, 66)), 5, 3),
        ("odd_37x23_up", png(scene(23, 37, 66)), 100, 61),
        ("nearly_same_513x511", png(noise(511, 513, 67)), 512, 512),
        ("aspect_100x100_to_300x20", png(scene(100, 100, 68)), 300, 20),
        ("width_only_64x48", png(noise(48, 64, 69)), 100, 48),
        ("height_only_64x48", png(noise(48, 64, 70)), 64, 10),
        ("checker_overshoot_up", png(checker(50, 70, 3)), 163, 97),
        ("checker_overshoot_down", png(checker(250, 170, 2)), 61, 83),
        ("noise_down_x7", png(noise(210, 350, 71)), 50, 30),
        ("tall_3x400", png(scene(400, 3, 72)), 2, 300),
        ("wide_400x3", png(scene(3, 400, 73)), 300, 2),
        ("to_1x1", png(scene(30, 40, 74)), 1, 1),
        ("gradient_up_x3", png(gradient(40, 40)), 120, 120),
        ("jpeg_source", _save(_pil(scene(67, 101, 75)), "JPEG", quality=80), 224, 160),
        ("webp_source", _save(_pil(scene(45, 61, 76)), "WEBP", quality=80), 64, 64),
        ("identity_512", png(scene(512, 512, 77)), 512, 512),
    ]


RESIZE_CASES = _resize_cases()
# name -> (max abs error, mean abs error, number of values); filled by whichever test
# needs a case first, so the summary also works when run on its own.
_resize_stats: dict[str, tuple[int, float, int]] = {}


@pytest.fixture(scope="module")
def resize_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("resize")
    done: dict[int, Path] = {}
    for name, make, _, _ in RESIZE_CASES:
        if id(make) in done:  # one source file shared by several cases
            (d / name).write_bytes(done[id(make)].read_bytes())
        else:
            done[id(make)] = make(d / name)
    return d


def _resize_error(probe: Path, resize_dir: Path, name: str, w: int, h: int) -> tuple[int, float, int]:
    if name not in _resize_stats:
        path = resize_dir / name
        with Image.open(path) as im:
            want = np.asarray(ImageOps.exif_transpose(im).convert("RGB").resize((w, h), Image.BICUBIC))
        got = ours_resize(probe, path, w, h)
        assert got.shape == want.shape, name
        diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
        _resize_stats[name] = (int(diff.max()), float(diff.mean()), diff.size)
    return _resize_stats[name]


@pytest.mark.parametrize("name,w,h", [(n, w, h) for n, _, w, h in RESIZE_CASES])
def test_resize_matches_pillow(probe: Path, resize_dir: Path, name: str, w: int, h: int) -> None:
    worst, mean, _ = _resize_error(probe, resize_dir, name, w, h)
    assert worst <= 1, f"{name}: max abs error {worst}, mean {mean:.6f}"


def test_resize_error_summary(probe: Path, resize_dir: Path) -> None:
    """The figures over all cases, images and channels (printed; see them with -s)."""
    stats = {n: _resize_error(probe, resize_dir, n, w, h) for n, _, w, h in RESIZE_CASES}
    total = sum(n for _, _, n in stats.values())
    mean = sum(m * n for _, m, n in stats.values()) / total
    worst = max(mx for mx, _, _ in stats.values())
    print(f"\nresize vs Pillow BICUBIC over {len(stats)} cases, {total} values: "
          f"max abs error {worst}, mean abs error {mean:.6f} (levels of 255)")
    for name, (mx, m, _) in sorted(stats.items()):
        if mx:
            print(f"  {name}: max {mx}, mean {m:.6f}")
    assert worst <= 1


# ------------------------------------------------------------------ smart_resize

def _smart_sizes() -> list[tuple[int, int]]:
    sizes = {(h, w) for h in range(1, 400, 13) for w in range(1, 400, 29)}
    sizes |= {(16 * k, 16 * j) for k in range(1, 40, 3) for j in range(1, 40, 5)}  # .5 quotients
    sizes |= {(512, 512), (256, 320), (300, 200), (272, 400), (100, 100), (1080, 1920), (4000, 6000),
              (1, 200), (1, 201), (10, 2000), (10, 2001), (3, 600), (7, 1400), (1500, 2000),
              (3024, 4032), (4032, 3024), (6000, 8000), (8192, 8192), (12345, 6789), (20000, 150),
              (1, 1), (2, 2), (15, 17), (31, 33), (48, 48), (4095, 4097)}
    rng = np.random.default_rng(80)
    sizes |= {(int(a), int(b)) for a, b in rng.integers(1, 9000, (400, 2))}
    return sorted(sizes)


def test_smart_resize_matches_transformers(probe: Path) -> None:
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    sizes = _smart_sizes()
    stdin = "".join(f"{h} {w}\n" for h, w in sizes).encode()
    proc = _run(probe, ["smart", "32", "65536", "16777216"], stdin)
    assert proc.returncode == 0, stderr_text(proc)
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == len(sizes)
    errors = 0
    for (h, w), line in zip(sizes, lines):
        try:
            want = "%d %d" % smart_resize(h, w, factor=32, min_pixels=65536, max_pixels=16777216)
        except ValueError:
            want = None
        if want is None:
            errors += 1
            assert line.startswith("error: ") and "aspect ratio" in line, (h, w, line)
        else:
            assert line == want, (h, w, line, want)
    assert errors > 0  # the aspect-ratio rejection was exercised


def test_probe_reports_bad_file(probe: Path, tmp_path: Path) -> None:
    bad = tmp_path / "notes.jpg"
    bad.write_text("just text\n")
    proc = _run(probe, ["load", str(bad), str(tmp_path / "o.rgb")])
    assert proc.returncode == 1
    assert str(bad) in stderr_text(proc) and "not a recognised image" in stderr_text(proc)
