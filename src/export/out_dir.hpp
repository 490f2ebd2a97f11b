// What --out may be. An export replaces OUT as a whole (docs/bundle.md, "How a bundle is
// written"), so it refuses, before writing anything, an OUT whose replacement would lose
// something that is not a bundle, or that it could not replace.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace qhx {

// OUT made absolute, without a trailing '/', a symbolic link followed to the folder it
// names (the bundle replaces that folder; the link stays). Throws qhx::Error when OUT is
// a file, is or holds the checkpoint `source`, sits where nothing can be written, or holds
// what is not a bundle. Creates OUT's parent folders when missing.
std::filesystem::path checked_out_dir(const std::filesystem::path& out, const std::filesystem::path& source);

// The entries of folder `dir` that are not part of the bundle it holds: those checksums.json
// does not list or, in a bundle written before checksums, those not named as an export names
// its files; every entry when `dir` holds no bundle.
std::vector<std::string> entries_not_of_a_bundle(const std::filesystem::path& dir);

}  // namespace qhx
