// qhexrt/error.hpp — the one exception type QHexRT throws.
//
// Every failure a user can cause (a missing file, a corrupt header, a bad flag)
// surfaces as qhx::Error whose message names *what* and *where*; tools print it
// and exit non-zero. Programming errors are asserted, not thrown.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace qhx {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file QHexRT has mapped (a model's weights) was truncated or rewritten
// while it was open: reads past its new end gave zeros instead of ending the
// process with SIGBUS (docs/bundle.md, "Mapped files"). Whatever used it cannot
// be trusted again, so a pipeline fails every later request with this error
// until it is reopened. It names the file; it is the server's fault, not the
// request's (qhx_serve answers 500).
class FileChangedError : public Error {
 public:
  using Error::Error;
};

// Concatenates its arguments with operator<< into one string.
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

// Throws qhx::Error with the concatenation of its arguments.
template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(cat(std::forward<Args>(args)...));
}

}  // namespace qhx
