// UTF-8 helpers shared by the tokenizer and the text output paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qhx::utf8 {

// Length of the well-formed sequence starting at s[i] (1..4), or 0 if the bytes
// there are not a complete, well-formed sequence (Unicode Table 3-7).
std::size_t valid_sequence_length(std::string_view s, std::size_t i);

// Offset of the first byte that is not part of a well-formed sequence, or
// s.size() if `s` is valid UTF-8.
std::size_t first_invalid(std::string_view s);

// Decodes the code point at s[i]; `s` must be valid UTF-8 there. Sets `len`.
char32_t decode(std::string_view s, std::size_t i, std::size_t& len);

void append(std::string& out, char32_t cp);

// Lossy decoding as Python's errors="replace" and Rust's from_utf8_lossy: each
// maximal subpart of an ill-formed sequence becomes one U+FFFD.
std::string to_valid_lossy(std::string_view bytes);

// Length of the longest prefix of `bytes` whose lossy decoding cannot change
// when more bytes are appended: everything except a trailing sequence that is
// incomplete but could still become well-formed.
std::size_t stable_prefix_length(std::string_view bytes);

}  // namespace qhx::utf8
