"""The w4 export's measured rule for the decoder matrix kinds it keeps in w8 (docs/bundle.md,
"w4"): the measurement is printed, the kinds asked for (or found over the rule's bound) are
written in w8, the rest in 4 bits, and a bad list is refused naming the kind."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

from conftest import cache_dir, tool_path

KINDS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def export(tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool_path("qhx_export")), "--hf", str(cache_dir() / "reference" / "tiny_a" / "checkpoint"),
                           "--out", str(tmp), "--weights", "w4", "-q", *extra], capture_output=True, text=True,
                          timeout=300, check=False)


def kinds_by_dtype(bundle: Path) -> dict[str, set[str]]:
    """Kind -> the dtypes its layers' matrices are stored in (I8 for w8, whether row-major or panels)."""
    with open(next(bundle.glob("llm_shared_*.bin")), "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    out: dict[str, set[str]] = {k: set() for k in KINDS}
    for name, meta in header.items():
        for k in KINDS:
            if f".{k}.weight" in name and (name.endswith(".weight") or name.endswith(".panels")):
                out[k].add(meta["dtype"])
    return out


def test_auto_measures_every_kind_and_keeps_none_of_uniform_random_weights(tmp_path):
    p = export(tmp_path / "b")
    assert p.returncode == 0, p.stderr
    line = next(l for l in p.stdout.splitlines() if l.startswith("w4 relative error by matrix kind"))
    errors = {k: float(line.split(f" {k} ")[1].split()[0].rstrip(";")) for k in KINDS}
    # 4-bit weights of a Gaussian: about a tenth of the weights' RMS, alike for every kind.
    assert all(0.05 < e < 0.15 for e in errors.values()), errors
    assert line.endswith("kept in w8 (error over 1.5 x the median " + line.split("median ")[1].split(")")[0] + "): none")
    assert all(d == {"U8"} for d in kinds_by_dtype(tmp_path / "b").values())


def test_kinds_asked_for_are_written_in_w8(tmp_path):
    p = export(tmp_path / "b", "--w4-keep-w8", "down_proj,v_proj")
    assert p.returncode == 0, p.stderr
    assert "kept in w8 (--w4-keep-w8 down_proj,v_proj): down_proj, v_proj" in p.stdout
    d = kinds_by_dtype(tmp_path / "b")
    assert d["down_proj"] == d["v_proj"] == {"I8"}
    assert all(d[k] == {"U8"} for k in KINDS if k not in ("down_proj", "v_proj")), d


def test_a_bad_kind_or_format_is_refused(tmp_path):
    p = export(tmp_path / "b", "--w4-keep-w8", "mlp")
    assert p.returncode == 1 and '"mlp" is not a decoder matrix kind' in p.stderr, p.stderr
    q = subprocess.run([str(tool_path("qhx_export")), "--hf", str(cache_dir() / "reference" / "tiny_a" / "checkpoint"),
                        "--out", str(tmp_path / "c"), "--weights", "w8", "--w4-keep-w8", "down_proj", "-q"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert q.returncode == 1 and "--w4-keep-w8 is for --weights w4" in q.stderr, q.stderr
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
