"""qhx::write_npy files as numpy sees them: build/bin/npy_probe (QHX_BIN) writes
them, numpy.load reads them back, and numpy.save of the same array must give
the very same bytes."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import run_tool, stderr_text, tool_path

SHAPES = {"3": (3,), "2x3": (2, 3), "0x4": (0, 4), "scalar": ()}


def _expected(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    k = np.arange(n, dtype=np.int64)
    values = k.astype(np.float32) * np.float32(0.5) - np.float32(1.0) if dtype == "f32" else k * 3 - 7
    return values.reshape(shape)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tool_path("npy_probe")
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} not built: cmake --build build --target npy_probe (or set QHX_BIN)")
    out = tmp_path_factory.mktemp("npy")
    proc = run_tool("npy_probe", [str(out)], b"", timeout=60)
    assert proc.returncode == 0, stderr_text(proc)
    return out


CASES = [("f32", s) for s in SHAPES] + [("i64", s) for s in SHAPES if s != "scalar"]


@pytest.mark.parametrize("dtype,shape", CASES)
def test_numpy_loads_our_file(written: Path, dtype: str, shape: str) -> None:
    want = _expected(dtype, SHAPES[shape])
    got = np.load(written / f"{dtype}_{shape}.npy", allow_pickle=False)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype,shape", CASES)
def test_bytes_equal_numpy_save(written: Path, dtype: str, shape: str) -> None:
    buf = io.BytesIO()
    np.save(buf, _expected(dtype, SHAPES[shape]))
    assert (written / f"{dtype}_{shape}.npy").read_bytes() == buf.getvalue()


def test_probe_reports_unwritable_dir(tmp_path: Path) -> None:
    proc = run_tool("npy_probe", [str(tmp_path / "missing")], b"", timeout=60)
    assert proc.returncode == 1
    assert "missing" in stderr_text(proc)
