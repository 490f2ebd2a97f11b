"""Shared helpers for the Python-side tests: where things live, running the tools.

Environment (the same names as scripts/env.sh and tests/CMakeLists.txt):
  QHX_TOKENIZER_JSON  the real tokenizer.json (default $QHX_CACHE/tokenizer/tokenizer.json,
                      QHX_CACHE defaulting to ~/.cache/qhexrt)
  QHX_BIN             directory of the built tools (default <repo>/build/bin)
  QHX_TEST_POISON_STATE  set to 1 here unless given: the tools fill new session state with
                      NaN bytes, so a graph reading state it never wrote changes the output
                      (src/testing/test_hooks_env.cpp; the shipped libraries ignore it)
A missing tool or tokenizer.json fails the tests (run scripts/setup.sh and build first):
a test that cannot run has checked nothing, so it never skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS_PY_DIR = Path(__file__).resolve().parent
if str(TESTS_PY_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_PY_DIR))

TOOL_TIMEOUT_S = 600
os.environ.setdefault("QHX_TEST_POISON_STATE", "1")  # inherited by every tool and server the tests start


def cache_dir() -> Path:
    return Path(os.environ.get("QHX_CACHE", str(Path.home() / ".cache" / "qhexrt")))


def tokenizer_json_path() -> Path:
    env = os.environ.get("QHX_TOKENIZER_JSON")
    return Path(env) if env else cache_dir() / "tokenizer" / "tokenizer.json"


def bin_dir() -> Path:
    env = os.environ.get("QHX_BIN")
    return Path(env) if env else REPO_ROOT / "build" / "bin"


def tool_path(name: str) -> Path:
    return bin_dir() / name


def _missing(what: str) -> None:
    pytest.fail(what + " (run scripts/setup.sh, then scripts/build.sh)")


def run_tool(name: str, args: list[str], stdin: bytes, timeout: float = TOOL_TIMEOUT_S
             ) -> subprocess.CompletedProcess[bytes]:
    """Runs build/bin/<name> ARGS with `stdin`; stdout and stderr are captured as bytes."""
    return subprocess.run([str(tool_path(name)), *args], input=stdin, capture_output=True,
                          timeout=timeout, check=False)


def model_name(checkpoint: Path) -> str:
    """What qhx_export names a bundle of `checkpoint` after (docs/bundle.md): "qwen3vl-" and the
    parameter count of its safetensors headers, rounded down in the largest of k, m, b, t."""
    import struct
    n = 0
    for f in checkpoint.glob("*.safetensors"):
        with f.open("rb") as fh:
            header = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        for name, t in header.items():
            if name != "__metadata__":
                count = 1
                for d in t["shape"]:
                    count *= d
                n += count
    for unit, letter in ((10**12, "t"), (10**9, "b"), (10**6, "m"), (10**3, "k")):
        if n >= unit:
            return f"qwen3vl-{n // unit}{letter}"
    return f"qwen3vl-{n}"


def bundle_manifest(bundle: Path, kind: str) -> Path:
    """The bundle's one manifest of `kind` ("vlm" or "text"): qhx_export names them after the
    model (docs/bundle.md), "<model>-<kind>-<image size>.json"."""
    found = sorted(bundle.glob(f"*-{kind}-*.json"))
    assert len(found) == 1, f"{bundle}: want one {kind} manifest, found {[p.name for p in found]}"
    return found[0]


def split_lines(out: bytes) -> list[str]:
    """Output lines, split on b'\\n' only (str.splitlines would also split on U+2028,
    U+0085, \\x1c.. inside raw UTF-8 JSON strings). A final newline ends the last line."""
    if not out:
        return []
    parts = out.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8") for p in parts]


def parse_json_lines(out: bytes) -> list[object]:
    return [json.loads(line) for line in split_lines(out)]


def jsonl(values: list[object], ascii_every_other: bool = False) -> bytes:
    """JSON Lines for `values`. With ascii_every_other, odd lines use \\uXXXX escapes
    (surrogate pairs for non-BMP) and even lines raw UTF-8, to exercise both."""
    lines = []
    for i, v in enumerate(values):
        lines.append(json.dumps(v, ensure_ascii=ascii_every_other and i % 2 == 1,
                                separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""


def stderr_text(proc: subprocess.CompletedProcess[bytes]) -> str:
    return proc.stderr.decode("utf-8", errors="replace")


@pytest.fixture(scope="session")
def tokenizer_json() -> Path:
    path = tokenizer_json_path()
    if not path.is_file():
        _missing(f"{path} not found: run scripts/fetch_tokenizer.sh (or set QHX_TOKENIZER_JSON)")
    return path


@pytest.fixture(scope="session")
def hf_tokenizer(tokenizer_json: Path):
    import tokenizers
    return tokenizers.Tokenizer.from_file(str(tokenizer_json))


@pytest.fixture(scope="session")
def qhx_tokenize() -> Path:
    path = tool_path("qhx_tokenize")
    if not os.access(path, os.X_OK):
        _missing(f"{path} not built: cmake --build build --target qhx_tokenize (or set QHX_BIN)")
    return path


@pytest.fixture(scope="session")
def tagged_corpus() -> list[tuple[str, str]]:
    import tokenizer_corpus
    return tokenizer_corpus.build_tagged_corpus()


@pytest.fixture(scope="session")
def corpus(tagged_corpus: list[tuple[str, str]]) -> list[str]:
    return [s for _, s in tagged_corpus]


def rowwise_cosine(a, b):
    """Cosine similarity of each row of a and b (float64)."""
    import numpy as np
    a = a.reshape(a.shape[0], -1).astype(np.float64)
    b = b.reshape(b.shape[0], -1).astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def check_close(ours, ref, what: str, cosine_min: float, max_abs: float | None) -> None:
    """Asserts equal shapes, every row's cosine >= cosine_min and (if given) max |ours - ref| <= max_abs;
    prints the figures (pytest -s shows them)."""
    import numpy as np
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} vs {ref.shape}"
    cos = rowwise_cosine(ours, ref)
    err = float(np.abs(ours - ref).max())
    print(f"{what}: min cosine {cos.min():.8f}, max abs error {err:.3e}")
    assert cos.min() >= cosine_min, f"{what}: min cosine {cos.min()} at row {cos.argmin()}"
    if max_abs is not None:
        assert err <= max_abs, f"{what}: max abs error {err}"
