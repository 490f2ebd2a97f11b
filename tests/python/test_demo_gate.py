"""scripts/demo.sh on a checkpoint whose w8 bundle fails the export gate (issue 47, part 4): the
demo says by how much and which command to run next, publishes nothing, and that command runs to
its caption. The checkpoint: the planted-outlier recipe (tests/reference/make_outlier_checkpoint.py),
whose int8 activations cannot hold its outlier channels."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
import make_outlier_checkpoint  # noqa: E402


def demo(args: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QHX_DEMO_BUNDLES": str(cache)}
    return subprocess.run(["bash", "scripts/demo.sh", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=900, env=env)


def test_a_refused_bundle_names_the_next_command_and_it_works(tmp_path):
    ckpt = make_outlier_checkpoint.ensure_outlier_reference(log=lambda *a: None) / "checkpoint"
    first = demo([str(ckpt)], tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "fails the export gate" in first.stderr
    assert "verify text" in first.stdout and "(bound 0.99900)" in first.stdout
    m = re.search(r"next: bash scripts/demo\.sh (.+)$", first.stdout, re.M)
    assert m, first.stdout
    bundle = tmp_path / f"{ckpt.name}-w8"
    assert not bundle.exists(), "the refused bundle was published"

    args = shlex.split(m.group(1))
    assert args[0] == str(ckpt) and "--weights" in args
    second = demo(args, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "verify: passed" in second.stdout
    caption = second.stdout.split("== caption assets/sample.png", 1)[1]
    assert re.search(r"\S", caption.splitlines()[1]), "no caption printed"
