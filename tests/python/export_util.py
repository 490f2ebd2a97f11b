"""Helpers for the tests of qhx_export's publishing (test_export_kill.py, test_export_disk_full.py,
test_export_check.py): running it as a user does, stopping it at a named moment through its test
hook (QHX_EXPORT_TEST_PAUSE_AT, docs/bundle.md "Test hooks"), and looking at what it left."""

from __future__ import annotations

import hashlib
import os
import selectors
import shutil
import subprocess
import time
from pathlib import Path

from conftest import cache_dir, tool_path

CHECKPOINT = cache_dir() / "reference" / "tiny_a" / "checkpoint"
EXPORT_TIMEOUT = 300


def export_args(out: Path, weights: str = "w8", hf: Path = CHECKPOINT) -> list[str]:
    return [str(tool_path("qhx_export")), "--hf", str(hf), "--out", str(out), "--weights", weights, "-q"]


def export(out: Path, weights: str = "w8", env: dict | None = None,
           hf: Path = CHECKPOINT) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(export_args(out, weights, hf), capture_output=True, timeout=EXPORT_TIMEOUT, check=False,
                          env={**os.environ, **(env or {})})


def check(bundle: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(tool_path("qhx_export")), "--check", str(bundle)], capture_output=True,
                          timeout=EXPORT_TIMEOUT, check=False)


def generate(bundle: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(tool_path("qhx_generate")), "-m", str(bundle), "-p", "Hi", "-n", "2", "--temp", "0"],
                          capture_output=True, timeout=EXPORT_TIMEOUT, check=False)


def tree(d: Path) -> dict[str, str]:
    """Every file under d (hidden ones too), relative name -> SHA-256."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def leftovers(out: Path) -> list[str]:
    """What exports of `out` left beside it: its hidden staging and backup folders."""
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def copy_bundle(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True)


def start_paused(out: Path, point: str, weights: str = "w8", env: dict | None = None,
                 timeout: float = EXPORT_TIMEOUT) -> subprocess.Popen[bytes]:
    """qhx_export started with its pause hook at `point`; returns once it waits there."""
    proc = subprocess.Popen(export_args(out, weights), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {}), "QHX_EXPORT_TEST_PAUSE_AT": point})
    want = f"qhx_export: paused at {point}".encode()
    seen = b""
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while want not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            proc.kill()
            raise AssertionError(f"qhx_export never reached {point!r}: {seen.decode(errors='replace')}")
        chunk = os.read(proc.stderr.fileno(), 65536)
        if not chunk:
            proc.wait()
            raise AssertionError(f"qhx_export ended (status {proc.returncode}) before {point!r}: "
                                 f"{seen.decode(errors='replace')}")
        seen += chunk
    sel.close()
    return proc


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()  # SIGKILL: no handler, no cleanup
    proc.wait(timeout=60)
    proc.stderr.close()


def with_activations(manifest: Path, activations: str, out: Path) -> Path:
    """A copy of `manifest` at `out` with every graph's "activations" set (e.g. "f32")."""
    import json
    m = json.loads(manifest.read_text())
    for g in m["graphs"].values():
        if "activations" in g:
            g["activations"] = activations
    out.write_text(json.dumps(m))
    return out
