// How CPU kernels see weights: read-only row-major matrices in the dtype they
// were stored in (mmapped, never copied). bf16 widens to f32 exactly by a
// 16-bit shift, so kernels compute in f32 on bf16 weights without converting
// the checkpoint up front.
#pragma once

#include <cstdint>
#include <cstring>

#include "qhexrt/dtype.hpp"

namespace qhx::cpu {

struct WeightMatrix {
  const void* data = nullptr;
  DType dtype = DType::F32;  // F32 or BF16
  std::int64_t rows = 0;     // output features
  std::int64_t cols = 0;     // input features
};

inline float bf16_to_f32(std::uint16_t v) {
  const std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Writes row `r` of `w` as f32 into `out` [w.cols].
void weight_row_to_f32(const WeightMatrix& w, std::int64_t r, float* out);

}  // namespace qhx::cpu
