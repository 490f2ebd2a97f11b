#include "runtime/kv_manager.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/test_hooks.hpp"
#include "models/model_family.hpp"
#include "qhexrt/error.hpp"
#include "runtime/run_context.hpp"

namespace qhx {

StateBuffer make_state_buffer(std::size_t bytes) {
  const HugeRegion r = map_huge(bytes);
  if (r.data == nullptr) fail("out of memory: a graph's state needs ", bytes, " bytes");
  if (const auto hook = test_hooks::hooks().new_state) hook(r.data, r.bytes);  // tests: poisoned bytes
  return StateBuffer(r.data, StateFree{r});
}

std::byte* KvManager::state(const Graph& graph, const IoSpec& spec) {
  auto& b = buffers_[graph.name + "." + spec.name];
  if (!b) {
    // Checked: the shape is a product of the context length and config sizes.
    std::size_t bytes = dtype_size(spec.dtype);
    for (const auto d : spec.shape)
      if (d < 0 || __builtin_mul_overflow(bytes, static_cast<std::size_t>(d), &bytes))
        fail("graph \"", graph.name, "\": state \"", spec.name, "\" is too large for this machine's address space");
    // Left uninitialized: a graph that owns its state reads only the positions already
    // written, and untouched pages of a long context cost no memory.
    b = make_state_buffer(bytes);
  }
  return b.get();
}

KvManager::BlockCache KvManager::block_cache(std::int64_t context, std::int64_t row) {
  const auto bytes = static_cast<std::size_t>(context * row) * sizeof(float);
  std::byte* kv[2];
  const char* names[2] = {"block_kv.key", "block_kv.value"};
  for (int i = 0; i < 2; ++i) {
    auto& b = buffers_[names[i]];
    if (!b) {
      b = make_state_buffer(bytes);
      std::memset(b.get(), 0, bytes);  // see the header: a mask cannot hide a NaN
    }
    kv[i] = b.get();
  }
  if (block_context_ == 0) {
    block_context_ = context;
    block_row_ = row;
  } else if (block_context_ != context || block_row_ != row) {
    fail("the block graphs of one plan disagree on their KV cache: [", block_context_, ", ", block_row_, "] and [",
         context, ", ", row, "] (a prefill and a decode graph must share one context and layout)");
  }
  return {reinterpret_cast<float*>(kv[0]), reinterpret_cast<float*>(kv[1]), context, row};
}

BlockInputs& KvManager::prepare_block(const ModelFamily& family, std::int64_t block, std::int64_t past,
                                      std::int64_t hidden, std::int64_t half, std::int64_t row, const float* embeds,
                                      const std::int32_t* positions, std::int64_t T, std::int64_t start,
                                      const float* deepstack, std::int64_t n_deepstack,
                                      const std::uint8_t* image_mask) {
  const std::int64_t AR = block, H = hidden, CL = past + AR;
  BlockInputs& b = block_;
  b.embeds.assign(static_cast<std::size_t>(AR * H), 0.0f);
  std::copy_n(embeds, T * H, b.embeds.data());
  b.mask.assign(static_cast<std::size_t>(AR * CL), kMaskedScore);
  for (std::int64_t r = 0; r < T; ++r) {
    std::fill_n(b.mask.data() + r * CL, start, 0.0f);         // the past this sequence has
    std::fill_n(b.mask.data() + r * CL + past, r + 1, 0.0f);  // causal within the block
  }
  b.positions.assign(static_cast<std::size_t>(3 * AR), 0);  // padding rows at position 0
  for (int a = 0; a < 3; ++a) std::copy_n(positions + a * T, T, b.positions.data() + a * AR);
  b.cos.resize(static_cast<std::size_t>(AR * half));
  b.sin.resize(b.cos.size());
  family.rope_tables(b.positions.data(), AR, b.cos.data(), b.sin.data());
  b.deepstack.assign(static_cast<std::size_t>(n_deepstack * AR * H), 0.0f);  // zeros at text rows
  for (std::int64_t d = 0; d < n_deepstack; ++d)
    for (std::int64_t t = 0; t < T; ++t)
      if (image_mask[t] != 0) std::copy_n(deepstack + (d * T + t) * H, H, b.deepstack.data() + (d * AR + t) * H);
  b.hidden.resize(static_cast<std::size_t>(AR * H));
  b.new_keys.resize(static_cast<std::size_t>(AR * row));
  b.new_values.resize(b.new_keys.size());
  return b;
}

void KvManager::write_block_rows(const BlockCache& cache, std::int64_t start, std::int64_t T) {
  if (start + T > cache.context)
    fail("the KV cache holds ", cache.context, " positions; a block writes [", start, ", ", start + T, ")");
  std::copy_n(block_.new_keys.data(), T * cache.row, cache.keys + start * cache.row);
  std::copy_n(block_.new_values.data(), T * cache.row, cache.values + start * cache.row);
}

}  // namespace qhx
