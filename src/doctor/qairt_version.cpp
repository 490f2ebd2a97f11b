#include "doctor/qairt_version.hpp"

#include <cctype>
#include <charconv>

#include "qhexrt/error.hpp"

namespace qhx::doctor {

// The first "N.N.N" (optionally ".N") in a build id such as "v2.51.0.260929181845". A plain
// scan: std::regex trips GCC 12's maybe-uninitialized warning under the sanitizers.
std::optional<QairtVersion> parse_qairt_build(const std::string& build_id) {
  const char* end = build_id.data() + build_id.size();
  for (const char* start = build_id.data(); start < end; ++start) {
    if (!std::isdigit(static_cast<unsigned char>(*start))) continue;
    int part[3] = {0, 0, 0};
    const char* p = start;
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) {
      const auto [next, ec] = std::from_chars(p, end, part[i]);
      ok = ec == std::errc() && next != p && (i == 2 || (next < end && *next == '.'));
      p = i == 2 ? next : next + 1;
    }
    if (!ok) continue;
    QairtVersion v;
    v.major = part[0];
    v.minor = part[1];
    v.patch = part[2];
    if (p < end && *p == '.' && p + 1 < end && std::isdigit(static_cast<unsigned char>(p[1]))) {
      const char* b = p + 1;
      while (b < end && std::isdigit(static_cast<unsigned char>(*b))) ++b;
      v.build.assign(p + 1, b);
    }
    return v;
  }
  return std::nullopt;
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
  const auto release = [](const QairtVersion& v) {
    return cat(v.major, ".", v.minor);
  };
  const auto full = [](const QairtVersion& v) {
    return cat(v.major, ".", v.minor, ".", v.patch, v.build.empty() ? "" : ".", v.build);
  };
  const int cmp = b->major != l->major ? (b->major < l->major ? -1 : 1)
                                       : (b->minor != l->minor ? (b->minor < l->minor ? -1 : 1) : 0);
  if (cmp > 0) {
    out.problem = true;
    out.message = cat("binary prepared with QAIRT ", full(*b), ", libraries are ", full(*l), ": install the QAIRT ",
                      release(*b), " runtime libraries or re-export with QAIRT ", release(*l));
  } else if (cmp < 0) {
    out.message =
        cat("binary prepared with QAIRT ", full(*b), ", libraries are ", full(*l),
            ": newer runtimes normally load older binaries; if loading fails, re-export with QAIRT ", release(*l));
  }
  return out;
}

}  // namespace qhx::doctor
