// The hidden folders an export of OUT makes beside it, in OUT's parent (the same file
// system, so one rename publishes): ".<OUT name>.partial-<pid>-<tag>", the bundle being
// written, and ".<OUT name>.old-<pid>-<tag>", the previous bundle for the moment between
// two renames on a file system that cannot swap two folders. The pid says whether their
// writer still runs: what a dead writer left is tidied by the next export of OUT, and the
// loader opens OUT only, never these.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace qhx {

enum class SiblingKind { Staging, Backup };

struct Sibling {
  std::filesystem::path path;
  SiblingKind kind;
  long pid;
};

std::filesystem::path sibling_path(const std::filesystem::path& out, SiblingKind kind, long pid,
                                   const std::string& tag);
// The ones present beside `out` (any writer).
std::vector<Sibling> siblings(const std::filesystem::path& out);
// The process is gone. Our own pid counts as gone: a leftover named with it is from an
// earlier process that had the same pid (an export started as pid 1 in a container).
bool writer_gone(long pid);
// A previous bundle moved aside by an export that died before putting the new one in place.
std::optional<std::filesystem::path> stranded_backup(const std::filesystem::path& out);
// For an error about a missing bundle `out`: "" or a sentence naming its stranded backup.
std::string missing_bundle_hint(const std::filesystem::path& out);

}  // namespace qhx
