// How CPU kernels see weights: read-only row-major matrices in the form they
// were stored in (mmapped, never copied). Kernels compute in f32: each format
// widens to f32 exactly, row by row (weight_row_to_f32), so no checkpoint is
// converted up front.
//
// The storage element type (`dtype`) names the format; `scales` is set for
// exactly the two quantized ones (docs/bundle.md, "Weight formats"):
//
//   dtype  format  data                              scales          value of element (r, c)
//   F32    f32     float [rows, cols]                nullptr         data[r, c]
//   BF16   bf16    bf16  [rows, cols]                nullptr         data[r, c] widened
//   F16    f16     f16   [rows, cols]                nullptr         data[r, c] widened
//   I8     w8      int8  [rows, cols]                float [rows]    q[r, c] * scales[r]
//   I8     w8, block scales (`block_scales`), cols % 32 == 0:
//                  int8  [rows, cols]                float [rows, cols / 32]
//                                                                    q[r, c] * scales[r, c / 32]
//   U8     w4      byte  [rows, cols / 2], two int4  float [rows, cols / 32]
//                  per byte: column 2j in the low nibble,            q[r, c] * scales[r, c / 32]
//                  2j + 1 in the high one, two's complement
//
// `cols` is always the logical number of input features (a w4 row holds
// cols / 2 bytes, and w4 needs cols % 32 == 0).
//
// A w8 matrix may instead be stored in the int8 kernels' panel layout (`panel_form`,
// bundle format 2, stored_panels.hpp): `data` is then [panels, k4, 16, 4], `scales`
// [panels · 16] and `panel_row_sums` [panels · 16], all mapped from the file, so a
// kernel with 16-row panels uses them in place. Every row reader (weight_row_to_f32,
// w8_at) reads that layout too; prepare() turns it into rows for a kernel that
// needs them, kept alive by `owned`.
//
// A w8 or w4 matrix may also ask for the int8 path (`int8_activations`): linear then
// quantizes each activation row to int8 and multiplies integers, by the
// contract in int8_matmul.hpp, instead of widening the weights to f32. A
// kernel set may keep a repacked copy of such a matrix in `packed`.
// Any matrix may instead ask for its input rounded to the nearest fp16 (ties to even)
// before the f32 product (`f16_activations`): the precision an fp16 accelerator holds
// activations in, so a CPU bundle can show what that costs.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>

#include "common/half.hpp"
#include "qhexrt/dtype.hpp"

namespace qhx::cpu {

struct PackedI8;  // int8_matmul.hpp

// Columns sharing one w4 scale, or one scale of a w8 matrix with block scales.
inline constexpr std::int64_t kW4GroupSize = 32;

struct WeightMatrix {
  const void* data = nullptr;
  DType dtype = DType::F32;                          // F32, BF16, F16, I8 (w8) or U8 (w4): see the table above
  std::int64_t rows = 0;                             // output features
  std::int64_t cols = 0;                             // input features
  const float* scales = nullptr;                     // w8: [rows] or [rows, cols / 32]; w4: [rows, cols / 32]
  bool block_scales = false;                         // w8 only: scales [rows, cols / 32] (see the table)
  bool int8_activations = false;                     // w8 and w4 only: the int8 path (see above)
  bool f16_activations = false;                      // not int8: activations rounded to fp16 first
  std::shared_ptr<const PackedI8> packed = nullptr;  // the kernel set's repacked copy, or null
  bool panel_form = false;                           // w8 only: data in the stored panel layout (above)
  const std::int32_t* panel_row_sums = nullptr;      // panel_form: [panels · 16] Σ_c q[r, c]
  std::shared_ptr<const void> owned = nullptr;       // memory `data` / `scales` point into, when not the file's

  static WeightMatrix w8(const std::int8_t* q, const float* row_scales, std::int64_t rows, std::int64_t cols) {
    return {.data = q, .dtype = DType::I8, .rows = rows, .cols = cols, .scales = row_scales};
  }
  static WeightMatrix w8_blocks(const std::int8_t* q, const float* block_scales, std::int64_t rows, std::int64_t cols) {
    return {.data = q, .dtype = DType::I8, .rows = rows, .cols = cols, .scales = block_scales, .block_scales = true};
  }
  static WeightMatrix w4(const std::uint8_t* packed, const float* group_scales, std::int64_t rows, std::int64_t cols) {
    return {.data = packed, .dtype = DType::U8, .rows = rows, .cols = cols, .scales = group_scales};
  }
};

// Whether the int8 path quantizes w's activations per block of 32 columns (w4, and
// w8 with block scales) rather than per row (int8_matmul.hpp).
inline bool has_block_scales(const WeightMatrix& w) {
  return w.dtype == DType::U8 || (w.dtype == DType::I8 && w.block_scales);
}

// "f32", "bf16", "f16", "w8", "w4" (or "invalid"), for messages.
const char* weight_format_name(const WeightMatrix& w);

// Rows per panel of the stored panel form (stored_panels.hpp's kStoredPanel).
inline constexpr std::int64_t kWeightPanel = 16;

// q[r, c] of a w8 matrix, row-major or in the panel form.
inline std::int8_t w8_at(const WeightMatrix& w, std::int64_t r, std::int64_t c) {
  const auto* q = static_cast<const std::int8_t*>(w.data);
  if (!w.panel_form) return q[r * w.cols + c];
  const std::int64_t k4 = (w.cols + 3) / 4;
  return q[((r / kWeightPanel) * k4 + c / 4) * kWeightPanel * 4 + (r % kWeightPanel) * 4 + c % 4];
}

// The signed value of nibble `high` (0 = low, 1 = high) of a w4 byte.
inline int w4_nibble(std::uint8_t byte, int high) {
  const int v = (byte >> (high != 0 ? 4 : 0)) & 0xF;
  return v >= 8 ? v - 16 : v;
}

// Writes row `r` of `w` as f32 into `out` [w.cols]: exact (quantized values are float(q) * scale).
void weight_row_to_f32(const WeightMatrix& w, std::int64_t r, float* out);

}  // namespace qhx::cpu
