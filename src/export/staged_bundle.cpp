#include "export/staged_bundle.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/durable_file.hpp"
#include "export/out_dir.hpp"
#include "formats/staging_names.hpp"
#include "export/export_steps.hpp"
#include "formats/bundle_checksums.hpp"
#include "qhexrt/error.hpp"

namespace qhx {

namespace fs = std::filesystem;

namespace {

bool present(const fs::path& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

// What exports of `out` that died left beside it. Returns true when it put a previous
// bundle back at `out` (it had been moved aside for the moment of a two-rename publish).
bool tidy_leftovers(const fs::path& out) {
  bool restored = false;
  for (const Sibling& s : siblings(out))
    if (s.kind == SiblingKind::Backup && writer_gone(s.pid) && !present(out))
      restored |= ::rename(s.path.c_str(), out.c_str()) == 0;
  std::error_code ignored;
  for (const Sibling& s : siblings(out))
    if (writer_gone(s.pid)) fs::remove_all(s.path, ignored);
  return restored;
}

std::string random_tag() {
  std::random_device rd;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", rd());
  return buf;
}

[[noreturn]] void rename_fail(const fs::path& from, const fs::path& to, int err) {
  fail("cannot rename ", from.string(), " to ", to.string(), ": ", std::strerror(err));
}

}  // namespace

StagedBundle::StagedBundle(const fs::path& out, const fs::path& source) : out_(checked_out_dir(out, source)) {
  if (tidy_leftovers(out_)) out_ = checked_out_dir(out, source);  // OUT is back: check it again
  const long pid = static_cast<long>(::getpid());
  for (int attempt = 0;; ++attempt) {
    tag_ = random_tag();
    dir_ = sibling_path(out_, SiblingKind::Staging, pid, tag_);
    if (::mkdir(dir_.c_str(), 0755) == 0) break;
    if (errno != EEXIST || attempt == 100)
      fail("cannot create the staging folder ", dir_.string(), ": ", std::strerror(errno));
  }
  export_point("staged");
}

StagedBundle::~StagedBundle() {
  if (published_) return;
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

void StagedBundle::record(const std::string& name, const FileDigest& digest) { recorded_[name] = digest; }

void StagedBundle::publish(bool exchange) { publish_to(out_, exchange); }

fs::path StagedBundle::publish_aside(const fs::path& at, const fs::path& source, bool exchange) {
  const fs::path target = checked_out_dir(at, source);
  publish_to(target, exchange);
  return target;
}

void StagedBundle::publish_to(const fs::path& out, bool exchange) {
  export_point("written");
  // Every file, recorded or not (the QNN generator's are read here once), and every folder
  // to sync, deepest last in the list.
  std::map<std::string, FileDigest> files;
  std::vector<fs::path> dirs{dir_};
  for (auto it = fs::recursive_directory_iterator(dir_); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_directory()) {
      dirs.push_back(it->path());
      continue;
    }
    if (!it->is_regular_file()) continue;
    const std::string name = it->path().lexically_relative(dir_).generic_string();
    if (name == kChecksumsFile) continue;
    const auto r = recorded_.find(name);
    files[name] =
        r != recorded_.end() && r->second.bytes == it->file_size() ? r->second : digest_file(it->path(), true);
  }
  write_checksums(dir_, files);
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) sync_dir(*d);
  export_point("publish");

  struct stat st;
  const bool replacing = ::lstat(out.c_str(), &st) == 0;
  fs::path old;  // where the previous bundle is once the new one is in place
  if (!replacing) {
    if (::rename(dir_.c_str(), out.c_str()) != 0) rename_fail(dir_, out, errno);
  } else {
    ::chmod(dir_.c_str(), st.st_mode & 07777);  // the folder keeps its permissions
    if (exchange && ::renameat2(AT_FDCWD, dir_.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
      old = dir_;
    } else if (!exchange || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
      // Two renames: between them OUT is missing, its bundle at `old`; the next export of
      // OUT puts it back if this process dies there, and the loader names it.
      old = sibling_path(out, SiblingKind::Backup, static_cast<long>(::getpid()), tag_);
      if (::rename(out.c_str(), old.c_str()) != 0) rename_fail(out, old, errno);
      export_point("moved-aside");
      if (::rename(dir_.c_str(), out.c_str()) != 0) {
        const int err = errno;
        ::rename(old.c_str(), out.c_str());
        rename_fail(dir_, out, err);
      }
    } else {
      fail("cannot swap ", dir_.string(), " with ", out.string(), ": ", std::strerror(errno));
    }
  }
  published_ = true;
  // The bundle is in place: what follows is best effort, and a kill here leaves the previous
  // bundle under a staging or backup name, which the next export of OUT removes.
  try {
    sync_dir(out.parent_path());
  } catch (const Error&) {}
  export_point("swapped");
  std::error_code ignored;
  if (!old.empty()) fs::remove_all(old, ignored);
}

}  // namespace qhx
