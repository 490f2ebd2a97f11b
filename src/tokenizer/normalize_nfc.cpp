#include "tokenizer/normalize_nfc.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "common/utf8.hpp"
#include "qhexrt/error.hpp"
#include "tokenizer/unicode_classes.hpp"

namespace qhx {
namespace {

// U+11A7 (Hangul T base) is an inert starter in NFC: it has no decomposition and
// is in no composition (an LV syllable composes only with U+11A8..U+11C2). But
// utf8proc 2.8 composes LV + U+11A7 into LV, deleting it (fixed upstream by
// utf8proc PR #317, 2025); HF keeps it. Cutting there is exact, so we do.
constexpr char32_t kHangulTBase = 0x11A7;

// Appends the NFC (utf8proc, current Unicode) of `piece`, valid UTF-8 made only of
// code points assigned in Unicode 9.0.
void append_nfc(std::string_view piece, std::string& out) {
  if (std::all_of(piece.begin(), piece.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    out.append(piece);  // ASCII is NFC, and nothing in it composes
    return;
  }
  utf8proc_uint8_t* buf = nullptr;
  const auto n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(piece.data()), static_cast<utf8proc_ssize_t>(piece.size()),
                   &buf, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("NFC normalization failed: ", utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
  std::free(buf);
}

}  // namespace

void nfc_as_hf(std::string_view text, std::string& out) {
  out.clear();
  std::size_t piece = 0;  // start of the current run of code points assigned in 9.0
  for (std::size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 1;
    const char32_t cp = utf8::decode(text, i, len);
    if (!unicode::assigned_in_unicode9(cp) || cp == kHangulTBase) {
      append_nfc(text.substr(piece, i - piece), out);
      out.append(text.substr(i, len));  // an opaque starter to HF's NFC
      piece = i + len;
    }
    i += len;
  }
  append_nfc(text.substr(piece), out);
}

}  // namespace qhx
