"""The NPU path end to end: qnn-htp bundles of the tiny checkpoints (scripts/qnn_bundles.sh:
`qhx_export --target qnn-htp --soc SM8750`), run by the seed's command
`qhx_generate MANIFEST libQnnHtp.so libQnnSystem.so DIR MAX_TOKENS PROMPT [IMAGE]` in x86-64 HTP
emulation, against the CPU backend on the same int8 weights (a CPU w8 bundle exported with the
same options, activations f32: the HTP keeps activations in fp16, not int8).

What must hold, for image -> text and text chat on both tiny configs, over 16 greedy steps:
- the QNN run follows the CPU's tokens (teacher-forced along them, so each step's logits are
  compared on the same prefix): at every step its greedy choice is the CPU's, except where the
  CPU's top two logits are closer than the two backends differ there (an fp16 rounding may flip
  a near-tie; such steps are listed);
- the logits' cosine at every step >= 0.9999;
- the image features and DeepStack features the vision graph returns: cosine >= 0.9999.
A free-running seed command (no forcing) is also checked to give the CPU's greedy tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO_ROOT, cache_dir, model_name, tool_path
import export_util  # noqa: E402

STEPS = 16
IMAGE = REPO_ROOT / "assets" / "sample.png"
PROMPTS = {"vlm": "Describe this image.", "text": "What is the capital of France?"}
MIN_COSINE = 0.9999


def seed_manifest(cfg: str, kind: str) -> str:
    """The file name qhx_export gives the manifest of `kind` of cfg's bundles here (docs/bundle.md)."""
    return f"{model_name(cache_dir() / 'reference' / cfg / 'checkpoint')}-{kind}-256.json"


W4_BLOCK = {"tiny_a": "64", "tiny_b": "32"}
SHORT_BLOCK = 32  # the short prefill graph of bundles with --prefill-chunk 64  # tiny_b's K = 96 and 160 take blocks of 32


def safetensors_header(path: Path) -> dict:
    with open(path, "rb") as f:
        return json.loads(f.read(int.from_bytes(f.read(8), "little")))


def qnn_bundle(cfg: str, weights: str = "w8") -> Path:
    d = cache_dir() / "qnn" / "bundles" / (cfg if weights == "w8" else f"{cfg}-{weights}")
    if not (d / "qnn_graphs.json").is_file():
        pytest.fail(f"{d} holds no qnn-htp bundle: run scripts/qnn_bundles.sh after the build")
    return d


def run(args: list[str], timeout: float = 900) -> subprocess.CompletedProcess[bytes]:
    p = subprocess.run([str(tool_path("qhx_generate")), *args], capture_output=True, timeout=timeout, check=False)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    return p


def last_json(p: subprocess.CompletedProcess[bytes]) -> dict:
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def cpu_bundle(tmp_path_factory, cfg: str, weights: str) -> Path:
    """A CPU bundle of the checkpoint with the qnn bundle's options, with f32-activation manifests."""
    d = tmp_path_factory.mktemp(f"cpu_{cfg}_{weights}")
    extra = ["--w4-scales", "lpbq", "--w4-block", W4_BLOCK[cfg]] if weights == "w4" else []
    p = subprocess.run([str(tool_path("qhx_export")), "--hf", str(cache_dir() / "reference" / cfg / "checkpoint"),
                        "--out", str(d), "--weights", weights, *extra, "--image-size", "256", "--prefill-chunk", "64",
                        "--context", "384", "-q"], capture_output=True, check=False)
    assert p.returncode == 0, p.stderr.decode()
    for kind in ("vlm", "text"):
        export_util.with_activations(d / seed_manifest(cfg, kind), "f32", d / f"{kind}-f32.json")
    return d


@pytest.fixture(scope="module")
def cpu_bundles(tmp_path_factory) -> dict[str, Path]:
    """CPU w8 bundles of the same checkpoints and options, with f32 activations."""
    return {cfg: cpu_bundle(tmp_path_factory, cfg, "w8") for cfg in ("tiny_a", "tiny_b")}


@pytest.fixture(scope="module")
def cpu_w4_bundles(tmp_path_factory) -> dict[str, Path]:
    """CPU w4 bundles (the same 4-bit weights as the w4 qnn bundles), with f32 activations."""
    return {cfg: cpu_bundle(tmp_path_factory, cfg, "w4") for cfg in ("tiny_a", "tiny_b")}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("weights", ["w8", "w4"])
@pytest.mark.parametrize("kind", ["vlm", "text"])
@pytest.mark.parametrize("cfg", ["tiny_a", "tiny_b"])
def test_seed_command_follows_the_cpu_backend(cfg, kind, weights, request, tmp_path):
    """16 steps of the seed's command on the HTP against the CPU backend on the same int8 (w8)
    or 4-bit (w4) weights with f32 activations, teacher-forced along the CPU's greedy tokens."""
    bundle = qnn_bundle(cfg, weights)
    cpu_bundles = request.getfixturevalue("cpu_bundles" if weights == "w8" else "cpu_w4_bundles")
    image = [str(IMAGE)] if kind == "vlm" else []
    cpu_dir, qnn_dir = tmp_path / "cpu", tmp_path / "qnn"
    cpu = last_json(run(["-m", str(cpu_bundles[cfg] / f"{kind}-f32.json"), "-p", PROMPTS[kind],
                         *sum((["--image", i] for i in image), []), "-n", str(STEPS), "--temp", "0", "--json",
                         "--dump-logits", str(tmp_path / "cpu.npy"), "--dump-dir", str(cpu_dir)]))
    tokens = cpu["tokens"]
    assert len(tokens) == STEPS
    qnn = last_json(run([seed_manifest(cfg, kind), "libQnnHtp.so", "libQnnSystem.so", str(bundle), str(STEPS),
                         PROMPTS[kind], *image, "--temp", "0", "--json",
                         "--force-tokens", ",".join(map(str, tokens)),
                         "--dump-logits", str(tmp_path / "qnn.npy"), "--dump-dir", str(qnn_dir)]))
    assert qnn["prompt_tokens"] == cpu["prompt_tokens"]
    assert qnn["tokens"] == tokens
    lc, lq = np.load(tmp_path / "cpu.npy"), np.load(tmp_path / "qnn.npy")
    assert lc.shape == lq.shape == (STEPS, lc.shape[1])
    flips, worst = [], 1.0
    for t in range(STEPS):
        c = cosine(lc[t], lq[t])
        worst = min(worst, c)
        assert c >= MIN_COSINE, f"step {t}: logits cosine {c:.7f} < {MIN_COSINE}"
        pick = int(np.argmax(lq[t]))
        if pick != tokens[t]:
            gap = float(lc[t, tokens[t]] - lc[t, pick])            # the CPU's margin between the two
            diff = float(np.max(np.abs(lc[t] - lq[t])))            # how far the backends differ at this step
            assert gap <= 2 * diff, f"step {t}: HTP picks {pick}, CPU {tokens[t]} by a margin {gap} > 2x {diff}"
            flips.append((t, tokens[t], pick, gap))
    print(f"{cfg} {weights} {kind}: {STEPS} steps, worst logits cosine {worst:.7f}, near-tie flips {flips}")
    if kind == "vlm":
        for name in ("vision.image_embeds", "vision.deepstack_all"):
            a, b = np.load(cpu_dir / f"{name}.npy"), np.load(qnn_dir / f"{name}.npy")
            assert a.shape == b.shape, name
            c = cosine(a, b)
            print(f"{cfg} {weights} {name}: cosine {c:.7f}")
            assert c >= MIN_COSINE, f"{name}: cosine {c:.7f}"


def test_free_running_seed_command_gives_the_cpu_greedy_tokens(cpu_bundles):
    """The seed's command exactly as the card writes it (plus --temp 0 --json)."""
    bundle = qnn_bundle("tiny_a")
    cpu = last_json(run(["-m", str(cpu_bundles["tiny_a"] / "vlm-f32.json"), "-p", PROMPTS["vlm"], "--image", str(IMAGE),
                         "-n", "8", "--temp", "0", "--json"]))
    env_cwd = bundle  # the card runs it from the bundle folder: DIR is "."
    p = subprocess.run([str(tool_path("qhx_generate")), seed_manifest("tiny_a", "vlm"), "libQnnHtp.so",
                        "libQnnSystem.so", ".", "8", PROMPTS["vlm"], str(IMAGE), "--temp", "0", "--json"], cwd=env_cwd,
                       capture_output=True, timeout=900, check=False, env=dict(os.environ))
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    assert last_json(p)["tokens"] == cpu["tokens"]


@pytest.mark.parametrize("cfg", ["tiny_a", "tiny_b"])
def test_a_w4_bundle_holds_half_the_decoder_bytes_and_an_int8_lm_head(cfg):
    w8 = json.loads((qnn_bundle(cfg) / "qnn_graphs.json").read_text())
    w4 = json.loads((qnn_bundle(cfg, "w4") / "qnn_graphs.json").read_text())
    assert (w8["weights"], w4["weights"]) == ("w8", "w4")
    assert [p["layers"] for p in w4["llm_parts"]] == [p["layers"] for p in w8["llm_parts"]]
    ck = safetensors_header(cache_dir() / "reference" / cfg / "checkpoint" / "model.safetensors")
    layers = [n for n in ck if n.startswith("model.language_model.layers.") and n.endswith("proj.weight")]
    weights = sum(np.prod(ck[n]["shape"]) for n in layers)
    rows = sum(ck[n]["shape"][0] for n in layers)
    block = int(W4_BLOCK[cfg])
    for p8, p4 in zip(w8["llm_parts"], w4["llm_parts"]):
        share = (p8["layers"][1] - p8["layers"][0]) / json.loads((qnn_bundle(cfg) / "config.json").read_text())[
            "text_config"]["num_hidden_layers"]
        # Every decoder matrix in 4 bits with an fp16 scale per block; w8: a byte and a scale per row.
        assert p8["int8_weight_bytes"] == round(share * (weights + 2 * rows))
        assert p4["int8_weight_bytes"] == round(share * (weights / 2 + 2 * weights / block))
        assert p4["shared"]["bytes"] < p8["shared"]["bytes"]
    assert w4["lm_head"]["bytes"] == w8["lm_head"]["bytes"]             # the lm-head stays int8


def test_the_bundle_holds_the_seed_files_and_every_graph_is_on_the_htp():
    bundle = qnn_bundle("tiny_a")
    for f in ("vis_native_256.bin", "lmhead_wqo.bin", "embed_f16.bin", "vis_patch_embed_f32.bin",
              "vis_patch_embed_bias_f32.bin", "vis_pos_embed_f32.bin", "tokenizer.json",
              seed_manifest("tiny_a", "vlm"), seed_manifest("tiny_a", "text")):
        assert (bundle / f).is_file(), f
    for kind in ("vlm", "text"):
        m = json.loads((bundle / seed_manifest("tiny_a", kind)).read_text())
        assert {g["backend"] for g in m["graphs"].values()} == {"qnn-htp"}, kind
    desc = json.loads((bundle / "qnn_graphs.json").read_text())
    assert desc["soc_model"] == 69 and desc["htp_arch"] == 79
    assert len(desc["llm_parts"]) == 2  # scripts/qnn_bundles.sh splits tiny_a's decoder in two


# --- bad input: each a clear error and a non-zero exit ------------------------------------------

def bundle_copy(tmp_path: Path, edit) -> Path:
    """The tiny_a qnn bundle's files linked into tmp_path, with its VLM manifest edited by `edit`."""
    src = qnn_bundle("tiny_a")
    for f in src.iterdir():
        if f.is_file():
            (tmp_path / f.name).symlink_to(f)
    name = seed_manifest("tiny_a", "vlm")
    m = json.loads((src / name).read_text())
    edit(m, tmp_path)
    (tmp_path / name).unlink()
    (tmp_path / name).write_text(json.dumps(m))
    return tmp_path


def seed_fails(bundle: Path, *needles: str, libs=("libQnnHtp.so", "libQnnSystem.so"), prompt=PROMPTS["vlm"],
               image=True) -> str:
    p = subprocess.run([str(tool_path("qhx_generate")), seed_manifest("tiny_a", "vlm"), *libs, str(bundle), "4", prompt,
                        *([str(IMAGE)] if image else [])], capture_output=True, timeout=600, check=False)
    err = p.stderr.decode(errors="replace")
    assert p.returncode != 0, err
    assert "Segmentation" not in err and p.returncode > 0, err
    for n in needles:
        assert n in err, f"{n!r} not in: {err}"
    return err


def test_binary_for_another_soc(tmp_path):
    def edit(m, _):
        m["graphs"]["vision"]["soc_model"] = 57
    seed_fails(bundle_copy(tmp_path, edit), "vis_native_256.bin", "SoC model 69", "57 (SM8650")


def test_truncated_binary(tmp_path):
    def edit(m, d):
        src = qnn_bundle("tiny_a") / "vis_native_256.bin"
        (d / "cut.bin").write_bytes(src.read_bytes()[:4096])
        m["graphs"]["vision"]["context_binary"] = "cut.bin"
    seed_fails(bundle_copy(tmp_path, edit), "cut.bin", "QnnSystemContext_getBinaryInfo failed")


def test_corrupt_binary(tmp_path):
    def edit(m, d):
        raw = bytearray((qnn_bundle("tiny_a") / "lmhead_wqo.bin").read_bytes())
        raw[:64] = b"\xa5" * 64
        (d / "bad.bin").write_bytes(bytes(raw))
        m["graphs"]["lm_head"]["context_binary"] = "bad.bin"
    seed_fails(bundle_copy(tmp_path, edit), "bad.bin", "error")


def test_missing_libraries():
    seed_fails(qnn_bundle("tiny_a"), "/nowhere/libQnnHtp.so", "QHX_QNN_LIB_DIR",
               libs=("/nowhere/libQnnHtp.so", "/nowhere/libQnnSystem.so"))


def test_graph_name_absent_from_the_context(tmp_path):
    def edit(m, _):
        m["graphs"]["decode"]["parts"][0]["emulator_graph"] = "token_ar1_cl384"
    seed_fails(bundle_copy(tmp_path, edit), "token_ar1_cl384", "it holds")


def test_signature_that_does_not_match_the_binary(tmp_path):
    def edit(m, _):  # the vision entry pointing at the lm-head's binary
        m["graphs"]["vision"]["context_binary"] = "lmhead_wqo.bin"
        del m["graphs"]["vision"]["graph"]
    seed_fails(bundle_copy(tmp_path, edit), "vision", "has no input named \"hidden\"")


def test_a_decoder_part_that_is_no_decoder(tmp_path):
    def edit(m, _):
        m["graphs"]["prefill"]["parts"].append({"context_binary": "lmhead_wqo.bin"})
    seed_fails(bundle_copy(tmp_path, edit), "parts[", "past_key")


def test_prompt_longer_than_the_fixed_context():
    seed_fails(qnn_bundle("tiny_a"), "context", prompt="word " * 400, image=False)


def test_a_session_on_the_htp_reuses_its_cache_and_follows_the_cpu(cpu_bundles, tmp_path):
    """Two turns through one session (--replay): the second prefills only what the cache lacks."""
    conv = tmp_path / "conv.json"
    conv.write_text(json.dumps([{"role": "user", "content": "What is the capital of France?"},
                                {"role": "assistant", "content": "(replaced)"},
                                {"role": "user", "content": "And of Italy?"}]))
    args = ["--messages", str(conv), "--replay", "-n", "4", "--temp", "0", "--json"]

    def turns(p):
        return [json.loads(line) for line in p.stdout.decode().strip().splitlines() if line.startswith("{")]

    cpu = turns(run(["-m", str(cpu_bundles["tiny_b"] / "text-f32.json"), *args]))
    qnn = turns(run(["-m", str(qnn_bundle("tiny_b") / seed_manifest("tiny_b", "text")), *args]))
    assert len(cpu) == len(qnn) == 2
    for c, q in zip(cpu, qnn):
        assert q["prompt_tokens"] == c["prompt_tokens"]
        assert q["tokens"] == c["tokens"]
    assert qnn[0]["cached_tokens"] == 0
    assert qnn[1]["cached_tokens"] >= len(qnn[0]["prompt_tokens"])
    assert qnn[1]["cached_tokens"] == cpu[1]["cached_tokens"]
    # The follow-up's few new tokens run one call of the short graph (block 32), not the
    # prefill graph's 64: its padding says which.
    new = len(qnn[1]["prompt_tokens"]) - qnn[1]["cached_tokens"]
    assert 0 < new < SHORT_BLOCK
    prompt_calls = qnn[1]["qnn"]["graph_calls"] - qnn[1]["qnn"]["decode_calls"]
    assert (prompt_calls, qnn[1]["qnn"]["padded_tokens"]) == (1, SHORT_BLOCK - new), qnn[1]["qnn"]


def text_run(bundle: Path, cfg: str, prompt: str, n: int, *extra: str) -> dict:
    return last_json(run([seed_manifest(cfg, "text"), "libQnnHtp.so", "libQnnSystem.so", str(bundle), str(n), prompt,
                          "--temp", "0", "--json", *extra]))


def test_the_doctor_reports_a_decoder_context_against_the_device_limit():
    bundle = qnn_bundle("tiny_a")
    p = subprocess.run([str(tool_path("qhx_doctor")), "--json", str(bundle / seed_manifest("tiny_a", "text"))],
                       capture_output=True, timeout=300, check=False)
    n = json.loads(p.stdout.decode())["manifest"]["npu_context"]
    desc = json.loads((bundle / "qnn_graphs.json").read_text())
    assert n["context_length"] == 384 and n["limit_bytes"] == 3_500_000_000
    assert n["binary_bytes"] == max(part["shared"]["bytes"] for part in desc["llm_parts"])
    assert n["binary_bytes"] + n["kv_bytes"] < n["per_context_bytes"] < n["limit_bytes"]


def test_a_long_text_prompt_is_prefilled_in_blocks():
    """The text manifest prefills through the block graphs: a 40-token prompt takes one
    64-row call (the cheapest mix, by the manifest's block_knee), not 40 decode calls."""
    prompt = ("Tell me everything you know about the rivers, the mountains, the lakes, the food and the old cities "
              "of northern Italy, and then about its history, its painters and its music, please.")
    r = text_run(qnn_bundle("tiny_a"), "tiny_a", prompt, 2)
    assert len(r["prompt_tokens"]) >= 40
    q = r["qnn"]
    assert q["graph_calls"] - q["decode_calls"] == 1 and q["padded_tokens"] == 64 - len(r["prompt_tokens"]), q


def test_speculation_on_the_htp_gives_the_plain_tokens_in_fewer_calls():
    bundle = qnn_bundle("tiny_a")
    plain = text_run(bundle, "tiny_a", PROMPTS["text"], 16)
    spec = text_run(bundle, "tiny_a", PROMPTS["text"], 16, "--speculate", "ngram:4")
    assert spec["tokens"] == plain["tokens"]
    assert spec["draft_tokens"] > 0 and spec["accepted_tokens"] > 0
    assert spec["qnn"]["decode_calls"] < plain["qnn"]["decode_calls"], (spec["qnn"], plain["qnn"])
    print(f"tiny_a: {plain['qnn']['decode_calls']} decode calls plain, {spec['qnn']['decode_calls']} with "
          f"ngram:4 ({spec['accepted_tokens']}/{spec['draft_tokens']} drafts accepted)")
    p = subprocess.run([str(tool_path("qhx_generate")), seed_manifest("tiny_a", "text"), "libQnnHtp.so",
                        "libQnnSystem.so", str(bundle), "4", PROMPTS["text"], "--speculate", "ngram:5"],
                       capture_output=True, timeout=300, check=False)
    assert p.returncode == 1
    assert b"speculate 5 is beyond this plan's verify graph" in p.stderr and b"at most 4" in p.stderr, p.stderr


def test_host_bytes_per_decode_step_do_not_grow_with_the_context(tmp_path):
    """The KV cache is bound in place: a decode step costs the host the same at context 384
    and 4,096 (the lm-head's logits, the block's inputs, one mask column, the new rows)."""
    long = tmp_path / "cl4096"
    p = subprocess.run([str(tool_path("qhx_export")), "--hf", str(cache_dir() / "reference" / "tiny_a" / "checkpoint"),
                        "--out", str(long), "--target", "qnn-htp", "--soc", "SM8750", "--weights", "w8",
                        "--image-size", "256", "--prefill-chunk", "64", "--context", "4096", "--qnn-parts", "2", "-q"],
                       capture_output=True, timeout=900, check=False)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    assert b"device memory per decoder context" in p.stdout and b"at context 4096" in p.stdout, p.stdout
    short = text_run(qnn_bundle("tiny_a"), "tiny_a", PROMPTS["text"], 4)
    big = text_run(long, "tiny_a", PROMPTS["text"], 4)
    assert big["tokens"] == short["tokens"]
    assert big["qnn"]["host_bytes_per_step"] == short["qnn"]["host_bytes_per_step"] > 0, (big["qnn"], short["qnn"])
    desc = json.loads((long / "qnn_graphs.json").read_text())
    assert desc["context_length"] == 4096 and desc["device_memory"]["per_context_bytes"] < 3.5e9


# --- the generators' own checks (tools/qnn/check_*.py, in the QNN venv) -------------------------
# Finer than the end-to-end comparison: on tiny random checkpoints a wrong rope in the vision
# graph still gives features of cosine 0.99999, so the vision check compares each block's update
# against the CPU's, and the text check runs each decoder part against a numpy fp32 reference.

def qnn_python() -> Path:
    p = cache_dir() / "qnn" / "venv" / "bin" / "python"
    if not p.is_file():
        pytest.fail(f"{p} missing: run scripts/setup_qnn.sh")
    return p


@pytest.mark.parametrize("weights", ["w8", "w4"])
@pytest.mark.parametrize("cfg", ["tiny_a", "tiny_b"])
def test_text_graphs_match_a_numpy_reference(cfg, weights, request):
    bundles = request.getfixturevalue("cpu_bundles" if weights == "w8" else "cpu_w4_bundles")
    p = subprocess.run([str(qnn_python()), str(REPO_ROOT / "tools/qnn/check_text_graphs.py"),
                        "--bundle", str(bundles[cfg]), "--graphs", str(qnn_bundle(cfg, weights))],
                       capture_output=True, timeout=900, check=False)
    out = p.stdout.decode(errors="replace")
    print(out)
    assert p.returncode == 0, out[-3000:] + p.stderr.decode(errors="replace")[-3000:]


@pytest.mark.parametrize("cfg", ["tiny_a", "tiny_b"])
def test_vision_graph_blocks_match_the_cpu(cfg, cpu_bundles, tmp_path):
    dump = tmp_path / "dump"
    run(["-m", str(cpu_bundles[cfg] / "vlm-f32.json"), "-p", PROMPTS["vlm"], "--image", str(IMAGE), "-n", "1",
         "--temp", "0", "--dump-dir", str(dump)])
    p = subprocess.run([str(qnn_python()), str(REPO_ROOT / "tools/qnn/check_vision_graph.py"),
                        "--bundle", str(cpu_bundles[cfg]), "--dump", str(dump), "--binary-dir", str(tmp_path / "bin")],
                       capture_output=True, timeout=900, check=False)
    out = p.stdout.decode(errors="replace")
    print(out)
    assert p.returncode == 0, out[-3000:] + p.stderr.decode(errors="replace")[-3000:]


def test_export_gate_on_a_qnn_bundle(tmp_path):
    """qhx_export --target qnn-htp --verify runs the bundle in emulation against the fp32 source."""
    p = subprocess.run([str(tool_path("qhx_export")), "--hf", str(cache_dir() / "reference" / "tiny_b" / "checkpoint"),
                        "--out", str(tmp_path / "b"), "--target", "qnn-htp", "--soc", "SM8750", "--image-size", "256",
                        "--prefill-chunk", "64", "--context", "384", "-q", "--verify"],
                       capture_output=True, timeout=900, check=False)
    out = p.stdout.decode()
    assert p.returncode == 0, out + p.stderr.decode(errors="replace")[-3000:]
    assert "verify: passed" in out and "verify image" in out
    assert not (tmp_path / "b" / ".cpu-w8").exists()  # the staging bundle is gone


@pytest.mark.parametrize("args,needles", [
    (["--weights", "f16"], ["--target qnn-htp", "--weights w8 or w4", "not f16"]),
    (["--weights", "w4"], ["hidden_size", "K = 96", "not a multiple of the w4 block (64 columns)", "--w4-block 32"]),
    (["--prefill-chunk", "384"], ["--prefill-chunk (384)", "below --context (384)"]),
    (["--soc", "SM8450"], ["--soc"]),
    (["--context", "300000"], ["--context 300000", "beyond the model's 262144 positions"]),
    (["--context", "262144", "--prefill-chunk", "1024"], ["MB of the device's memory", "attention scores",
                                                         "a device's process domain holds"]),
    (["--verify-block", "64", "--prefill-chunk", "64"], ["--verify-block (64)"]),
])
def test_export_refuses_what_a_qnn_bundle_cannot_be(args, needles, tmp_path):
    p = subprocess.run([str(tool_path("qhx_export")), "--hf", str(cache_dir() / "reference" / "tiny_b" / "checkpoint"),
                        "--out", str(tmp_path / "b"), "--target", "qnn-htp", "--image-size", "256",
                        *([] if "--context" in args else ["--context", "384"]), *args, "-q"],
                       capture_output=True, timeout=300, check=False)
    err = p.stderr.decode() + p.stdout.decode()
    assert p.returncode != 0
    assert not (tmp_path / "b").exists()  # refused before any work
    for n in needles:
        assert n in err, f"{n!r} not in {err}"


def test_the_device_time_model_is_calibrated_and_prices_the_bundle():
    """qhx_bench --npu-model: the reference design's three SM8750 figures come back exactly
    (the model's three constants are solved from them), and the bundle's table is consistent."""
    bundle = qnn_bundle("tiny_a")
    p = subprocess.run([str(tool_path("qhx_bench")), "--npu-model", str(bundle), "--soc", "SM8750", "--json"],
                       capture_output=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr.decode()
    j = json.loads(p.stdout.decode())
    for graph, (predicted, measured) in j["calibration"].items():
        assert abs(predicted - measured) < 1e-6, (graph, predicted, measured)
    w8, w4 = j["w8"], j["w4"]
    assert [g["graph"] for g in w8["graphs"]] == ["vision", "prefill", "short", "verify", "decode", "lm_head"]
    assert [g["rows"] for g in w8["graphs"]][1:5] == [64, 32, 5, 1]  # the bundle's blocks
    assert w8["context"] == 384 and j["bundle_weights"] == "w8"
    assert w4["decode_ms_per_token"] < w8["decode_ms_per_token"]
    assert w8["spec_ms_per_token"] == sorted(w8["spec_ms_per_token"], reverse=True)  # higher acceptance, faster
    bad = subprocess.run([str(tool_path("qhx_bench")), "--npu-model", str(bundle), "--soc", "SM8450"],
                         capture_output=True, timeout=60, check=False)
    assert bad.returncode != 0 and b"--soc" in bad.stderr
