#include "common/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "common/huge_pages.hpp"
#include "common/mapping_guard.hpp"

namespace qhx {

namespace {

constexpr std::size_t kHuge = kHugePageBytes;

// The file mapped read-only at a 2 MiB-aligned address and advised for huge
// pages. Where the page cache holds the file in 2 MiB folios (Linux 6.16+ on
// ext4 and xfs reads them so for a mapping advised MADV_HUGEPAGE; qhx_export
// drops what it wrote from the cache so the first reader does), the kernel maps
// them with one page-table entry per 2 MiB instead of 512: the weight stream of
// a decode step then takes no TLB miss and no prefetcher stop every 4 KiB, and
// faulting the file in takes one fault per 2 MiB (the figures are in
// docs/bundle.md, "Mapped files"). Elsewhere (small folios, other file
// systems, THP off) this is an ordinary mapping. MAP_FAILED on failure.
void* map_aligned(int fd, std::size_t size) {
  if (size < kHuge) return ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  // Reserve size + 2 MiB, map the file over its first aligned address, and
  // return the slack on both sides.
  void* reserved = ::mmap(nullptr, size + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return MAP_FAILED;
  const auto base = reinterpret_cast<std::uintptr_t>(reserved);
  const std::uintptr_t at = (base + kHuge - 1) / kHuge * kHuge;
  void* p = ::mmap(reinterpret_cast<void*>(at), size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::munmap(reserved, size + kHuge);
    errno = err;
    return MAP_FAILED;
  }
  if (at > base) ::munmap(reserved, at - base);
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t end = at + (size + page - 1) / page * page, reserved_end = base + size + kHuge;
  if (reserved_end > end) ::munmap(reinterpret_cast<void*>(end), reserved_end - end);
#ifdef MADV_HUGEPAGE
  ::madvise(p, size, MADV_HUGEPAGE);  // advisory: without it the mapping is the same, in 4 KiB pages
#endif
  return p;
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path, bool in_memory) : path_(path) {
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
  if (in_memory) {
    size_ = size;
    try {
      read_into_memory(fd);
    } catch (...) {
      ::close(fd);
      reset();
      throw;
    }
    ::close(fd);
    return;
  }
  void* p = map_aligned(fd, size);
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

// A file whose bytes a decode step streams in full (a bundle's decoder weights)
// is read, not mapped: page-cache pages are 4 KiB, and each one costs the
// stream a TLB miss and a stop of the hardware prefetchers, which work within
// a page. In anonymous memory advised for 2 MiB pages decode streams it faster
// (docs/bundle.md, "Mapped files"); the price is reading the file at open. The
// file is read in 2 MiB-aligned slices by up to four threads,
// and its size and modification time must be the same before and after.
void MappedFile::read_into_memory(int fd) {
  struct stat before {};
  if (::fstat(fd, &before) != 0) fail(path_.string(), ": cannot stat: ", std::strerror(errno));
  const HugeRegion region = map_huge(size_);
  if (region.data == nullptr)
    fail(path_.string(), ": cannot allocate ", size_, " bytes to read it into: ", std::strerror(errno));
  region_ = region;
  std::byte* dst = region.data;
  const std::size_t slices = (size_ + kHuge - 1) / kHuge;
  const unsigned threads = static_cast<unsigned>(
      std::clamp<std::size_t>(std::min<std::size_t>(slices, std::thread::hardware_concurrency()), 1, 4));
  std::vector<int> errors(threads, 0);
  std::vector<char> short_read(threads, 0);
  const auto read_part = [&](unsigned t) {
    std::size_t at = size_ * t / threads / kHuge * kHuge;
    const std::size_t end = t + 1 == threads ? size_ : size_ * (t + 1) / threads / kHuge * kHuge;
    while (at < end) {
      const ssize_t got =
          ::pread(fd, dst + at, std::min<std::size_t>(end - at, std::size_t{64} << 20), static_cast<off_t>(at));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        errors[t] = errno;
        return;
      }
      if (got == 0) {
        short_read[t] = 1;
        return;
      }
      at += static_cast<std::size_t>(got);
    }
  };
  std::vector<std::thread> workers;
  for (unsigned t = 1; t < threads; ++t) workers.emplace_back(read_part, t);
  read_part(0);
  for (auto& w : workers) w.join();
  for (unsigned t = 0; t < threads; ++t) {
    if (errors[t] != 0) fail(path_.string(), ": cannot read: ", std::strerror(errors[t]));
    if (short_read[t] != 0) throw FileChangedError(path_.string() + ": the file became shorter while it was read");
  }
  struct stat after {};
  if (::fstat(fd, &after) != 0) fail(path_.string(), ": cannot stat: ", std::strerror(errno));
  if (after.st_size != before.st_size || after.st_mtim.tv_sec != before.st_mtim.tv_sec ||
      after.st_mtim.tv_nsec != before.st_mtim.tv_nsec)
    throw FileChangedError(path_.string() + ": the file changed while it was read");
  ::mprotect(dst, region.bytes, PROT_READ);  // the copy is as read-only as a mapping would be
  data_ = dst;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      slot_(std::exchange(other.slot_, -1)),
      region_(std::exchange(other.region_, HugeRegion{})) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    slot_ = std::exchange(other.slot_, -1);
    region_ = std::exchange(other.region_, HugeRegion{});
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
  if (region_.base != nullptr)
    unmap_huge(region_);
  else if (data_ != nullptr)
    ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  slot_ = -1;
  region_ = HugeRegion{};
}

}  // namespace qhx
