"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) and their
dictionaries (tests/fuzz/<target>.dict). Both are committed, so a checkout fuzzes
and runs its regression tests without this script; rerun it after a format
changes. Needs Pillow and numpy (the reference venv) and, for the manifest,
config and tokenizer seeds, the cache that scripts/test.sh fills.

    python tests/fuzz/make_seeds.py            # rewrites every corpus and dict
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import struct
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = Path(os.environ.get("QHX_CACHE", Path.home() / ".cache" / "qhexrt"))
CORPUS = HERE / "corpus"


def put(target: str, name: str, data: bytes | str) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data.encode() if isinstance(data, str) else data)


def dictionary(target: str, tokens: list[str | bytes]) -> None:
    lines = []
    for t in dict.fromkeys(tokens):  # unique, in order
        b = t.encode() if isinstance(t, str) else t
        esc = "".join(chr(c) if 0x20 <= c < 0x7F and c not in b'"\\' else f"\\x{c:02X}" for c in b)
        lines.append(f'"{esc}"')
    (HERE / f"{target}.dict").write_text("\n".join(lines) + "\n")


def literals(*sources: str) -> list[str]:
    """The short string literals of source files: the keys and values a parser compares against."""
    out = []
    for s in sources:
        text = (ROOT / s).read_text()
        out += [m for m in re.findall(r'"([A-Za-z_][A-Za-z0-9_.\-]{1,40})"', text)]
    return out


# --- safetensors and bundles ---------------------------------------------------

def safetensors_header(tensors: dict, metadata: dict | None = None) -> tuple[bytes, bytes]:
    """(header JSON, data section) for tensors {name: (dtype, shape, bytes)}."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    return text + b" " * (-(8 + len(text)) % 8), data  # padded as writers do: the data section 8-aligned


def f32(*v: float) -> bytes:
    return np.asarray(v, dtype="<f4").tobytes()


def bundle_like() -> list[tuple[str, dict, dict | None]]:
    q8 = bytes(range(256))[:2 * 32]
    q4 = bytes(range(64))[:2 * 16]
    return [
        ("f32_matrix", {"w": ("F32", [2, 3], f32(1, 2, 3, 4, 5, 6))}, None),
        ("w8", {"m.weight": ("I8", [2, 32], q8), "m.weight.scale": ("F32", [2], f32(0.5, 0.25))},
         {"qhexrt_bundle": "1", "role": "llm_shared", "weights": "w8"}),
        ("w4", {"m.weight": ("U8", [2, 16], q4), "m.weight.scale": ("F32", [2, 1], f32(0.5, 0.25))},
         {"qhexrt_bundle": "1", "role": "vision", "weights": "w4"}),
        ("f16_bf16", {"a": ("F16", [2, 2], b"\x00\x3c" * 4), "b": ("BF16", [4], b"\x80\x3f" * 4)},
         {"qhexrt_bundle": "1", "role": "embed", "weights": "f16"}),
        ("vector_and_pad", {"norm.weight": ("F32", [4], f32(1, 1, 1, 1)), "__pad.0": ("U8", [12], bytes(12)),
                            "e": ("I64", [0, 3], b""), "i": ("I32", [1], b"\x07\x00\x00\x00")},
         {"qhexrt_bundle": "1", "role": "lm_head", "weights": "f32"}),
        ("newer_version", {"x": ("U8", [1], b"\x01")}, {"qhexrt_bundle": "2"}),
    ]


def safetensors_seeds() -> None:
    for name, tensors, meta in bundle_like():
        header, data = safetensors_header(tensors, meta)
        put("fuzz_safetensors", name, struct.pack("<Q", len(header)) + header + data)
        put("fuzz_bundle", name, header + b"\0" + data)
    put("fuzz_safetensors", "empty_header", struct.pack("<Q", 2) + b"{}")
    dictionary("fuzz_safetensors", ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"qhexrt_bundle"',
                                    *[f'"{d}"' for d in ("F32", "F16", "BF16", "I8", "U8", "I32", "I64")]])
    dictionary("fuzz_bundle", ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"qhexrt_bundle"', '"role"',
                               '"weights"', '".scale"', '"__pad.', *[f'"{d}"' for d in ("F32", "F16", "BF16", "I8", "U8")]])


# --- JSON documents -----------------------------------------------------------

def manifest_seeds() -> None:
    for f in sorted((CACHE / "bundles").glob("*/qwen3vl-*.json"))[:2]:
        put("fuzz_manifest", f.name, f.read_bytes())
    put("fuzz_manifest", "minimal.json", json.dumps({
        "qhexrt_manifest": 1, "model": "qwen3vl", "config": "config.json", "tokenizer": "tokenizer.json",
        "graphs": {"llm": {"backend": "cpu", "kind": "qwen3vl.text_decoder", "weights": "w.safetensors"}},
        "stages": [{"op": "tokenize"}, {"op": "embed", "table": "embed"}, {"op": "detokenize"}]}))
    dictionary("fuzz_manifest", [f'"{k}"' for k in literals("src/runtime/manifest.cpp", "src/common/json_section.hpp")])


def config_seeds() -> None:
    for sub in ("tiny_a", "tiny_a_tf5", "tiny_b"):
        f = CACHE / "reference" / sub / "checkpoint" / "config.json"
        if f.exists():
            put("fuzz_hf_config", f"{sub}.json", f.read_bytes())
    dictionary("fuzz_hf_config", [f'"{k}"' for k in literals("src/formats/hf_config.cpp")])


def tiny_tokenizer() -> bytes:
    """The real tokenizer.json cut to its 256 byte tokens, the merges among the first
    600 ids and a few added tokens: the same structure, 3 % of a millisecond to load."""
    t = json.loads((CACHE / "tokenizer" / "tokenizer.json").read_text())
    vocab = {k: v for k, v in t["model"]["vocab"].items() if v < 600}
    merges = [m for m in t["model"]["merges"] if (m[0] + m[1]) in vocab and m[0] in vocab and m[1] in vocab]
    t["model"]["vocab"], t["model"]["merges"] = vocab, merges
    added = [a for a in t["added_tokens"] if a["content"] in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>")]
    for i, a in enumerate(added):
        a["id"] = 600 + i
    t["added_tokens"] = added
    return json.dumps(t, ensure_ascii=False, separators=(",", ":")).encode()


def tokenizer_seeds() -> None:
    tiny = tiny_tokenizer()
    put("fuzz_tokenizer_load", "tiny.json", tiny)
    t = json.loads(tiny)
    t["model"]["merges"] = [" ".join(m) for m in t["model"]["merges"]]  # the older "left right" spelling
    t["normalizer"] = None
    put("fuzz_tokenizer_load", "tiny_string_merges.json", json.dumps(t, ensure_ascii=False))
    dictionary("fuzz_tokenizer_load", [f'"{k}"' for k in literals("src/tokenizer/tokenizer.cpp")] + ['"Ġ"', '"Ċ"'])

    texts = ["Hello, world!", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
             "你好，世界。 こんにちは 안녕하세요", "e\u0301 A\u030a \u1100\u1161\u11a8 \ufb01 K\u212a",
             "  leading   spaces\n\n\ttabs\r\n123456 3.14 don't WE'LL", "emoji 👍🏽 🇫🇷 \U0001f9d1\u200d\U0001f4bb",
             "<think>\n\n</think>\n\n<|vision_start|><|image_pad|><|vision_end|>", "\u0000\u007f\u0085\u2028"]
    for i, s in enumerate(texts):
        put("fuzz_tokenizer", f"text_{i}", b"\x00" + s.encode())
        put("fuzz_tokenizer", f"text_skip_{i}", b"\x01" + s.encode())
    rng = np.random.default_rng(7)
    for i in range(4):
        put("fuzz_tokenizer", f"ids_{i}", bytes([2 | (i & 1)]) + rng.integers(0, 256, 3 * 40, dtype=np.uint8).tobytes())
    dictionary("fuzz_tokenizer", ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                                  "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "\r\n", "'s", "'ll",
                                  "\u0301".encode(), "\u200d".encode(), "\xef\xbf\xbd".encode("latin-1")])


def chat_seeds() -> None:
    convs = [
        [{"role": "user", "content": "Hi"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [
            {"type": "image", "path": "a.png"}, {"type": "text", "text": "What is this?"}]},
         {"role": "assistant", "content": "<think>\nA cat.\n</think>\n\nA cat."}, {"role": "user", "content": "More"}],
        [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
         {"role": "system", "content": "late system"}],
    ]
    for i, c in enumerate(convs):
        put("fuzz_chat_template", f"json_{i}", json.dumps(c).encode() + b"\x81")  # the mode byte is read from the end
    put("fuzz_chat_template", "json_odd_types", json.dumps(
        [{"role": "user", "content": [{"type": "image_url"}, {"text": 5}, None]}, {"role": 3, "content": {}}]).encode() + b"\x80")
    rng = np.random.default_rng(11)
    for i in range(4):
        put("fuzz_chat_template", f"structured_{i}", bytes([i & 1]) + rng.integers(0, 256, 200, dtype=np.uint8).tobytes())
    dictionary("fuzz_chat_template", ['"role"', '"content"', '"type"', '"text"', '"image"', '"path"', '"system"',
                                      '"user"', '"assistant"', '"reasoning_content"', '"tool_calls"', "<think>",
                                      "</think>", "<tool_call>", "\\n"])


def serve_seeds() -> None:
    png = io.BytesIO()
    Image.new("RGB", (2, 2), (10, 20, 30)).save(png, "PNG")
    url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    bodies = [
        {"messages": [{"role": "user", "content": "Hello"}]},
        {"model": "qwen", "messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": [
            {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": url}}]}],
         "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 16, "temperature": 0.7,
         "top_p": 0.9, "top_k": -1, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5,
         "repetition_penalty": 1.1, "seed": 42, "stop": ["\n\n", "END"], "n": 1},
        {"messages": [{"role": "assistant", "content": None}, {"role": "user", "content": [
            {"type": "image_url", "image_url": "file:///etc/passwd"}]}], "stop": "x", "max_completion_tokens": 3},
    ]
    for i, b in enumerate(bodies):
        put("fuzz_serve_request", f"body_{i}.json", json.dumps(b))
    dictionary("fuzz_serve_request", [f'"{k}"' for k in literals("tools/serve/request.cpp")] +
               ['"data:image/png;base64,', '"file://', ";base64,"])
    put("fuzz_serve_data_url", "png", url)
    put("fuzz_serve_data_url", "ppm", "data:image/x-portable-pixmap;base64," + base64.b64encode(b"P6\n1 1\n255\n\0\0\0").decode())
    put("fuzz_serve_data_url", "wrapped", "data:;base64," + base64.encodebytes(b"\xff\xd8\xff" + bytes(100)).decode())
    put("fuzz_serve_data_url", "bad", "data:image/png,notbase64")
    dictionary("fuzz_serve_data_url", ["data:", ";base64,", "image/png", "file://localhost/", "http://", "==", "\n",
                                       b"\x89PNG\r\n\x1a\n", "RIFF", "WEBP", "P5", "P6", b"\xff\xd8\xff"])


# --- images -------------------------------------------------------------------

def exif_block(orientation: int, fmt: int = 3, big_endian: bool = False) -> bytes:
    """A TIFF-structured EXIF block whose IFD0 holds one Orientation tag (0x0112)."""
    e = ">" if big_endian else "<"
    size = {1: 1, 3: 2, 4: 4, 6: 1, 8: 2, 9: 4}[fmt]
    value = struct.pack(e + {1: "B", 3: "H", 4: "I", 6: "b", 8: "h", 9: "i"}[fmt], orientation).ljust(4, b"\0")
    assert size <= 4
    return (b"MM" if big_endian else b"II") + struct.pack(e + "HI", 42, 8) + struct.pack(e + "H", 1) + \
        struct.pack(e + "HHI", 0x0112, fmt, 1) + value + struct.pack(e + "I", 0)


def gradient(w: int, h: int, mode: str = "RGB") -> Image.Image:
    a = np.zeros((h, w, 3), dtype=np.uint8)
    a[..., 0] = np.linspace(0, 255, w, dtype=np.uint8)[None, :]
    a[..., 1] = np.linspace(0, 255, h, dtype=np.uint8)[:, None]
    a[..., 2] = 128
    return Image.fromarray(a).convert(mode)


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def image_seeds() -> None:
    exif6 = b"Exif\0\0" + exif_block(6)
    put("fuzz_image_jpeg", "rgb", encode(gradient(8, 6), "JPEG", quality=50))
    put("fuzz_image_jpeg", "gray_progressive", encode(gradient(9, 7, "L"), "JPEG", progressive=True))
    put("fuzz_image_jpeg", "cmyk", encode(gradient(4, 4, "CMYK"), "JPEG"))
    put("fuzz_image_jpeg", "exif6_420", encode(gradient(17, 5), "JPEG", exif=exif6, subsampling=2))
    put("fuzz_image_jpeg", "restart", encode(gradient(16, 16), "JPEG", restart_marker_blocks=1, optimize=True))

    put("fuzz_image_png", "rgb", encode(gradient(5, 3), "PNG"))
    put("fuzz_image_png", "palette_trns", encode(gradient(6, 2).quantize(4), "PNG", transparency=1))
    put("fuzz_image_png", "gray16", encode(Image.fromarray(np.arange(12, dtype=np.uint16).reshape(3, 4) * 4000), "PNG"))
    put("fuzz_image_png", "rgba", encode(gradient(7, 7, "RGBA"), "PNG"))
    put("fuzz_image_png", "la_exif", encode(gradient(3, 3, "LA"), "PNG", exif=exif_block(3, fmt=3, big_endian=True)))
    put("fuzz_image_png", "bilevel", encode(gradient(9, 2, "1"), "PNG"))

    put("fuzz_image_webp", "lossy", encode(gradient(8, 8), "WEBP", quality=30))
    put("fuzz_image_webp", "lossless", encode(gradient(5, 3), "WEBP", lossless=True))
    put("fuzz_image_webp", "alpha_exif", encode(gradient(4, 6, "RGBA"), "WEBP", exif=exif6))
    frames = [gradient(4, 4), gradient(4, 4).transpose(Image.Transpose.ROTATE_90)]
    put("fuzz_image_webp", "animated", encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=10))

    put("fuzz_image_ppm", "p6", b"P6\n3 2\n255\n" + gradient(3, 2).tobytes())
    put("fuzz_image_ppm", "p5_comment", b"P5 # a comment\n4 # w\n2\n255\n" + bytes(range(0, 256, 32)))
    put("fuzz_image_ppm", "p5_16bit", b"P5\n2 2\n65535\n" + b"\x00\x01\xff\xff\x80\x00\x12\x34")
    put("fuzz_image_ppm", "p6_maxval_7", b"P6 1 1 7\n\x01\x07\x03")

    # FuzzedDataProvider's order: the XMP string from the front (ended by a backslash and
    # one more byte), the sizes from the back, the EXIF block in between.
    def exif_input(xmp: bytes, exif: bytes, w: int, h: int) -> bytes:
        return xmp + b"\\x" + exif + bytes([h - 1, w - 1])
    for o in (1, 3, 6, 8):
        put("fuzz_exif", f"tiff_short_{o}", exif_input(b"", exif_block(o), 3, 2))
    put("fuzz_exif", "be_long_5", exif_input(b"", b"Exif\0\0Exif\0\0" + exif_block(5, fmt=4, big_endian=True), 2, 3))
    put("fuzz_exif", "sbyte_7", exif_input(b"", exif_block(7, fmt=6), 1, 4))
    put("fuzz_exif", "xmp_only", exif_input(b'<x:xmpmeta tiff:Orientation="6"/>', b"", 4, 4))

    dictionary("fuzz_image_jpeg", [b"\xff\xd8", b"\xff\xd9", b"\xff\xc0", b"\xff\xc2", b"\xff\xc4", b"\xff\xdb",
                                   b"\xff\xda", b"\xff\xdd", b"\xff\xe1", b"\xff\xee", b"Exif\0\0", b"Adobe",
                                   b"http://ns.adobe.com/xap/1.0/\0", b"tiff:Orientation="])
    dictionary("fuzz_image_png", ["IHDR", "PLTE", "IDAT", "IEND", "tRNS", "eXIf", "iTXt", "zTXt", "tEXt", "gAMA",
                                  "sRGB", "iCCP", "XML:com.adobe.xmp", b"\x00\x00\x00\x0d"])
    dictionary("fuzz_image_webp", ["RIFF", "WEBP", "VP8 ", "VP8L", "VP8X", "ALPH", "ANIM", "ANMF", "EXIF", "XMP ",
                                   "ICCP", b"\x9d\x01\x2a", b"\x2f"])
    dictionary("fuzz_image_ppm", ["P5", "P6", "#", "\n", "255", "65535", "256", " "])
    dictionary("fuzz_exif", [b"Exif\0\0", b"II*\0", b"MM\0*", b"\x12\x01", b"\x01\x12", b"\x69\x87",
                             "tiff:Orientation", '="', ">"])


def binary_seeds() -> None:
    rng = np.random.default_rng(3)
    for i, n in enumerate((16, 64, 256, 1024)):
        put("fuzz_npy", f"random_{i}", rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        put("fuzz_qnn_binary_info", f"random_{i}", rng.integers(0, 256, n, dtype=np.uint8).tobytes())


def main() -> None:
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    for f in HERE.glob("*.dict"):
        f.unlink()
    safetensors_seeds()
    manifest_seeds()
    config_seeds()
    tokenizer_seeds()
    chat_seeds()
    serve_seeds()
    image_seeds()
    binary_seeds()
    total = sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file())
    print(f"make_seeds: {sum(1 for f in CORPUS.rglob('*') if f.is_file())} seeds, {total} bytes in {CORPUS}")


if __name__ == "__main__":
    main()
