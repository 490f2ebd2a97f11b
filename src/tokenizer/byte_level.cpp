#include "tokenizer/byte_level.hpp"

#include "common/utf8.hpp"

namespace qhx::byte_level {
namespace {

// Printable bytes map to themselves; the other 68 bytes, in increasing
// order, map to U+0100, U+0101, ... (the GPT-2 table).
bool maps_to_itself(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int, 0x200> to_byte{};  // every mapped code point is below U+0144
  Tables() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      to_char[b] = maps_to_itself(b) ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t char_of_byte(unsigned char b) { return tables().to_char[b]; }

int byte_of_char(char32_t cp) { return cp < 0x200 ? tables().to_byte[cp] : -1; }

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) utf8::append(out, char_of_byte(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::string> decode(std::string_view text) {
  if (utf8::first_invalid(text) != text.size()) return std::nullopt;
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t len = 0;
    const int b = byte_of_char(utf8::decode(text, i, len));
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
    i += len;
  }
  return out;
}

}  // namespace qhx::byte_level
