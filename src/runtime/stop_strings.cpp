#include "runtime/stop_strings.hpp"

#include <algorithm>

#include "qhexrt/error.hpp"

namespace qhx {

StopStrings::StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (std::size_t i = 0; i < stops_.size(); ++i)
    if (stops_[i].empty()) fail("stop[", i, "]: a stop string must not be empty");
}

std::size_t StopStrings::find_in(std::string_view text) const {
  std::size_t first = std::string_view::npos;
  for (const auto& s : stops_) first = std::min(first, text.find(s));
  return first;
}

std::string StopStrings::push(std::string_view piece) {
  if (stopped_) return {};
  if (stops_.empty()) return std::string(piece);
  const std::size_t before = text_.size();
  text_.append(piece);
  // A stop string that ends in this piece may start up to its length - 1 bytes before it.
  std::size_t longest = 0;
  for (const auto& s : stops_) longest = std::max(longest, s.size());
  const std::size_t from = before >= longest ? before - longest + 1 : 0;
  const std::size_t hit = find_in(std::string_view(text_).substr(from));
  std::size_t safe = text_.size();
  if (hit != std::string_view::npos) {
    stopped_ = true;
    safe = from + hit;
  } else {
    // Hold back the longest tail that is a proper prefix of some stop string.
    for (const auto& s : stops_)
      for (std::size_t n = std::min(s.size() - 1, text_.size()); n > 0; --n)
        if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
          safe = std::min(safe, text_.size() - n);
          break;
        }
  }
  safe = std::max(safe, released_);
  std::string out = text_.substr(released_, safe - released_);
  released_ = safe;
  return out;
}

std::string StopStrings::flush() {
  if (stopped_ || stops_.empty()) return {};
  std::string out = text_.substr(released_);
  released_ = text_.size();
  return out;
}

}  // namespace qhx
