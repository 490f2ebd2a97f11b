// Python's str semantics on UTF-8 strings: Jinja templates index, slice, split
// and strip strings as Python does, by code point and with Unicode whitespace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qhx::chat::py {

// The code point at s[i], setting `len` to its byte length; len = 0 when the
// bytes there are not well-formed UTF-8 (overlong, surrogate, truncated...).
char32_t decode_at(std::string_view s, std::size_t i, std::size_t& len);
std::size_t first_invalid(std::string_view s);  // s.size() when all of s is well-formed
void append(std::string& out, char32_t c);      // c as UTF-8

std::u32string decode(std::string_view s);  // throws qhx::Error on ill-formed UTF-8
std::string encode(std::u32string_view s);
std::size_t length(std::string_view s);  // in code points

bool is_space(char32_t c);  // str.isspace()

// str.strip / lstrip / rstrip: `chars` absent means whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);

// str.split / rsplit: `sep` absent means runs of whitespace; maxsplit < 0 means no limit.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit);

// str.splitlines() (without keepends): every Unicode line boundary Python knows.
std::vector<std::string> splitlines(std::string_view s);

std::string replace(std::string_view s, std::string_view old, std::string_view with, std::int64_t count);
std::int64_t count(std::string_view s, std::string_view sub);
// str.find, in code points; -1 when absent.
std::int64_t find(std::string_view s, std::string_view sub);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);   // str.capitalize()
std::string title(std::string_view s);        // str.title()
std::string jinja_title(std::string_view s);  // Jinja's |title filter (words split at - ( { [ < and spaces)

// Python's slice s[start:stop:step] resolved against a length; returns the indices taken.
std::vector<std::size_t> slice_indices(std::size_t len, std::optional<std::int64_t> start,
                                       std::optional<std::int64_t> stop, std::optional<std::int64_t> step);

// repr(float): the shortest round-tripping digits, in Python's layout.
std::string float_repr(double v);
// repr(str): quoted and escaped as Python prints a string inside a list.
std::string str_repr(std::string_view s);

}  // namespace qhx::chat::py
