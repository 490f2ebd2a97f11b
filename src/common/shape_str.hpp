// A tensor shape as messages print it: "[2, 3]".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace qhx {

inline std::string shape_str(std::span<const std::int64_t> s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
inline std::string shape_str(std::initializer_list<std::int64_t> s) {
  return shape_str(std::span(s.begin(), s.size()));
}

}  // namespace qhx
