"""Parity of build/bin/qhx_tokenize with Hugging Face `tokenizers` on the real Qwen3
tokenizer.json, over the ~6,000-string corpus of tokenizer_corpus.py; plus the
tool's error behaviour.

The tool runs once per direction over the whole corpus (JSON Lines on stdin).
"""

from __future__ import annotations

import random
import re
import unicodedata
from pathlib import Path

import pytest

import tokenizer_corpus
from conftest import jsonl, parse_json_lines, run_tool, split_lines, stderr_text

MAX_REPORTED = 10
VOCAB_SIZE = 151669


# ---------------------------------------------------------------------------
# helpers


def _short(x: object, limit: int = 300) -> str:
    r = repr(x)
    return r if len(r) <= limit else r[:limit] + f"... ({len(r)} chars)"


def _first_diff(a: list, b: list) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _report(title: str, mismatches: list[str], total: int, checked: int) -> str:
    head = f"{title}: {total} of {checked} differ; the first {min(total, MAX_REPORTED)}:"
    return "\n".join([head, *mismatches[:MAX_REPORTED]])


def _by_category(tagged: list[tuple[str, str]], bad: list[int]) -> str:
    counts: dict[str, int] = {}
    for i in bad:
        counts[tagged[i][0]] = counts.get(tagged[i][0], 0) + 1
    return "\nmismatches by category: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _names_line(stderr: str, n: int) -> bool:
    return re.search(rf"(?i)\bline\s*:?\s*{n}\b", stderr) is not None


def _gpt2_byte_chars() -> dict[int, str]:
    """The GPT-2 byte -> printable character table (spec §7)."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def _encode_mismatch(hf_tokenizer, i: int, cat: str, s: str, mine: object, theirs: list[int]) -> str:
    text = f"[line {i + 1}, {cat}] {_short(s)}\n    ours: {_short(mine, 600)}\n    HF:   {_short(theirs, 600)}"
    if isinstance(mine, list) and all(isinstance(t, int) and 0 <= t < VOCAB_SIZE for t in mine):
        k = _first_diff(mine, theirs)
        lo = max(0, k - 2)
        text += (f"\n    from token {lo}: ours {[hf_tokenizer.id_to_token(t) for t in mine[lo:k + 4]]}"
                 f" vs HF {[hf_tokenizer.id_to_token(t) for t in theirs[lo:k + 4]]}")
    return text


def _tool_ok(proc, what: str) -> None:
    assert proc.returncode == 0, (
        f"qhx_tokenize {what} exited {proc.returncode}; stderr:\n{stderr_text(proc)[:4000]}")


# ---------------------------------------------------------------------------
# fixtures: one tool run per direction


@pytest.fixture(scope="module")
def hf_ids(hf_tokenizer, corpus) -> list[list[int]]:
    encs = hf_tokenizer.encode_batch(corpus, add_special_tokens=False)
    return [e.ids for e in encs]


@pytest.fixture(scope="module")
def qhx_encode_run(qhx_tokenize, tokenizer_json, corpus):
    return run_tool("qhx_tokenize", ["--tokenizer", str(tokenizer_json)],
                    jsonl(corpus, ascii_every_other=True))


@pytest.fixture(scope="module")
def decode_cases(hf_tokenizer, hf_ids) -> list[list[int]]:
    """The HF id lists of the corpus, then extra id lists that decode to invalid or
    partial UTF-8 (compared with HF decode only)."""
    cases = [list(ids) for ids in hf_ids]
    extra: list[list[int]] = [[]]
    for i, ids in enumerate(hf_ids):
        if i % 5 == 0 and len(ids) >= 2:
            extra.append(ids[:-1])
            extra.append(ids[1:])
    byte_ids = {b: hf_tokenizer.token_to_id(c) for b, c in _gpt2_byte_chars().items()}
    assert all(v is not None for v in byte_ids.values())
    extra.extend([byte_ids[b]] for b in range(256))
    extra.append([byte_ids[b] for b in range(256)])
    rng = random.Random(20240611)
    high = list(range(0x80, 0x100))
    for _ in range(300):  # random byte soups: lone lead bytes, overlongs, surrogates, > U+10FFFF
        n = rng.randint(1, 8)
        extra.append([byte_ids[rng.choice(high) if rng.random() < 0.8 else rng.randrange(0x80)]
                      for _ in range(n)])
    for _ in range(300):  # random ids over the whole vocabulary, added tokens included
        n = rng.randint(1, 20)
        extra.append([rng.randrange(VOCAB_SIZE) if rng.random() < 0.9
                      else rng.randrange(151643, VOCAB_SIZE) for _ in range(n)])
    extra.append(list(range(151643, VOCAB_SIZE)))
    extra.append([byte_ids[0xE4], 151645, byte_ids[0xB8], byte_ids[0xAD]])
    return cases + extra


@pytest.fixture(scope="module")
def qhx_decode_run(qhx_tokenize, tokenizer_json, decode_cases):
    return run_tool("qhx_tokenize", ["--tokenizer", str(tokenizer_json), "--decode"],
                    jsonl(decode_cases))


# ---------------------------------------------------------------------------
# the corpus itself


def test_corpus_size_and_validity(corpus):
    assert len(corpus) >= 5000
    assert len(set(corpus)) == len(corpus)
    for s in corpus:
        assert isinstance(s, str)
        s.encode("utf-8")  # raises on a lone surrogate


def test_corpus_is_deterministic(corpus):
    assert tokenizer_corpus.build_corpus() == corpus


def test_corpus_covers_every_category(tagged_corpus):
    seed = tokenizer_corpus.load_seed()
    present = {cat for cat, _ in tagged_corpus}
    for cat in tokenizer_corpus.REQUIRED_SEED_CATEGORIES:
        assert seed.get(cat), f"seed file lacks category {cat!r}"
        assert cat in present, f"no corpus string tagged {cat!r}"
    for cat in tokenizer_corpus.GENERATED_CATEGORIES:
        assert cat in present, f"no corpus string tagged {cat!r}"


ENGLAND = "\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F"
FAMILY = "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466"
REQUIRED_SUBSTRINGS = [
    "\u00a0", "\u2009", "\u3000", "\u2028", "\u2029", "\u0085", "\u180e", "\u200b", "\ufeff",
    "\x0b", "\x0c", "\r\n", "I'M", "DON'T", "we'Ll", "'S", "it'\u017f", "\u2019s",
    "\u216b", "\u00b2\u00b3", "\u00bd", "1,000,000", "\uff11", "\u0661",
    "<|im_start", "im_end|>", "<thi", "<|image_pad|", "<|vision_start|><|image_pad|><|image_pad|>",
    "<think>", "<tool_call>", ENGLAND, FAMILY, "\U0001F3FD", "\U0001F1FA\U0001F1F8",
    "e\u0301", "A\u030a", "\u1100\u1161\u11a8", "e\u0302\u0301", "\U0001D400", "\ue000", "\u0378",
    "    return", "\t", "\n\n\n", "\r\r", "\x7f", "\x00",
    "\u4f60\u597d", "\u3053\u3093\u306b\u3061\u306f", "\uc548\ub155", "\u0645\u0631\u062d\u0628\u0627",
    "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u041f\u0440\u0438\u0432\u0435\u0442", "\u0393\u03b5\u03b9\u03ac",
    "https://", "@example.com", "\\frac", "```", "\U00010330",
] + list(tokenizer_corpus.ADDED_TOKENS) + [chr(c) for c in range(1, 32)]


def test_corpus_contains_required_features(corpus):
    assert "" in corpus
    assert any(s.strip() == "" and s for s in corpus), "no whitespace-only string"
    assert max(len(s.encode("utf-8")) for s in corpus) >= 4000, "no long string"
    assert sum(unicodedata.normalize("NFC", s) != s for s in corpus) >= 100
    missing = [m for m in REQUIRED_SUBSTRINGS if not any(m in s for s in corpus)]
    assert not missing, f"corpus lacks {missing!r}"


# ---------------------------------------------------------------------------
# the reference: facts the parity assertions rely on


def test_hf_reference_sanity(hf_tokenizer, tagged_corpus, corpus, hf_ids):
    assert hf_tokenizer.get_vocab_size(with_added_tokens=True) == VOCAB_SIZE
    assert hf_tokenizer.encode("Describe this image.", add_special_tokens=False).ids == [74785, 419, 2168, 13]
    assert hf_tokenizer.encode("You are a helpful assistant.", add_special_tokens=False).ids == [
        2610, 525, 264, 10950, 17847, 13]
    exempt = tokenizer_corpus.nfc_version_sensitive(tagged_corpus)
    bad = [s for s, ids in zip(corpus, hf_ids) if s not in exempt
           and hf_tokenizer.decode(ids, skip_special_tokens=False) != unicodedata.normalize("NFC", s)]
    assert not bad, f"HF itself does not round-trip {len(bad)} strings, e.g. {_short(bad[:5])}"
    # The exempt strings are there because HF's NFC (Unicode 9.0 data) differs from Python's.
    assert any(hf_tokenizer.normalizer.normalize_str(s) != unicodedata.normalize("NFC", s) for s in exempt)


def test_hf_decode_is_lossy_utf8(hf_tokenizer):
    """HF's decode of raw bytes is UTF-8 with one U+FFFD per maximal invalid
    subsequence, i.e. Python's errors="replace" (spec §7)."""
    byte_ids = {b: hf_tokenizer.token_to_id(c) for b, c in _gpt2_byte_chars().items()}
    rng = random.Random(7)
    for _ in range(2000):
        raw = bytes(rng.choice(range(0x80, 0x100)) if rng.random() < 0.7 else rng.randrange(0x80)
                    for _ in range(rng.randint(1, 8)))
        got = hf_tokenizer.decode([byte_ids[b] for b in raw], skip_special_tokens=False)
        assert got == raw.decode("utf-8", errors="replace"), raw


# ---------------------------------------------------------------------------
# parity


def test_encode_parity(hf_tokenizer, tagged_corpus, corpus, hf_ids, qhx_encode_run):
    _tool_ok(qhx_encode_run, "(encode)")
    ours = parse_json_lines(qhx_encode_run.stdout)
    assert len(ours) == len(corpus), f"{len(ours)} output lines for {len(corpus)} input lines"
    mismatches = []
    total = 0
    for i, (s, theirs, mine) in enumerate(zip(corpus, hf_ids, ours)):
        if mine != theirs:
            total += 1
            if len(mismatches) < MAX_REPORTED:
                mismatches.append(_encode_mismatch(hf_tokenizer, i, tagged_corpus[i][0], s, mine, theirs))
    assert total == 0, _report("encode ids", mismatches, total, len(corpus)) + _by_category(
        tagged_corpus, [i for i, (a, b) in enumerate(zip(ours, hf_ids)) if a != b])


def test_decode_parity(hf_tokenizer, tagged_corpus, corpus, decode_cases, qhx_decode_run):
    """Decoding HF's ids gives NFC(s) (Python's NFC, except for the strings whose
    NFC is Unicode-version sensitive) and HF's decode, for every corpus string;
    the extra id lists are compared with HF's decode."""
    _tool_ok(qhx_decode_run, "--decode")
    exempt = tokenizer_corpus.nfc_version_sensitive(tagged_corpus)
    ours = parse_json_lines(qhx_decode_run.stdout)
    assert len(ours) == len(decode_cases), f"{len(ours)} output lines for {len(decode_cases)} input lines"
    hf_texts = hf_tokenizer.decode_batch(decode_cases, skip_special_tokens=False)
    mismatches = []
    total = 0
    for i, (ids, mine, theirs) in enumerate(zip(decode_cases, ours, hf_texts)):
        expected = [theirs]
        if i < len(corpus) and corpus[i] not in exempt:
            expected.append(unicodedata.normalize("NFC", corpus[i]))
        if any(mine != e for e in expected):
            total += 1
            if len(mismatches) < MAX_REPORTED:
                src = f"{tagged_corpus[i][0]} string {_short(corpus[i])}" if i < len(corpus) else "extra id list"
                mismatches.append(
                    f"[line {i + 1}] {src}\n    ids:  {_short(ids, 400)}\n"
                    f"    ours: {_short(mine)}\n    HF:   {_short(theirs)}"
                    + (f"\n    NFC:  {_short(expected[1])}" if len(expected) > 1 else ""))
    assert total == 0, _report("decoded text", mismatches, total, len(decode_cases))


# ---------------------------------------------------------------------------
# the CLI's behaviour on good and bad input


def _tok_args(tokenizer_json: Path, decode: bool = False) -> list[str]:
    return ["--tokenizer", str(tokenizer_json)] + (["--decode"] if decode else [])


def test_bad_json_line_stops_after_earlier_output(qhx_tokenize, tokenizer_json, hf_tokenizer):
    proc = run_tool("qhx_tokenize", _tok_args(tokenizer_json),
                    b'"hello world"\n"<think>x"\n{"not json\n"never reached"\n')
    assert proc.returncode == 1, stderr_text(proc)
    assert _names_line(stderr_text(proc), 3), stderr_text(proc)
    out = parse_json_lines(proc.stdout)
    assert out == [hf_tokenizer.encode("hello world", add_special_tokens=False).ids,
                   hf_tokenizer.encode("<think>x", add_special_tokens=False).ids]


ENCODE_WRONG = [
    pytest.param(b"42", id="number"),
    pytest.param(b'{"text": "a"}', id="object"),
    pytest.param(b"[1, 2]", id="array"),
    pytest.param(b"null", id="null"),
    pytest.param(b"true", id="bool"),
    pytest.param(b'"\xff\xfe"', id="invalid-utf8"),
    pytest.param(b'"\\ud800"', id="lone-surrogate"),
    pytest.param(b'"a" "b"', id="two-values"),
]
DECODE_WRONG = [
    pytest.param(b'"abc"', id="string"),
    pytest.param(b"42", id="number"),
    pytest.param(b'{"ids": [1]}', id="object"),
    pytest.param(b"null", id="null"),
    pytest.param(b"[1.5]", id="float-id"),
    pytest.param(b'["1"]', id="string-id"),
    pytest.param(b"[[1]]", id="nested"),
    pytest.param(b"[true]", id="bool-id"),
    pytest.param(b"[151669]", id="id-151669"),
    pytest.param(b"[-1]", id="id-minus-1"),
    pytest.param(b"[4294967494]", id="id-2^32+198"),
    pytest.param(b"[-2147483649]", id="id-below-int32"),
    pytest.param(b"[9223372036854775807]", id="id-int64-max"),
    pytest.param(b"[18446744073709551615]", id="id-uint64-max"),
    pytest.param(b"[1e3]", id="id-exponent"),
]


@pytest.mark.parametrize("bad", ENCODE_WRONG)
def test_encode_rejects_wrong_line(qhx_tokenize, tokenizer_json, bad):
    proc = run_tool("qhx_tokenize", _tok_args(tokenizer_json), b'"ok"\n' + bad + b'\n"after"\n')
    assert proc.returncode == 1, (bad, stderr_text(proc))
    assert _names_line(stderr_text(proc), 2), stderr_text(proc)
    assert split_lines(proc.stdout) == ["[562]"], proc.stdout


@pytest.mark.parametrize("bad", DECODE_WRONG)
def test_decode_rejects_wrong_line(qhx_tokenize, tokenizer_json, bad):
    proc = run_tool("qhx_tokenize", _tok_args(tokenizer_json, decode=True), b"[562]\n" + bad + b"\n[562]\n")
    assert proc.returncode == 1, (bad, stderr_text(proc))
    assert _names_line(stderr_text(proc), 2), stderr_text(proc)
    assert parse_json_lines(proc.stdout) == ["ok"], proc.stdout


def test_decode_accepts_boundary_ids(qhx_tokenize, tokenizer_json, hf_tokenizer):
    cases = [[0], [151642], [151643], [151668], [], [151644, 872, 198]]
    proc = run_tool("qhx_tokenize", _tok_args(tokenizer_json, decode=True), jsonl(cases))
    _tool_ok(proc, "--decode")
    assert parse_json_lines(proc.stdout) == [hf_tokenizer.decode(c, skip_special_tokens=False) for c in cases]


def test_line_endings_and_empty_input(qhx_tokenize, tokenizer_json):
    proc = run_tool("qhx_tokenize", _tok_args(tokenizer_json), b"")
    _tool_ok(proc, "(empty input)")
    assert proc.stdout == b""
    proc = run_tool("qhx_tokenize", _tok_args(tokenizer_json), b'"ok"\n"ok"')  # no final newline
    _tool_ok(proc, "(no final newline)")
    assert split_lines(proc.stdout) == ["[562]", "[562]"]
    proc = run_tool("qhx_tokenize", _tok_args(tokenizer_json), b'"ok"\r\n"ok"\r\n')  # CRLF: \r is JSON whitespace
    _tool_ok(proc, "(CRLF lines)")
    assert split_lines(proc.stdout) == ["[562]", "[562]"]
    proc = run_tool("qhx_tokenize", _tok_args(tokenizer_json, decode=True), b"[562]\r\n[562]")
    _tool_ok(proc, "--decode (CRLF, no final newline)")
    assert parse_json_lines(proc.stdout) == ["ok", "ok"]


def test_missing_tokenizer_file(qhx_tokenize, tmp_path):
    missing = tmp_path / "no_such_dir" / "tokenizer.json"
    proc = run_tool("qhx_tokenize", ["--tokenizer", str(missing)], b'"a"\n')
    assert proc.returncode == 1, stderr_text(proc)
    assert str(missing) in stderr_text(proc), stderr_text(proc)
    assert proc.stdout == b""


def test_truncated_tokenizer_file(qhx_tokenize, tokenizer_json, tmp_path):
    truncated = tmp_path / "truncated_tokenizer.json"
    truncated.write_bytes(tokenizer_json.read_bytes()[:1000])
    proc = run_tool("qhx_tokenize", ["--tokenizer", str(truncated)], b'"a"\n')
    assert proc.returncode == 1, stderr_text(proc)
    assert str(truncated) in stderr_text(proc), stderr_text(proc)
    assert proc.stdout == b""
