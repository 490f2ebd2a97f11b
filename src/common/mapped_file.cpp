#include "common/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/mapping_guard.hpp"

namespace qhx {

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path.string(), ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path.string(), ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path.string(), ": not a regular file");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return;
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    fail(path.string(), ": cannot mmap: ", std::strerror(err));
  }
  try {
    slot_ = mapping_registry::add(static_cast<const std::byte*>(p), size, fd, path);  // keeps fd
  } catch (...) {
    ::munmap(p, size);
    ::close(fd);
    throw;
  }
  data_ = static_cast<const std::byte*>(p);
  size_ = size;
}

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      slot_(std::exchange(other.slot_, -1)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

bool MappedFile::lost(bool stat_file) const { return slot_ >= 0 && mapping_registry::lost(slot_, stat_file); }

void MappedFile::check(bool stat_file) const {
  if (lost(stat_file)) mapping_registry::fail_lost(slot_);
}

void MappedFile::reset() noexcept {
  // Unregistered first: the guard must never take a fault in a range that is
  // unmapped (and maybe mapped again by someone else) for ours.
  if (slot_ >= 0) mapping_registry::remove(slot_);
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  slot_ = -1;
}

}  // namespace qhx
