// Bounds on JSON text, checked before it becomes a tree (src/common/limits.hpp).
// Header-only: the chat-template library uses it too.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/limits.hpp"
#include "qhexrt/error.hpp"

namespace qhx {

// Throws naming `source` when arrays and objects nest deeper than
// limits::kJsonDepth. A scan of the brackets outside strings, not a parser:
// malformed text passes here and is reported by the parser that follows.
inline void check_json_depth(std::string_view text, std::string_view source) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limits::kJsonDepth)
        fail(source, ": JSON nests deeper than ", limits::kJsonDepth, " levels (limits::kJsonDepth, docs/limits.md)");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

// Throws naming `source` when a JSON file of `bytes` is over `limit`
// (`limit_name` says which one, e.g. "limits::kJsonFileBytes").
inline void check_json_file_size(std::uint64_t bytes, std::uint64_t limit, std::string_view source,
                                 std::string_view limit_name) {
  if (bytes > limit)
    fail(source, ": ", bytes, " bytes is over the ", limit, "-byte limit for this file (", limit_name,
         ", docs/limits.md)");
}

// Both, for a small JSON file read whole into a tree.
inline void check_json_text(std::string_view text, std::string_view source) {
  check_json_file_size(text.size(), limits::kJsonFileBytes, source, "limits::kJsonFileBytes");
  check_json_depth(text, source);
}

}  // namespace qhx
