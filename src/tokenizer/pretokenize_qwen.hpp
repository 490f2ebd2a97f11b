// Qwen2/Qwen3's pre-tokenizer: splits text into the chunks that BPE encodes
// independently. A hand-written matcher of the tokenizer.json regex
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// with Oniguruma's semantics as HF `tokenizers` runs it: alternatives tried in
// order at each position, \p{L} = L*, \p{N} = N*, \s = Unicode White_Space,
// and case-insensitive contractions (so "'ſ" (U+017F) counts as "'s").
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace qhx {

// The exact pattern string that tokenizer.json must carry for this splitter.
extern const std::string_view kQwenSplitPattern;

struct ByteSpan {
  std::size_t begin, end;
};

// Appends the chunks of `text` (valid UTF-8) to `out`; together they cover it.
// `scratch` is reused between calls to avoid allocations.
struct QwenSplitScratch {
  std::vector<char32_t> cps;
  std::vector<unsigned char> cls;
  std::vector<std::size_t> off;
};
void split_qwen(std::string_view text, std::vector<ByteSpan>& out, QwenSplitScratch& scratch);

}  // namespace qhx
