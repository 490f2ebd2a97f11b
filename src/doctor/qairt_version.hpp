// QAIRT build ids ("v2.51.0.260929181845", as QnnBackend_getBuildId and a context
// binary's metadata give them) and what a difference between a binary's and the
// libraries' means (qhx_doctor, include/qhexrt/doctor.hpp).
#pragma once

#include <optional>
#include <string>

namespace qhx::doctor {

struct QairtVersion {
  int major = 0, minor = 0, patch = 0;
  std::string build;  // the fourth part (a date stamp), may be empty
};

// The version in a build id, or nothing when it holds no "MAJOR.MINOR.PATCH".
std::optional<QairtVersion> parse_qairt_build(const std::string& build_id);

struct BuildCheck {
  bool problem = false;  // the binary will not load: it is newer than the libraries
  std::string message;   // empty: the same release
};

// A binary prepared by QAIRT `binary_build` against libraries of `library_build`:
// a newer binary is a problem (install that release's libraries, or re-export with
// the libraries' release); an older one a warning (newer runtimes normally accept
// older binaries); the same MAJOR.MINOR is fine.
BuildCheck check_qairt_builds(const std::string& binary_build, const std::string& library_build);

}  // namespace qhx::doctor
