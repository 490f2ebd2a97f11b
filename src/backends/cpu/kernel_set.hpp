// The CPU backend's kernels as one table of function pointers, so a graph is
// written once and runs on whichever implementation the machine supports.
// Every implementation must pass the shared suite in tests/cpp/test_kernels.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "backends/cpu/block_step.hpp"
#include "backends/cpu/weights.hpp"

namespace qhx::cpu {

struct KernelSet {
  std::string_view name;  // "reference", ...
  void (*linear)(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y);
  // `linear`, then step.run on blocks that together cover the output [m, w.rows)
  // once each, every block after its own outputs are written (blocks may run at
  // once on different threads; step must only touch its own block).
  void (*linear_then)(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y,
                      BlockStep step);
  void (*rms_norm)(const float* x, const float* w, std::int64_t rows, std::int64_t n, float eps, float* y);
  void (*layer_norm)(const float* x, const float* w, const float* b, std::int64_t rows, std::int64_t n, float eps,
                     float* y);
  void (*silu_mul)(const float* gate, const float* up, std::int64_t n, float* y);
  void (*gelu_tanh)(const float* x, std::int64_t n, float* y);
  void (*gelu_erf)(const float* x, std::int64_t n, float* y);
  void (*add_inplace)(float* y, const float* x, std::int64_t n);
  void (*rope_rotate_half)(float* x, std::int64_t tokens, std::int64_t heads, std::int64_t dim, const float* cos,
                           const float* sin);
  void (*attention)(const float* q, const float* k, const float* v, std::int64_t t, std::int64_t n, std::int64_t hq,
                    std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal, float* out);
  // `attention` over keys and values stored as f16 (a decoder's KV cache kept
  // in half the bytes): k and v are one layer's keys and values [hkv, ctx, d],
  // each head's rows together, and the results are those of `attention` on the
  // widened values.
  void (*attention_f16kv)(const float* q, const std::uint16_t* k, const std::uint16_t* v, std::int64_t t,
                          std::int64_t n, std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d,
                          std::int64_t start, float scale, bool causal, float* out);
  // y[i] = the f16 nearest x[i], ties to even (half.hpp's f32_to_f16, bit for bit).
  void (*to_f16)(const float* x, std::int64_t n, std::uint16_t* y);
  // Causal `attention` over an 8-bit KV cache (kv_cache_i8.hpp): k and v are one
  // layer's keys and values [hkv, ctx, d + 4], and the results are those of
  // `attention` of the queries on their 16-bit grid on the values the cache
  // stands for (float(q) · s), the scores computed as kv_i8_score does; d <= 512.
  void (*attention_i8kv)(const float* q, const std::int8_t* k, const std::int8_t* v, std::int64_t t, std::int64_t n,
                         std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start,
                         float scale, float* out);
  // Non-causal attention with int8 products (the contract of int8_attention.hpp),
  // for graphs on the int8 path; shapes as in `attention`.
  void (*attention_i8)(const float* q, const float* k, const float* v, std::int64_t t, std::int64_t n, std::int64_t hq,
                       std::int64_t hkv, std::int64_t d, float scale, float* out);
  void (*gather_rows)(const WeightMatrix& table, const std::int32_t* ids, std::int64_t n, float* out);
  // The repacked copy `linear` wants for a w8 matrix on the int8 path, or null
  // (it then reads the matrix as stored). Called once per matrix, at load.
  std::shared_ptr<const PackedI8> (*pack)(const WeightMatrix& w);
};

// The plain f32 kernels of kernels_ref.hpp.
const KernelSet& reference_kernels();

// The kernels graphs run on: the fast set (kernels_fast.hpp), unless the
// environment variable QHX_KERNELS=reference asks for the reference one
// (read once, at the first call).
const KernelSet& active_kernels();

}  // namespace qhx::cpu
