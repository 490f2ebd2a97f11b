"""qhx_export killed with SIGKILL at any moment (docs/bundle.md, "How a bundle is written"), as a
user meets it: `qhx_export --hf tiny_a --out OUT --weights w8`, over a previous complete bundle
(an f16 one, so old and new differ in every weights file) and into an OUT that does not exist.

What must hold after the kill:
- replacing: OUT is byte for byte the previous bundle and still runs (qhx_generate), unless the
  kill came after the new bundle was in place, when OUT is the new bundle and passes --check;
- writing a new one: OUT does not exist, or is the complete new bundle; never a partial folder;
- either way a later export of the same OUT succeeds and removes what the killed one left.

The moments are the export's named pause points (its test hook QHX_EXPORT_TEST_PAUSE_AT), on
both publish paths (RENAME_EXCHANGE, and the two renames of file systems without it), plus kills
after plain delays spread over a measured run, and a SIGINT, which stops the export cleanly.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import bundle_manifest
from export_util import (check, copy_bundle, export, export_args, generate, kill, leftovers, start_paused, tree)

BEFORE_PUBLISH = ["staged", "writing", "written", "publish"]


@pytest.fixture(scope="module")
def old_bundle(tmp_path_factory) -> Path:
    """A complete f16 bundle: what OUT holds before the export that gets killed."""
    d = tmp_path_factory.mktemp("old") / "bundle"
    p = export(d, weights="f16")
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return d


def assert_new_bundle(out: Path) -> None:
    c = check(out)
    assert c.returncode == 0, c.stderr.decode(errors="replace")
    manifest = json.loads(bundle_manifest(out, "text").read_text())
    assert manifest["name"].endswith("-w8"), manifest["name"]


def assert_later_export_tidies(out: Path) -> None:
    p = export(out)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert leftovers(out) == [], leftovers(out)
    assert_new_bundle(out)
    g = generate(out)
    assert g.returncode == 0, g.stderr.decode(errors="replace")


@pytest.mark.parametrize("point", BEFORE_PUBLISH + ["swapped"])
@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_kill_while_replacing_a_bundle(old_bundle, tmp_path, point, exchange):
    out = tmp_path / "bundle"
    copy_bundle(old_bundle, out)
    before = tree(out)
    env = {} if exchange else {"QHX_EXPORT_TEST_NO_EXCHANGE": "1"}
    kill(start_paused(out, point, env=env))
    if point in BEFORE_PUBLISH:
        assert tree(out) == before, f"killed at {point}: OUT changed"
        g = generate(out)
        assert g.returncode == 0, g.stderr.decode(errors="replace")
    else:
        assert_new_bundle(out)
    # One hidden folder beside OUT (the staging one, or the previous bundle under a hidden name),
    # which the loader never opens.
    assert len(leftovers(out)) == 1, leftovers(out)
    assert_later_export_tidies(out)


def test_kill_between_the_two_renames_strands_the_bundle_where_it_is_found_again(old_bundle, tmp_path):
    out = tmp_path / "bundle"
    copy_bundle(old_bundle, out)
    before = tree(out)
    kill(start_paused(out, "moved-aside", env={"QHX_EXPORT_TEST_NO_EXCHANGE": "1"}))
    # The one window of the two-rename path: OUT is missing, its bundle intact beside it.
    assert not out.exists()
    [backup] = [out.parent / n for n in leftovers(out) if ".old-" in n]
    assert tree(backup) == before
    for proc in (generate(out), check(out)):  # the loader and --check say where it is
        err = proc.stderr.decode(errors="replace")
        assert proc.returncode != 0 and str(backup) in err and "interrupted qhx_export" in err, err
    # The next export puts it back before anything else: killed at once, OUT is the old bundle again.
    kill(start_paused(out, "staged"))
    assert tree(out) == before
    assert_later_export_tidies(out)


@pytest.mark.parametrize("point", BEFORE_PUBLISH + ["swapped"])
def test_kill_while_writing_a_new_bundle(tmp_path, point):
    out = tmp_path / "bundle"
    kill(start_paused(out, point))
    if point in BEFORE_PUBLISH:
        assert not out.exists(), f"killed at {point}: {sorted(p.name for p in out.iterdir())}"
        assert len(leftovers(out)) == 1, leftovers(out)
    else:
        assert_new_bundle(out)
        assert leftovers(out) == []
    assert_later_export_tidies(out)


def test_kill_after_delays_spread_over_the_run(old_bundle, tmp_path):
    """No hook: SIGKILL after 5..95% of a measured run. OUT is the old bundle or the new one."""
    out = tmp_path / "bundle"
    t0 = time.monotonic()
    p = export(tmp_path / "timing")
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    run = time.monotonic() - t0
    old = tree(old_bundle)
    for fraction in (0.05, 0.25, 0.5, 0.75, 0.95):
        if out.exists():
            subprocess.run(["rm", "-rf", str(out)], check=True)
        copy_bundle(old_bundle, out)
        proc = subprocess.Popen(export_args(out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(run * fraction)
        kill(proc)
        if tree(out) != old:
            assert_new_bundle(out)
    assert_later_export_tidies(out)


def test_sigint_stops_the_export_and_removes_its_staging_folder(old_bundle, tmp_path):
    out = tmp_path / "bundle"
    copy_bundle(old_bundle, out)
    before = tree(out)
    proc = start_paused(out, "writing")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    text = err.decode(errors="replace")
    assert proc.returncode == 1, text
    assert "interrupted" in text and f"{out} is as it was" in text, text
    assert tree(out) == before
    assert leftovers(out) == []
