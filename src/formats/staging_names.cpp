#include "formats/staging_names.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace qhx {

namespace fs = std::filesystem;

namespace {

// Built with append: GCC 12 at -O3 warns falsely (-Wrestrict) on "." + a string.
std::string prefix(const fs::path& out, SiblingKind kind) {
  std::string p = ".";
  p.append(out.filename().string()).append(kind == SiblingKind::Staging ? ".partial-" : ".old-");
  return p;
}

// "<pid>-<tag>" -> pid, or -1.
long parse_pid(const std::string& rest) {
  const auto dash = rest.find('-');
  if (dash == 0 || dash == std::string::npos || dash + 1 == rest.size()) return -1;
  long pid = 0;
  for (std::size_t i = 0; i < dash; ++i) {
    if (rest[i] < '0' || rest[i] > '9' || pid > 1'000'000'000) return -1;
    pid = pid * 10 + (rest[i] - '0');
  }
  return pid > 0 ? pid : -1;
}

}  // namespace

fs::path sibling_path(const fs::path& out, SiblingKind kind, long pid, const std::string& tag) {
  std::string name = prefix(out, kind);
  name.append(std::to_string(pid)).append("-").append(tag);
  return out.parent_path() / name;
}

std::vector<Sibling> siblings(const fs::path& out) {
  std::vector<Sibling> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    for (const SiblingKind kind : {SiblingKind::Staging, SiblingKind::Backup}) {
      const std::string p = prefix(out, kind);
      if (name.compare(0, p.size(), p) != 0) continue;
      if (const long pid = parse_pid(name.substr(p.size())); pid > 0) found.push_back({e.path(), kind, pid});
    }
  }
  return found;
}

bool writer_gone(long pid) {
  if (pid == static_cast<long>(::getpid())) return true;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

std::optional<fs::path> stranded_backup(const fs::path& out) {
  for (const Sibling& s : siblings(out))
    if (s.kind == SiblingKind::Backup && writer_gone(s.pid)) return s.path;
  return std::nullopt;
}

std::string missing_bundle_hint(const fs::path& out) {
  std::error_code ec;
  const fs::path abs = fs::absolute(out, ec).lexically_normal();
  const auto backup = stranded_backup(abs.filename().empty() ? abs.parent_path() : abs);
  if (!backup) return "";
  return "; an interrupted qhx_export left the previous bundle at " + backup->string() +
         ": export again (the export first puts it back), or rename it to " + out.string();
}

}  // namespace qhx
