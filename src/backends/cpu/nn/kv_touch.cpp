#include "backends/cpu/nn/kv_touch.hpp"

#include <algorithm>

namespace qhx::nn {

void touch_ahead(const KvRegions& kv, std::int64_t start, std::int64_t T, std::int64_t ahead) {
  if (kv.regions <= 0) return;
  const std::int64_t reach = std::max(ahead, kv.regions);  // every region once within the reach
  for (std::int64_t t = start; t < start + T; ++t) {
    const std::int64_t row = t + reach;
    if (row >= kv.ctx) break;
    // volatile: the read and the write both happen, and the write is what faults a writable page in.
    volatile std::byte* b = kv.base + ((t % kv.regions) * kv.ctx + row) * kv.row_bytes;
    *b = *b;
  }
}

}  // namespace qhx::nn
