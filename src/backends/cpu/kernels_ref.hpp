// The plain reference kernels of the CPU backend, in f32.
//
// These are the oracle: written for clarity and a fixed summation order, and
// the yardstick every fast kernel is tested against (tests/cpp/test_kernels.cpp).
// They know nothing of any model. Shapes are in [rows, cols] row-major order.
#pragma once

#include <cstdint>

#include "backends/cpu/block_step.hpp"
#include "backends/cpu/weights.hpp"

namespace qhx::cpu::ref {

// y[m, w.rows] = x[m, w.cols] · wᵀ (+ bias[w.rows] if not null); for a w8
// matrix with int8_activations, the int8 contract of int8_matmul.hpp.
void linear(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y);
// linear, then step over the whole output at once.
void linear_then(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y, BlockStep step);

// y[r, :] = w ⊙ x[r, :] / sqrt(mean(x[r, :]²) + eps), for each of `rows` rows of n.
void rms_norm(const float* x, const float* w, std::int64_t rows, std::int64_t n, float eps, float* y);

// y[r, :] = (x[r, :] − mean) / sqrt(var + eps) ⊙ w + b (biased variance).
void layer_norm(const float* x, const float* w, const float* b, std::int64_t rows, std::int64_t n, float eps, float* y);

// y = silu(gate) ⊙ up, silu(u) = u·sigmoid(u).
void silu_mul(const float* gate, const float* up, std::int64_t n, float* y);

// y = gelu(x) with the tanh approximation (PyTorch's approximate="tanh").
void gelu_tanh(const float* x, std::int64_t n, float* y);

// y = gelu(x) = x·Φ(x), exact (erf).
void gelu_erf(const float* x, std::int64_t n, float* y);

// y += x.
void add_inplace(float* y, const float* x, std::int64_t n);

// Rotates x [tokens, heads, dim] in place: x·cos + rotate_half(x)·sin, with
// rotate_half(v) = [−v[dim/2:], v[:dim/2]] and cos, sin [tokens, dim].
void rope_rotate_half(float* x, std::int64_t tokens, std::int64_t heads, std::int64_t dim, const float* cos,
                      const float* sin);

// Scaled dot-product attention with grouped KV heads.
//   q   [t, hq, d]  queries for absolute positions start .. start+t−1
//   k,v [n, hkv, d] keys/values for absolute positions 0 .. n−1 (n >= start+t when causal)
//   out [t, hq, d]
// Query head h reads KV head h / (hq / hkv). With `causal`, query i sees keys
// j <= start + i; otherwise all n keys. Softmax in f32.
void attention(const float* q, const float* k, const float* v, std::int64_t t, std::int64_t n, std::int64_t hq,
               std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal, float* out);

// attention on k and v [hkv, ctx, d] widened from f16 (exactly) to f32.
void attention_f16kv(const float* q, const std::uint16_t* k, const std::uint16_t* v, std::int64_t t, std::int64_t n,
                     std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start,
                     float scale, bool causal, float* out);
// y[i] = f32_to_f16(x[i]) (common/half.hpp).
void to_f16(const float* x, std::int64_t n, std::uint16_t* y);
// causal attention on the values an 8-bit KV cache stands for (kv_cache_i8.hpp),
// dequantized to f32 first: k, v [hkv, ctx, d + 4] bytes.
void attention_i8kv(const float* q, const std::int8_t* k, const std::int8_t* v, std::int64_t t, std::int64_t n,
                    std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start,
                    float scale, float* out);
// out[i, :] = table[ids[i], :] as f32. ids must be in range (callers check).
void gather_rows(const WeightMatrix& table, const std::int32_t* ids, std::int64_t n, float* out);

}  // namespace qhx::cpu::ref
