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
#pragma once

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

// Writes the rows of tokens start .. start+T−1 of x [T, hkv, d] into a layer's
// cache [hkv, ctx, d + 4], quantized as above.
void kv_i8_write(const float* x, std::int64_t T, std::int64_t hkv, std::int64_t d, std::int64_t ctx,
                 std::int64_t start, std::int8_t* cache);

// out [n, hkv, d] = the values the cache stands for, x̂ = float(q) · s, of its first n tokens.
void kv_i8_dequantize(const std::int8_t* cache, std::int64_t n, std::int64_t hkv, std::int64_t d, std::int64_t ctx,
                      float* out);

}  // namespace qhx::cpu
