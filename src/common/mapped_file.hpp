// A read-only memory map of a whole file (RAII). Weights are served straight
// from the page cache: opening a 4 GB checkpoint copies nothing.
//
// The file may be truncated or rewritten by another process while it is
// mapped; reads past its new end then see zeros instead of ending the process
// with SIGBUS, and the file counts as lost (src/common/mapping_guard.hpp).
// Whoever reads it checks that afterwards (check(), check_mapped_files).
#pragma once

#include <cstddef>
#include <filesystem>

#include "common/huge_pages.hpp"
#include "qhexrt/error.hpp"

namespace qhx {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws qhx::Error naming the path and the OS reason. With `in_memory` the
  // file is read into this process's memory instead, in 2 MiB pages
  // (read_into_memory below), and can no longer be lost.
  explicit MappedFile(const std::filesystem::path& path, bool in_memory = false);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

  // Whether a read faulted past the file's end (the mapping now reads zeros
  // from there), or with `stat_file`, whether its size or modification time
  // changed since it was opened.
  bool lost(bool stat_file = false) const;
  // Throws FileChangedError naming the file when lost(stat_file).
  void check(bool stat_file = false) const;

  // fn(*this)'s result, for code that parses the whole file in place: when the
  // file changed meanwhile, the FileChangedError naming it replaces the result,
  // or whatever error the zeros made fn throw.
  template <typename Fn>
  auto parse(Fn&& fn) const {
    try {
      auto result = fn(*this);
      check(/*stat_file=*/true);
      return result;
    } catch (const Error&) {
      check(/*stat_file=*/true);
      throw;
    }
  }

 private:
  void reset() noexcept;
  void read_into_memory(int fd);
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  int slot_ = -1;      // in the mapping registry; -1 for an empty file (nothing mapped) or one in memory
  HugeRegion region_;  // in memory: the anonymous mapping data_ lies in
};

}  // namespace qhx
