#include "chat/py_string.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "qhexrt/error.hpp"

namespace qhx::chat::py {

char32_t decode_at(std::string_view s, std::size_t i, std::size_t& len) {
  auto byte = [&](std::size_t k) {
    return static_cast<unsigned>(static_cast<unsigned char>(s[i + k]));
  };
  len = 0;
  const unsigned lead = byte(0);
  if (lead < 0x80) {
    len = 1;
    return lead;
  }
  std::size_t n = 0;
  char32_t cp = 0, min = 0;
  if ((lead & 0xE0) == 0xC0) {
    n = 2, cp = lead & 0x1F, min = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    n = 3, cp = lead & 0x0F, min = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    n = 4, cp = lead & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  len = n;
  return cp;
}

std::size_t first_invalid(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = 0;
    decode_at(s, i, n);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = 0;
    const char32_t c = decode_at(s, i, n);
    if (n == 0) qhx::fail("invalid UTF-8 at byte ", i);
    out.push_back(c);
    i += n;
  }
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append(out, c);
  return out;
}

std::size_t length(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return c >= 0x2000 && c <= 0x200A;
  }
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string u = decode(s);
  const std::u32string set = chars ? decode(*chars) : std::u32string();
  auto drop = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : is_space(c);
  };
  std::size_t b = 0, e = u.size();
  if (left)
    while (b < e && drop(u[b])) ++b;
  if (right)
    while (e > b && drop(u[e - 1])) --e;
  return encode(std::u32string_view(u).substr(b, e - b));
}

namespace {

std::vector<std::string> split_whitespace(std::string_view s, std::int64_t maxsplit, bool from_right) {
  std::u32string u = decode(s);
  if (from_right) std::reverse(u.begin(), u.end());
  std::vector<std::string> parts;
  std::size_t i = 0;
  while (true) {
    while (i < u.size() && is_space(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit) {
      // Python keeps the rest verbatim, whitespace at its far end included.
      std::u32string rest = u.substr(i);
      if (from_right) std::reverse(rest.begin(), rest.end());
      parts.push_back(encode(rest));
      break;
    }
    std::size_t j = i;
    while (j < u.size() && !is_space(u[j])) ++j;
    std::u32string word = u.substr(i, j - i);
    if (from_right) std::reverse(word.begin(), word.end());
    parts.push_back(encode(word));
    i = j;
  }
  if (from_right) std::reverse(parts.begin(), parts.end());
  return parts;
}

}  // namespace

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit) {
  if (!sep) return split_whitespace(s, maxsplit, false);
  if (sep->empty()) qhx::fail("empty separator");
  std::vector<std::string> parts;
  std::size_t pos = 0;
  while (maxsplit < 0 || static_cast<std::int64_t>(parts.size()) < maxsplit) {
    const std::size_t hit = s.find(*sep, pos);
    if (hit == std::string_view::npos) break;
    parts.emplace_back(s.substr(pos, hit - pos));
    pos = hit + sep->size();
  }
  parts.emplace_back(s.substr(pos));
  return parts;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit) {
  if (!sep) return split_whitespace(s, maxsplit, true);
  if (sep->empty()) qhx::fail("empty separator");
  std::vector<std::string> parts;
  std::size_t end = s.size();
  while (maxsplit < 0 || static_cast<std::int64_t>(parts.size()) < maxsplit) {
    if (end < sep->size()) break;
    const std::size_t hit = s.rfind(*sep, end - sep->size());
    if (hit == std::string_view::npos) break;
    parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
    end = hit;
  }
  parts.emplace_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> splitlines(std::string_view s) {
  const std::u32string u = decode(s);
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    const bool brk = c == U'\n' || c == U'\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                     c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    lines.push_back(encode(std::u32string_view(u).substr(start, i - start)));
    if (c == U'\r' && i + 1 < u.size() && u[i + 1] == U'\n') ++i;
    start = i + 1;
  }
  if (start < u.size()) lines.push_back(encode(std::u32string_view(u).substr(start)));
  return lines;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with, std::int64_t count) {
  std::string out;
  std::int64_t done = 0;
  if (old.empty()) {
    // Python inserts `with` before every code point and at the end.
    const std::u32string u = decode(s);
    for (char32_t c : u) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      append(out, c);
    }
    if (count < 0 || done < count) out += with;
    return out;
  }
  std::size_t pos = 0;
  while (count < 0 || done < count) {
    const std::size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += with;
    pos = hit + old.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

std::int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<std::int64_t>(length(s)) + 1;
  std::int64_t n = 0;
  for (std::size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

std::int64_t find(std::string_view s, std::string_view sub) {
  const std::size_t hit = s.find(sub);
  return hit == std::string_view::npos ? -1 : static_cast<std::int64_t>(length(s.substr(0, hit)));
}

namespace {

char32_t map_case(char32_t c, utf8proc_int32_t (*f)(utf8proc_int32_t)) {
  return static_cast<char32_t>(f(static_cast<utf8proc_int32_t>(c)));
}
bool is_cased(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
std::string map_all(std::string_view s, utf8proc_int32_t (*f)(utf8proc_int32_t)) {
  std::u32string u = decode(s);
  for (char32_t& c : u) c = map_case(c, f);
  return encode(u);
}

}  // namespace

std::string upper(std::string_view s) { return map_all(s, utf8proc_toupper); }
std::string lower(std::string_view s) { return map_all(s, utf8proc_tolower); }

std::string capitalize(std::string_view s) {
  std::u32string u = decode(s);
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = map_case(u[i], i == 0 ? utf8proc_totitle : utf8proc_tolower);
  return encode(u);
}

std::string title(std::string_view s) {
  std::u32string u = decode(s);
  bool previous_cased = false;
  for (char32_t& c : u) {
    const bool cased = is_cased(c);
    c = map_case(c, previous_cased ? utf8proc_tolower : utf8proc_totitle);
    previous_cased = cased;
  }
  return encode(u);
}

std::string jinja_title(std::string_view s) {
  std::u32string u = decode(s);
  auto separator = [](char32_t c) {
    return c == U'-' || c == U'(' || c == U'{' || c == U'[' || c == U'<' || is_space(c);
  };
  // Each run of separators, and each run between them, starts a new item whose
  // first code point is upper-cased and the rest lower-cased.
  for (std::size_t i = 0; i < u.size();) {
    const bool sep = separator(u[i]);
    std::size_t j = i;
    while (j < u.size() && separator(u[j]) == sep) ++j;
    for (std::size_t k = i; k < j; ++k) u[k] = map_case(u[k], k == i ? utf8proc_toupper : utf8proc_tolower);
    i = j;
  }
  return encode(u);
}

std::vector<std::size_t> slice_indices(std::size_t len, std::optional<std::int64_t> start,
                                       std::optional<std::int64_t> stop, std::optional<std::int64_t> step) {
  const std::int64_t n = static_cast<std::int64_t>(len);
  const std::int64_t st = step.value_or(1);
  if (st == 0) qhx::fail("slice step cannot be zero");
  auto clamp = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
    if (!v) return dflt;
    std::int64_t x = *v < 0 ? *v + n : *v;
    if (st > 0) return std::clamp<std::int64_t>(x, 0, n);
    return std::clamp<std::int64_t>(x, -1, n - 1);
  };
  const std::int64_t b = clamp(start, st > 0 ? 0 : n - 1);
  const std::int64_t e = clamp(stop, st > 0 ? n : -1);
  std::vector<std::size_t> idx;
  for (std::int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(static_cast<std::size_t>(i));
  return idx;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // e.g. "-1.2345e+17"
  const std::size_t e_pos = sci.find('e');
  const int exp = std::stoi(sci.substr(e_pos + 1));
  const bool neg = sci[0] == '-';
  std::string digits;
  for (std::size_t i = neg ? 1 : 0; i < e_pos; ++i)
    if (sci[i] != '.') digits += sci[i];
  std::string out = neg ? "-" : "";
  // Python switches to exponent form outside 1e-4 <= |v| < 1e16.
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return out + e;
  }
  if (exp < 0) return out + "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
  const std::size_t int_digits = static_cast<std::size_t>(exp) + 1;
  if (digits.size() <= int_digits) return out + digits + std::string(int_digits - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

std::string str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode(s)) {
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == U'\\') {
      out += '\\';
      append(out, c);
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c < 0x20 || (c >= 0x7F && c < 0xA0)) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else {
      append(out, c);
    }
  }
  out += quote;
  return out;
}

}  // namespace qhx::chat::py
