// Weight-only quantization of f32 matrices into the bundle formats
// (docs/bundle.md, "Weight formats"). Reference implementations: plain loops,
// exact to the contract, independent of the FPU rounding mode. A matrix is
// row-major [rows = out, cols = in]; every format is row-local, so a matrix can
// be converted one row at a time (BundleWriter streams it that way).
//
//   f32  F32 [rows, cols]
//   f16  F16 [rows, cols], round to nearest even (an f32 beyond the f16 range is an error)
//   w8   I8 [rows, cols] + F32 scales [rows]: per row, scale = max|w| / 127,
//        q = clamp(round_half_even(w / scale), -127, 127)
//   w4   U8 [rows, cols / 2] + F32 scales [rows, cols / 32] (+ F32 channel scales [rows]):
//        low-power block quantization (QAIRT's LPBQ) with blocks of B = 64 (or 32, 128)
//        columns: a per-row channel scale s with 4 significant bits and per block
//        an integer multiplier m in 1..16, the block's scale s · m (exact in f32,
//        bf16 and fp16 alike), chosen by the least squared error of the block;
//        q = clamp(round_half_even(w / (s · m)), -8, 7), two's-complement
//        nibbles, column 2j in the low nibble of byte j, 2j + 1 in the high one.
//        The scales are stored per group of 32 columns (a block of 64 writes its
//        scale twice), the layout the kernels and older bundles share.
//        Or, with free scales (W4Scales::Free, the CPU's default), per group of 32 any
//        bf16 scale: of the 32 candidates ±|loud| / t, t = 6.5, 6.6, ..., 8.0 (loud: the
//        group's value of largest magnitude; + first, then −), each rounded to bf16, the
//        one of least squared error (ties to the first); no channel scale. A negative
//        scale mirrors the group onto [-8, 7], giving the loud side the -8 level.
// A row or group that is all zeros gets scale 1 (not 0, which would make w / scale
// 0 / 0): its q are 0 and so are its values; so does a w4 row whose channel scale
// would be below 2^-126. Value = float(q) * scale.
// Non-finite inputs are errors (they would poison a whole row or group).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "qhexrt/dtype.hpp"

namespace qhx {

enum class WeightFormat : std::uint8_t { F32, F16, W8, W4 };

inline constexpr std::int64_t kW4Group = 32;  // columns per stored w4 scale
inline constexpr std::int64_t kW4Block = 64;  // columns per LPBQ block, by default
inline constexpr int kW4MaxMultiplier = 16;   // a block's scale is s · m, m in 1..16 (4 bits)

// How a w4 row's scales are chosen (above): LPBQ, which the HTP takes, or free per group of 32.
enum class W4Scales : std::uint8_t { Lpbq, Free };
// "lpbq", "free" (the spelling of the bundle's "w4_scales" metadata and of qhx_export's --w4-scales).
std::string_view w4_scales_name(W4Scales s);
std::optional<W4Scales> parse_w4_scales(std::string_view s);

// "f32", "f16", "w8", "w4": the spelling of the bundle's "weights" metadata.
std::string_view format_name(WeightFormat f);
std::optional<WeightFormat> parse_weight_format(std::string_view s);

// The format a matrix with `cols` input features is stored in under bundle
// format `f`: w4 needs cols % block == 0, other matrices fall back to w8.
WeightFormat matrix_storage_format(WeightFormat f, std::int64_t cols, std::int64_t block = kW4Block);
// A w4 block size the scheme takes: 32, 64 or 128 (anything else throws).
void check_w4_block(std::int64_t block);

// The stored dtype of a matrix in format `f` (F32, F16, I8, U8), and its shape
// and its scales' shape ({} for f32 and f16).
DType stored_dtype(WeightFormat f);
std::vector<std::int64_t> stored_shape(WeightFormat f, std::int64_t rows, std::int64_t cols);
std::vector<std::int64_t> scale_shape(WeightFormat f, std::int64_t rows, std::int64_t cols);

// Round to the nearest integer, ties to even (2.5 -> 2, 3.5 -> 4, -2.5 -> -2).
float round_half_even(float x);

// One row of `cols` values. Each throws qhx::Error naming the column of a
// non-finite (or, for f16, out-of-range) value.
void quantize_f16_row(const float* w, std::int64_t cols, std::uint16_t* out);
// Writes q [cols] and returns the row's scale.
float quantize_w8_row(const float* w, std::int64_t cols, std::int8_t* q);
// cols % block == 0. Writes packed [cols / 2] and scales [cols / 32]; returns the
// row's channel scale s (every scale is s times an integer in 1..16). With free
// scales, block must be 32 and the return value is 0 (no channel scale).
float quantize_w4_row(const float* w, std::int64_t cols, std::int64_t block, std::uint8_t* packed, float* scales,
                      W4Scales how = W4Scales::Lpbq);

// A whole matrix: the stored bytes (row-major, stored_shape) and the scales.
struct QuantizedMatrix {
  WeightFormat format = WeightFormat::F32;
  std::int64_t rows = 0, cols = 0;
  std::vector<std::uint8_t> data;
  std::vector<float> scales;          // w8: [rows]; w4: [rows, cols / 32]; else empty
  std::vector<float> channel_scales;  // w4 (LPBQ): [rows]; else empty
};

// Quantizes `w` [rows, cols] to exactly `f` (w4 with cols % block != 0 is an
// error: apply matrix_storage_format first). Errors name the row and column.
QuantizedMatrix quantize_matrix(const float* w, std::int64_t rows, std::int64_t cols, WeightFormat f,
                                std::int64_t w4_block = kW4Block, W4Scales how = W4Scales::Lpbq);

}  // namespace qhx
