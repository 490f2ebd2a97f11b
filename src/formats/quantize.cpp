#include "formats/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

// The smallest value with 4 significant bits (k · 2^e, k in 8..15) that is >= t > 0:
// then s · m for m <= 16 has at most 8 significant bits, a value bf16 holds, so the
// CPU kernels stream the block scales in 16 bits and the HTP's fp16 scales are exact.
float round_up_4_bits(float t) {
  int e = 0;
  const float mant = std::frexp(t, &e);  // t = mant · 2^e, mant in [0.5, 1)
  return std::ldexp(std::ceil(mant * 16.0f), e - 4);
}

int quantize_one(float w, float scale, float qmin, float qmax) {
  return static_cast<int>(std::clamp(round_half_even(w / scale), qmin, qmax));
}

// Squared error of one block quantized against `scale`, in double so that the
// choice of multiplier does not hinge on f32 summation order.
double block_error(const float* w, std::int64_t n, float scale) {
  double e = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(w[i]) - static_cast<double>(quantize_one(w[i], scale, -8.0f, 7.0f)) * scale;
    e += d * d;
  }
  return e;
}

// The multiplier in 1..16 of least squared error; ties go to the larger one (less clipping).
// Going down from 16, the block's loudest value clips ever more: once its clipping error
// alone reaches the best sum, no smaller multiplier can win, and the search stops.
int best_multiplier(const float* w, std::int64_t n, float channel_scale) {
  float loud = 0.0f;
  for (std::int64_t i = 0; i < n; ++i)
    if (std::fabs(w[i]) > std::fabs(loud)) loud = w[i];
  const double reach = loud < 0 ? 8.0 : 7.0;  // the largest |q| on the loud value's side
  int best = kW4MaxMultiplier;
  double best_error = block_error(w, n, channel_scale * static_cast<float>(best));
  for (int m = kW4MaxMultiplier - 1; m >= 1; --m) {
    const float scale = channel_scale * static_cast<float>(m);
    const double clip = std::fabs(static_cast<double>(loud)) - reach * static_cast<double>(scale);
    if (clip > 0 && clip * clip >= best_error) break;
    const double e = block_error(w, n, scale);
    if (e < best_error) best = m, best_error = e;
  }
  return best;
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

WeightFormat matrix_storage_format(WeightFormat f, std::int64_t cols, std::int64_t block) {
  return f == WeightFormat::W4 && cols % block != 0 ? WeightFormat::W8 : f;
}

void check_w4_block(std::int64_t block) {
  if (block != 32 && block != 64 && block != 128) fail("the w4 block size must be 32, 64 or 128 columns, got ", block);
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

std::string_view w4_scales_name(W4Scales s) { return s == W4Scales::Free ? "free" : "lpbq"; }

std::optional<W4Scales> parse_w4_scales(std::string_view s) {
  if (s == "lpbq") return W4Scales::Lpbq;
  if (s == "free") return W4Scales::Free;
  return std::nullopt;
}

namespace {

// n values (n even) as w4 nibbles of `scale`, two per byte; zeros when `zero`.
void pack_w4(const float* w, std::int64_t n, float scale, bool zero, std::uint8_t* packed) {
  for (std::int64_t j = 0; j < n / 2; ++j) {
    const auto lo = zero ? 0u : static_cast<unsigned>(quantize_one(w[2 * j], scale, -8.0f, 7.0f)) & 0xFu;
    const auto hi = zero ? 0u : static_cast<unsigned>(quantize_one(w[2 * j + 1], scale, -8.0f, 7.0f)) & 0xFu;
    packed[j] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
}

// One group of 32 with a free bf16 scale (quantize.hpp): the scale written, the nibbles packed.
float quantize_w4_group_free(const float* w, std::uint8_t* packed) {
  float loud = 0.0f;
  for (std::int64_t i = 0; i < kW4Group; ++i) loud = std::max(loud, std::fabs(w[i]));
  float best = 1.0f;
  if (loud >= 0x1p-126f) {
    // A negative scale puts the group's values the other way round on [-8, 7]: the loud side
    // then has the -8 level too (as llama.cpp's Q4_0 does by its sign), so both are tried.
    double best_error = std::numeric_limits<double>::infinity();
    for (const float sign : {1.0f, -1.0f})
      for (int k = 0; k < 16; ++k) {
        const float scale = sign * bf16_to_f32(f32_to_bf16(loud / (6.5f + 0.1f * static_cast<float>(k))));
        if (!(std::fabs(scale) >= 0x1p-126f)) continue;
        const double e = block_error(w, kW4Group, scale);
        if (e < best_error) best = scale, best_error = e;
      }
  }
  pack_w4(w, kW4Group, best, !(loud >= 0x1p-126f), packed);
  return best;
}

float quantize_w4_row_free(const float* w, std::int64_t cols, std::int64_t block, std::uint8_t* packed, float* scales) {
  if (block != kW4Group) fail("w4 with free scales takes groups of 32 columns, not blocks of ", block);
  if (cols % kW4Group != 0) fail("w4 needs a multiple of 32 columns, got ", cols);
  check_finite(w, cols);
  for (std::int64_t g = 0; g < cols / kW4Group; ++g)
    scales[g] = quantize_w4_group_free(w + g * kW4Group, packed + g * (kW4Group / 2));
  return 0.0f;
}

}  // namespace

float quantize_w4_row(const float* w, std::int64_t cols, std::int64_t block, std::uint8_t* packed, float* scales,
                      W4Scales how) {
  check_w4_block(block);
  if (how == W4Scales::Free) return quantize_w4_row_free(w, cols, block, packed, scales);
  if (cols % block != 0) fail("w4 needs a multiple of ", block, " columns (its block), got ", cols);
  check_finite(w, cols);
  // The channel scale lets the loudest block reach its max with m = 16 and q = 7.
  const float channel = round_up_4_bits(max_abs(w, cols) / (7.0f * kW4MaxMultiplier));
  const bool zero = !(channel >= 0x1p-126f);  // all zeros, or too small for a normal scale
  for (std::int64_t b = 0; b < cols / block; ++b) {
    const float* wb = w + b * block;
    const float scale = zero ? 1.0f : channel * static_cast<float>(best_multiplier(wb, block, channel));
    for (std::int64_t g = 0; g < block / kW4Group; ++g) scales[b * (block / kW4Group) + g] = scale;
    pack_w4(wb, block, scale, zero, packed + b * (block / 2));
  }
  return zero ? 1.0f : channel;
}

QuantizedMatrix quantize_matrix(const float* w, std::int64_t rows, std::int64_t cols, WeightFormat f,
                                std::int64_t w4_block, W4Scales how) {
  if (rows < 0 || cols < 0) fail("quantize_matrix: negative shape [", rows, ", ", cols, "]");
  if (f == WeightFormat::W4) check_w4_block(w4_block);
  if (f == WeightFormat::W4 && cols % w4_block != 0)
    fail("quantize_matrix: w4 needs a multiple of ", w4_block, " columns (its block), got ", cols);
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
    case WeightFormat::W4:
      m.data.resize(n / 2), m.scales.resize(n / kW4Group);
      if (how == W4Scales::Lpbq) m.channel_scales.resize(static_cast<std::size_t>(rows));
      break;
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
        case WeightFormat::W4: {
          const float channel = quantize_w4_row(row, cols, w4_block, m.data.data() + ur * (ucols / 2),
                                                m.scales.data() + ur * (ucols / kW4Group), how);
          if (how == W4Scales::Lpbq) m.channel_scales[ur] = channel;
        } break;
      }
    } catch (const Error& e) {
      fail("row ", r, ": ", e.what());
    }
  }
  return m;
}

}  // namespace qhx
