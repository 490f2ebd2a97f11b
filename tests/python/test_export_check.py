"""A bundle's checksums (docs/bundle.md, "Checksums") as a user checks them: `qhx_export --check
BUNDLE` and `qhx_doctor BUNDLE` pass a freshly exported bundle and fail, naming the file, on a
flipped byte, a truncated file and a missing one; a bundle exported before checksums were
recorded is said to be one. Also the OUT values qhx_export refuses before writing anything.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import bundle_manifest, tool_path
from export_util import CHECKPOINT, check, copy_bundle, export, leftovers, tree


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("exported") / "bundle"
    p = export(d)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return d


@pytest.fixture
def bundle(exported, tmp_path) -> Path:
    d = tmp_path / "bundle"
    copy_bundle(exported, d)
    return d


def doctor(path: Path) -> tuple[int, dict]:
    p = subprocess.run([str(tool_path("qhx_doctor")), "--json", str(path)], capture_output=True, timeout=300,
                       check=False)
    return p.returncode, json.loads(p.stdout)


def test_a_fresh_bundle_lists_every_file_and_passes(bundle):
    listed = json.loads((bundle / "checksums.json").read_text())
    assert listed["qhexrt_checksums"] == 1 and listed["algorithm"] == "xxh3-128"
    on_disk = sorted(p.name for p in bundle.iterdir() if p.name != "checksums.json")
    assert sorted(listed["files"]) == on_disk
    for name, entry in listed["files"].items():
        assert entry["bytes"] == (bundle / name).stat().st_size and len(entry["xxh3_128"]) == 32, name
    p = check(bundle)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert f"{len(on_disk)} files match" in p.stdout.decode(), p.stdout.decode()
    status, report = doctor(bundle)
    assert status == 0, report["problems"]
    assert report["bundle_files"]["files"] == len(on_disk) and report["bundle_files"]["problems"] == []


def flip_a_byte(f: Path) -> None:
    b = bytearray(f.read_bytes())
    b[len(b) // 2] ^= 0x01
    f.write_bytes(bytes(b))


def truncate(f: Path) -> None:
    f.write_bytes(f.read_bytes()[:-1])


DAMAGE = {"flipped": (flip_a_byte, "XXH3-128 differs"), "truncated": (truncate, "bytes, checksums.json records"),
          "missing": (Path.unlink, "missing")}


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("name", ["llm_shared_512.bin", "text manifest"])
def test_damage_fails_the_check_naming_the_file(bundle, name, damage):
    do, says = DAMAGE[damage]
    if name == "text manifest":
        name = bundle_manifest(bundle, "text").name
    target = bundle_manifest(bundle, "vlm")
    do(bundle / name)
    p = check(bundle)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1 and str(bundle / name) in err and says in err, err
    # The doctor, pointed at the folder or at a manifest in it, says the same (the manifest
    # itself may be what is missing: then the folder).
    status, report = doctor(target)
    assert status == 1
    assert any(str(bundle / name) in prob and says in prob for prob in report["problems"]), report["problems"]


def test_a_bundle_from_before_checksums_is_named_so(bundle):
    (bundle / "checksums.json").unlink()
    p = check(bundle)
    assert p.returncode == 1 and "no checksums.json" in p.stderr.decode(), p.stderr.decode()
    status, report = doctor(bundle)
    assert status == 0 and any("no checksums.json" in w for w in report["warnings"]), report
    # It still loads, and a new export replaces it.
    p = export(bundle)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert check(bundle).returncode == 0


def test_unlisted_files_are_reported_not_failed(bundle):
    (bundle / "notes.txt").write_text("mine")
    p = check(bundle)
    assert p.returncode == 0 and "notes.txt" in p.stdout.decode(), p.stdout.decode()


def refused(out: Path, *fragments: str, hf: Path = CHECKPOINT) -> None:
    p = export(out, hf=hf)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1 and all(f in err for f in fragments), err


def test_dangerous_out_values_are_refused_and_left_alone(bundle, tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    refused(f, str(f), "not a folder")
    assert f.read_text() == "x"
    ck = tmp_path / "models" / "checkpoint"  # a copy: were the refusal broken, it would be replaced
    copy_bundle(CHECKPOINT, ck)
    ck_files = tree(ck)
    refused(ck, "is the checkpoint folder", hf=ck)
    refused(ck.parent, "holds the checkpoint", hf=ck)
    assert tree(ck) == ck_files
    (bundle / "my-notes.txt").write_text("mine")  # replacing the bundle would delete it
    before = tree(bundle)
    refused(bundle, "my-notes.txt", "would be lost")
    assert tree(bundle) == before and leftovers(bundle) == []
    ro = tmp_path / "read-only"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        p = export(ro / "bundle")
        if p.returncode == 0:  # root writes anywhere: nothing to refuse
            assert check(ro / "bundle").returncode == 0
        else:
            err = p.stderr.decode(errors="replace")
            assert f"cannot write in {ro}" in err and "Permission denied" in err, err
    finally:
        ro.chmod(0o755)
