"""qhx_generate --speculate: greedy output (tokens, text, logits) identical to plain decode on
the tiny checkpoint with drafts really accepted, and a clear error for a bad value."""
from __future__ import annotations

import json
import subprocess

from conftest import cache_dir, tool_path

PROMPT = "one two three four one two three four one two three four one two three four"


def run(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    exe = tool_path("qhx_generate")
    assert exe.is_file(), f"{exe} not built: cmake --build build --target qhx_generate (or set QHX_BIN)"
    model = cache_dir() / "reference" / "tiny_a" / "checkpoint"
    return subprocess.run([str(exe), "-m", str(model), *args], capture_output=True, timeout=300)


def generate(tmp_path, speculate: list[str], name: str) -> tuple[dict, bytes]:
    logits = tmp_path / f"{name}.npy"
    proc = run(["-p", PROMPT, "-n", "32", "--temp", "0", "--json", "--dump-logits", str(logits), *speculate])
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout.decode().strip().splitlines()[-1]), logits.read_bytes()


def test_speculation_gives_the_same_greedy_output(tmp_path):
    plain, plain_logits = generate(tmp_path, [], "plain")
    spec, spec_logits = generate(tmp_path, ["--speculate", "ngram:4"], "spec")
    assert spec["tokens"] == plain["tokens"]
    assert spec["text"] == plain["text"]
    assert spec_logits == plain_logits
    assert plain["draft_tokens"] == 0
    assert spec["accepted_tokens"] > 0
    assert spec["timings"]["decode_steps"] < plain["timings"]["decode_steps"]


def test_bad_speculate_values_are_refused():
    for bad, want in [("foo", "expected ngram"), ("ngram:0", "[1, 16]"), ("ngram:99", "[1, 16]")]:
        proc = run(["-p", "hi", "-n", "2", "--speculate", bad])
        assert proc.returncode != 0
        assert want in proc.stderr.decode(), proc.stderr.decode()
