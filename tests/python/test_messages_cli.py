"""qhx_generate --messages as users meet it: bad conversations, bad flag combinations, bundle
folders given to -m, and a thread count above the machine's.

Every bad input must end with exit status 1 (not a signal, not 0) and one error on stderr
naming what is wrong and where (the file and the JSON path of the bad element, or the flag).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, split_lines, tool_path

sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
import build_all  # noqa: E402

CONFIG = "tiny_a"
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    assert build_all.ensure_reference(CONFIG, log=lambda *a: None)
    ckpt = build_all.reference_dir(CONFIG) / "checkpoint"
    assert (ckpt / "config.json").is_file(), f"{ckpt}: no checkpoint"
    return ckpt


@pytest.fixture(scope="module")
def images_dir(checkpoint) -> Path:
    d = checkpoint.parent.parent / "images"
    assert (d / "img256x320.png").is_file() and (d / "img300x200.png").is_file(), f"{d}: test images missing"
    return d


def generate(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    exe = tool_path("qhx_generate")
    assert exe.is_file(), f"{exe} not built: cmake --build build --target qhx_generate (or set QHX_BIN)"
    return subprocess.run([str(exe), *args], capture_output=True, timeout=TIMEOUT_S, check=False)


def fails(proc: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    """Asserts exit status 1 with an error on stderr that contains every needle; returns stderr."""
    err = proc.stderr.decode("utf-8", errors="replace")
    assert proc.returncode == 1, f"exit status {proc.returncode} (a negative one is a signal)\n{err}"
    assert "qhx_generate: error:" in err, err
    for n in needles:
        assert n in err, f"{n!r} not in the error:\n{err}"
    assert "terminate called" not in err and "Aborted" not in err, err
    return err


def last_json(proc: subprocess.CompletedProcess[bytes]) -> dict:
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return json.loads(split_lines(proc.stdout)[-1])


def write(tmp: Path, name: str, obj_or_text) -> Path:
    p = tmp / name
    p.write_text(obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text), encoding="utf-8")
    return p


def user(*parts) -> dict:
    return {"role": "user", "content": list(parts)}


def text(t: str) -> dict:
    return {"type": "text", "text": t}


def image(path: str) -> dict:
    return {"type": "image", "path": path}


GREEDY = ["--temp", "0", "-n", "2", "--json"]


# --- bad conversations: each names the file and the JSON path of the bad element

BAD_CONVERSATIONS = {
    # name: (file contents, what the error must name besides the file)
    "not_json": ('[{"role": "user", "content": "hi"', ["not JSON"]),
    "object_not_list": ({"role": "user", "content": "hi"}, ["expected a JSON array"]),
    "empty_list": ([], ["no messages"]),
    "message_not_object": (["hello"], ["[0]", "must be an object"]),
    "no_role": ([{"content": "hi"}], ["[0].role", "missing"]),
    "role_not_string": ([{"role": 3, "content": "hi"}], ["[0].role"]),
    "unknown_role": ([{"role": "user", "content": "hi"}, {"role": "robot", "content": "beep"},
                      {"role": "user", "content": "hi"}], ["[1].role", '"robot"']),
    "no_content": ([{"role": "user"}], ["[0].content", "missing"]),
    "content_number": ([{"role": "user", "content": 42}], ["[0].content", "a string or a list"]),
    "content_object": ([{"role": "user", "content": {"type": "text", "text": "hi"}}],
                       ["[0].content", "a string or a list"]),
    "part_not_object": ([user("hi")], ["[0].content[0]", "must be an object"]),
    "part_without_type": ([user({"text": "hi"})], ["[0].content[0].type", "missing"]),
    "unknown_part_type": ([user(text("listen"), {"type": "audio", "path": "a.wav"})],
                          ["[0].content[1].type", '"audio"']),
    "text_not_string": ([user({"type": "text", "text": ["a"]})], ["[0].content[0].text"]),
    "image_without_path": ([user({"type": "image"}, text("what?"))], ["[0].content[0].path", "missing"]),
    "image_empty_path": ([user(image(""), text("what?"))], ["[0].content[0].path"]),
    "ends_with_assistant": ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
                            ["[1]", "must end with a user message", '"assistant"']),
}


# Each also through --replay (parsing comes first), except the trailing assistant turn: --replay
# replaces the file's assistant turns by the answers, so one at the end is only a placeholder.
BAD_RUNS = [(n, r) for n in BAD_CONVERSATIONS for r in (False, True) if not (r and n == "ends_with_assistant")]


@pytest.mark.parametrize("name,replay", BAD_RUNS,
                         ids=[f"{n}-{'replay' if r else 'single'}" for n, r in BAD_RUNS])
def test_bad_conversation(checkpoint, tmp_path, name, replay):
    contents, needles = BAD_CONVERSATIONS[name]
    conv = write(tmp_path, f"{name}.json", contents)
    proc = generate(["-m", str(checkpoint), "--messages", str(conv), *GREEDY, *(["--replay"] if replay else [])])
    fails(proc, str(conv), *needles)


def test_missing_image_in_turn_3_names_the_file(checkpoint, images_dir, tmp_path):
    conv = [user(image(str(images_dir / "img256x320.png")), text("Describe the picture.")),
            {"role": "assistant", "content": "A picture."},
            user(text("What colour is the largest shape?")),
            {"role": "assistant", "content": "Red."},
            user(image("no_such_photo.png"), text("And in this one?"))]
    path = write(tmp_path, "conv.json", conv)
    missing = str(tmp_path / "no_such_photo.png")  # relative paths resolve against the file's folder
    where = f"{path}: [4].content[0]"
    fails(generate(["-m", str(checkpoint), "--messages", str(path), *GREEDY]), missing, where, "cannot open")
    # through one session: turns 1 and 2 are answered, then turn 3 fails the same way
    proc = generate(["-m", str(checkpoint), "--messages", str(path), "--replay", *GREEDY])
    fails(proc, missing, where, "cannot open")


def test_replay_without_a_user_turn(checkpoint, tmp_path):
    conv = write(tmp_path, "conv.json", [{"role": "system", "content": "Be brief."},
                                         {"role": "assistant", "content": "Hello."}])
    fails(generate(["-m", str(checkpoint), "--messages", str(conv), "--replay", *GREEDY]), str(conv),
          "no user message")


def test_messages_with_prompt_flags(checkpoint, images_dir, tmp_path):
    conv = write(tmp_path, "conv.json", [{"role": "user", "content": "hi"}])
    for extra in (["-p", "hello"], ["--system", "be brief"], ["-i", str(images_dir / "img256x320.png")],
                  ["--raw"]):
        fails(generate(["-m", str(checkpoint), "--messages", str(conv), *extra, *GREEDY]), "--messages", extra[0])


def test_replay_without_messages(checkpoint):
    fails(generate(["-m", str(checkpoint), "-p", "hello", "--replay", *GREEDY]), "--replay", "--messages")


def test_messages_file_that_does_not_exist(checkpoint, tmp_path):
    missing = tmp_path / "nowhere.json"
    fails(generate(["-m", str(checkpoint), "--messages", str(missing), *GREEDY]), str(missing))


# --- bundle folders and threads


@pytest.fixture(scope="module")
def bundle(checkpoint, tmp_path_factory) -> dict[str, Path]:
    """A tiny w8 bundle whose two manifests are told apart by their default max_new_tokens
    (text 3, image 5), so which one ran shows in the number of generated tokens."""
    out = tmp_path_factory.mktemp("bundle_w8")
    exe = tool_path("qhx_export")
    assert exe.is_file(), f"{exe} not built: cmake --build build --target qhx_export (or set QHX_BIN)"
    proc = subprocess.run([str(exe), "--hf", str(checkpoint), "--out", str(out), "--weights", "w8", "--quiet"],
                          capture_output=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    found = {}
    for p in sorted(out.glob("*.json")):
        doc = json.loads(p.read_text())
        if not isinstance(doc, dict) or "qhexrt_manifest" not in doc:
            continue
        kind = "vlm" if any(s.get("op") == "load_images" for s in doc["stages"]) else "text"
        assert kind not in found, f"two {kind} manifests in {out}"
        found[kind] = p
        doc["max_new_tokens"] = {"text": 3, "vlm": 5}[kind]
        p.write_text(json.dumps(doc, indent=2))
    assert set(found) == {"text", "vlm"}, f"{out}: manifests {found}"
    return {"dir": out, **found}


def test_bundle_folder_picks_the_manifest_by_images(bundle, images_dir, tmp_path):
    d = str(bundle["dir"])
    im = str(images_dir / "img256x320.png")
    runs = {
        "-p -i": (["-p", "<image>What is it?", "-i", im], 5),
        "-p": (["-p", "What is it?"], 3),
        "--messages with an image": (["--messages", str(write(tmp_path, "img.json", [user(image(im), text("What?"))]))], 5),
        "--messages text only": (["--messages", str(write(tmp_path, "txt.json", [user(text("What?"))]))], 3),
    }
    for what, (args, n) in runs.items():
        r = last_json(generate(["-m", d, "--temp", "0", "--json", *args]))
        # tiny random models never hit EOS this early; if one did, the count would be lower
        assert r["stop_reason"] == "max_new_tokens", (what, r)
        assert len(r["tokens"]) == n, f"{what}: {len(r['tokens'])} tokens: the other manifest ran"
        assert (r["timings"]["image_tokens"] > 0) == (n == 5), what


def test_print_plan_of_a_bundle_folder_is_the_manifest_that_runs(bundle, images_dir):
    d = str(bundle["dir"])
    for args, kind in ((["-i", str(images_dir / "img256x320.png")], "vlm"), ([], "text")):
        proc = generate(["-m", d, "--print-plan", *args])
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        plan = json.loads(proc.stdout)
        assert plan["max_new_tokens"] == {"vlm": 5, "text": 3}[kind], f"{args}: not the {kind} manifest"
        assert any(s["op"] == "load_images" for s in plan["stages"]) == (kind == "vlm"), args


def test_threads_above_the_cores_warn_and_still_work(bundle):
    cores = os.cpu_count() or 1
    asked = max(64, 2 * cores)
    proc = generate(["-m", str(bundle["dir"]), "-p", "hello", "--threads", str(asked), *GREEDY])
    r = last_json(proc)
    assert len(r["tokens"]) == 2
    err = proc.stderr.decode(errors="replace")
    assert "qhx_generate: warning:" in err, err
    assert f"{asked} threads" in err and f"using {cores}" in err, f"the warning must name the cap:\n{err}"
