"""The Python package `qhexrt` (pyproject.toml, python/qhexrt/), as a user gets it: a clean
checkout (git clone of this repository's HEAD: commit what you test) built with pip
into a wheel, installed into a fresh venv with Pillow and numpy (the pins of
scripts/requirements-ref.txt), and used from that venv's interpreter, outside the source
tree. Checked on the tiny reference checkpoint tiny_a against qhx_generate:

- greedy text (temperature=0) gives qhx_generate --temp 0 --json's tokens;
- an image as a path, encoded bytes, a PIL image and a numpy array gives the same tokens
  (and qhx_generate -i's);
- streamed pieces join to the text of the same answer unstreamed; closing a stream early
  cancels the answer;
- a second turn of a session reports cached tokens;
- errors (a missing image file, bytes that are no image, a bad manifest, a missing path)
  raise qhexrt.Error with the runtime's message.

The wheel is built by pip from the clone either way; what goes into it:
- when the checkout is clean (its tracked files are HEAD's, as in CI) and QHX_BIN's build has
  libqhexrt.so, that library: pip runs the clone's CMake with QHX_PREBUILT_LIBRARY, which
  packages it instead of compiling it a third time (the library is of the same commit; the
  packaging path, pyproject.toml and the install rules, is the clone's). Seconds, not cached.
- else (or with QHX_PY_WHEEL_FROM_SOURCE=1) libqhexrt.so compiled from the clone (about 25
  minutes at -j1 on a 2-core machine, ~8 at -j2), so that wheel is cached in
  $QHX_CACHE/python-wheels/<hash of HEAD's files but tests/ and docs/>/ and rebuilt only when
  they change (QHX_PY_WHEEL_REBUILD=1 forces it). CMAKE_BUILD_PARALLEL_LEVEL, if set, bounds
  the build's jobs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT, cache_dir, tool_path

BUILD_TIMEOUT_S = 3600
CHECKPOINT = cache_dir() / "reference" / "tiny_a" / "checkpoint"
IMAGE = cache_dir() / "reference" / "images" / "img256x320.png"
PROMPT = "Tell me a story about a lighthouse keeper."
MAX_NEW = 12


def _run(cmd: list[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, **kw)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def _pins() -> list[str]:
    wanted = {"numpy", "pillow"}
    pins = []
    for line in (REPO_ROOT / "scripts" / "requirements-ref.txt").read_text().splitlines():
        name = line.split("==")[0].strip().lower()
        if name in wanted:
            pins.append(line.strip())
    assert len(pins) == 2, pins
    return pins


def _source_key(clone: Path) -> str:
    """A hash of the committed files the wheel is built from (all but tests/ and docs/)."""
    listing = _run(["git", "-C", str(clone), "ls-tree", "-r", "HEAD"]).stdout.splitlines()
    kept = [line for line in listing if not line.split("\t", 1)[1].startswith(("tests/", "docs/"))]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()[:24]


def _clone_at_the_repositorys_depth(work: Path) -> tuple[Path, Path | None]:
    """A fresh folder for the clone, as many levels below / as REPO_ROOT.

    With CCACHE_BASEDIR=/ the compiler cache keys system headers by their path relative to
    the build folder (../../usr/include/...), so the clone's objects match the Release
    build's only when CLONE/build is as deep as REPO_ROOT/build. pytest's temporary folders
    are deeper than most checkouts; a folder under the system's temporary directory, padded
    to that depth, is used instead. Returns the clone's path and that folder (the caller
    removes it), or a path in `work` and None when no temporary folder is shallow enough."""
    depth = len(REPO_ROOT.parts)
    base = Path(tempfile.mkdtemp(prefix="qhx-pypkg-"))
    if len(base.parts) > depth:  # a checkout right under /: no folder is shallow enough
        shutil.rmtree(base)
        return work / "src", None
    clone = base
    while len(clone.parts) < depth:
        clone = clone / "d"
    return clone, base


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory):
    for what in (CHECKPOINT / "config.json", IMAGE):
        if not what.exists():
            pytest.fail(f"{what} not found: run tests/reference/build_all.py (scripts/test.sh does)")
    work = tmp_path_factory.mktemp("pypkg")
    clone, clone_base = _clone_at_the_repositorys_depth(work)
    try:
        yield _build_and_install(work, clone)
    finally:
        if clone_base is not None:
            shutil.rmtree(clone_base, ignore_errors=True)


def _prebuilt_library() -> Path | None:
    """QHX_BIN's build's libqhexrt.so when it is HEAD's: the checkout's tracked files
    unchanged since HEAD (untracked build folders aside); else None."""
    if os.environ.get("QHX_PY_WHEEL_FROM_SOURCE") == "1":
        return None
    lib = tool_path("qhx_generate").parent.parent / "lib" / "libqhexrt.so.0"
    dirty = _run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"]).stdout.strip()
    return lib.resolve() if lib.is_file() and not dirty else None


def _build_and_install(work: Path, clone: Path) -> Path:
    """Clones HEAD into `clone`, builds (or takes from the cache) its wheel and installs it
    into a fresh venv in `work`; returns that venv's interpreter."""
    _run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO_ROOT), str(clone)])
    prebuilt = _prebuilt_library()
    if prebuilt is not None:
        staging = work / "wheel"
        t0 = time.monotonic()
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(staging),
              "--config-settings=build-dir=build",
              f"--config-settings=cmake.define.QHX_PREBUILT_LIBRARY={prebuilt}", str(clone)],
             timeout=BUILD_TIMEOUT_S)
        print(f"packaged the Release build's {prebuilt.name} into a wheel in {time.monotonic() - t0:.0f} s")
        found = sorted(staging.glob("qhexrt-*.whl"))
        assert len(found) == 1, found
        return _install(work, found[0])
    wheels = cache_dir() / "python-wheels" / _source_key(clone)
    found = sorted(wheels.glob("qhexrt-*.whl")) if wheels.is_dir() else []
    if not found or os.environ.get("QHX_PY_WHEEL_REBUILD") == "1":
        shutil.rmtree(wheels, ignore_errors=True)
        staging = work / "wheel"
        t0 = time.monotonic()
        # What `pip install .` does (PEP 517, build isolation: scikit-build-core from the index).
        # The CMake tree at CLONE/build rather than a temporary folder: the same relative
        # layout as the Release build's, so scripts/test.sh's compiler cache (ccache, when
        # CMAKE_CXX_COMPILER_LAUNCHER says so) serves its objects; the wheel is the same.
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(staging),
              "--config-settings=build-dir=build", str(clone)],
             timeout=BUILD_TIMEOUT_S)
        print(f"built the qhexrt wheel in {time.monotonic() - t0:.0f} s")
        wheels.mkdir(parents=True, exist_ok=True)
        for w in staging.glob("*.whl"):
            shutil.copy2(w, wheels / w.name)
        found = sorted(wheels.glob("qhexrt-*.whl"))
    assert len(found) == 1, found
    return _install(work, found[0])


def _install(work: Path, wheel: Path) -> Path:
    """A fresh venv in `work` with `wheel` and the pins the package's image inputs use."""
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "--quiet", str(wheel), *_pins()])
    return py


def run_py(py: Path, code: str, tmp: Path) -> dict:
    """Runs `code` with the venv's interpreter (cwd outside the source tree); its last stdout line is JSON."""
    script = tmp / "probe.py"
    script.write_text("import json, qhexrt\n" + textwrap.dedent(code))
    proc = _run([str(py), str(script)], cwd=tmp)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def qhx_generate(args: list[str]) -> dict:
    tool = tool_path("qhx_generate")
    if not os.access(tool, os.X_OK):
        pytest.fail(f"{tool} not built (scripts/build.sh, or set QHX_BIN)")
    proc = _run([str(tool), "-m", str(CHECKPOINT), "--temp", "0", "-n", str(MAX_NEW), "--json", *args])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_package_is_installed_outside_the_tree(venv_python, tmp_path):
    out = run_py(venv_python, """
        import pathlib
        lib = pathlib.Path(qhexrt.__file__).parent
        print(json.dumps({"file": qhexrt.__file__, "typed": (lib / "py.typed").is_file(),
                          "so": sorted(p.name for p in lib.glob("libqhexrt*")),
                          "version": qhexrt.version(), "api": qhexrt.api_version()}))
    """, tmp_path)
    assert "site-packages" in out["file"] and str(REPO_ROOT) not in out["file"], out
    assert out["typed"] and out["so"] == ["libqhexrt.so.0"], out
    assert out["version"] == "0.1.0" and out["api"] >= 4, out


def test_option_structs_hold_all_the_library_writes(venv_python, tmp_path):
    """qhx_*_init fill the whole struct the library knew at C API 5 (struct_size says how much):
    each of the package's ctypes structs must be exactly that large, and the _init_sized the
    package calls must fill exactly the size it is given."""
    out = run_py(venv_python, """
        import ctypes
        from qhexrt import _capi
        sizes = {}
        for cls, init in ((_capi.PipelineOptions, "qhx_pipeline_options_init"),
                          (_capi.GenerationOptions, "qhx_generation_options_init"),
                          (_capi.Timings, "qhx_timings_init"),
                          (_capi.ImageCacheStats, "qhx_image_cache_stats_init")):
            buf = ctypes.create_string_buffer(4096)
            assert getattr(_capi.lib, init)(ctypes.cast(buf, ctypes.POINTER(cls))) == 0
            sizes[cls.__name__] = [ctypes.c_size_t.from_buffer(buf).value, ctypes.sizeof(cls)]
            # _init_sized (C API 6) fills exactly the size it is given: struct_size, not a byte past it.
            buf = ctypes.create_string_buffer(b"\\x5a" * 4096, 4096)
            size = ctypes.sizeof(cls)
            assert getattr(_capi.lib, init + "_sized")(ctypes.cast(buf, ctypes.POINTER(cls)), size) == 0
            sizes[cls.__name__].append(ctypes.c_size_t.from_buffer(buf).value)
            sizes[cls.__name__].append(buf.raw[size:] == b"\\x5a" * (4096 - size))
        print(json.dumps(sizes))
    """, tmp_path)
    assert len(out) == 4, out
    for name, (written, ours, sized, tail_kept) in out.items():
        assert written == ours, f"{name}: the library's init fills {written} bytes, the package's struct has {ours}"
        assert sized == ours and tail_kept, f"{name}: init_sized set struct_size {sized} or wrote past {ours} bytes"


def test_weights_in_memory_gives_the_same_tokens(venv_python, tmp_path):
    out = run_py(venv_python, f"""
        toks = []
        for in_memory in (False, True):
            s = qhexrt.Pipeline({str(CHECKPOINT)!r}, weights_in_memory=in_memory).session()
            toks.append(s.send({PROMPT!r}, max_tokens={MAX_NEW}, temperature=0).tokens)
        print(json.dumps({{"tokens": toks}}))
    """, tmp_path)
    assert out["tokens"][0] == out["tokens"][1] and len(out["tokens"][0]) > 0, out


def test_greedy_text_equals_qhx_generate(venv_python, tmp_path):
    ref = qhx_generate(["-p", PROMPT])
    out = run_py(venv_python, f"""
        pipe = qhexrt.Pipeline({str(CHECKPOINT)!r})
        r = pipe.session().send({PROMPT!r}, max_tokens={MAX_NEW}, temperature=0)
        print(json.dumps({{"tokens": r.tokens, "text": r.text, "prompt": r.prompt_tokens,
                          "reason": r.stop_reason, "timings": r.timings.__dict__}}))
    """, tmp_path)
    assert out["tokens"] == ref["tokens"], (out, ref["tokens"])
    assert out["text"] == ref["text"]
    assert out["prompt"] == len(ref["prompt_tokens"])
    assert out["reason"] == ref["stop_reason"]
    assert out["timings"]["decode_steps"] > 0 and out["timings"]["prefill_ms"] > 0


def test_penalties_reach_the_sampler_as_qhx_generate_passes_them(venv_python, tmp_path):
    flags = ["--repeat-penalty", "1.3", "--presence-penalty", "0.5", "--frequency-penalty", "2"]
    ref, plain = qhx_generate(["-p", PROMPT, *flags]), qhx_generate(["-p", PROMPT])
    assert ref["tokens"] != plain["tokens"], "the penalties changed nothing: the test could not fail"
    out = run_py(venv_python, f"""
        s = qhexrt.Pipeline({str(CHECKPOINT)!r}).session()
        r = s.send({PROMPT!r}, max_tokens={MAX_NEW}, temperature=0, repetition_penalty=1.3,
                   presence_penalty=0.5, frequency_penalty=2.0)
        print(json.dumps({{"tokens": r.tokens}}))
    """, tmp_path)
    assert out["tokens"] == ref["tokens"], (out, ref["tokens"])


SPEC_PROMPT = "one two three four one two three four one two three four one two three four"


def test_speculation_keeps_greedy_tokens_and_checks_its_range(venv_python, tmp_path):
    ref = qhx_generate(["-p", SPEC_PROMPT])
    out = run_py(venv_python, f"""
        s = qhexrt.Pipeline({str(CHECKPOINT)!r}).session()
        plain = s.send({SPEC_PROMPT!r}, max_tokens={MAX_NEW}, temperature=0)
        s.reset()
        r = s.send({SPEC_PROMPT!r}, max_tokens={MAX_NEW}, temperature=0, speculate=4)
        s.reset()
        try:
            s.send("x", max_tokens=2, speculate=99)
            bad = None
        except qhexrt.Error as e:
            bad = str(e)
        print(json.dumps({{"tokens": r.tokens, "steps": r.timings.decode_steps,
                          "plain_steps": plain.timings.decode_steps, "bad": bad}}))
    """, tmp_path)
    assert out["tokens"] == ref["tokens"], (out, ref["tokens"])
    assert out["steps"] < out["plain_steps"], out  # drafts were accepted: speculation ran
    assert out["bad"] is not None and "speculate" in out["bad"], out


def test_image_in_every_form_gives_the_same_tokens(venv_python, tmp_path):
    ref = qhx_generate(["-p", "Describe this image.", "-i", str(IMAGE)])
    out = run_py(venv_python, f"""
        import pathlib
        import numpy as np
        from PIL import Image
        path = {str(IMAGE)!r}
        forms = {{"str": path, "Path": pathlib.Path(path), "bytes": pathlib.Path(path).read_bytes(),
                  "PIL": Image.open(path), "numpy": np.asarray(Image.open(path).convert("RGB"))}}
        pipe = qhexrt.Pipeline({str(CHECKPOINT)!r}, image_cache_mb=0)
        got = {{}}
        for name, image in forms.items():
            r = pipe.session().send("Describe this image.", images=[image], max_tokens={MAX_NEW}, temperature=0)
            got[name] = {{"tokens": r.tokens, "image_tokens": r.timings.image_tokens,
                         "encoded": r.timings.images_encoded}}
        print(json.dumps(got))
    """, tmp_path)
    for name, r in out.items():
        assert r["tokens"] == ref["tokens"], (name, r, ref["tokens"])
        assert r["image_tokens"] == ref["timings"]["image_tokens"] > 0 and r["encoded"] == 1, (name, r)


def test_streaming_joins_to_the_text_and_a_closed_stream_cancels(venv_python, tmp_path):
    out = run_py(venv_python, f"""
        pipe = qhexrt.Pipeline({str(CHECKPOINT)!r})
        whole = pipe.session().send({PROMPT!r}, max_tokens={MAX_NEW}, temperature=0)
        stream = pipe.session().send({PROMPT!r}, stream=True, max_tokens={MAX_NEW}, temperature=0)
        pieces = list(stream)
        s = pipe.session()
        early = s.send({PROMPT!r}, stream=True, max_tokens=200, temperature=0)
        first = next(early)
        early.close()
        print(json.dumps({{"whole": whole.text, "pieces": pieces, "streamed": stream.result.text,
                          "tokens": [whole.tokens, stream.result.tokens], "first": first,
                          "cancelled": early.result.stop_reason, "n_cancelled": len(early.result.tokens),
                          "messages": [[m.role, m.text] for m in s.messages]}}))
    """, tmp_path)
    assert len(out["pieces"]) > 1, out
    assert "".join(out["pieces"]) == out["whole"] == out["streamed"], out
    assert out["tokens"][0] == out["tokens"][1]
    assert out["first"] and out["cancelled"] == "cancelled" and out["n_cancelled"] < 200, out
    assert out["messages"][0] == ["user", PROMPT], out


def test_second_turn_reports_cached_tokens(venv_python, tmp_path):
    out = run_py(venv_python, f"""
        pipe = qhexrt.Pipeline({str(CHECKPOINT)!r})
        s = pipe.session(system="You are terse.")
        a = s.send("Describe this image.", images=[{str(IMAGE)!r}], max_tokens=6, temperature=0)
        b = s.send("And the colours?", max_tokens=6, temperature=0)
        roles = [m.role for m in s.messages]
        kinds = [p["type"] for p in s.messages[1].content]
        s.reset()
        c = s.send("Hello", max_tokens=4, temperature=0)
        print(json.dumps({{"a": [a.prompt_tokens, a.cached_tokens], "b": [b.prompt_tokens, b.cached_tokens],
                          "hits": b.timings.image_cache_hits, "roles": roles, "kinds": kinds,
                          "after_reset": [m.role for m in s.messages], "c_cached": c.cached_tokens}}))
    """, tmp_path)
    assert out["a"][1] == 0, out
    assert out["b"][1] > out["a"][0] - 8 and out["b"][0] > out["b"][1], out  # the whole first turn is reused
    assert out["roles"] == ["system", "user", "assistant", "user", "assistant"], out
    assert out["kinds"] == ["image", "text"], out
    assert out["after_reset"] == ["system", "user", "assistant"], out


def test_errors_raise_qhexrt_error_with_the_message(venv_python, tmp_path):
    bad_manifest = tmp_path / "bad_manifest.json"
    bad_manifest.write_text('{"version": 1, "graphs": 7}')
    out = run_py(venv_python, f"""
        def error_of(fn):
            try:
                fn()
            except qhexrt.Error as e:
                return [type(e).__name__, str(e), e.status]
            return None
        pipe = qhexrt.Pipeline({str(CHECKPOINT)!r})
        s = pipe.session()
        out = {{
            "missing_image": error_of(lambda: s.send("x", images=["/nonexistent/cat.png"], max_tokens=2)),
            "bad_bytes": error_of(lambda: s.send("x", images=[b"this is not an image"], max_tokens=2)),
            "bad_manifest": error_of(lambda: qhexrt.Pipeline({str(bad_manifest)!r})),
            "missing_path": error_of(lambda: qhexrt.Pipeline("/nonexistent/bundle")),
            "bad_sampling": error_of(lambda: s.send("x", max_tokens=2, top_p=7.0)),
            "messages_after": len(s.messages),
        }}
        print(json.dumps(out))
    """, tmp_path)
    print(json.dumps(out, indent=1))
    for key in ("missing_image", "bad_bytes", "bad_manifest", "missing_path", "bad_sampling"):
        assert out[key] is not None and out[key][0] == "Error", (key, out[key])
    assert "/nonexistent/cat.png" in out["missing_image"][1], out
    assert "image in memory" in out["bad_bytes"][1], out
    assert "bad_manifest.json" in out["bad_manifest"][1], out
    assert "/nonexistent/bundle" in out["missing_path"][1], out
    assert "top_p" in out["bad_sampling"][1], out
    assert out["messages_after"] == 0  # a failed send appends nothing
