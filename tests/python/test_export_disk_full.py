"""qhx_export when the disk fills (docs/bundle.md, "How a bundle is written"): a file size limit
(`ulimit -f`, under which write() fails with EFBIG once qhx_export ignores SIGXFSZ) and a small
tmpfs (No space left on device), over a previous bundle and into a new OUT.

What must hold: a non-zero exit with an error naming the file being written and the OS reason,
no staging folder left beside OUT, and OUT as it was (the previous bundle byte for byte, or
nothing).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from export_util import copy_bundle, export, export_args, leftovers, tree

# The order qhx_export writes a w8 bundle's files in (src/export/export_bundle.cpp).
WRITE_ORDER = ["vis_native_512.bin", "llm_shared_512.bin", "lmhead_wqo.bin", "embed_f16.bin",
               "vis_patch_embed_f32.bin", "vis_patch_embed_bias_f32.bin", "vis_pos_embed_f32.bin",
               "tokenizer.json", "config.json"]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """A previous (f16) bundle to protect, and a w8 one for the sizes of what is written."""
    out = {}
    for weights in ("f16", "w8"):
        d = tmp_path_factory.mktemp(weights) / "bundle"
        p = export(d, weights=weights)
        assert p.returncode == 0, p.stderr.decode(errors="replace")
        out[weights] = d
    return out


def first_file_over(bundle: Path, limit: int) -> str:
    return next(f for f in WRITE_ORDER if (bundle / f).stat().st_size > limit)


def size_of(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def assert_clear_failure(proc: subprocess.CompletedProcess[bytes], reason: str, file: str, out: Path) -> None:
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1, err
    assert reason in err and file in err, f"the error should name {file} and say {reason!r}: {err}"
    assert f"{out} is as it was" in err, err
    assert leftovers(out) == [], leftovers(out)


@pytest.mark.parametrize("replacing", [True, False], ids=["replacing", "new"])
@pytest.mark.parametrize("which", ["first", "later"])
def test_a_file_size_limit_is_a_clear_error(bundles, tmp_path, replacing, which):
    w8 = bundles["w8"]
    # Under the first file written, or just over the first two (a later, larger one fails).
    first_two = max((w8 / f).stat().st_size for f in WRITE_ORDER[:2])
    limit_kib = 64 if which == "first" else first_two // 1024 + 1
    assert WRITE_ORDER.index(first_file_over(w8, limit_kib * 1024)) == (0 if which == "first" else 2)
    out = tmp_path / "bundle"
    if replacing:
        copy_bundle(bundles["f16"], out)
    before = tree(out) if replacing else None
    cmd = f"ulimit -f {limit_kib}; exec {shlex.join(export_args(out))}"
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, timeout=300, check=False)
    assert_clear_failure(proc, "File too large", first_file_over(w8, limit_kib * 1024), out)
    if replacing:
        assert tree(out) == before
    else:
        assert not out.exists()


def can_mount_tmpfs(tmp_path: Path) -> str:
    """'' when a tmpfs can be mounted in a private mount namespace here, else why not."""
    mnt = tmp_path / "probe"
    mnt.mkdir()
    p = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {shlex.quote(str(mnt))}"],
                       capture_output=True, timeout=60, check=False)
    return "" if p.returncode == 0 else p.stderr.decode(errors="replace").strip()


@pytest.mark.parametrize("replacing", [True, False], ids=["replacing", "new"])
def test_a_full_tmpfs_is_a_clear_error(bundles, tmp_path, replacing):
    why = can_mount_tmpfs(tmp_path)
    if why:
        pytest.skip(f"no tmpfs mount in a user namespace here ({why}); the ulimit -f tests cover a full disk")
    old, w8 = bundles["f16"], bundles["w8"]
    # Room for the previous bundle and half the new one: the staging folder runs out of space.
    size_kib = ((size_of(old) if replacing else 0) + size_of(w8) // 2) // 1024
    mnt, result = tmp_path / "mnt", tmp_path / "result"
    mnt.mkdir()
    out = mnt / "bundle"
    # The mount exists only inside the namespace: the script copies what the export left out of it.
    script = "\n".join([
        "set -e",
        f"mount -t tmpfs -o size={size_kib}k tmpfs {shlex.quote(str(mnt))}",
        f"cp -a {shlex.quote(str(old))} {shlex.quote(str(out))}" if replacing else "true",
        "set +e",
        f"{shlex.join(export_args(out))} 2> {shlex.quote(str(tmp_path / 'stderr'))}",
        f"echo $? > {shlex.quote(str(tmp_path / 'status'))}",
        f"cp -a {shlex.quote(str(mnt))}/. {shlex.quote(str(result))}",
    ])
    result.mkdir()
    p = subprocess.run(["unshare", "-rm", "bash", "-c", script], capture_output=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    proc = subprocess.CompletedProcess([], int((tmp_path / "status").read_text()), b"",
                                       (tmp_path / "stderr").read_bytes())
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1 and "No space left on device" in err and str(mnt) in err, err
    assert f"{out} is as it was" in err, err
    left = sorted(os.listdir(result))
    if replacing:
        assert left == ["bundle"], left
        assert tree(result / "bundle") == tree(old)
    else:
        assert left == [], left
