// The state a conversation keeps for its language-model graphs, in the layout and dtype
// each graph takes (ExecuTorch's kv_manager is the model), and the per-call inputs a
// block graph needs over it. A session owns one (SessionState::kv); stages reach the KV
// cache only through it.
//
//   state graphs (GraphContract::DecoderState): the graph's own state input, e.g. a CPU
//     decoder's KV cache in its internal layout and its kv_cache dtype; allocated on first use,
//     uninitialized (the graph reads only the positions it wrote).
//   block graphs (GraphContract::DecoderBlock, docs/manifest.md): one host-kept cache of keys
//     and one of values, f32 [context, row] with row = layers · kv_heads · head_dim, sequence-
//     major, so a prefill graph's past and a decode graph's past are prefixes of the same
//     buffers; zeroed on first use (the graph reads its whole past input, and a mask cannot
//     hide a NaN there: 0 · NaN is NaN).
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

// One block call's inputs, built by KvManager::prepare_block (shapes for a block of AR rows
// over a past of `past` rows, CL = past + AR, hidden H, rope half-width `half`).
struct BlockInputs {
  std::vector<float> embeds;                // [AR, H]: the T tokens' rows, then zeros
  std::vector<float> mask;                  // [AR, CL] additive: 0 attends, kMaskedScore masks
  std::vector<std::int32_t> positions;      // [3, AR]: padding rows at position 0
  std::vector<float> cos, sin;              // [AR, half]: the family's rope tables of `positions`
  std::vector<float> deepstack;             // [n, AR, H]: the image rows' features, zeros at text rows
  std::vector<float> hidden;                // [AR, H] output
  std::vector<float> new_keys, new_values;  // [AR, row] outputs
};

class KvManager {
 public:
  // The additive mask value of a masked score (the NPU graphs' float mask, docs/qnn.md).
  static constexpr float kMaskedScore = -1000.0f;

  // The state input `spec` of `graph`, allocated on first use. Throws naming the graph
  // when its shape does not fit the address space.
  std::byte* state(const Graph& graph, const IoSpec& spec);

  // The block graphs' host-kept cache: [context, row] floats of keys and of values.
  struct BlockCache {
    float* keys = nullptr;
    float* values = nullptr;
    std::int64_t context = 0, row = 0;
  };
  // Allocated and zeroed on first use; every block graph of a plan must agree on its shape.
  BlockCache block_cache(std::int64_t context, std::int64_t row);

  // Fills the scratch inputs of a block of `block` rows over a past of `past` rows for the
  // T tokens at [start, start + T): embeds [T, H] padded with zeros, the mask (the first
  // `start` past rows and, causally, the block's own rows), positions [3, T] padded with 0,
  // their rope tables, and DeepStack rows [n_deepstack, T, H] where image_mask is set.
  BlockInputs& prepare_block(const ModelFamily& family, std::int64_t block, std::int64_t past, std::int64_t hidden,
                             std::int64_t half, std::int64_t row, const float* embeds, const std::int32_t* positions,
                             std::int64_t T, std::int64_t start, const float* deepstack, std::int64_t n_deepstack,
                             const std::uint8_t* image_mask);
  // Copies the block's first T new rows of keys and values into the cache at [start, start + T).
  void write_block_rows(const BlockCache& cache, std::int64_t start, std::int64_t T);

 private:
  std::map<std::string, StateBuffer> buffers_;      // by "graph.input", and the block cache's two
  std::int64_t block_context_ = 0, block_row_ = 0;  // the block cache's shape, once allocated
  BlockInputs block_;
};

}  // namespace qhx
