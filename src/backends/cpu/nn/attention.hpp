// Self-attention block of Qwen3-style decoders: q/k/v projections, per-head
// RMSNorm of q and k (before RoPE), rotate_half RoPE, a KV cache, grouped-query
// causal attention and the output projection, added to the residual stream.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "common/line_aligned.hpp"

namespace qhx::nn {

struct AttentionWeights {
  cpu::Linear q, k, v, o;             // q [hq·d, hidden], k/v [hkv·d, hidden], o [hidden, hq·d]
  std::vector<float> q_norm, k_norm;  // [d], shared by all heads
};

struct AttentionShape {
  std::int64_t heads, kv_heads, head_dim;
  float norm_eps;
};

// Buffers for up to max_tokens tokens, allocated once.
struct AttentionScratch {
  AttentionScratch() = default;
  AttentionScratch(std::int64_t max_tokens, std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim);
  LineFloats q, k, v, attn, out;  // q/attn [T, hq·d]; k/v [T, hkv·d]; out [T, hidden]
};

// How a KV cache stores its keys and values: f32; f16 (half the memory and the
// bytes decode reads; rounded to f16 once, when written); or int8 with a scale
// per token and KV head (backends/cpu/kv_cache_i8.hpp: about a quarter of f32).
enum class KvStore { F32, F16, I8 };

// One layer's KV cache: keys and values [ctx, kv_heads, head_dim] (f32),
// [kv_heads, ctx, head_dim] (f16), or [kv_heads, ctx, head_dim + 4] bytes (I8).
struct KvCache {
  void* k = nullptr;
  void* v = nullptr;
  KvStore store = KvStore::F32;
  std::int64_t ctx = 0;  // tokens the cache holds
};

// residual[T, hidden] += o_proj(attention(x)), with x [T, hidden] already
// normed. Tokens sit at absolute indices start .. start+T−1; their keys and
// values are written to the cache there, and each token attends to every
// cached token up to itself. cos/sin [T, head_dim].
void self_attention(const cpu::KernelSet& k, const AttentionWeights& w, const AttentionShape& s, const float* x,
                    std::int64_t T, std::int64_t start, const float* cos, const float* sin, const KvCache& cache,
                    AttentionScratch& scratch, float* residual);

}  // namespace qhx::nn
