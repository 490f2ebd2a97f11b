#include "export/out_dir.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "formats/bundle_checksums.hpp"
#include "qhexrt/error.hpp"

namespace qhx {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// What exports before checksums.json wrote into OUT, finished or interrupted.
bool export_name(const std::string& n) {
  for (const char* tail : {".bin", ".bin.partial", ".json", ".json.tmp"})
    if (ends_with(n, tail)) return true;
  return n == "chat_template.jinja" || n == ".cpu-w8" || n == "onnx" || n == "verify_image.ppm" ||
         n.rfind(".prep_", 0) == 0;
}

bool weights_name(const std::string& n) {
  return ends_with(n, ".bin") || ends_with(n, ".bin.partial") || n == ".cpu-w8";
}

void need_write_access(const fs::path& dir, const char* why) {
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail("--out: cannot write in ", dir.string(), " (", why, "): ", std::strerror(errno));
}

}  // namespace

std::vector<std::string> entries_not_of_a_bundle(const fs::path& dir) {
  std::vector<std::string> all, foreign;
  bool has_weights = false;
  const auto listed = checksummed_files(dir);
  std::set<std::string> tops;
  if (listed)
    for (const auto& n : *listed) tops.insert(fs::path(n).begin()->string());
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    all.push_back(n);
    if (listed) {
      if (n != kChecksumsFile && tops.count(n) == 0) foreign.push_back(n);
    } else if (!export_name(n)) {
      foreign.push_back(n);
    } else {
      has_weights |= weights_name(n);
    }
  }
  std::vector<std::string>& out = listed || has_weights ? foreign : all;
  std::sort(out.begin(), out.end());
  return out;
}

fs::path checked_out_dir(const fs::path& given, const fs::path& source) {
  if (given.empty()) fail("--out is empty");
  fs::path out = fs::absolute(given).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "bundle/"
  if (out == out.root_path()) fail("--out cannot be the root folder");
  std::error_code ec;
  if (fs::is_symlink(out, ec)) {
    const fs::path target = fs::canonical(out, ec);
    if (ec) fail("--out ", out.string(), " is a symbolic link to nothing that exists: ", ec.message());
    out = target;
  }
  const auto st = fs::status(out, ec);
  const bool exists = fs::exists(st);
  if (exists && !fs::is_directory(st)) fail("--out ", out.string(), " exists and is not a folder");
  if (exists && fs::exists(source, ec)) {
    const fs::path src = fs::canonical(source, ec), dst = fs::canonical(out, ec);
    if (fs::equivalent(src, dst, ec))
      fail("--out ", out.string(), " is the checkpoint folder (--hf): the export would replace the checkpoint");
    const fs::path rel = src.lexically_relative(dst);
    if (!rel.empty() && *rel.begin() != "..")
      fail("--out ", out.string(), " holds the checkpoint ", source.string(), " (--hf): the export would delete it");
  }
  const fs::path parent = out.parent_path();
  fs::create_directories(parent, ec);
  if (ec) fail("--out: cannot create ", parent.string(), ": ", ec.message());
  need_write_access(parent, "the bundle is written beside OUT, then renamed into place");
  if (!exists) return out;
  need_write_access(out, "the previous bundle's files are removed once the new one is in place");
  if (const auto foreign = entries_not_of_a_bundle(out); !foreign.empty()) {
    std::string names;
    for (std::size_t i = 0; i < foreign.size() && i < 5; ++i) names += (i ? ", " : "") + foreign[i];
    if (foreign.size() > 5) names += cat(" and ", foreign.size() - 5, " more");
    fail("--out ", out.string(), " holds what is not part of a QHexRT bundle (", names,
         "): an export replaces the whole folder, so it would be lost. Move it, choose another --out, or remove ",
         out.string(), " first");
  }
  return out;
}

}  // namespace qhx
