"""Deterministic tokenizer test corpus (about 6,000 strings).

The corpus is the hand-assembled fragments of tests/data/tokenizer_corpus_seed.json,
plus strings generated from them with a fixed-seed random.Random:

- every ordered pair of the 26 added tokens;
- long strings (a few kB, and pathological runs of one character class);
- random strings over small alphabets that exercise each alternative of the
  Qwen pre-tokenizer regex (whitespace look-ahead, contractions, punctuation
  runs followed by newlines, digits);
- random code points drawn from long-assigned Unicode blocks;
- concatenations of 2-4 fragments with assorted separators;
- mutations of fragments (insertions of interesting characters, splicing added
  tokens and pieces of them, truncation, reversal, ASCII case changes, ...).

Everything is valid Unicode (no lone surrogates). The generator uses no
locale- or Unicode-version-dependent functions (no str.upper(), no
unicodedata), so the corpus is the same on any Python 3.

    python tests/python/tokenizer_corpus.py OUT.jsonl   # one JSON string per line
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED_PATH = Path(__file__).resolve().parents[1] / "data" / "tokenizer_corpus_seed.json"
TARGET_SIZE = 6000
RANDOM_SEED = 0x51E7  # fixed: the corpus must be the same on every run

# Categories the seed file must provide (the test checks each is present and non-empty).
REQUIRED_SEED_CATEGORIES = (
    "english", "whitespace", "exotic_whitespace", "contractions",
    "chat_markup", "chat_markup_fragments", "added_tokens", "added_tokens_adjacent",
    "cjk_chinese", "cjk_japanese", "cjk_korean", "arabic", "hebrew", "devanagari",
    "thai", "cyrillic", "greek",
    "emoji_basic", "emoji_zwj", "emoji_skin_tone", "emoji_flags", "emoji_tag_sequences",
    "combining_nfc_composes", "combining_nfc_no_compose", "nfc_singletons",
    "code_python", "code_cpp", "code_js", "code_json", "code_shell",
    "numbers", "punctuation", "urls_emails_paths", "markdown", "latex",
    "mixed_script", "outside_bmp", "recent_unicode", "nfc_unicode_version", "private_use_unassigned",
    "control_chars", "nul", "format_chars",
)
# Seed categories whose expected result depends on the Unicode version of a
# table (HF: Unicode 16.0 for the regex's \p{L} and \p{N}, Unicode 9.0 for NFC).
# The generator does not use them as material, so that a table of another age
# shows up in these categories only.
UNICODE_VERSION_CATEGORIES = ("recent_unicode", "nfc_unicode_version")
# Of those, the ones whose NFC differs between HF and Python's unicodedata: the
# decode test compares them with HF only.
NFC_VERSION_SENSITIVE_CATEGORIES = ("nfc_unicode_version",)
# Categories produced by the generator.
GENERATED_CATEGORIES = (
    "gen_added_token_pairs", "gen_long", "gen_whitespace_alphabet", "gen_regex_alphabet",
    "gen_random_codepoints", "gen_concat", "gen_mutation",
)

ADDED_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
)

# Separators used between concatenated fragments.
_SEPARATORS = ("", "", " ", " ", "  ", "\n", "\n\n", "\t", "\r\n", " \n", "\u00a0", "\u3000",
               ", ", ". ", "\n    ", "'s ", "\u2028")

# Small alphabets: random strings over them hit every branch of the pre-tokenizer regex.
_WHITESPACE_ALPHABET = (" ", " ", " ", "\t", "\n", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028",
                        "\x0b", "\x0c", "\u0085", "\u2009", "\u200b", "a", "Word", "1", "!", ".",
                        "'s", "中", "\u0301", "\U0001F600", "<|im_end|>")
_REGEX_ALPHABET = ("'", "'", "s", "S", "t", "T", "ll", "LL", "re", "RE", "ve", "m", "d", "D",
                   "a", "Z", "\u00e9", "e\u0301", "\u017f", "1", "23", "\u0663", "\u00bd", "\u00b2",
                   "\u2167", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "!", "?", ".", "-", "_",
                   "\"", "(", ")", "\U0001F600", "\u4e2d", "\u00a0", "\u3000", "\u2019", "<", "|", ">")

# Code point ranges for random strings: blocks whose letters/digits/whitespace
# and normalization data have not changed since Unicode 12, so the corpus tests
# the tokenizer and not the age of a Unicode table (see the recent_unicode
# seed category for that).
_CODEPOINT_RANGES = (
    (0x20, 0x7E), (0xA0, 0x24F), (0x250, 0x2FF), (0x300, 0x36F), (0x391, 0x3A1), (0x3A3, 0x3FF),
    (0x400, 0x52F), (0x5D0, 0x5EA), (0x5B0, 0x5C7), (0x620, 0x64A), (0x64B, 0x65F), (0x660, 0x669),
    (0x900, 0x97F), (0xE01, 0xE3A), (0xE3F, 0xE5B), (0x1100, 0x11FF), (0x1E00, 0x1EFF),
    (0x1F00, 0x1FFE), (0x2000, 0x2064), (0x2070, 0x209C), (0x20A0, 0x20BF), (0x20D0, 0x20F0),
    (0x2100, 0x218B), (0x2190, 0x23FF), (0x2460, 0x24FF), (0x2500, 0x27BF), (0x3000, 0x303F),
    (0x3041, 0x3096), (0x3099, 0x30FF), (0x3131, 0x318E), (0x4E00, 0x9FD5), (0xAC00, 0xD7A3),
    (0xE000, 0xF8FF), (0xF900, 0xFA6D), (0xFB00, 0xFB4F), (0xFE70, 0xFEFC), (0xFF01, 0xFFEE),
    (0x10000, 0x1005D), (0x1D400, 0x1D7FF), (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF),
    (0x20000, 0x2A6D6), (0x2F800, 0x2FA1D), (0xE0000, 0xE007F), (0xF0000, 0xF00FF),
)

# Characters inserted by mutations.
_INSERTIONS = (
    " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u0085", "\u200b", "\ufeff",
    "\x0b", "\x0c", "\x01", "\x7f", "\u0301", "\u0308", "\u0323\u0302", "\u3099", "\u1161", "\u11a8",
    "\u212b", "\u037e", "\u200d", "\ufe0f", "\U0001F3FD", "\U0001F1FA", "\U000E0067", "'s", "'LL",
    "\u2019", "0", "7", "\u0663", "\u00b2", "\u00bd", "\u2167", "!", "...", "<", "|", ">", "<|",
    "|>", "\U0001D400", "\ue000", "\U0010fffd", "\u4e2d", "\u3042", "\uac00", "\u0627", "\u05d0",
    "\u0928", "\u0e01", "\U0001F600", "\x00",
)


def load_seed(path: Path = SEED_PATH) -> dict[str, list[str]]:
    """The seed fragments, by category (in file order)."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    cats = data["categories"]
    for name, items in cats.items():
        if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
            raise ValueError(f"{path}: category {name!r} is not a list of strings")
    return cats


def _ascii_case(rng: random.Random, s: str) -> str:
    mode = rng.randrange(4)
    out = []
    for c in s:
        if "a" <= c <= "z" or "A" <= c <= "Z":
            if mode == 0:
                c = c.upper()
            elif mode == 1:
                c = c.lower()
            elif mode == 2:
                c = c.swapcase()
            elif rng.random() < 0.5:
                c = c.swapcase()
        out.append(c)
    return "".join(out)


def _mutate(rng: random.Random, s: str, fragments: list[str]) -> str:
    op = rng.randrange(12)
    n = len(s)
    pos = rng.randint(0, n)
    if op == 0:  # insert 1-3 interesting characters at random positions
        for _ in range(rng.randint(1, 3)):
            p = rng.randint(0, len(s))
            s = s[:p] + rng.choice(_INSERTIONS) + s[p:]
        return s
    if op == 1:  # splice an added token
        return s[:pos] + rng.choice(ADDED_TOKENS) + s[pos:]
    if op == 2:  # splice a piece of an added token
        t = rng.choice(ADDED_TOKENS)
        a = rng.randint(0, len(t) - 1)
        b = rng.randint(a + 1, len(t))
        return s[:pos] + t[a:b] + s[pos:]
    if op == 3:  # truncate at a code point boundary (both ends)
        a = rng.randint(0, n)
        b = rng.randint(a, n)
        return s[a:b]
    if op == 4:  # reverse the code points (leading marks, broken ZWJ sequences)
        return s[::-1]
    if op == 5:
        return _ascii_case(rng, s)
    if op == 6:  # wrap in whitespace
        return (rng.choice(_SEPARATORS) + rng.choice(("", " ", "\n", "\t", "  ")) + s
                + rng.choice(("", " ", "\n", "  ", "\r\n", " \n", "\t")))
    if op == 7:  # repeat
        return s * rng.randint(2, 5)
    if op == 8:  # swap every ASCII space for an exotic one
        return s.replace(" ", rng.choice(("\u00a0", "\u3000", "\u2009", "\u2028", "  ", "\t", " \u0301")))
    if op == 9:  # digits into the middle
        return s[:pos] + str(rng.randint(0, 10 ** rng.randint(1, 12))) + s[pos:]
    if op == 10:  # splice another fragment
        return s[:pos] + rng.choice(fragments) + s[pos:]
    # op == 11: delete a span
    a = rng.randint(0, n)
    b = rng.randint(a, min(n, a + 5))
    return s[:a] + s[b:]


def _random_codepoints(rng: random.Random, length: int) -> str:
    out = []
    for _ in range(length):
        lo, hi = rng.choice(_CODEPOINT_RANGES)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def _long_strings(rng: random.Random, fragments: list[str]) -> list[str]:
    out = [
        " " * 5000, "\n" * 3000, "a" * 5000, "\U0001F600" * 1000, "1" * 3000,
        "<|image_pad|>" * 1024, "\u4e2d" * 2000, "ab " * 1000, "\t" * 2000, " \n" * 1500,
        "'s" * 1000, "e\u0301" * 1000, "!" * 4000, "\r\n" * 1500, "\u00a0" * 2000,
        "\u3000" * 1000 + "x", "x" + " " * 3000 + "y", "\u0301" * 2000, "." * 3000 + "\n",
        "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466" * 300,
        "The quick brown fox jumps over the lazy dog. " * 60,
        "\u1100\u1161\u11a8" * 700,
        ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
         "incididunt ut labore et dolore magna aliqua.\n") * 30,
    ]
    for target in (2000, 3000, 4000, 6000, 8000, 2500, 5000, 12000):
        parts: list[str] = []
        size = 0
        while size < target:
            f = rng.choice(fragments)
            parts.append(f)
            parts.append(rng.choice(_SEPARATORS))
            size += len(f.encode("utf-8")) + 1
        out.append("".join(parts))
    out.append(_random_codepoints(rng, 2000))
    return out


def build_tagged_corpus(size: int = TARGET_SIZE) -> list[tuple[str, str]]:
    """(category, string) pairs; the strings are unique and `size` in number."""
    rng = random.Random(RANDOM_SEED)
    seed = load_seed()
    fragments = [s for cat, items in seed.items() if cat not in UNICODE_VERSION_CATEGORIES
                 for s in items]
    out: list[tuple[str, str]] = []
    seen: set[str] = set()

    def add(cat: str, s: str) -> None:
        if s not in seen:
            seen.add(s)
            out.append((cat, s))

    for cat, items in seed.items():
        for s in items:
            add(cat, s)
    for a in ADDED_TOKENS:
        for b in ADDED_TOKENS:
            add("gen_added_token_pairs", a + b)
    for s in _long_strings(rng, fragments):
        add("gen_long", s)
    for _ in range(500):
        add("gen_whitespace_alphabet",
            "".join(rng.choice(_WHITESPACE_ALPHABET) for _ in range(rng.randint(1, 12))))
    for _ in range(600):
        add("gen_regex_alphabet",
            "".join(rng.choice(_REGEX_ALPHABET) for _ in range(rng.randint(1, 14))))
    for _ in range(400):
        add("gen_random_codepoints", _random_codepoints(rng, rng.randint(1, 16)))
    for _ in range(1100):
        k = rng.randint(2, 4)
        parts = [rng.choice(fragments) for _ in range(k)]
        sep = rng.choice(_SEPARATORS)
        add("gen_concat", sep.join(parts))
    while len(out) < size:
        s = rng.choice(fragments)
        for _ in range(rng.randint(1, 3)):
            s = _mutate(rng, s, fragments)
        if len(s) > 20000:
            s = s[:20000]
        add("gen_mutation", s)
    return out[:size]


def nfc_version_sensitive(tagged: list[tuple[str, str]]) -> set[str]:
    """Strings of `tagged` whose expected NFC is HF's (Unicode 9.0), not Python's."""
    return {s for cat, s in tagged if cat in NFC_VERSION_SENSITIVE_CATEGORIES}


def build_corpus() -> list[str]:
    """The corpus: seed fragments first, then the generated strings."""
    return [s for _, s in build_tagged_corpus()]


def write_jsonl(path: str | Path, corpus: list[str]) -> None:
    """One JSON string per line, UTF-8 (not ASCII-escaped); lines end with \\n only."""
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for s in corpus:
            fh.write(json.dumps(s, ensure_ascii=False))
            fh.write("\n")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(f"usage: {argv[0]} OUT.jsonl", file=sys.stderr)
        return 2
    corpus = build_corpus()
    write_jsonl(argv[1], corpus)
    nbytes = sum(len(s.encode("utf-8")) for s in corpus)
    print(f"wrote {len(corpus)} strings ({nbytes} UTF-8 bytes) to {argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
