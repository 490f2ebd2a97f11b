// Faulting in a KV cache's pages ahead of its writes, a few per token.
//
// A session reserves the whole cache and leaves the system to fault it in as it
// fills (runtime/kv_manager.cpp), on 2 MiB pages where the kernel gives them.
// A cache is a set of "regions", each a run of ctx rows (a layer's keys, or its
// values, or one head of them), and the regions fill in step. So the first write
// past a page boundary faults a new page in every region at once: for the 2B's
// f16 cache, 56 pages of 2 MiB at positions 1024, 2048, ..., all in one decode
// step, which stalls it visibly. touch_ahead spreads those faults: each
// token touches one region's row `ahead` positions later, regions in turn. The
// reach is raised to the number of regions if shorter: then (while it is at most
// a page's rows) every region's next page is touched before the writes reach it,
// one region a step (pages shorter than that are cheap to fault anyway).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qhx::nn {

// regions × ctx rows of row_bytes each; region r's row p at base + (r · ctx + p) · row_bytes.
struct KvRegions {
  std::byte* base = nullptr;
  std::int64_t regions = 0, ctx = 0, row_bytes = 0;
};

// For each position t in [start, start + T): reads and rewrites one byte of row
// t + max(ahead, regions) of region t mod regions (rows past ctx are left alone). The cache's
// contents do not change (QHX_TEST_POISON_STATE's NaN bytes stay NaN).
void touch_ahead(const KvRegions& kv, std::int64_t start, std::int64_t T, std::int64_t ahead);

}  // namespace qhx::nn
