#include "tokenizer/pretokenize_qwen.hpp"

#include <array>

#include "common/utf8.hpp"
#include "tokenizer/unicode_classes.hpp"

namespace qhx {

const std::string_view kQwenSplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

enum : unsigned char {
  kOther = unicode::kOther,
  kLetter = unicode::kLetter,  // \p{L}
  kNumber = unicode::kNumber,  // \p{N}
  kSpace = unicode::kSpace,    // \s
  kNewline = 8,                // [\r\n]; always together with kSpace
};
static_assert((kNewline & (unicode::kLetter | unicode::kNumber | unicode::kSpace)) == 0);

// Unicode 16.0 classes, as HF's Oniguruma has them (see unicode_classes.hpp).
unsigned char classify_any(char32_t cp) {
  const unsigned char c = unicode::regex_class(cp);
  return cp == '\r' || cp == '\n' ? c | kNewline : c;
}

const std::array<unsigned char, 128>& ascii_classes() {
  static const auto table = [] {
    std::array<unsigned char, 128> t{};
    for (char32_t c = 0; c < 128; ++c) t[c] = classify_any(c);
    return t;
  }();
  return table;
}

inline unsigned char classify(char32_t cp) { return cp < 128 ? ascii_classes()[cp] : unicode::regex_class(cp); }

inline bool is_other(unsigned char c) { return c == kOther; }

// Length in code points of a contraction at `i` ('s 't 're 've 'm 'll 'd,
// any case), or 0. Case folding maps U+017F LATIN SMALL LETTER LONG S to 's'.
std::size_t contraction_length(const std::vector<char32_t>& cp, std::size_t i) {
  const std::size_t n = cp.size();
  if (cp[i] != '\'' || i + 1 >= n) return 0;
  const char32_t a = cp[i + 1];
  auto lower = [](char32_t c) {
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
  };
  const char32_t la = lower(a);
  if (la == 's' || a == 0x17F || la == 't' || la == 'm' || la == 'd') return 2;
  if (i + 2 >= n) return 0;
  const char32_t lb = lower(cp[i + 2]);
  if ((la == 'r' || la == 'v') && lb == 'e') return 3;
  if (la == 'l' && lb == 'l') return 3;
  return 0;
}

}  // namespace

void split_qwen(std::string_view text, std::vector<ByteSpan>& out, QwenSplitScratch& s) {
  s.cps.clear();
  s.cls.clear();
  s.off.clear();
  for (std::size_t i = 0; i < text.size();) {
    std::size_t len = 1;
    const unsigned char b = static_cast<unsigned char>(text[i]);
    const char32_t cp = b < 0x80 ? b : utf8::decode(text, i, len);
    s.cps.push_back(cp);
    s.cls.push_back(classify(cp));
    s.off.push_back(i);
    i += len;
  }
  s.off.push_back(text.size());

  const auto& cp = s.cps;
  const auto& cls = s.cls;
  const std::size_t n = cp.size();
  auto emit = [&](std::size_t a, std::size_t b) {
    out.push_back({s.off[a], s.off[b]});
  };
  auto run_end = [&](std::size_t j, unsigned char mask) {
    while (j < n && (cls[j] & mask) != 0) ++j;
    return j;
  };

  std::size_t i = 0;
  while (i < n) {
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (const std::size_t c = contraction_length(cp, i); c != 0) {
      emit(i, i + c);
      i += c;
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (cls[i] == kLetter) {
      const std::size_t j = run_end(i + 1, kLetter);
      emit(i, j);
      i = j;
      continue;
    }
    if ((cls[i] & (kNewline | kLetter | kNumber)) == 0 && i + 1 < n && cls[i + 1] == kLetter) {
      const std::size_t j = run_end(i + 2, kLetter);
      emit(i, j);
      i = j;
      continue;
    }
    // \p{N}
    if (cls[i] == kNumber) {
      emit(i, i + 1);
      ++i;
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    {
      std::size_t k = i;
      if (cp[k] == ' ' && k + 1 < n && is_other(cls[k + 1])) ++k;
      if (is_other(cls[k])) {
        std::size_t j = k + 1;
        while (j < n && is_other(cls[j])) ++j;
        j = run_end(j, kNewline);
        emit(i, j);
        i = j;
        continue;
      }
    }
    // Only whitespace is left at i.
    const std::size_t j = run_end(i, kSpace);
    // \s*[\r\n]+ : up to and including the last newline of the run.
    std::size_t last_nl = j;
    for (std::size_t k = j; k > i; --k) {
      if ((cls[k - 1] & kNewline) != 0) {
        last_nl = k - 1;
        break;
      }
    }
    if (last_nl != j) {
      emit(i, last_nl + 1);
      i = last_nl + 1;
      continue;
    }
    // \s+(?!\S) : the run, leaving its last space to the next chunk if text follows.
    if (j == n || j - 1 == i) {  // the latter is \s+ (a lone space before text)
      emit(i, j);
      i = j;
    } else {
      emit(i, j - 1);
      i = j - 1;
    }
  }
}

}  // namespace qhx
