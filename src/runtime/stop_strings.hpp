// Stop strings over streamed text: text is released only once it can no
// longer be the start of a stop string, so a client never sees a piece of one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qhx {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops);  // empty strings are refused (qhx::Error)

  // Appends `piece` to the text so far; returns the part now safe to release.
  // After a stop string appears, stopped() is true and nothing more is released.
  std::string push(std::string_view piece);
  // The text held back at the end (no stop string came).
  std::string flush();
  bool stopped() const { return stopped_; }

  // The first stop string in `text`, or npos.
  std::size_t find_in(std::string_view text) const;

 private:
  std::vector<std::string> stops_;
  std::string text_;          // everything pushed
  std::size_t released_ = 0;  // bytes of text_ released
  bool stopped_ = false;
};

}  // namespace qhx
