#include "backends/cpu/nn/attention.hpp"

#include <cmath>
#include <cstring>

#include "backends/cpu/kv_cache_i8.hpp"

namespace qhx::nn {

AttentionScratch::AttentionScratch(std::int64_t max_tokens, std::int64_t heads, std::int64_t kv_heads,
                                   std::int64_t head_dim)
    : q(static_cast<std::size_t>(max_tokens * heads * head_dim)),
      k(static_cast<std::size_t>(max_tokens * kv_heads * head_dim)),
      v(k.size()),
      attn(q.size()),
      out() {}

void self_attention(const cpu::KernelSet& k, const AttentionWeights& w, const AttentionShape& s, const float* x,
                    std::int64_t T, std::int64_t start, const float* cos, const float* sin, const KvCache& cache,
                    AttentionScratch& sc, float* residual) {
  const std::int64_t d = s.head_dim, hq = s.heads, hkv = s.kv_heads;
  const std::int64_t hidden = w.o.w.rows;
  if (sc.out.size() < static_cast<std::size_t>(T * hidden)) sc.out.resize(static_cast<std::size_t>(T * hidden));

  k.linear(x, T, w.q.w, w.q.bias_or_null(), sc.q.data());
  k.linear(x, T, w.k.w, w.k.bias_or_null(), sc.k.data());
  k.linear(x, T, w.v.w, w.v.bias_or_null(), sc.v.data());
  k.rms_norm(sc.q.data(), w.q_norm.data(), T * hq, d, s.norm_eps, sc.q.data());
  k.rms_norm(sc.k.data(), w.k_norm.data(), T * hkv, d, s.norm_eps, sc.k.data());
  k.rope_rotate_half(sc.q.data(), T, hq, d, cos, sin);
  k.rope_rotate_half(sc.k.data(), T, hkv, d, cos, sin);

  // The cache holds k after norm and RoPE, v as projected.
  const std::int64_t row = hkv * d, at = start * row;
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  if (cache.store == KvStore::I8) {
    auto* kc = static_cast<std::int8_t*>(cache.k);
    auto* vc = static_cast<std::int8_t*>(cache.v);
    cpu::kv_i8_write(sc.k.data(), T, hkv, d, cache.ctx, start, kc);
    cpu::kv_i8_write(sc.v.data(), T, hkv, d, cache.ctx, start, vc);
    k.attention_i8kv(sc.q.data(), kc, vc, T, start + T, cache.ctx, hq, hkv, d, start, scale, sc.attn.data());
  } else if (cache.store == KvStore::F16) {
    // [hkv, ctx, d]: each token's row of each head goes to that head's rows.
    auto* kc = static_cast<std::uint16_t*>(cache.k);
    auto* vc = static_cast<std::uint16_t*>(cache.v);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t g = 0; g < hkv; ++g) {
        const std::int64_t from = (t * hkv + g) * d, to = (g * cache.ctx + start + t) * d;
        k.to_f16(sc.k.data() + from, d, kc + to);
        k.to_f16(sc.v.data() + from, d, vc + to);
      }
    k.attention_f16kv(sc.q.data(), kc, vc, T, start + T, cache.ctx, hq, hkv, d, start, scale, /*causal=*/true,
                      sc.attn.data());
  } else {
    auto* kc = static_cast<float*>(cache.k);
    auto* vc = static_cast<float*>(cache.v);
    std::memcpy(kc + at, sc.k.data(), static_cast<std::size_t>(T * row) * sizeof(float));
    std::memcpy(vc + at, sc.v.data(), static_cast<std::size_t>(T * row) * sizeof(float));
    k.attention(sc.q.data(), kc, vc, T, start + T, hq, hkv, d, start, scale, /*causal=*/true, sc.attn.data());
  }
  k.linear(sc.attn.data(), T, w.o.w, w.o.bias_or_null(), sc.out.data());
  k.add_inplace(residual, sc.out.data(), T * hidden);
}

}  // namespace qhx::nn
