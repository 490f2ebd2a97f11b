#include "formats/bundle_checksums.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/durable_file.hpp"
#include "formats/staging_names.hpp"
#include "qhexrt/error.hpp"

namespace qhx {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

constexpr int kChecksumsVersion = 1;

// A listed name must stay inside the bundle: no absolute paths, no "..".
bool inside(const std::string& name) {
  const fs::path p(name);
  if (name.empty() || p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == ".." || part == ".") return false;
  return true;
}

// checksums.json's "files", validated; throws naming the file and what is wrong.
std::map<std::string, FileDigest> read_checksums(const fs::path& dir) {
  const fs::path path = dir / kChecksumsFile;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), ": cannot read");
  Json j;
  try {
    j = Json::parse(in);
  } catch (const Json::exception& e) {
    fail(path.string(), ": not JSON (", e.what(), ")");
  }
  if (!j.is_object() || !j.contains("qhexrt_checksums") || !j["qhexrt_checksums"].is_number_integer())
    fail(path.string(), ": no \"qhexrt_checksums\" version");
  if (j["qhexrt_checksums"].get<int>() > kChecksumsVersion)
    fail(path.string(), ": version ", j["qhexrt_checksums"].get<int>(), " is newer than this QHexRT reads (",
         kChecksumsVersion, ")");
  if (j.value("algorithm", "") != "xxh3-128") fail(path.string(), ": \"algorithm\" is not \"xxh3-128\"");
  if (!j.contains("files") || !j["files"].is_object()) fail(path.string(), ": no \"files\" object");
  std::map<std::string, FileDigest> files;
  for (const auto& [name, e] : j["files"].items()) {
    if (!inside(name)) fail(path.string(), ": file name \"", name, "\" points outside the bundle");
    if (!e.is_object() || !e.contains("bytes") || !e["bytes"].is_number_unsigned() || !e.contains("xxh3_128") ||
        !e["xxh3_128"].is_string())
      fail(path.string(), ": \"", name, "\" needs \"bytes\" and \"xxh3_128\"");
    files[name] = FileDigest{e["bytes"].get<std::uint64_t>(), e["xxh3_128"].get<std::string>()};
  }
  return files;
}

}  // namespace

FileDigest write_checksums(const fs::path& dir, const std::map<std::string, FileDigest>& files) {
  Json j = {{"qhexrt_checksums", kChecksumsVersion}, {"algorithm", "xxh3-128"}, {"files", Json::object()}};
  for (const auto& [name, d] : files) j["files"][name] = {{"bytes", d.bytes}, {"xxh3_128", d.xxh3_128}};
  return write_file_durably(dir / kChecksumsFile, j.dump(1) + "\n");
}

std::optional<std::set<std::string>> checksummed_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / kChecksumsFile, ec)) return std::nullopt;
  try {
    std::set<std::string> names;
    for (const auto& [name, d] : read_checksums(dir)) names.insert(name);
    return names;
  } catch (const Error&) {
    return std::nullopt;
  }
}

BundleCheck check_bundle(const fs::path& dir) {
  BundleCheck c;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    c.problems.push_back(cat(dir.string(), ": not a folder", missing_bundle_hint(dir)));
    return c;
  }
  if (!fs::is_regular_file(dir / kChecksumsFile, ec)) {
    c.problems.push_back(cat(dir.string(), ": no ", kChecksumsFile,
                             ": the bundle was written before QHexRT recorded checksums, so its files cannot be "
                             "checked (export it again to have them)"));
    return c;
  }
  c.has_checksums = true;
  std::map<std::string, FileDigest> files;
  try {
    files = read_checksums(dir);
  } catch (const Error& e) {
    c.problems.push_back(e.what());
    return c;
  }
  c.files = files.size();
  for (const auto& [name, want] : files) {
    const fs::path p = dir / name;
    if (!fs::is_regular_file(p, ec)) {
      c.problems.push_back(cat(p.string(), ": missing (", kChecksumsFile, " lists it)"));
      continue;
    }
    const std::uint64_t size = fs::file_size(p, ec);
    if (ec) {
      c.problems.push_back(cat(p.string(), ": ", ec.message()));
      continue;
    }
    if (size != want.bytes) {
      c.problems.push_back(cat(p.string(), ": ", size, " bytes, ", kChecksumsFile, " records ", want.bytes,
                               " (truncated, or changed after the export)"));
      continue;
    }
    try {
      if (digest_file(p).xxh3_128 != want.xxh3_128)
        c.problems.push_back(cat(p.string(), ": its XXH3-128 differs from the one ", kChecksumsFile,
                                 " records (the file is corrupt, or changed after the export)"));
    } catch (const Error& e) {
      c.problems.push_back(e.what());
    }
  }
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string name = it->path().lexically_relative(dir).generic_string();
    if (name != kChecksumsFile && files.count(name) == 0) c.unlisted.push_back(name);
  }
  return c;
}

}  // namespace qhx
