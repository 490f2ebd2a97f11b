"""A multi-turn conversation through one Session against Hugging Face transformers in fp32.

For both tiny configs, the session references of tests/reference (make_session_reference.py: a
3-turn conversation, images in turns 1 and 3; for every turn transformers answers the whole
conversation so far greedily, and its own answer joins the history) are replayed with

    qhx_generate -m CKPT --messages session_<case>.replay.messages.json --replay --temp 0 -n 8
                 --json --dump-logits steps.npy

(the replay file's assistant turns are placeholders: QHexRT must replace them by its answers,
or the next prompt differs from transformers'). Per turn:
  - the prompt ids equal transformers', the greedy tokens equal token for token and the answer
    text equals transformers' decode(skip_special_tokens=True);
  - the step logits are within the bounds of test_image_parity.py / test_text_parity.py (per row
    cosine >= 0.99999, max abs error <= 1e-4);
  - the cache is reused: cached_tokens of turn k+1 >= the prompt length of turn k; turn 2
    encodes no image and turn 3 exactly one (its new image).
Then every turn run fresh (--messages without --replay, one process per turn, the history
holding the replay's answers) gives step logits equal bit for bit to the replay's, and --stop
ends the text before the stop string with stop_reason "stop_string".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import test_image_parity
import test_text_parity
from conftest import REPO_ROOT, bundle_manifest, check_close, split_lines, tool_path

sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
import build_all  # noqa: E402

CONFIGS = ["tiny_a", "tiny_b"]
CASE = "three_turns"
# the bounds of the single-turn parity suites, unchanged
COSINE_MIN = test_image_parity.COSINE_MIN
MAX_ABS = test_image_parity.MAX_ABS
assert (COSINE_MIN, MAX_ABS) == (test_text_parity.COSINE_MIN, test_text_parity.MAX_ABS)
TIMEOUT_S = 900


@pytest.fixture(scope="session")
def references() -> dict[str, Path]:
    out = {}
    for name in CONFIGS:
        man = build_all.ensure_reference(name, log=lambda *a: None)
        assert CASE in man.get("session_cases", {}), f"{name}: no session references were built"
        out[name] = build_all.reference_dir(name)
    return out


def load_reference(root: Path) -> tuple[dict, dict]:
    meta_path = root / f"session_{CASE}.json"
    tensors_path = root / f"session_{CASE}.safetensors"
    for p in (meta_path, tensors_path):
        assert p.is_file(), f"{p} missing: run tests/reference/build_all.py"
    return json.loads(meta_path.read_text()), load_file(str(tensors_path))


def generate(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    exe = tool_path("qhx_generate")
    assert exe.is_file(), f"{exe} not built: cmake --build build --target qhx_generate (or set QHX_BIN)"
    return subprocess.run([str(exe), *args], capture_output=True, timeout=TIMEOUT_S, check=False)


def json_lines(proc: subprocess.CompletedProcess[bytes], n: int) -> tuple[str, list[dict]]:
    """(the streamed text before the JSON lines, the last n stdout lines parsed as JSON)."""
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    lines = split_lines(proc.stdout)
    assert len(lines) >= n, proc.stdout
    return "\n".join(lines[:-n]), [json.loads(line) for line in lines[-n:]]


def greedy_args(max_new: int) -> list[str]:
    return ["--temp", "0", "-n", str(max_new), "--json"]


_replays: dict[str, tuple[list[dict], np.ndarray]] = {}


def replay(references, config: str, tmp: Path) -> tuple[list[dict], np.ndarray]:
    """The replay of the reference conversation (run once per config): per-turn JSON results and
    the concatenated step logits."""
    if config not in _replays:
        root = references[config]
        meta, _ = load_reference(root)
        steps = tmp / f"{config}_replay_steps.npy"
        proc = generate(["-m", str(root / "checkpoint"), "--messages", str(root / meta["replay_messages_file"]),
                         "--replay", *greedy_args(meta["max_new_tokens"]), "--dump-logits", str(steps)])
        _, results = json_lines(proc, meta["num_turns"])
        _replays[config] = (results, np.load(steps))
    return _replays[config]


def split_steps(results: list[dict], steps: np.ndarray) -> list[np.ndarray]:
    counts = [len(r["tokens"]) for r in results]
    assert steps.shape[0] == sum(counts), f"{steps.shape[0]} logit rows for {counts} tokens"
    return np.split(steps, np.cumsum(counts)[:-1])


@pytest.mark.parametrize("config", CONFIGS)
def test_replay_matches_transformers(references, config, tmp_path_factory):
    meta, ref = load_reference(references[config])
    results, steps = replay(references, config, tmp_path_factory.mktemp("replay"))
    assert len(results) == meta["num_turns"] == 3
    per_turn = split_steps(results, steps)
    for k, (r, turn, ours) in enumerate(zip(results, meta["turns"], per_turn)):
        what = f"{config}/{CASE} turn {k + 1}"
        want_ids = ref[f"turn{k}.input_ids"].tolist()
        if r["prompt_tokens"] != want_ids:
            first = next((i for i, (a, b) in enumerate(zip(r["prompt_tokens"], want_ids)) if a != b),
                         min(len(want_ids), len(r["prompt_tokens"])))
            pytest.fail(f"{what}: prompt ids differ from position {first}: ours "
                        f"{r['prompt_tokens'][first:first + 12]} (len {len(r['prompt_tokens'])}), "
                        f"transformers {want_ids[first:first + 12]} (len {len(want_ids)})")
        assert r["tokens"] == ref[f"turn{k}.greedy_tokens"].tolist(), f"{what}: greedy tokens differ"
        assert r["text"] == turn["answer"], f"{what}: answer text differs"
        check_close(ours, ref[f"turn{k}.step_logits"], f"{what} step logits", COSINE_MIN, MAX_ABS)
        n_images = len(turn["images"])
        # the vision tower runs only on the images this turn added (the earlier ones are in the
        # reused prefix): their pads, as transformers expanded them
        n_old = len(meta["turns"][k - 1]["images"]) if k > 0 else 0
        assert turn["images"][:n_old] == (meta["turns"][k - 1]["images"] if k > 0 else [])
        assert r["timings"]["image_tokens"] == sum(turn["num_image_tokens"][n_old:]), what
        if k > 0:
            prev = len(ref[f"turn{k - 1}.input_ids"])
            assert r["cached_tokens"] >= prev, \
                f"{what}: {r['cached_tokens']} tokens reused, the previous prompt had {prev}"
            assert r["cached_tokens"] < len(want_ids)
        else:
            assert r["cached_tokens"] == 0, what
        print(f"{what}: prompt {len(want_ids)} tokens, {r['cached_tokens']} cached, "
              f"{n_images} images in the conversation, {r['timings']['images_encoded']} encoded")
    # turn 1 encodes its image; turn 2 adds none (turn 1's is in the kept prefix); turn 3 adds one
    assert [r["timings"]["images_encoded"] for r in results] == [1, 0, 1]
    assert [r["timings"]["image_cache_hits"] for r in results] == [0, 0, 0]
    # the image cache's counters after each turn: one miss per new image, never a lookup for an
    # image whose tokens are in the reused prefix
    assert [(r["image_cache"]["misses"], r["image_cache"]["entries"]) for r in results] == [(1, 1), (1, 1), (2, 2)]


def fresh_messages(meta: dict, results: list[dict], k: int, images_dir: Path) -> list[dict]:
    """The conversation up to user turn k with the replay's answers as the assistant turns
    (absolute image paths, so the file can live anywhere)."""
    msgs = json.loads(json.dumps(meta["turns"][k]["messages"]))
    answers = iter(r["text"] for r in results)
    for m in msgs:
        if m["role"] == "assistant":
            m["content"] = next(answers)
        elif isinstance(m["content"], list):
            for p in m["content"]:
                if p["type"] == "image":
                    p["path"] = str(images_dir / Path(p["path"]).name)
    return msgs


@pytest.mark.parametrize("config", CONFIGS)
def test_fresh_runs_equal_the_replay_bit_for_bit(references, config, tmp_path_factory, tmp_path):
    root = references[config]
    meta, _ = load_reference(root)
    results, steps = replay(references, config, tmp_path_factory.mktemp("replay"))
    per_turn = split_steps(results, steps)
    for k in range(meta["num_turns"]):
        what = f"{config}/{CASE} turn {k + 1} fresh"
        conv = tmp_path / f"turn{k}.json"
        conv.write_text(json.dumps(fresh_messages(meta, results, k, root.parent / "images")))
        out = tmp_path / f"turn{k}_steps.npy"
        proc = generate(["-m", str(root / "checkpoint"), "--messages", str(conv),
                         *greedy_args(meta["max_new_tokens"]), "--dump-logits", str(out)])
        _, (r,) = json_lines(proc, 1)
        assert r["cached_tokens"] == 0, what
        assert r["prompt_tokens"] == results[k]["prompt_tokens"], what
        assert r["tokens"] == results[k]["tokens"], what
        fresh = np.load(out)
        assert fresh.shape == per_turn[k].shape, what
        assert np.array_equal(fresh, per_turn[k]), \
            f"{what}: step logits differ from the replay's by up to {np.abs(fresh - per_turn[k]).max():.3e}"


def first_containing(tok, tokens: list[int], stop: str) -> int:
    """The number of tokens after which the decoded text first contains `stop`."""
    for n in range(1, len(tokens) + 1):
        if stop in tok.decode(tokens[:n], skip_special_tokens=True):
            return n
    raise AssertionError(f"{stop!r} never appears")


@pytest.mark.parametrize("config", CONFIGS)
def test_stop_string_ends_the_answer_before_it(references, config, tmp_path_factory, hf_tokenizer):
    root = references[config]
    meta, _ = load_reference(root)
    results, _ = replay(references, config, tmp_path_factory.mktemp("replay"))
    first = results[0]  # the first run's answer to turn 1
    text = first["text"]
    assert len(text) >= 8, f"{config}: answer {text!r} too short to cut"
    # a stop string from inside the answer that spans two tokens' text (the boundary after the
    # middle token, as the HF tokenizer decodes them): the answer must end right before its
    # first occurrence, and generation stop at the token that completes it
    tokens = first["tokens"]
    boundary = len(hf_tokenizer.decode(tokens[:len(tokens) // 2], skip_special_tokens=True))
    assert hf_tokenizer.decode(tokens, skip_special_tokens=True) == text
    stop = text[boundary - 2: boundary + 2]
    at = text.find(stop)
    assert at > 0, f"{config}: stop {stop!r} at {at} in {text!r}: choose another"
    want_text = text[:at]
    want_tokens = first["tokens"][:first_containing(hf_tokenizer, first["tokens"], stop)]
    proc = generate(["-m", str(root / "checkpoint"), "--messages", str(root / meta["turns"][0]["messages_file"]),
                     *greedy_args(meta["max_new_tokens"]), "--stop", stop])
    streamed, (r,) = json_lines(proc, 1)
    assert r["stop_reason"] == "stop_string", r
    assert r["text"] == want_text, f"stop {stop!r}: {r['text']!r}, expected {want_text!r}"
    assert r["tokens"] == want_tokens, f"stop {stop!r}"
    assert streamed == want_text, f"streamed text {streamed!r} (a stop string is never streamed)"
    # a stop string that never occurs changes nothing
    proc = generate(["-m", str(root / "checkpoint"), "--messages", str(root / meta["turns"][0]["messages_file"]),
                     *greedy_args(meta["max_new_tokens"]), "--stop", "\u2603 never \u2603"])
    _, (r,) = json_lines(proc, 1)
    assert (r["text"], r["tokens"], r["stop_reason"]) == (text, first["tokens"], first["stop_reason"])


def test_cached_session_references_are_a_noop(references):
    """A second build reuses the session references and imports neither torch nor transformers."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import build_all\n"
            "for n in sys.argv[2:]:\n"
            "    m = build_all.ensure_reference(n, log=lambda *a: None)\n"
            "    assert not m['built_session_refs'] and m['session_hash'], n\n"
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code, str(REPO_ROOT / "tests" / "reference"), *CONFIGS],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")


@pytest.mark.parametrize("kv_cache", ["f16", "i8"])
def test_fresh_runs_equal_the_replay_bit_for_bit_on_a_w8_bundle(references, tmp_path, kv_cache):
    """The same on a w8 bundle (int8 activations, an f16 or the 8-bit KV cache, images at the
    seed's fixed 512x512): the session's reuse must not depend on the arithmetic either."""
    root = references["tiny_a"]
    meta, _ = load_reference(root)
    bundle = tmp_path / "bundle_w8"
    proc = subprocess.run([str(tool_path("qhx_export")), "--hf", str(root / "checkpoint"), "--out", str(bundle),
                           "--weights", "w8", "--kv-cache", kv_cache, "--quiet"], capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert json.loads(bundle_manifest(bundle, "text").read_text())["graphs"]["llm"]["kv_cache"] == kv_cache
    steps = tmp_path / "replay_steps.npy"
    proc = generate(["-m", str(bundle), "--messages", str(root / meta["replay_messages_file"]), "--replay",
                     *greedy_args(meta["max_new_tokens"]), "--dump-logits", str(steps)])
    _, results = json_lines(proc, meta["num_turns"])
    assert [r["timings"]["images_encoded"] for r in results] == [1, 0, 1]
    assert all(results[k + 1]["cached_tokens"] >= len(results[k]["prompt_tokens"]) for k in range(len(results) - 1))
    per_turn = split_steps(results, np.load(steps))
    for k in range(meta["num_turns"]):
        what = f"w8 bundle ({kv_cache} KV) turn {k + 1} fresh"
        conv = tmp_path / f"turn{k}.json"
        conv.write_text(json.dumps(fresh_messages(meta, results, k, root.parent / "images")))
        out = tmp_path / f"turn{k}_steps.npy"
        proc = generate(["-m", str(bundle), "--messages", str(conv), *greedy_args(meta["max_new_tokens"]),
                         "--dump-logits", str(out)])
        _, (r,) = json_lines(proc, 1)
        assert r["prompt_tokens"] == results[k]["prompt_tokens"], what
        fresh = np.load(out)
        assert np.array_equal(fresh, per_turn[k]), \
            f"{what}: step logits differ from the replay's by up to {np.abs(fresh - per_turn[k]).max():.3e}"
