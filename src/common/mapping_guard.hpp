// Keeps the process alive when a file it has mapped shrinks underneath it.
//
// A read from a mapping past the end of its (since truncated) file raises
// SIGBUS, which would end the process with no word on which file. Every
// MappedFile registers its range here. A SIGBUS inside a registered range maps
// zero pages over the rest of that mapping, so the read completes (with
// zeros), and marks the mapping lost; code that used it then turns "lost" into
// a FileChangedError naming the file (check_mapped_files, MappedFile::check).
// A SIGBUS anywhere else goes to the handler installed before ours, or kills
// the process as SIGBUS always did. docs/bundle.md, "Mapped files".
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace qhx {

// Mappings made on a thread while a MappingGroupScope is alive there belong
// to its group, so a pipeline can check exactly the files it mapped.
using MappingGroup = std::uint64_t;
inline constexpr MappingGroup kNoMappingGroup = 0;                    // mappings made outside any scope
inline constexpr MappingGroup kEveryMappingGroup = ~MappingGroup{0};  // for checks: all of them
MappingGroup new_mapping_group();

class MappingGroupScope {
 public:
  explicit MappingGroupScope(MappingGroup group);
  ~MappingGroupScope();
  MappingGroupScope(const MappingGroupScope&) = delete;
  MappingGroupScope& operator=(const MappingGroupScope&) = delete;

 private:
  MappingGroup previous_;
};

// Throws FileChangedError naming the first lost file of `group`. Without
// `stat_files` it costs one atomic load while nothing is lost (it runs after
// every graph call); with it, each file's size and modification time are
// first compared with those at open (an in-place rewrite that kept the size
// raises no SIGBUS), a few system calls per file (once per request).
void check_mapped_files(MappingGroup group, bool stat_files = false);

// For MappedFile: its registration. `fd` is kept (and closed by unregister):
// stat checks must see the mapped file, not whatever the path names now.
namespace mapping_registry {
// Throws naming `path` when limits::kMappedFiles mappings are live already.
int add(const std::byte* data, std::size_t size, int fd, const std::filesystem::path& path);
void remove(int slot) noexcept;
bool lost(int slot, bool stat_file);
[[noreturn]] void fail_lost(int slot);
// Whether [data, data + bytes) lies inside one registered file mapping (not,
// e.g., a file read into memory, whose pages madvise(MADV_DONTNEED) would zero).
bool maps_file(const void* data, std::size_t bytes);
}  // namespace mapping_registry

}  // namespace qhx
