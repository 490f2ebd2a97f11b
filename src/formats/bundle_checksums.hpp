// checksums.json, a bundle's record of its own files (docs/bundle.md, "Checksums"): each
// file's size and XXH3-128, written by the export last, just before the bundle is published.
// `qhx_export --check BUNDLE` and `qhx_doctor BUNDLE` compare the files against it.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "common/file_digest.hpp"
#include "qhexrt/export.hpp"

namespace qhx {

inline constexpr const char* kChecksumsFile = "checksums.json";

// `files`: names relative to `dir` ('/'-separated), every file of the bundle but
// checksums.json itself. Written durably; throws naming the file.
FileDigest write_checksums(const std::filesystem::path& dir, const std::map<std::string, FileDigest>& files);

// The names checksums.json lists, or nothing when `dir` has none (or an unreadable one).
std::optional<std::set<std::string>> checksummed_files(const std::filesystem::path& dir);

// check_bundle (qhexrt/export.hpp) is defined with them, in bundle_checksums.cpp.

}  // namespace qhx
