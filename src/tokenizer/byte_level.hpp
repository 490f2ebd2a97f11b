// GPT-2's byte-level alphabet: every byte maps to one printable code point, so
// BPE can work on text that contains any byte sequence.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace qhx::byte_level {

// The code point that stands for byte b (e.g. ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
char32_t char_of_byte(unsigned char b);

// Inverse: the byte a code point stands for, or -1 if it stands for none.
int byte_of_char(char32_t cp);

// Byte-level form of raw bytes (UTF-8 text of the mapped code points).
std::string encode(std::string_view bytes);

// Raw bytes of a byte-level string; nullopt if any character is outside the alphabet.
std::optional<std::string> decode(std::string_view byte_level_text);

}  // namespace qhx::byte_level
