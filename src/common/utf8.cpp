#include "common/utf8.hpp"

namespace qhx::utf8 {
namespace {

inline unsigned byte_at(std::string_view s, std::size_t i) { return static_cast<unsigned char>(s[i]); }

// The allowed range of the second byte for a given lead byte (Table 3-7);
// later continuation bytes are always 0x80..0xBF.
struct LeadInfo {
  std::size_t length;  // 0 for a byte that cannot start a sequence
  unsigned lo, hi;     // range of the second byte
};

LeadInfo lead_info(unsigned b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes surrogates
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // caps at U+10FFFF
  return {0, 0, 0};
}

// Number of bytes from s[i] that form a prefix of some well-formed sequence
// (at least 1 for a valid lead byte), and whether that prefix is complete.
std::size_t valid_prefix(std::string_view s, std::size_t i, bool& complete) {
  const LeadInfo li = lead_info(byte_at(s, i));
  complete = false;
  if (li.length == 0) return 0;
  if (li.length == 1) {
    complete = true;
    return 1;
  }
  std::size_t n = 1;
  while (n < li.length && i + n < s.size()) {
    const unsigned b = byte_at(s, i + n);
    const unsigned lo = n == 1 ? li.lo : 0x80;
    const unsigned hi = n == 1 ? li.hi : 0xBF;
    if (b < lo || b > hi) return n;
    ++n;
  }
  complete = n == li.length;
  return n;
}

}  // namespace

std::size_t valid_sequence_length(std::string_view s, std::size_t i) {
  bool complete = false;
  const std::size_t n = valid_prefix(s, i, complete);
  return complete ? n : 0;
}

std::size_t first_invalid(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (byte_at(s, i) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = valid_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

char32_t decode(std::string_view s, std::size_t i, std::size_t& len) {
  const unsigned b0 = byte_at(s, i);
  if (b0 < 0x80) {
    len = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    len = 2;
    return static_cast<char32_t>(((b0 & 0x1Fu) << 6) | (byte_at(s, i + 1) & 0x3Fu));
  }
  if (b0 < 0xF0) {
    len = 3;
    return static_cast<char32_t>(((b0 & 0x0Fu) << 12) | ((byte_at(s, i + 1) & 0x3Fu) << 6) |
                                 (byte_at(s, i + 2) & 0x3Fu));
  }
  len = 4;
  return static_cast<char32_t>(((b0 & 0x07u) << 18) | ((byte_at(s, i + 1) & 0x3Fu) << 12) |
                               ((byte_at(s, i + 2) & 0x3Fu) << 6) | (byte_at(s, i + 3) & 0x3Fu));
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string to_valid_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    bool complete = false;
    const std::size_t n = valid_prefix(bytes, i, complete);
    if (complete) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD for the maximal subpart (at least one byte)
      i += n == 0 ? 1 : n;
    }
  }
  return out;
}

std::size_t stable_prefix_length(std::string_view bytes) {
  // An unfinished sequence is at most 3 bytes long, so only the tail can be undecided.
  const std::size_t start = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (std::size_t i = start; i < bytes.size(); ++i) {
    bool complete = false;
    const std::size_t n = valid_prefix(bytes, i, complete);
    if (!complete && n > 0 && i + n == bytes.size()) return i;
  }
  return bytes.size();
}

}  // namespace qhx::utf8
