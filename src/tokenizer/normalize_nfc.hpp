// NFC exactly as Hugging Face `tokenizers` 0.22 computes it. Its normalizer (the
// crate unicode-normalization-alignments) carries Unicode 9.0 data, so every code
// point assigned after 9.0 is, to it, a starter (ccc 0) with no decomposition that
// composes with nothing: it blocks composition across itself and is never
// reordered. For the code points assigned by 9.0, NFC has not changed since
// (Unicode's normalization stability policy: their decompositions and ccc are
// frozen, and new compositions always involve a new character).
//
// So: cut the text at every code point not assigned in Unicode 9.0, keep those
// as they are, and NFC each piece in between with utf8proc (Unicode 15.0). One
// more cut, at U+11A7, works around a utf8proc bug (see normalize_nfc.cpp).
// Checked against HF on random strings: see docs/tokenizer.md.
#pragma once

#include <string>
#include <string_view>

namespace qhx {

// Writes the NFC of `text` (valid UTF-8), HF's way, to `out` (replacing its contents).
void nfc_as_hf(std::string_view text, std::string& out);

}  // namespace qhx
