// A read-only memory map of a whole file (RAII). Weights are served straight
// from the page cache: opening a 4 GB checkpoint copies nothing.
#pragma once

#include <cstddef>
#include <filesystem>

namespace qhx {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws qhx::Error naming the path and the OS reason.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void reset() noexcept;
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace qhx
