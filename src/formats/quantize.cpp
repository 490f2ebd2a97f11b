#include "formats/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/half.hpp"
#include "qhexrt/error.hpp"

namespace qhx {
namespace {

void check_finite(const float* w, std::int64_t cols) {
  for (std::int64_t c = 0; c < cols; ++c)
    if (!std::isfinite(w[c])) fail("value ", w[c], " at column ", c, " is not finite");
}

float max_abs(const float* w, std::int64_t n) {
  float m = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(w[i]));
  return m;
}

// max|w| / qmax; 1 when that is 0 (an all-zero block, or one so small that the
// division underflows), so w / scale is never 0 / 0 and every q comes out 0.
float symmetric_scale(const float* w, std::int64_t n, float qmax) {
  const float s = max_abs(w, n) / qmax;
  return s == 0.0f ? 1.0f : s;
}

// bf16(max|w| / 7): a 16-bit value, so the CPU kernels stream w4's scales in
// half the bytes (int8_matmul.hpp); the q are rounded against this scale, so the
// half-step bound holds as it would for max / 7 (|w| / scale <= 7 · (1 + 2^-8) < 7.5).
// A group whose scale would be 0 or below the smallest normal float 2^-126 (where
// bf16 keeps too few bits to bound |w| / scale) is stored as zeros with scale 1.
float w4_group_scale(const float* w) {
  const float s = bf16_to_f32(f32_to_bf16(max_abs(w, kW4Group) / 7.0f));
  return s < 0x1p-126f ? 1.0f : s;
}

int quantize_one(float w, float scale, float qmin, float qmax) {
  return static_cast<int>(std::clamp(round_half_even(w / scale), qmin, qmax));
}

}  // namespace

std::string_view format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::F16: return "f16";
    case WeightFormat::W8: return "w8";
    case WeightFormat::W4: return "w4";
  }
  fail("qhx::WeightFormat: invalid enumerator ", static_cast<int>(f));
}

std::optional<WeightFormat> parse_weight_format(std::string_view s) {
  for (const WeightFormat f : {WeightFormat::F32, WeightFormat::F16, WeightFormat::W8, WeightFormat::W4})
    if (format_name(f) == s) return f;
  return std::nullopt;
}

WeightFormat matrix_storage_format(WeightFormat f, std::int64_t cols) {
  return f == WeightFormat::W4 && cols % kW4Group != 0 ? WeightFormat::W8 : f;
}

DType stored_dtype(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return DType::F32;
    case WeightFormat::F16: return DType::F16;
    case WeightFormat::W8: return DType::I8;
    case WeightFormat::W4: return DType::U8;
  }
  fail("qhx::WeightFormat: invalid enumerator ", static_cast<int>(f));
}

std::vector<std::int64_t> stored_shape(WeightFormat f, std::int64_t rows, std::int64_t cols) {
  return {rows, f == WeightFormat::W4 ? cols / 2 : cols};
}

std::vector<std::int64_t> scale_shape(WeightFormat f, std::int64_t rows, std::int64_t cols) {
  if (f == WeightFormat::W8) return {rows};
  if (f == WeightFormat::W4) return {rows, cols / kW4Group};
  return {};
}

float round_half_even(float x) {
  const float a = std::fabs(x);
  if (!(a < 8388608.0f)) return x;  // |x| >= 2^23 is an integer already (or inf / NaN)
  const float r = std::floor(a);
  const float d = a - r;  // exact: 0 <= d < 1, a multiple of a's ulp
  const float up = d > 0.5f || (d == 0.5f && std::fmod(r, 2.0f) != 0.0f) ? r + 1.0f : r;
  return std::copysign(up, x);
}

void quantize_f16_row(const float* w, std::int64_t cols, std::uint16_t* out) {
  check_finite(w, cols);
  for (std::int64_t c = 0; c < cols; ++c) {
    out[c] = f32_to_f16(w[c]);
    if ((out[c] & 0x7FFFu) == 0x7C00u) fail("value ", w[c], " at column ", c, " is beyond the f16 range (65504)");
  }
}

float quantize_w8_row(const float* w, std::int64_t cols, std::int8_t* q) {
  check_finite(w, cols);
  const float scale = symmetric_scale(w, cols, 127.0f);
  for (std::int64_t c = 0; c < cols; ++c) q[c] = static_cast<std::int8_t>(quantize_one(w[c], scale, -127.0f, 127.0f));
  return scale;
}

void quantize_w4_row(const float* w, std::int64_t cols, std::uint8_t* packed, float* scales) {
  if (cols % kW4Group != 0) fail("w4 needs a multiple of ", kW4Group, " columns, got ", cols);
  check_finite(w, cols);
  for (std::int64_t g = 0; g < cols / kW4Group; ++g) {
    const float* wg = w + g * kW4Group;
    const float scale = w4_group_scale(wg);
    scales[g] = scale;
    for (std::int64_t j = 0; j < kW4Group / 2; ++j) {
      const auto lo = static_cast<unsigned>(quantize_one(wg[2 * j], scale, -8.0f, 7.0f)) & 0xFu;
      const auto hi = static_cast<unsigned>(quantize_one(wg[2 * j + 1], scale, -8.0f, 7.0f)) & 0xFu;
      packed[g * (kW4Group / 2) + j] = static_cast<std::uint8_t>(lo | (hi << 4));
    }
  }
}

QuantizedMatrix quantize_matrix(const float* w, std::int64_t rows, std::int64_t cols, WeightFormat f) {
  if (rows < 0 || cols < 0) fail("quantize_matrix: negative shape [", rows, ", ", cols, "]");
  if (f == WeightFormat::W4 && cols % kW4Group != 0)
    fail("quantize_matrix: w4 needs a multiple of ", kW4Group, " columns, got ", cols);
  QuantizedMatrix m;
  m.format = f;
  m.rows = rows;
  m.cols = cols;
  const auto n = static_cast<std::size_t>(rows * cols);
  const auto ucols = static_cast<std::size_t>(cols);
  switch (f) {
    case WeightFormat::F32: m.data.resize(n * sizeof(float)); break;
    case WeightFormat::F16: m.data.resize(n * sizeof(std::uint16_t)); break;
    case WeightFormat::W8: m.data.resize(n), m.scales.resize(static_cast<std::size_t>(rows)); break;
    case WeightFormat::W4: m.data.resize(n / 2), m.scales.resize(n / kW4Group); break;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    const auto ur = static_cast<std::size_t>(r);
    try {
      switch (f) {
        case WeightFormat::F32:
          check_finite(row, cols);
          std::memcpy(m.data.data() + ur * ucols * sizeof(float), row, ucols * sizeof(float));
          break;
        case WeightFormat::F16: {
          std::vector<std::uint16_t> h(ucols);
          quantize_f16_row(row, cols, h.data());
          std::memcpy(m.data.data() + ur * ucols * sizeof(std::uint16_t), h.data(), ucols * sizeof(std::uint16_t));
          break;
        }
        case WeightFormat::W8: {
          std::vector<std::int8_t> q(ucols);
          m.scales[ur] = quantize_w8_row(row, cols, q.data());
          std::memcpy(m.data.data() + ur * ucols, q.data(), ucols);
          break;
        }
        case WeightFormat::W4:
          quantize_w4_row(row, cols, m.data.data() + ur * (ucols / 2), m.scales.data() + ur * (ucols / kW4Group));
          break;
      }
    } catch (const Error& e) {
      fail("row ", r, ": ", e.what());
    }
  }
  return m;
}

}  // namespace qhx
