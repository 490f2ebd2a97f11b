"""qhx_template (QHexRT's own Jinja renderer) against transformers' apply_chat_template.

For every (template, conversation, add_generation_prompt) the text qhx_template writes must be
byte-identical to what transformers renders with the same variables:
  (a) the tiny checkpoints' Qwen3-VL template (tests/reference/chat_template.py) as the
      checkpoint's processor finds it (ProcessorMixin.get_processor_dict), rendered as
      ProcessorMixin.apply_chat_template does (render_jinja_template with the tokenizer's special
      tokens), and through AutoTokenizer.apply_chat_template on the same directory (AutoProcessor
      itself cannot load without torchvision, see tests/reference/make_image_reference.py);
  (b) the real Qwen3 template with <think> handling and tools, from the npm tokenizer package's
      tokenizer_config.json, through AutoTokenizer.apply_chat_template;
  (c) tests/data/chat_templates/qwen3vl_thinking.jinja, through transformers' own
      render_jinja_template (the function apply_chat_template calls).
The comparison is shown to catch a difference (a deliberately altered template), and the tool's
error path is checked (an {% include %} names the construct and its line).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, stderr_text, tokenizer_json_path, tool_path

sys.path.insert(0, str(REPO_ROOT / "tests" / "reference"))
import build_all  # noqa: E402
import chat_template  # noqa: E402
import make_checkpoint  # noqa: E402
from common import locked, tokenizer_dir  # noqa: E402

THINKING_TEMPLATE = REPO_ROOT / "tests" / "data" / "chat_templates" / "qwen3vl_thinking.jinja"

# ---- conversations ----

IMG = {"type": "image"}
VIDEO = {"type": "video"}


def text(t: str) -> dict:
    return {"type": "text", "text": t}


UNICODE = "héllo 世界 😀 — \u2028 tab\t\"quotes\" \\backslash {{ not jinja }}"

# Content as lists of parts or strings: for the vision-language templates (a) and (c).
VL_CONVERSATIONS: dict[str, tuple[list[dict], dict]] = {
    "text_only": ([{"role": "user", "content": "Hello there"}], {}),
    "text_parts": ([{"role": "user", "content": [text("Hello"), text(" there")]}], {}),
    "system_first": ([{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": [text("Hi")]}], {}),
    "system_parts": ([{"role": "system", "content": [text("Sys as parts")]},
                      {"role": "user", "content": "plain string"}], {}),
    "system_not_first": ([{"role": "user", "content": "Q1"},
                          {"role": "assistant", "content": "A1"},
                          {"role": "system", "content": "Late system"},
                          {"role": "user", "content": [IMG, text("Q2")]}], {}),
    "empty_system": ([{"role": "system", "content": ""},
                      {"role": "user", "content": "Hi"}], {}),
    "image_then_text": ([{"role": "user", "content": [IMG, text("Describe this image.")]}], {}),
    "images_several_turns": ([{"role": "user", "content": [IMG, text("What is this?")]},
                              {"role": "assistant", "content": "A cat."},
                              {"role": "user", "content": [text("And these?"), IMG, IMG]},
                              {"role": "assistant", "content": [text("Two dogs.")]},
                              {"role": "user", "content": "Thanks"}], {}),
    "image_key_forms": ([{"role": "user", "content": [{"type": "image", "image": "file:///a.png"},
                                                      {"image_url": {"url": "http://x/b.png"}},
                                                      {"image": "c.png"}, text("three")]}], {}),
    "video": ([{"role": "user", "content": [VIDEO, text("What happens?")]},
               {"role": "assistant", "content": "It rains."},
               {"role": "user", "content": [{"video": "v.mp4"}, IMG, text("and now")]}], {}),
    "vision_ids": ([{"role": "system", "content": [text("S")]},
                    {"role": "user", "content": [IMG, text("one"), IMG]},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": [VIDEO, IMG, text("more")]}], {"add_vision_id": True}),
    "vision_ids_off": ([{"role": "user", "content": [IMG, VIDEO]}], {"add_vision_id": False}),
    "unicode": ([{"role": "system", "content": UNICODE},
                 {"role": "user", "content": [text(UNICODE), IMG]},
                 {"role": "assistant", "content": UNICODE}], {}),
    "assistant_last": ([{"role": "user", "content": "2+2?"},
                        {"role": "assistant", "content": "4"}], {}),
    "unknown_part_and_role": ([{"role": "user", "content": [{"type": "audio"}, text("x")]},
                               {"role": "other", "content": "ignored"}], {}),
}

# Thinking and tool turns (content strings or parts); for (c).
THINKING_VL_CONVERSATIONS: dict[str, tuple[list[dict], dict]] = {
    "think_in_content": ([{"role": "user", "content": [IMG, text("Why?")]},
                          {"role": "assistant", "content": "<think>\nLook closer.\n</think>\n\nBecause."}], {}),
    "reasoning_content": ([{"role": "user", "content": "Q"},
                           {"role": "assistant", "content": "A", "reasoning_content": "\nthought\n"}], {}),
    "history_thinking_dropped": ([{"role": "user", "content": "Q1"},
                                  {"role": "assistant", "content": "<think>old</think>A1"},
                                  {"role": "user", "content": [IMG, text("Q2")]},
                                  {"role": "assistant", "content": [text("<think>\nnew\n</think>\n\nA2")]}], {}),
    "vl_tools": ([{"role": "system", "content": "Use tools."},
                  {"role": "user", "content": [IMG, text("Where was this taken?")]},
                  {"role": "assistant", "content": "", "reasoning_content": "Need location.",
                   "tool_calls": [{"type": "function", "function": {"name": "geo", "arguments": {"q": "tower", "n": 1}}}]},
                  {"role": "tool", "content": "Paris"},
                  {"role": "tool", "content": [text("France")]},
                  {"role": "assistant", "content": "In Paris."}],
                 {"tools": [{"type": "function", "function": {"name": "geo", "description": "Locate",
                                                              "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]}),
}

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city — in °C",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}

# String content only (the Qwen3 text template concatenates message.content): for (b).
TEXT_CONVERSATIONS: dict[str, tuple[list[dict], dict]] = {
    "text_only": ([{"role": "user", "content": "Hello there"}], {}),
    "system_first": ([{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "Hi"}], {}),
    "system_not_first": ([{"role": "user", "content": "Q1"},
                          {"role": "assistant", "content": "A1"},
                          {"role": "system", "content": "Late system"},
                          {"role": "user", "content": "Q2"}], {}),
    "empty_system": ([{"role": "system", "content": ""},
                      {"role": "user", "content": "Hi"}], {}),
    "multi_turn": ([{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
                    {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"}], {}),
    "reasoning_content_last": ([{"role": "user", "content": "Q"},
                                {"role": "assistant", "content": "Answer", "reasoning_content": "Let me think."}], {}),
    "reasoning_content_none": ([{"role": "user", "content": "Q"},
                                {"role": "assistant", "content": "Answer", "reasoning_content": None}], {}),
    "think_in_content": ([{"role": "user", "content": "Q"},
                          {"role": "assistant", "content": "<think>\nStep 1.\nStep 2.\n</think>\n\nDone."}], {}),
    "history_thinking_dropped": ([{"role": "user", "content": "Q1"},
                                  {"role": "assistant", "content": "<think>\nold\n</think>\n\nA1"},
                                  {"role": "user", "content": "Q2"},
                                  {"role": "assistant", "content": "<think>new</think>A2"}], {}),
    "no_thinking": ([{"role": "user", "content": "Q"}], {"enable_thinking": False}),
    "thinking_on": ([{"role": "user", "content": "Q"}], {"enable_thinking": True}),
    "tools_no_system": ([{"role": "user", "content": "Weather in Paris?"}], {"tools": [WEATHER_TOOL]}),
    "tools_multi_step": ([{"role": "system", "content": "Be helpful."},
                          {"role": "user", "content": "Weather and time in Paris?"},
                          {"role": "assistant", "content": "<think>\nI need two tools.\n</think>\n\nLet me check.",
                           "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                            "arguments": {"city": "Paris", "unit": "c"}}},
                                          {"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
                          {"role": "tool", "content": "{\"temp\": 21}"},
                          {"role": "tool", "content": "14:05"},
                          {"role": "assistant", "content": "",
                           "tool_calls": [{"name": "get_weather", "arguments": {"city": "Lyon"}}]},
                          {"role": "tool", "content": "18"},
                          {"role": "assistant", "content": "Paris: 21 °C at 14:05; Lyon: 18 °C."}],
                         {"tools": [WEATHER_TOOL, TIME_TOOL]}),
    "tool_response_in_user_turn": ([{"role": "user", "content": "Q"},
                                    {"role": "assistant", "content": "",
                                     "tool_calls": [{"function": {"name": "get_time", "arguments": {}}}]},
                                    {"role": "user", "content": "<tool_response>\n12:00\n</tool_response>"},
                                    {"role": "assistant", "content": "<think>ok</think>Noon."}],
                                   {"tools": [TIME_TOOL]}),
    "unicode": ([{"role": "system", "content": UNICODE},
                 {"role": "user", "content": UNICODE},
                 {"role": "assistant", "content": "<think>" + UNICODE + "</think>" + UNICODE}], {}),
}

GEN_PROMPT = [False, True]


# ---- rendering ----

@pytest.fixture(scope="session")
def qhx_template() -> Path:
    path = tool_path("qhx_template")
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} not built: cmake --build build --target qhx_template (or set QHX_BIN)")
    return path


def render_qhx(template: Path, messages: list[dict], add_generation_prompt: bool, context: dict,
               tmp: Path) -> str:
    (tmp / "messages.json").write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    (tmp / "context.json").write_text(json.dumps(context, ensure_ascii=False), encoding="utf-8")
    args = [str(tool_path("qhx_template")), "--template", str(template), "--messages", str(tmp / "messages.json"),
            "--context", str(tmp / "context.json")]
    if add_generation_prompt:
        args.append("--add-generation-prompt")
    proc = subprocess.run(args, capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, stderr_text(proc)
    return proc.stdout.decode("utf-8")


def assert_same(ours: str, ref: str, what: str) -> None:
    if ours == ref:
        return
    at = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
    raise AssertionError(f"{what}: renderings differ at character {at}:\n"
                         f"  qhx_template: {ours[max(0, at - 40):at + 40]!r}\n"
                         f"  transformers: {ref[max(0, at - 40):at + 40]!r}")


@pytest.fixture(scope="session")
def tiny_checkpoint() -> Path:
    """The tiny_a checkpoint directory that transformers wrote (built if missing)."""
    root = build_all.reference_dir("tiny_a")
    with locked(root.parent / ".tiny_a.lock"):
        make_checkpoint.make_checkpoint("tiny_a", root / "checkpoint", tok_dir=tokenizer_dir(), log=lambda *a: None)
    return root / "checkpoint"


def processor_template(ckpt: Path) -> str:
    """The chat template the checkpoint's processor loads, by transformers' own file lookup."""
    from transformers import ProcessorMixin
    processor_dict, _ = ProcessorMixin.get_processor_dict(str(ckpt))
    return processor_dict["chat_template"]


def render_as_processor(ckpt: Path, tokenizer, messages: list[dict], gen: bool, kwargs: dict) -> str:
    """ProcessorMixin.apply_chat_template(messages, tokenize=False, ...) without the processor object."""
    from transformers.utils.chat_template_utils import render_jinja_template
    rendered, _ = render_jinja_template(conversations=[messages], chat_template=processor_template(ckpt),
                                        add_generation_prompt=gen, **kwargs, **tokenizer.special_tokens_map)
    return rendered[0]


@pytest.fixture(scope="session")
def ckpt_tokenizer(tiny_checkpoint: Path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(tiny_checkpoint))


@pytest.fixture(scope="session")
def qwen3_config() -> Path:
    path = tokenizer_json_path().parent / "tokenizer_config.json"
    if not path.is_file():
        pytest.fail(f"{path} not found: run scripts/fetch_tokenizer.sh")
    return path


@pytest.fixture(scope="session")
def qwen3_tokenizer(qwen3_config: Path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(qwen3_config.parent))


def special_tokens(tok) -> dict:
    # apply_chat_template passes these to every template; qhx_template gets them as --context.
    return dict(tok.special_tokens_map)


# ---- (a) the tiny checkpoints' template, via AutoProcessor ----

def test_checkpoint_carries_the_reference_template(tiny_checkpoint: Path, ckpt_tokenizer) -> None:
    assert processor_template(tiny_checkpoint) == chat_template.QWEN3VL_CHAT_TEMPLATE
    assert ckpt_tokenizer.chat_template == chat_template.QWEN3VL_CHAT_TEMPLATE


@pytest.mark.parametrize("gen", GEN_PROMPT, ids=["plain", "gen_prompt"])
@pytest.mark.parametrize("case", sorted(VL_CONVERSATIONS))
def test_qwen3vl_instruct_template(case: str, gen: bool, tiny_checkpoint: Path, ckpt_tokenizer, tmp_path: Path) -> None:
    messages, kwargs = VL_CONVERSATIONS[case]
    ref = render_as_processor(tiny_checkpoint, ckpt_tokenizer, messages, gen, kwargs)
    assert ckpt_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen, **kwargs) == ref
    ours = render_qhx(tiny_checkpoint / "chat_template.json", messages, gen,
                      {**special_tokens(ckpt_tokenizer), **kwargs}, tmp_path)
    assert_same(ours, ref, f"(a) {case}")


def test_checkpoint_directory_resolves_like_the_processor(tiny_checkpoint: Path, ckpt_tokenizer, tmp_path: Path) -> None:
    """qhx_template given a checkpoint directory takes the file transformers takes:
    chat_template.json over chat_template.jinja (processor), chat_template.jinja over
    tokenizer_config.json (tokenizer), and tokenizer_config.json when it is the only one."""
    from transformers import AutoTokenizer
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for f in tiny_checkpoint.iterdir():
        if f.is_file() and f.suffix == ".json":
            shutil.copy(f, ckpt / f.name)
    (ckpt / "chat_template.jinja").write_text("JINJA FILE {{ messages|length }}", encoding="utf-8")
    cfg = json.loads((ckpt / "tokenizer_config.json").read_text(encoding="utf-8"))
    cfg["chat_template"] = "TOKENIZER CONFIG {{ messages|length }}"
    (ckpt / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    messages, _ = VL_CONVERSATIONS["images_several_turns"]

    ref = render_as_processor(ckpt, ckpt_tokenizer, messages, True, {})
    assert ref.startswith("<|im_start|>user")
    assert_same(render_qhx(ckpt, messages, True, {}, tmp_path), ref, "with chat_template.json")

    (ckpt / "chat_template.json").unlink()
    ref = render_as_processor(ckpt, ckpt_tokenizer, messages, False, {})
    assert ref == "JINJA FILE 5"
    assert AutoTokenizer.from_pretrained(str(ckpt)).apply_chat_template(messages, tokenize=False) == ref
    assert_same(render_qhx(ckpt, messages, False, {}, tmp_path), ref, "with chat_template.jinja")

    (ckpt / "chat_template.jinja").unlink()
    ref = AutoTokenizer.from_pretrained(str(ckpt)).apply_chat_template(messages, tokenize=False)
    assert ref == "TOKENIZER CONFIG 5"
    assert_same(render_qhx(ckpt, messages, False, {}, tmp_path), ref, "with tokenizer_config.json only")


# ---- (b) the real Qwen3 template, via AutoTokenizer ----

def test_qwen3_template_is_the_packaged_one(qwen3_config: Path, qwen3_tokenizer) -> None:
    cfg = json.loads(qwen3_config.read_text(encoding="utf-8"))
    assert qwen3_tokenizer.chat_template == cfg["chat_template"]
    assert "<think>" in cfg["chat_template"] and "tool_call" in cfg["chat_template"]


@pytest.mark.parametrize("gen", GEN_PROMPT, ids=["plain", "gen_prompt"])
@pytest.mark.parametrize("case", sorted(TEXT_CONVERSATIONS))
def test_qwen3_template(case: str, gen: bool, qwen3_config: Path, qwen3_tokenizer, tmp_path: Path) -> None:
    messages, kwargs = TEXT_CONVERSATIONS[case]
    ref = qwen3_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen, **kwargs)
    ours = render_qhx(qwen3_config, messages, gen, {**special_tokens(qwen3_tokenizer), **kwargs}, tmp_path)
    assert_same(ours, ref, f"(b) {case}")


# ---- (c) the Qwen3-VL Thinking-style fixture, via render_jinja_template ----

@pytest.mark.parametrize("gen", GEN_PROMPT, ids=["plain", "gen_prompt"])
@pytest.mark.parametrize("case", sorted(VL_CONVERSATIONS) + sorted(THINKING_VL_CONVERSATIONS))
def test_qwen3vl_thinking_template(case: str, gen: bool, tmp_path: Path) -> None:
    from transformers.utils.chat_template_utils import render_jinja_template
    messages, kwargs = {**VL_CONVERSATIONS, **THINKING_VL_CONVERSATIONS}[case]
    kwargs = dict(kwargs)
    tools = kwargs.pop("tools", None)
    rendered, _ = render_jinja_template(conversations=[messages], tools=tools, add_generation_prompt=gen,
                                        chat_template=THINKING_TEMPLATE.read_text(encoding="utf-8"), **kwargs)
    ours = render_qhx(THINKING_TEMPLATE, messages, gen, {"tools": tools, **kwargs}, tmp_path)
    assert_same(ours, rendered[0], f"(c) {case}")
    if gen:
        assert ours.endswith("<|im_start|>assistant\n<think>\n")


# ---- (d) the comparison can fail; the tool's errors ----

def test_a_different_rendering_is_detected(tiny_checkpoint: Path, ckpt_tokenizer, tmp_path: Path) -> None:
    altered = chat_template.QWEN3VL_CHAT_TEMPLATE.replace("<|vision_end|>", "<|vision_end|> ")
    assert altered != chat_template.QWEN3VL_CHAT_TEMPLATE
    path = tmp_path / "altered.jinja"
    path.write_text(altered, encoding="utf-8")
    messages, _ = VL_CONVERSATIONS["images_several_turns"]
    ref = render_as_processor(tiny_checkpoint, ckpt_tokenizer, messages, True, {})
    ours = render_qhx(path, messages, True, {}, tmp_path)
    with pytest.raises(AssertionError, match="renderings differ"):
        assert_same(ours, ref, "altered template")


def test_unsupported_construct_exits_1_naming_it_and_its_line(qhx_template: Path, tmp_path: Path) -> None:
    path = tmp_path / "bad.jinja"
    path.write_text("{%- for m in messages %}{{ m.content }}{% endfor %}\n  {% include 'x' %}\n", encoding="utf-8")
    proc = subprocess.run([str(qhx_template), "--template", str(path)], capture_output=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stdout == b""
    assert stderr_text(proc) == f"qhx_template: error: {path}:2:6: unsupported Jinja construct 'include'\n"


def test_tool_errors(qhx_template: Path, tmp_path: Path) -> None:
    raising = tmp_path / "raise.jinja"
    raising.write_text("{{ raise_exception('Conversation roles must alternate') }}", encoding="utf-8")
    missing = tmp_path / "none.json"
    missing.write_text('{"eos_token": "x"}', encoding="utf-8")
    cases = [
        ([str(raising)], f"{raising}:1:4: raise_exception: Conversation roles must alternate"),
        ([str(missing)], f"{missing}: no \"chat_template\" key"),
        ([str(tmp_path / "absent.jinja")], "cannot open"),
        ([str(tmp_path)], "no chat template"),
    ]
    for args, part in cases:
        proc = subprocess.run([str(qhx_template), "--template", *args], capture_output=True, timeout=60, check=False)
        assert proc.returncode == 1, args
        err = stderr_text(proc)
        assert err.startswith("qhx_template: error: ") and part in err, err


def test_tool_reads_a_template_list_and_the_token_flags(qhx_template: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "tokenizer_config.json"
    cfg.write_text(json.dumps({"chat_template": [
        {"name": "tool_use", "template": "TOOLS"},
        {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"
                                        "{% if add_generation_prompt %}>{% endif %}"}]}), encoding="utf-8")
    from transformers.utils.chat_template_utils import render_jinja_template
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    default = json.loads(cfg.read_text())["chat_template"][1]["template"]
    ref, _ = render_jinja_template(conversations=[messages], chat_template=default, add_generation_prompt=True,
                                   bos_token="<s>", eos_token="</s>")
    (tmp_path / "m.json").write_text(json.dumps(messages))
    proc = subprocess.run([str(qhx_template), "--template", str(cfg), "--messages", str(tmp_path / "m.json"),
                           "--add-generation-prompt", "--bos-token", "<s>", "--eos-token", "</s>"],
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, stderr_text(proc)
    assert proc.stdout.decode() == ref[0] == "<s>a</s>b</s>>"
