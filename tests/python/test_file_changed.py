"""A bundle file truncated under QHexRT, as a user meets it (docs/bundle.md, "Mapped files").

On a w8 bundle exported from the tiny_a checkpoint:
  - truncated before the model opens: qhx_generate exits non-zero naming the file;
  - truncated while qhx_serve has it open: the chat request gets a 500 with OpenAI's error JSON
    naming the file, the server stays up (/health 200), and the next request fails the same way;
The SIGBUS path in the middle of an answer is tests/cpp/test_file_changed.cpp (it needs a hook
between two tokens).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO_ROOT, tool_path
from serve_util import ServeProcess

sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
import build_all  # noqa: E402

TIMEOUT_S = 600
WEIGHTS = "llm_shared_512.bin"  # the language model's matrices
EMBED = "embed_f16.bin"         # the token embeddings, read in place at every token


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    assert build_all.ensure_reference("tiny_a", log=lambda *a: None)
    ckpt = build_all.reference_dir("tiny_a") / "checkpoint"
    dest = tmp_path_factory.mktemp("tiny_a_w8")
    proc = subprocess.run([str(tool_path("qhx_export")), "--hf", str(ckpt), "--out", str(dest), "--weights", "w8",
                           "--quiet"], capture_output=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    for name in (WEIGHTS, EMBED):
        assert (dest / name).is_file(), f"{dest}: no {name} (bundle file names changed?)"
    return dest


def copy_of(bundle: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "bundle"
    shutil.copytree(bundle, dest)
    return dest


def truncate_to_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def chat(url: str, text: str = "Say something.") -> tuple[int, dict]:
    body = json.dumps({"messages": [{"role": "user", "content": text}], "max_tokens": 4,
                       "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def health(url: str) -> int:
    with urllib.request.urlopen(url + "/health", timeout=30) as r:
        return r.status


def test_truncated_before_open_is_an_error_naming_the_file(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    truncate_to_half(b / WEIGHTS)
    proc = subprocess.run([str(tool_path("qhx_generate")), "-m", str(b), "-p", "Hi", "-n", "2"],
                          capture_output=True, timeout=TIMEOUT_S)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode != 0, err
    assert proc.returncode > 0, f"killed by signal {-proc.returncode}: {err}"
    assert str(b / WEIGHTS) in err and "truncated" in err, err


def test_truncated_while_served_fails_each_request_naming_the_file(bundle, tmp_path):
    b = copy_of(bundle, tmp_path)
    server = ServeProcess(tool_path("qhx_serve"), b, [], tmp_path / "logs")
    try:
        status, ok = chat(server.url)
        assert status == 200, ok
        for name in (EMBED, WEIGHTS):
            truncate_to_half(b / name)
        for attempt in range(2):  # the model's weights are gone: every later request fails too
            status, body = chat(server.url)
            assert status == 500, body
            err = body["error"]
            assert err["code"] == "model_file_changed", body
            assert err["type"] == "server_error", body
            assert "truncated or changed while mapped" in err["message"], body
            assert str(b / EMBED) in err["message"] or str(b / WEIGHTS) in err["message"], body
            assert "reopen the model" in err["message"], body
            assert server.proc.poll() is None, server.log()
            assert health(server.url) == 200
    finally:
        rc = server.stop()
    assert rc == 0, f"qhx_serve exited with {rc}: {server.log()}"



def test_weights_read_into_memory_give_the_same_answer_and_outlive_the_file(bundle, tmp_path):
    """--weights-in-memory (PipelineOptions::weights_in_memory): the decoder's and lm-head's panel-form
    weights are read at open, not mapped. Their logits equal the mapped ones bit for bit, and
    qhx_serve answers on after those two files are truncated (the embeddings stay mapped)."""
    import numpy as np
    b = copy_of(bundle, tmp_path)
    base = [str(tool_path("qhx_generate")), "-m", str(b), "-p", "Say something.", "-n", "6", "--temp", "0"]
    logits = {}
    for mode in ("mapped", "in_memory"):
        out = tmp_path / f"{mode}.npy"
        extra = ["--weights-in-memory"] if mode == "in_memory" else []
        proc = subprocess.run(base + extra + ["--dump-logits", str(out)], capture_output=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        logits[mode] = np.load(out)
    assert logits["mapped"].shape[0] == 6
    assert np.array_equal(logits["mapped"], logits["in_memory"]), \
        f"logits differ by up to {np.abs(logits['mapped'] - logits['in_memory']).max():.3e}"

    server = ServeProcess(tool_path("qhx_serve"), b, ["--weights-in-memory"], tmp_path / "logs")
    try:
        status, first = chat(server.url)
        assert status == 200, first
        truncate_to_half(b / WEIGHTS)
        truncate_to_half(b / "lmhead_wqo.bin")
        status, again = chat(server.url)
        assert status == 200, again
        assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    finally:
        rc = server.stop()
    assert rc == 0, f"qhx_serve exited with {rc}: {server.log()}"
