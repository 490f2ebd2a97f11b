// The 8-bit KV cache ("kv_cache": "i8" on a decoder graph): keys and values
// kept as int8 with one f32 scale per token and KV head, a quarter of f32's
// bytes and about half of f16's. At long contexts decode streams the cache as
// well as the weights (4,096 tokens of the 2B's f16 cache are 0.47 GB a step
// beside 1.72 GB of weights), so the cache's bytes set the speed there.
//
// Layout of one layer's keys (values alike), head-major so that a KV head's
// rows are one sequential stream for the hardware prefetcher:
//   [kv_heads, ctx, d + 4] bytes; row (g, j) = d int8 values q, then the f32
//   scale s of that row (native byte order, unaligned: read with memcpy).
// Quantization of a row x [d] (quantize_rows_q8's rule, int8_matmul.hpp):
//   amax = max_c |x[c]|;  s = amax / 127 (0 for a zero row)
//   q[c] = clamp(nearbyint(x[c] · (127 / amax)), −127, 127)   (round half to even)
// The cache stands for x̂[c] = float(q[c]) · s, so |x[c] − x̂[c]| <= s / 2
// (plus one rounding of x · 127/amax): rows are written once, when their token
// runs, and never re-quantized, so chunked prefill, decode and a rolled-back
// speculation step all see the same values.
//
// Scores against the cache are integer products: each query row (one head's d
// values) is put on a 16-bit grid with one scale, quantize_rows_q8's rule at
// 32767 instead of 127 (kv_i8_quantize_query):
//   amax = max_c |q[c]|;  sq = amax / 32767 (0 for a zero row)
//   qq[c] = clamp(nearbyint(q[c] · (32767 / amax)), −32767, 32767)   (a NaN to 0)
// and every implementation computes score j from the exact int32 sum, in one order:
//   s_j = (float(Σ_c qq[c] · k_j[c]) · s_kj) · (sq · scale)            (kv_i8_score)
// so the scores are the same bits on every path. The grid moves a score by at
// most scale · sq / 2 · Σ_c |k̂_jc|: ~1.5e-5 of |q|·|k̂| at most, beside the keys'
// own rounding of up to 1/254 of their largest element. Why: widened to f32, a
// key costs two conversions per value and an FMA per head before a horizontal
// sum; as 16-bit integers, one widening per 32 values and a multiply-add per
// head, and the sums of 16 keys fold into one vector (bench_kernels' decode
// attention at 4k compares the two). Values are unchanged: weights in f32, rows
// widened.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace qhx::cpu {

// Bytes of one row: d values and the scale.
inline constexpr std::int64_t kv_i8_row_bytes(std::int64_t d) { return d + 4; }

inline float kv_i8_scale(const std::int8_t* row, std::int64_t d) {
  float s;
  std::memcpy(&s, row + d, sizeof s);
  return s;
}

// |Σ_c qq[c] · k[c]| <= d · 32767 · 127 fits an int32 for head sizes up to this.
inline constexpr std::int64_t kKvI8MaxHeadDim = 512;

// qq [d] = one head's query row on the 16-bit grid above; returns sq.
inline float kv_i8_quantize_query(const float* q, std::int64_t d, std::int16_t* qq) {
  float amax = 0.0f;
  for (std::int64_t c = 0; c < d; ++c) amax = std::max(amax, std::abs(q[c]));
  const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
  for (std::int64_t c = 0; c < d; ++c) {
    float v = q[c] * inv;
    v = (v + 12582912.0f) - 12582912.0f;  // nearbyint for |v| < 2^22 (quantize_rows_q8)
    v = v >= -32767.0f ? (v <= 32767.0f ? v : 32767.0f) : (v < -32767.0f ? -32767.0f : 0.0f);
    qq[c] = static_cast<std::int16_t>(v);
  }
  return amax / 32767.0f;
}

// Score j from its exact integer sum, the key row's scale and sq · scale.
inline float kv_i8_score(std::int32_t dot, float key_scale, float q_scale) {
  return static_cast<float>(dot) * key_scale * q_scale;
}

// Writes the rows of tokens start .. start+T−1 of x [T, hkv, d] into a layer's
// cache [hkv, ctx, d + 4], quantized as above.
void kv_i8_write(const float* x, std::int64_t T, std::int64_t hkv, std::int64_t d, std::int64_t ctx, std::int64_t start,
                 std::int8_t* cache);

// out [n, hkv, d] = the values the cache stands for, x̂ = float(q) · s, of its first n tokens.
void kv_i8_dequantize(const std::int8_t* cache, std::int64_t n, std::int64_t hkv, std::int64_t d, std::int64_t ctx,
                      float* out);

}  // namespace qhx::cpu
