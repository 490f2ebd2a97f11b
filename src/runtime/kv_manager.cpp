#include "runtime/kv_manager.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/half.hpp"
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

std::int64_t BlockLayout::row() const {
  std::int64_t r = 0;
  for (const auto w : widths) r += w;
  return r;
}

std::int64_t KvManager::BlockCache::offset(std::size_t g, std::int64_t p) const {
  std::int64_t before = 0;
  for (std::size_t j = 0; j < g; ++j) before += layout.widths[j];
  return context * before + p * layout.widths[g];
}

namespace {

void set_score(std::byte* data, DType dtype, std::int64_t i, float v) {
  if (dtype == DType::F16)
    reinterpret_cast<std::uint16_t*>(data)[i] = f32_to_f16(v);
  else
    reinterpret_cast<float*>(data)[i] = v;
}

}  // namespace

KvManager::BlockCache KvManager::block_cache(std::int64_t context, const BlockLayout& layout) {
  if (layout.dtype != DType::F32 && layout.dtype != DType::F16)
    fail("a block graph's KV cache is F32 or F16, not ", dtype_name(layout.dtype));
  if (block_context_ == 0) {
    block_context_ = context;
    block_layout_ = layout;
  } else if (block_context_ != context || !(block_layout_ == layout)) {
    fail("the block graphs of one plan disagree on their KV cache: [", block_context_, ", ", block_layout_.row(), "] ",
         dtype_name(block_layout_.dtype), " in ", block_layout_.widths.size(), " group(s) and [", context, ", ",
         layout.row(), "] ", dtype_name(layout.dtype), " in ", layout.widths.size(),
         " (a prefill and a decode graph must share one context and layout)");
  }
  const auto bytes = static_cast<std::size_t>(context * layout.row()) * dtype_size(layout.dtype);
  std::byte* kv[2];
  const char* names[2] = {"block_kv.key", "block_kv.value"};
  for (int i = 0; i < 2; ++i) {
    auto& b = buffers_[names[i]];
    if (!b) {
      b = make_state_buffer(bytes);
      std::memset(b.get(), 0, bytes);  // see the header: a mask cannot hide a NaN (fp16 0 is 0 bits too)
    }
    kv[i] = b.get();
  }
  return {kv[0], kv[1], context, layout};
}

// Row r attends to columns [0, start) of the past and, causally, [past, past + r]. Only
// the columns between the mask's last start and this one change.
const void* KvManager::update_mask(std::int64_t block, std::int64_t past, DType dtype, std::int64_t start) {
  const std::int64_t AR = block, CL = past + AR;
  Mask& m = masks_[AR];
  if (m.CL != CL || m.dtype != dtype) {
    m = Mask{dtype, CL, 0, std::vector<std::byte>(static_cast<std::size_t>(AR * CL) * dtype_size(dtype))};
    for (std::int64_t r = 0; r < AR; ++r)
      for (std::int64_t c = 0; c < CL; ++c)
        set_score(m.data.data(), dtype, r * CL + c, c >= past && c - past <= r ? 0.0f : kMaskedScore);
    stats_.host_bytes += m.data.size();
  }
  const std::int64_t lo = std::min(m.start, start), hi = std::max(m.start, start);
  for (std::int64_t r = 0; r < AR; ++r)
    for (std::int64_t c = lo; c < hi; ++c) set_score(m.data.data(), dtype, r * CL + c, c < start ? 0.0f : kMaskedScore);
  stats_.host_bytes += static_cast<std::uint64_t>(AR * (hi - lo)) * dtype_size(dtype);
  m.start = start;
  return m.data.data();
}

BlockInputs& KvManager::prepare_block(const ModelFamily& family, std::int64_t block, std::int64_t past,
                                      std::int64_t hidden, std::int64_t half, const BlockCache& cache, DType mask_dtype,
                                      const float* embeds, const std::int32_t* positions, std::int64_t T,
                                      std::int64_t start, const float* deepstack, std::int64_t n_deepstack,
                                      const std::uint8_t* image_mask) {
  const std::int64_t AR = block, H = hidden;
  BlockInputs& b = block_;
  b.embeds.assign(static_cast<std::size_t>(AR * H), 0.0f);
  std::copy_n(embeds, T * H, b.embeds.data());
  b.mask = update_mask(AR, past, mask_dtype, start);
  b.mask_dtype = mask_dtype;
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
  const auto kv_bytes = static_cast<std::size_t>(AR * cache.layout.row()) * dtype_size(cache.layout.dtype);
  b.new_keys.resize(kv_bytes);
  b.new_values.resize(kv_bytes);
  stats_.host_bytes += 4 * (b.embeds.size() + b.positions.size() + 2 * b.cos.size() + b.deepstack.size());
  return b;
}

void KvManager::write_block_rows(const BlockCache& cache, std::int64_t block, std::int64_t start, std::int64_t T) {
  if (start + T > cache.context)
    fail("the KV cache holds ", cache.context, " positions; a block writes [", start, ", ", start + T, ")");
  const std::size_t elem = dtype_size(cache.layout.dtype);
  // The block's rows are group-major too, each group a slab of `block` rows.
  BlockCache rows = cache;
  rows.context = block;
  for (std::size_t g = 0; g < cache.layout.widths.size(); ++g) {
    const auto n = static_cast<std::size_t>(T * cache.layout.widths[g]) * elem;
    const auto from = static_cast<std::size_t>(rows.offset(g, 0)) * elem;
    const auto to = static_cast<std::size_t>(cache.offset(g, start)) * elem;
    std::memcpy(cache.keys + to, block_.new_keys.data() + from, n);
    std::memcpy(cache.values + to, block_.new_values.data() + from, n);
    stats_.host_bytes += 4 * n;  // read and written, keys and values
  }
}

}  // namespace qhx
