#include "doctor/qairt_version.hpp"

#include <regex>

#include "qhexrt/error.hpp"

namespace qhx::doctor {

std::optional<QairtVersion> parse_qairt_build(const std::string& build_id) {
  static const std::regex re(R"((\d+)\.(\d+)\.(\d+)(?:\.(\d+))?)");
  std::smatch m;
  if (!std::regex_search(build_id, m, re)) return std::nullopt;
  QairtVersion v;
  v.major = std::stoi(m[1].str());
  v.minor = std::stoi(m[2].str());
  v.patch = std::stoi(m[3].str());
  v.build = m[4].matched ? m[4].str() : "";
  return v;
}

BuildCheck check_qairt_builds(const std::string& binary_build, const std::string& library_build) {
  const auto b = parse_qairt_build(binary_build);
  const auto l = parse_qairt_build(library_build);
  BuildCheck out;
  if (!b || !l) {
    if (binary_build != library_build)
      out.message = cat("binary prepared with QAIRT build \"", binary_build, "\", libraries are \"", library_build,
                        "\" (not versions QHexRT can compare)");
    return out;
  }
  const auto release = [](const QairtVersion& v) { return cat(v.major, ".", v.minor); };
  const auto full = [](const QairtVersion& v) { return cat(v.major, ".", v.minor, ".", v.patch, v.build.empty() ? "" : ".", v.build); };
  const int cmp = b->major != l->major ? (b->major < l->major ? -1 : 1) : (b->minor != l->minor ? (b->minor < l->minor ? -1 : 1) : 0);
  if (cmp > 0) {
    out.problem = true;
    out.message = cat("binary prepared with QAIRT ", full(*b), ", libraries are ", full(*l), ": install the QAIRT ",
                      release(*b), " runtime libraries or re-export with QAIRT ", release(*l));
  } else if (cmp < 0) {
    out.message = cat("binary prepared with QAIRT ", full(*b), ", libraries are ", full(*l),
                      ": newer runtimes normally load older binaries; if loading fails, re-export with QAIRT ",
                      release(*l));
  }
  return out;
}

}  // namespace qhx::doctor
