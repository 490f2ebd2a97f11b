// Anonymous memory in 2 MiB pages where the system grants them: the KV cache and the weights
// a decode step streams in full. Each 4 KiB page costs a stream a TLB miss and a stop of the
// hardware prefetchers, which work within a page.
#pragma once

#include <cstddef>

namespace qhx {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// A read-write anonymous mapping whose `data` starts on a 2 MiB boundary and holds at least
// the bytes asked for, rounded up to whole 2 MiB pages and advised MADV_HUGEPAGE (advisory:
// without it the memory is the same, in 4 KiB pages). Zero-filled, as any fresh mapping.
struct HugeRegion {
  void* base = nullptr;  // the mapping, for unmap_huge
  std::size_t length = 0;
  std::byte* data = nullptr;  // 2 MiB-aligned, `bytes` rounded up to 2 MiB usable
  std::size_t bytes = 0;
};

// data == nullptr (errno set) when the system refuses the mapping, or when `bytes` is too
// large to round up.
HugeRegion map_huge(std::size_t bytes);
void unmap_huge(const HugeRegion& region);

}  // namespace qhx
