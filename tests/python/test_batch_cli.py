"""qhx_generate --batch: many independent requests on one load. Each answer equals the same
request run alone (text and tokens), in file order; a bad file is refused before the model loads,
with the file and line named."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from conftest import REPO_ROOT, cache_dir, tool_path

IMAGE = REPO_ROOT / "assets" / "sample.png"


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    exe = tool_path("qhx_generate")
    assert exe.is_file(), f"{exe} not built: cmake --build build --target qhx_generate (or set QHX_BIN)"
    model = cache_dir() / "reference" / "tiny_a" / "checkpoint"
    return subprocess.run([str(exe), "-m", str(model), *args], capture_output=True, text=True, timeout=300)


def test_batch_answers_equal_single_runs(tmp_path: Path):
    shutil.copyfile(IMAGE, tmp_path / "pic.png")
    tasks = [{"prompt": "Describe this image.", "image": "pic.png", "answer": "ignored"},
             {"prompt": "What is the capital of France?"},
             {"prompt": "Say hi.", "system": "You are terse."},
             {"prompt": "Compare <image> and <image>.", "images": ["pic.png", "pic.png"]}]
    f = tmp_path / "tasks.jsonl"
    f.write_text("\n".join(json.dumps(t) for t in tasks) + "\n\n")  # a blank line is skipped
    p = run(["--batch", str(f), "-n", "6", "--temp", "0", "--json"])
    assert p.returncode == 0, p.stderr
    got = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    assert [g["index"] for g in got] == [0, 1, 2, 3]
    for t, g in zip(tasks, got):
        args = ["-p", t["prompt"], "-n", "6", "--temp", "0", "--json"]
        for im in t.get("images", [t["image"]] if "image" in t else []):
            args += ["-i", str(tmp_path / im)]
        if "system" in t:
            args += ["--system", t["system"]]
        alone = run(args)
        assert alone.returncode == 0, alone.stderr
        one = json.loads(alone.stdout.strip().splitlines()[-1])
        assert (g["tokens"], g["text"], g["prompt_tokens"]) == (one["tokens"], one["text"], len(one["prompt_tokens"]))
    plain = run(["--batch", str(f), "-n", "6", "--temp", "0"])  # without --json: one line per answer
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == [g["text"].replace("\n", "\\n") for g in got]


def test_bad_batch_files_are_refused(tmp_path: Path):
    cases = {
        "not json": ('{"prompt": "a"}\n{oops\n', "tasks.jsonl:2: not a JSON object"),
        "array": ('["a"]\n', "tasks.jsonl:1: a task is a JSON object"),
        "no prompt": ('{"image": "x.png"}\n', 'tasks.jsonl:1: no "prompt"'),
        "prompt type": ('{"prompt": 3}\n', '"prompt" must be a string'),
        "images type": ('{"prompt": "a", "images": "x.png"}\n', '"images" must be an array'),
        "deep": ('{"prompt": "a", "x": ' + "[" * 50 + "]" * 50 + "}\n", "nested too deeply"),
        "empty": ("\n\n", "no tasks"),
        "missing image": ('{"prompt": "a", "image": "nowhere.png"}\n', "nowhere.png"),
    }
    for name, (text, want) in cases.items():
        f = tmp_path / "tasks.jsonl"
        f.write_text(text)
        p = run(["--batch", str(f), "-n", "2"])
        assert p.returncode != 0, name
        assert want in p.stderr, (name, p.stderr)
        assert "error" in p.stderr
    p = run(["--batch", str(tmp_path / "absent.jsonl")])
    assert p.returncode != 0 and "cannot open the batch file" in p.stderr
    p = run(["--batch", str(f), "-p", "hi"])
    assert p.returncode != 0 and "--batch gives every request" in p.stderr
