// The state a conversation keeps for its language-model graphs, in the layout and dtype
// each graph takes (ExecuTorch's kv_manager is the model), and the per-call inputs a
// block graph needs over it. A session owns one (SessionState::kv); stages reach the KV
// cache only through it.
//
//   state graphs (GraphContract::DecoderState): the graph's own state input, e.g. a CPU
//     decoder's KV cache in its internal layout and its kv_cache dtype; allocated on first use,
//     uninitialized (the graph reads only the positions it wrote).
//   block graphs (GraphContract::DecoderBlock, docs/manifest.md): one host-kept cache of keys
//     and one of values, [context, row] with row = layers · kv_heads · head_dim, sequence-
//     major, so a prefill graph's past and a decode graph's past are prefixes of the same
//     buffers; zeroed on first use (the graph reads its whole past input, and a mask cannot
//     hide a NaN there: 0 · NaN is NaN). In the dtype and layout the graph takes
//     (BlockLayout): f32 for the CPU's block graph; fp16 for an NPU graph, group-major when
//     its layers run in parts (each part's layers a slab of `context` rows), bound in place so
//     a call costs the host O(block), not O(context). The additive masks persist per block
//     size and change only in the columns between the last call's past and this one's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/delegate.hpp"
#include "common/huge_pages.hpp"

namespace qhx {

struct Graph;
class ModelFamily;

// A state tensor's memory: on 2 MiB pages where the system grants them (decode streams the
// KV cache like the weights, and 4 KiB pages would cost a TLB miss every few rows).
struct StateFree {
  HugeRegion region;
  void operator()(std::byte*) const { unmap_huge(region); }
};
using StateBuffer = std::unique_ptr<std::byte[], StateFree>;
StateBuffer make_state_buffer(std::size_t bytes);

// How a block graph takes its KV cache (from its past_key input): the dtype, and the
// elements per token of each group of layers (one group: plain [context, row] rows).
struct BlockLayout {
  DType dtype = DType::F32;
  std::vector<std::int64_t> widths;
  std::int64_t row() const;
  bool operator==(const BlockLayout&) const = default;
};

// What a block's calls cost the host: the graph calls, the rows run as padding, and the
// bytes the host wrote or copied for them (inputs, masks, KV rows, and the backends'
// conversions at the graph boundary: Delegate::boundary_bytes).
struct BlockStats {
  std::int64_t calls = 0, padded_tokens = 0;
  std::uint64_t host_bytes = 0;
};

// One block call's inputs, built by KvManager::prepare_block (shapes for a block of AR rows
// over a past of `past` rows, CL = past + AR, hidden H, rope half-width `half`).
struct BlockInputs {
  std::vector<float> embeds;   // [AR, H]: the T tokens' rows, then zeros
  const void* mask = nullptr;  // [AR, CL] additive, of mask_dtype: 0 attends, kMaskedScore masks
  DType mask_dtype = DType::F32;
  std::vector<std::int32_t> positions;  // [3, AR]: padding rows at position 0
  std::vector<float> cos, sin;          // [AR, half]: the family's rope tables of `positions`
  std::vector<float> deepstack;         // [n, AR, H]: the image rows' features, zeros at text rows
  std::vector<float> hidden;            // [AR, H] output
  // [AR, row] outputs in the cache's dtype and layout (group-major with AR rows a slab).
  std::vector<std::byte> new_keys, new_values;
};

class KvManager {
 public:
  // The additive mask value of a masked score (the NPU graphs' float mask, docs/qnn.md).
  static constexpr float kMaskedScore = -1000.0f;

  // The state input `spec` of `graph`, allocated on first use. Throws naming the graph
  // when its shape does not fit the address space.
  std::byte* state(const Graph& graph, const IoSpec& spec);

  // The block graphs' host-kept cache: [context, row] elements of keys and of values.
  struct BlockCache {
    std::byte* keys = nullptr;
    std::byte* values = nullptr;
    std::int64_t context = 0;
    BlockLayout layout;
    // Element offset of layer group g's row p.
    std::int64_t offset(std::size_t g, std::int64_t p) const;
  };
  // Allocated and zeroed on first use; every block graph of a plan must agree on its shape.
  BlockCache block_cache(std::int64_t context, const BlockLayout& layout);

  // Fills the scratch inputs of a block of `block` rows over a past of `past` rows for the
  // T tokens at [start, start + T): embeds [T, H] padded with zeros, the mask (the first
  // `start` past rows and, causally, the block's own rows; padding rows as if real: no
  // real row attends to them), positions [3, T] padded with 0, their rope tables, and
  // DeepStack rows [n_deepstack, T, H] where image_mask is set.
  BlockInputs& prepare_block(const ModelFamily& family, std::int64_t block, std::int64_t past, std::int64_t hidden,
                             std::int64_t half, const BlockCache& cache, DType mask_dtype, const float* embeds,
                             const std::int32_t* positions, std::int64_t T, std::int64_t start, const float* deepstack,
                             std::int64_t n_deepstack, const std::uint8_t* image_mask);
  // Copies the block's first T new rows of keys and values into the cache at [start, start + T).
  void write_block_rows(const BlockCache& cache, std::int64_t block, std::int64_t start, std::int64_t T);

  // What the block calls have cost so far (the session's; a request reads its share).
  BlockStats& block_stats() { return stats_; }

 private:
  // A block size's additive mask [AR, CL], kept between calls.
  struct Mask {
    DType dtype = DType::F32;
    std::int64_t CL = 0, start = 0;
    std::vector<std::byte> data;
  };
  const void* update_mask(std::int64_t block, std::int64_t past, DType dtype, std::int64_t start);

  std::map<std::string, StateBuffer> buffers_;  // by "graph.input", and the block cache's two
  std::int64_t block_context_ = 0;              // the block cache's shape, once allocated
  BlockLayout block_layout_;
  std::map<std::int64_t, Mask> masks_;  // by block size
  BlockInputs block_;
  BlockStats stats_;
};

}  // namespace qhx
