#include "backends/cpu/kv_cache_i8.hpp"

#include "backends/cpu/int8_matmul.hpp"

namespace qhx::cpu {

void kv_i8_write(const float* x, std::int64_t T, std::int64_t hkv, std::int64_t d, std::int64_t ctx, std::int64_t start,
                 std::int8_t* cache) {
  const std::int64_t rb = kv_i8_row_bytes(d);
  // The best kernel's quantize is quantize_rows_q8 bit for bit, vectorized: a decode
  // step writes 2 · layers · kv_heads rows, which the scalar one makes a visible cost.
  const auto quantize = int8_kernel_best().quantize;
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t g = 0; g < hkv; ++g) {
      std::int8_t* row = cache + (g * ctx + start + t) * rb;
      float s = 0.0f;
      // offset 0: the signed values' bytes, and no padding columns (ldq = d).
      quantize(x + (t * hkv + g) * d, 1, d, d, 0, reinterpret_cast<std::uint8_t*>(row), &s);
      std::memcpy(row + d, &s, sizeof s);
    }
}

void kv_i8_dequantize(const std::int8_t* cache, std::int64_t n, std::int64_t hkv, std::int64_t d, std::int64_t ctx,
                      float* out) {
  const std::int64_t rb = kv_i8_row_bytes(d);
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t g = 0; g < hkv; ++g) {
      const std::int8_t* row = cache + (g * ctx + j) * rb;
      const float s = kv_i8_scale(row, d);
      float* o = out + (j * hkv + g) * d;
      for (std::int64_t c = 0; c < d; ++c) o[c] = static_cast<float>(row[c]) * s;
    }
}

}  // namespace qhx::cpu
