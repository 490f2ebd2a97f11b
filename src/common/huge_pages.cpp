#include "common/huge_pages.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>

namespace qhx {

HugeRegion map_huge(std::size_t bytes) {
  HugeRegion r;
  if (bytes > SIZE_MAX - 2 * kHugePageBytes) {
    errno = ENOMEM;
    return r;
  }
  r.bytes = bytes == 0 ? kHugePageBytes : (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  // One page more than asked for, so a 2 MiB boundary lies within the first page of it.
  r.length = r.bytes + kHugePageBytes;
  void* p = ::mmap(nullptr, r.length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return {};
  r.base = p;
  r.data = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(p) + kHugePageBytes - 1) / kHugePageBytes *
                                        kHugePageBytes);
#ifdef MADV_HUGEPAGE
  ::madvise(r.data, r.bytes, MADV_HUGEPAGE);
#endif
  return r;
}

void unmap_huge(const HugeRegion& region) {
  if (region.base != nullptr) ::munmap(region.base, region.length);
}

}  // namespace qhx
