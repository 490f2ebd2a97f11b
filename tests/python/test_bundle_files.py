"""QHexRT bundle files as the Python safetensors library sees them.

build/bin/bundle_probe (QHX_BIN) writes a small bundle with every weight format
(see tests/cpp/bundle_probe.cpp for its contents); safetensors.safe_open must
open it, and every tensor must have the name, dtype, shape and values the
storage contract in docs/bundle.md ("Weight formats") prescribes: the quantized
bytes are recomputed here in numpy from the same source values and must match
exactly. Every tensor's data must start at a multiple of 64 bytes in the file.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from conftest import run_tool, stderr_text, tool_path

W8_TIES = [127, 2.5, 3.5, -2.5, -3.5, 0.5, -0.5, 1.5, -127, 126.5, -126.5]
W4_TIES = [1, -2, 7, -7, 2.5, 3.5, -2.5, -3.5, 0.5, -0.5, 6.5, -6.5, 1.5, -1.5, 0, 3]
W4_FILL = [7, -7, 6, -6, 5, -5, 4, -4]


def source(rows: int, cols: int) -> np.ndarray:
    """bundle_probe's source values: float(((r*31 + c*17) % 97) - 48) / float(7 + r), in f32."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return (((r * 31 + c * 17) % 97) - 48).astype(np.float32) / (7 + r).astype(np.float32)


def w8_source() -> np.ndarray:
    w = source(5, 11)
    w[0] = np.array(W8_TIES, dtype=np.float32)
    w[1] = 0
    return w


def w4_source() -> np.ndarray:
    w = source(4, 128)
    w[0, :64] = np.array(W4_FILL * 8, dtype=np.float32)
    w[0, :16] = np.array(W4_TIES, dtype=np.float32)
    w[1] = 0
    return w


def to_bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to the nearest bf16 (ties to even), as torch rounds it, back in f32."""
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16).to(torch.float32).numpy()


def symmetric(w: np.ndarray, qmax: int, qmin: int, bf16_scale: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Scales and q over the last axis per the contract: scale = max|w| / qmax (w4: rounded to
    bf16; 1 if that is 0 or, w4, below 2^-126), q = clamp(round_half_even(w / scale), qmin, qmax);
    all arithmetic in f32."""
    scale = np.max(np.abs(w), axis=-1) / np.float32(qmax)
    if bf16_scale:
        scale = to_bf16(scale)
        scale = np.where(scale < np.float32(2.0**-126), np.float32(1), scale)
    scale = np.where(scale == 0, np.float32(1), scale).astype(np.float32)
    q = np.clip(np.rint(w / scale[..., None]), qmin, qmax)
    return scale, q.astype(np.int8)


def expect_w8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return symmetric(w, 127, -127)


def w4_q(w: np.ndarray, scale: np.float32) -> np.ndarray:
    return np.clip(np.rint(w / scale), -8, 7)  # f32 division, ties to even


def expect_w4(w: np.ndarray, block: int = 64) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(packed U8 [rows, cols/2], scales [rows, cols/32], q [rows, cols], channel scales [rows])
    per docs/bundle.md "w4": per row s = max|w| / 112 rounded up to 4 significant bits, per
    block the multiplier m in 16..1 of least squared error (the first of equals from 16 down),
    scale s * m; a row whose s is below 2^-126 is zeros with scales 1."""
    rows, cols = w.shape
    q = np.zeros((rows, cols), np.int8)
    scales = np.ones((rows, cols // 32), np.float32)
    channel = np.ones(rows, np.float32)
    for r in range(rows):
        t = np.max(np.abs(w[r])) / np.float32(112)
        mant, e = np.frexp(t)
        s = np.float32(np.ldexp(np.ceil(mant * 16), e - 4))
        if not s >= np.float32(2.0**-126):
            continue
        channel[r] = s
        for b in range(cols // block):
            wb = w[r, b * block:(b + 1) * block]
            errors = [(np.sum((wb.astype(np.float64) - w4_q(wb, np.float32(s * m)) * np.float64(s * m)) ** 2), -m)
                      for m in range(16, 0, -1)]
            m = -min(errors)[1]
            scale = np.float32(s * m)
            q[r, b * block:(b + 1) * block] = w4_q(wb, scale)
            scales[r, b * block // 32:(b + 1) * block // 32] = scale
    nib = q.astype(np.uint8) & 0xF
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    return packed, scales, q, channel


def bf16(x: np.ndarray) -> np.ndarray:
    """f32 values rounded to bf16 (ties to even), as f32."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


def expect_w4_free(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(packed, scales [rows, cols/32], q) per docs/bundle.md "w4", free scales: per group of 32 the
    candidate ±bf16(|loud| / t), t = 6.5, 6.6, ..., 8.0 (+ first), of least squared error (the
    first of equals); a zero group gets scale 1."""
    rows, cols = w.shape
    q = np.zeros((rows, cols), np.int8)
    scales = np.ones((rows, cols // 32), np.float32)
    for r in range(rows):
        for g in range(cols // 32):
            wg = w[r, 32 * g:32 * g + 32]
            loud = np.float32(np.max(np.abs(wg)))
            if not loud >= np.float32(2.0**-126):
                continue
            best = None
            for sign in (np.float32(1), np.float32(-1)):
                for k in range(16):
                    s = sign * bf16(loud / (np.float32(6.5) + np.float32(0.1) * np.float32(k)))
                    e = np.sum((wg.astype(np.float64) - w4_q(wg, s) * np.float64(s)) ** 2)
                    if best is None or e < best[0]:
                        best = (e, s)
            scales[r, g] = best[1]
            q[r, 32 * g:32 * g + 32] = w4_q(wg, best[1])
    nib = q.astype(np.uint8) & 0xF
    return (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8), scales, q


def unpack_w4(packed: np.ndarray) -> np.ndarray:
    lo = (packed & 0xF).astype(np.int8)
    hi = (packed >> 4).astype(np.int8)
    out = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.int8)
    out[:, 0::2] = np.where(lo >= 8, lo - 16, lo)
    out[:, 1::2] = np.where(hi >= 8, hi - 16, hi)
    return out


def assert_within_half_step(w: np.ndarray, deq: np.ndarray, step: np.ndarray) -> None:
    err = np.abs(w.astype(np.float64) - deq.astype(np.float64))
    assert np.all(err <= step.astype(np.float64) / 2 * (1 + 1e-6))


# name -> (dtype, shape) as safetensors reports them
EXPECTED = {
    "probe.f32.weight": (np.float32, (3, 5)),
    "probe.f16.weight": (np.float16, (4, 6)),
    "probe.w8.weight": (np.int8, (5, 11)),
    "probe.w8.weight.scale": (np.float32, (5,)),
    "probe.w4.weight": (np.uint8, (4, 64)),
    "probe.w4.weight.scale": (np.float32, (4, 4)),
    "probe.w4.weight.channel_scale": (np.float32, (4,)),
    "probe.w4_fallback.weight": (np.int8, (3, 96)),
    "probe.w4_fallback.weight.scale": (np.float32, (3,)),
    "probe.norm.weight": (np.float32, (7,)),
    "probe.bias": (np.float32, (3,)),
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tool_path("bundle_probe")
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} not built: cmake --build build --target bundle_probe (or set QHX_BIN)")
    out = tmp_path_factory.mktemp("bundle") / "probe.bin"
    proc = run_tool("bundle_probe", [str(out), str(out.with_name("panels.bin")), str(out.with_name("w4free.bin"))], b"",
                    timeout=60)
    assert proc.returncode == 0, stderr_text(proc)
    return out


@pytest.fixture(scope="module")
def panels_file(bundle: Path) -> Path:
    return bundle.with_name("panels.bin")


@pytest.fixture(scope="module")
def tensors(bundle: Path) -> dict[str, np.ndarray]:
    with safe_open(str(bundle), "np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def test_metadata(bundle: Path) -> None:
    with safe_open(str(bundle), "np") as f:
        assert f.metadata() == {"qhexrt_bundle": "1", "role": "probe", "weights": "w4"}


def test_panel_form(panels_file: Path) -> None:
    """docs/bundle.md "Panel form": the w8 matrix in 16-row panels of 4-column groups,
    q[r, c] at [r // 16, c // 4, r % 16, c % 4], zeros past the edges, padded row sums and
    scales, the logical shape; the file is format version 2."""
    with safe_open(str(panels_file), "np") as f:
        assert f.metadata() == {"qhexrt_bundle": "2", "role": "probe", "weights": "w8"}
        t = {k: f.get_tensor(k) for k in f.keys() if not k.startswith("__pad.")}
    name = "probe.panels.weight"
    assert set(t) == {name + s for s in (".panels", ".row_sums", ".scale", ".shape")}
    w = source(21, 11)
    w[0] = np.array(W8_TIES, dtype=np.float32)
    w[1] = 0
    scale, q = expect_w8(w)
    assert t[name + ".shape"].dtype == np.int64 and t[name + ".shape"].tolist() == [21, 11]
    panels = t[name + ".panels"]
    assert panels.dtype == np.int8 and panels.shape == (2, 3, 16, 4)
    padded = np.zeros((32, 12), dtype=np.int8)
    padded[:21, :11] = q
    want = padded.reshape(2, 16, 3, 4).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(panels, want)
    sums = t[name + ".row_sums"]
    assert sums.dtype == np.int32 and sums.tolist() == padded.astype(np.int32).sum(axis=1).tolist()
    sc = t[name + ".scale"]
    assert sc.dtype == np.float32 and sc.shape == (32,)
    np.testing.assert_array_equal(sc[:21], scale)
    assert not sc[21:].any()


def test_names_dtypes_shapes(tensors: dict[str, np.ndarray]) -> None:
    names = {k for k in tensors if not k.startswith("__pad.")}
    assert names == set(EXPECTED)
    for name, (dtype, shape) in EXPECTED.items():
        assert tensors[name].dtype == dtype, name
        assert tensors[name].shape == shape, name
    for k, v in tensors.items():
        if k.startswith("__pad."):
            assert v.dtype == np.uint8 and v.ndim == 1 and 0 < v.size < 64 and not v.any(), k


def test_every_tensor_is_64_byte_aligned_in_the_file(bundle: Path) -> None:
    data = bundle.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    start = 8 + n
    assert start % 64 == 0
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        spans.append((begin, end))
        if not name.startswith("__pad."):
            assert (start + begin) % 64 == 0, (name, start + begin)
    spans.sort()
    assert spans[0][0] == 0 and spans[-1][1] == len(data) - start
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # no unlisted gaps


def test_f32_and_vectors(tensors: dict[str, np.ndarray]) -> None:
    np.testing.assert_array_equal(tensors["probe.f32.weight"], source(3, 5))
    np.testing.assert_array_equal(tensors["probe.norm.weight"], np.arange(7, dtype=np.float32) / 4 - 1)
    np.testing.assert_array_equal(tensors["probe.bias"], np.array([0.5, -1.5, 3.0], dtype=np.float32))


def test_f16_rounds_to_nearest_even(tensors: dict[str, np.ndarray]) -> None:
    want = source(4, 6).astype(np.float16)  # numpy's conversion rounds to nearest even
    assert tensors["probe.f16.weight"].view(np.uint16).tolist() == want.view(np.uint16).tolist()


@pytest.mark.parametrize("name,src", [("probe.w8.weight", w8_source), ("probe.w4_fallback.weight",
                                                                        lambda: source(3, 96))])
def test_w8(tensors: dict[str, np.ndarray], name: str, src) -> None:
    w = src()
    scale, q = expect_w8(w)
    np.testing.assert_array_equal(tensors[name + ".scale"], scale)
    np.testing.assert_array_equal(tensors[name], q)
    deq = tensors[name].astype(np.float32) * tensors[name + ".scale"][:, None]
    assert_within_half_step(w, deq, np.broadcast_to(scale[:, None], w.shape))


def test_w8_ties_and_zero_row(tensors: dict[str, np.ndarray]) -> None:
    q, scale = tensors["probe.w8.weight"], tensors["probe.w8.weight.scale"]
    assert scale[0] == 1 and scale[1] == 1
    assert q[0].tolist() == [127, 2, 4, -2, -4, 0, 0, 2, -127, 126, -126]
    assert not q[1].any()


def test_w4(tensors: dict[str, np.ndarray]) -> None:
    w = w4_source()
    packed, scale, q, channel = expect_w4(w)
    np.testing.assert_array_equal(tensors["probe.w4.weight.scale"], scale)
    np.testing.assert_array_equal(tensors["probe.w4.weight.channel_scale"], channel)
    np.testing.assert_array_equal(tensors["probe.w4.weight"], packed)
    stored_q = unpack_w4(tensors["probe.w4.weight"])
    np.testing.assert_array_equal(stored_q, q)
    m = tensors["probe.w4.weight.scale"] / channel[:, None]  # LPBQ: integer multipliers in 1..16
    assert np.all(m == np.round(m)) and m.min() >= 1 and m.max() <= 16
    assert np.all(scale[:, 0::2] == scale[:, 1::2])  # one scale per block of 64


def test_w4_free_scales(bundle: Path) -> None:
    """A w4 matrix with free scales: each group's bf16 scale of least squared error, no channel scale."""
    with safe_open(str(bundle.with_name("w4free.bin")), "np") as f:
        assert f.metadata() == {"qhexrt_bundle": "1", "role": "probe", "weights": "w4", "w4_block": "32",
                                "w4_scales": "free"}
        t = {k: f.get_tensor(k) for k in f.keys()}
    assert sorted(t) == ["probe.w4free.weight", "probe.w4free.weight.scale"]
    w = w4_source()
    packed, scale, q = expect_w4_free(w)
    np.testing.assert_array_equal(t["probe.w4free.weight.scale"], scale)
    np.testing.assert_array_equal(t["probe.w4free.weight"], packed)
    assert np.all(bf16(scale) == scale)
    assert (scale < 0).any() and (scale > 0).any(), "both signs are taken in this matrix"
    # Never worse than the LPBQ scales of the same rows, group for group in sum.
    _, lpbq_scale, lpbq_q, _ = expect_w4(w)
    err = lambda qq, ss: np.sum((w.astype(np.float64) - qq * np.repeat(ss, 32, axis=1).astype(np.float64)) ** 2)
    assert err(q, scale) <= err(lpbq_q, lpbq_scale)


def test_w4_ties_nibble_order_and_zero_rows(tensors: dict[str, np.ndarray]) -> None:
    packed, scale = tensors["probe.w4.weight"], tensors["probe.w4.weight.scale"]
    assert tensors["probe.w4.weight.channel_scale"][0] == 2.0**-4
    assert scale[0, 0] == 1 and scale[1].tolist() == [1, 1, 1, 1]
    assert unpack_w4(packed)[0, :16].tolist() == [1, -2, 7, -7, 2, 4, -2, -4, 0, 0, 6, -6, 2, -2, 0, 3]
    assert packed[0, 0] == 0xE1  # column 0 (1) in the low nibble, column 1 (-2) in the high one
    assert packed[0, 1] == 0x97  # 7, -7
    assert not packed[1].any()


def test_probe_reports_unwritable_path(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "probe.bin"
    proc = run_tool("bundle_probe", [str(target)], b"", timeout=60)
    assert proc.returncode == 1
    assert str(target) in stderr_text(proc)
    assert not target.exists()
