// Weight formats (docs/bundle.md, "Weight formats"): f16 conversion and the w8 and
// w4 quantizers. BundleWriter's files are tests/cpp/test_bundle_writer.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/weights.hpp"
#include "common/half.hpp"
#include "formats/quantize.hpp"
#include "qhexrt/error.hpp"
#include "quant_checks.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

using test::expect_error;
using test::expect_within_half_step;
using test::random_row;

float bits_f32(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// ---------------------------------------------------------------------------
// f16

TEST(Half, EveryF16WidensAndNarrowsBackExactly) {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto v = static_cast<std::uint16_t>(h);
    const float f = f16_to_f32(v);
    if ((v & 0x7C00) == 0x7C00 && (v & 0x3FF) != 0) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_EQ(f32_to_f16(f) & 0x7C00, 0x7C00) << h;
      EXPECT_NE(f32_to_f16(f) & 0x3FF, 0) << h;
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), v) << h;
  }
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
}

// Every midpoint between neighbouring finite f16 values rounds to the even one,
// and the floats just either side of it round to the nearer one.
TEST(Half, NarrowingRoundsToNearestEven) {
  for (std::uint16_t h = 0; h < 0x7BFF; ++h) {
    const float lo = f16_to_f32(h), hi = f16_to_f32(static_cast<std::uint16_t>(h + 1));
    const auto mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);  // exact: 12 significant bits
    const std::uint16_t even = (h & 1) == 0 ? h : static_cast<std::uint16_t>(h + 1);
    ASSERT_EQ(f32_to_f16(mid), even) << h;
    ASSERT_EQ(f32_to_f16(-mid), even | 0x8000) << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)), h) << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), h + 1) << h;
  }
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7BFF);  // below the midpoint to 2^16
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);    // the midpoint: ties to the even "2^16", infinity
  EXPECT_EQ(f32_to_f16(1e30f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e30f), 0xFC00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie with 0 and 2^-24: even is 0
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: even is 2
  EXPECT_EQ(f32_to_f16(bits_f32(0x00000001)), 0x0000);   // f32 subnormal
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400);  // 1023.5 units -> 1024: smallest normal
}

// ---------------------------------------------------------------------------
// Rounding and the quantizers

TEST(Quantize, RoundHalfEven) {
  const std::pair<float, float> cases[] = {
      {0.5f, 0.0f},        {1.5f, 2.0f},       {2.5f, 2.0f},       {3.5f, 4.0f},         {-0.5f, -0.0f},
      {-1.5f, -2.0f},      {-2.5f, -2.0f},     {-3.5f, -4.0f},     {126.5f, 126.0f},     {127.5f, 128.0f},
      {0.49999997f, 0.0f}, {2.4999998f, 2.0f}, {2.5000002f, 3.0f}, {-7.4999995f, -7.0f}, {8388607.5f, 8388608.0f},
      {1e30f, 1e30f},      {0.0f, 0.0f},
  };
  for (const auto& [x, want] : cases) EXPECT_EQ(round_half_even(x), want) << x;
  EXPECT_TRUE(std::signbit(round_half_even(-0.25f)));
}

TEST(Quantize, FormatNamesAndW4Fallback) {
  for (const auto* s : {"f32", "f16", "w8", "w4"}) EXPECT_EQ(format_name(*parse_weight_format(s)), s);
  EXPECT_FALSE(parse_weight_format("int4"));
  EXPECT_EQ(matrix_storage_format(WeightFormat::W4, 64), WeightFormat::W4);
  EXPECT_EQ(matrix_storage_format(WeightFormat::W4, 48), WeightFormat::W8);
  EXPECT_EQ(matrix_storage_format(WeightFormat::W4, 96), WeightFormat::W8);  // not a multiple of the block, 64
  EXPECT_EQ(matrix_storage_format(WeightFormat::W4, 96, 32), WeightFormat::W4);
  EXPECT_EQ(matrix_storage_format(WeightFormat::W8, 48), WeightFormat::W8);
  EXPECT_EQ(matrix_storage_format(WeightFormat::F16, 3), WeightFormat::F16);
  EXPECT_EQ(stored_shape(WeightFormat::W4, 3, 64), (std::vector<std::int64_t>{3, 32}));
  EXPECT_EQ(scale_shape(WeightFormat::W4, 3, 64), (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(scale_shape(WeightFormat::W8, 3, 64), (std::vector<std::int64_t>{3}));
  EXPECT_TRUE(scale_shape(WeightFormat::F16, 3, 64).empty());
}

TEST(Quantize, W8ErrorBoundAndScale) {
  std::mt19937 rng(7);
  for (const float mag : {1e-3f, 0.05f, 1.0f, 300.0f}) {
    for (const std::size_t cols : {1u, 7u, 64u, 1000u}) {
      const auto w = random_row(rng, cols, mag);
      std::vector<std::int8_t> q(cols);
      const float scale = quantize_w8_row(w.data(), static_cast<std::int64_t>(cols), q.data());
      float m = 0;
      for (const float v : w) m = std::max(m, std::abs(v));
      EXPECT_EQ(scale, m / 127.0f);
      bool hit_extreme = false;
      for (std::size_t c = 0; c < cols; ++c) {
        ASSERT_GE(q[c], -127);
        expect_within_half_step(w[c], static_cast<float>(q[c]) * scale, scale);
        hit_extreme |= std::abs(q[c]) == 127;
      }
      EXPECT_TRUE(hit_extreme);  // the largest magnitude maps to +-127
    }
  }
}

TEST(Quantize, W8TiesZeroRowsAndTinyRows) {
  // max 127 -> scale exactly 1, so w / scale is w and the ties are exact.
  const std::vector<float> w = {127, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f, -127, 126.5f, -126.5f};
  const std::vector<int> want = {127, 2, 4, -2, -4, 0, 0, 2, -127, 126, -126};
  std::vector<std::int8_t> q(w.size());
  EXPECT_EQ(quantize_w8_row(w.data(), static_cast<std::int64_t>(w.size()), q.data()), 1.0f);
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(q[i], want[i]) << i;

  const std::vector<float> zeros(5, 0.0f);
  q.assign(5, 99);
  EXPECT_EQ(quantize_w8_row(zeros.data(), 5, q.data()), 1.0f);  // not 0: no 0 / 0
  for (const auto v : q) EXPECT_EQ(v, 0);

  const std::vector<float> tiny = {bits_f32(1), -bits_f32(3)};  // max / 127 underflows to 0
  EXPECT_EQ(quantize_w8_row(tiny.data(), 2, q.data()), 1.0f);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[1], 0);
}

// The bf16 nearest to f > 0, ties to even, chosen between f's two bf16
// neighbours by their distance in double (not by half.hpp's bit trick).
float nearest_bf16(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  const std::uint32_t lo_bits = b & 0xFFFF0000u, hi_bits = lo_bits + 0x10000u;
  const float lo = bits_f32(lo_bits), hi = bits_f32(hi_bits);
  const double dl = static_cast<double>(f) - lo, dh = static_cast<double>(hi) - f;
  if (dl != dh) return dl < dh ? lo : hi;
  return (lo_bits & 0x10000u) == 0 ? lo : hi;
}

// The squared error of a block quantized against `scale`, computed here in double
// from the contract (clamp(round_half_even(w / scale), -8, 7)), not by the writer.
double w4_block_error(const float* w, std::size_t n, float scale) {
  double e = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double q = std::clamp(std::nearbyint(static_cast<double>(w[i] / scale)), -8.0, 7.0);
    const double d = static_cast<double>(w[i]) - q * scale;
    e += d * d;
  }
  return e;
}

// k · 2^e with k an integer in 8..16: at most 4 significant bits.
bool has_4_significant_bits(float s) {
  int e = 0;
  const float m = std::frexp(s, &e) * 16.0f;
  return m == std::floor(m) && m >= 8.0f && m <= 16.0f;
}

TEST(Quantize, W4BlocksAreLeastSquaresMultiplesOfAChannelScale) {
  std::mt19937 rng(11);
  for (const std::int64_t block : {64, 32, 128}) {
    for (const std::size_t cols : {64u, 128u, 320u, 384u}) {
      if (cols % static_cast<std::size_t>(block) != 0) continue;
      auto w = random_row(rng, cols, 1.0f);
      for (std::size_t c = 0; c < 8; ++c) w[c] *= 0.01f;  // a quiet block beside loud ones
      for (std::size_t c = 64; c < cols && c < 128; ++c) w[c] *= 20.0f;
      std::vector<std::uint8_t> packed(cols / 2);
      std::vector<float> scales(cols / 32);
      const float s = quantize_w4_row(w.data(), static_cast<std::int64_t>(cols), block, packed.data(), scales.data());
      float max = 0;
      for (const float v : w) max = std::max(max, std::abs(v));
      EXPECT_TRUE(has_4_significant_bits(s)) << s;
      EXPECT_GE(s, max / 112.0f);          // the loudest block reaches max with m = 16, q = 7
      EXPECT_LT(s, max / 112.0f * 1.13f);  // rounded up by less than 1/8
      const auto b = static_cast<std::size_t>(block);
      for (std::size_t k = 0; k < cols / b; ++k) {
        const float scale = scales[k * b / 32];
        for (std::size_t g = k * b / 32; g < (k + 1) * b / 32; ++g) EXPECT_EQ(scales[g], scale);  // one per block
        const float m = scale / s;
        EXPECT_EQ(m, std::floor(m));
        EXPECT_GE(m, 1.0f);
        EXPECT_LE(m, 16.0f);
        EXPECT_EQ(scale, nearest_bf16(scale));  // a bf16 value, so the kernels may keep it in 16 bits
        const double best = w4_block_error(w.data() + k * b, b, scale);
        for (int other = 1; other <= 16; ++other)
          EXPECT_LE(best, w4_block_error(w.data() + k * b, b, s * static_cast<float>(other))) << k << " m " << other;
        for (std::size_t c = k * b; c < (k + 1) * b; ++c) {
          const int qv = cpu::w4_nibble(packed[c / 2], static_cast<int>(c % 2));
          const double q = std::clamp(std::nearbyint(static_cast<double>(w[c] / scale)), -8.0, 7.0);
          EXPECT_EQ(qv, static_cast<int>(q)) << c;
        }
      }
    }
  }
}

TEST(Quantize, W4ChannelScaleRoundsUpAndTinyRowsBecomeZero) {
  // Block 0: max 112 = 7 · 16 -> channel scale 1, and 112, -48, 16 are exact at m = 16
  // (q 7, -3, 1), which no other m is. Block 1: 3, -2, 1 are exact at m = 1.
  std::vector<float> w(128, 0.0f);
  w[0] = 112.0f, w[1] = -48.0f, w[2] = 16.0f;
  w[64] = 3.0f, w[65] = -2.0f, w[66] = 1.0f;
  std::vector<std::uint8_t> packed(64);
  std::vector<float> scales(4);
  EXPECT_EQ(quantize_w4_row(w.data(), 128, 64, packed.data(), scales.data()), 1.0f);
  EXPECT_EQ(scales[0], 16.0f);
  EXPECT_EQ(scales[1], 16.0f);
  EXPECT_EQ(scales[2], 1.0f);
  EXPECT_EQ(scales[3], 1.0f);
  EXPECT_EQ(cpu::w4_nibble(packed[0], 0), 7);
  EXPECT_EQ(cpu::w4_nibble(packed[0], 1), -3);
  EXPECT_EQ(cpu::w4_nibble(packed[1], 0), 1);
  EXPECT_EQ(cpu::w4_nibble(packed[32], 0), 3);
  EXPECT_EQ(cpu::w4_nibble(packed[32], 1), -2);
  EXPECT_EQ(cpu::w4_nibble(packed[33], 0), 1);
  // max 112 · (1 + 2^-5): the channel scale 1 + 2^-5 has 6 significant bits, rounded up to 1.125.
  w[0] = 112.0f * (1.0f + 0x1p-5f);
  EXPECT_EQ(quantize_w4_row(w.data(), 128, 64, packed.data(), scales.data()), 1.125f);
  // max 112 · 2^-127: the channel scale would be below the smallest normal float: zeros, scale 1.
  std::vector<float> tiny(64, 0.0f);
  tiny[0] = 112.0f * 0x1p-127f;
  tiny[1] = -0x1p-127f;
  std::vector<std::uint8_t> tp(32, 0xAA);
  std::vector<float> ts(2);
  EXPECT_EQ(quantize_w4_row(tiny.data(), 64, 64, tp.data(), ts.data()), 1.0f);
  EXPECT_EQ(ts[0], 1.0f);
  EXPECT_EQ(ts[1], 1.0f);
  for (const auto v : tp) EXPECT_EQ(v, 0);
  expect_error([&] { quantize_w4_row(w.data(), 96, 64, packed.data(), scales.data()); }, {"multiple of 64", "96"});
  expect_error([&] { quantize_w4_row(w.data(), 128, 48, packed.data(), scales.data()); }, {"32, 64 or 128", "48"});
}

TEST(Quantize, W4FreeScalesTakeTheCandidateOfLeastError) {
  // Group 0: 7, -3, 1 (and zeros) are exact at scale 1 = 7 / 7.0 (t = 7.0 is the 6th candidate;
  // -1 is exact too, and the positive one comes first). Group 1: all zeros -> scale 1, q 0.
  // Group 2: -8 is reached at t = 8.0 (scale 1): -8, 4 exact. Group 3: 8, -4 are exact only at
  // scale -1 (q -8, 4): the loud side takes the -8 level. No channel scale: the return value is 0.
  std::vector<float> w(128, 0.0f);
  w[0] = 7.0f, w[1] = -3.0f, w[2] = 1.0f;
  w[64] = -8.0f, w[65] = 4.0f;
  w[96] = 8.0f, w[97] = -4.0f;
  std::vector<std::uint8_t> packed(64, 0xAA);
  std::vector<float> scales(4);
  EXPECT_EQ(quantize_w4_row(w.data(), 128, 32, packed.data(), scales.data(), W4Scales::Free), 0.0f);
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(scales[1], 1.0f);
  EXPECT_EQ(cpu::w4_nibble(packed[0], 0), 7);
  EXPECT_EQ(cpu::w4_nibble(packed[0], 1), -3);
  EXPECT_EQ(cpu::w4_nibble(packed[1], 0), 1);
  for (int j = 16; j < 32; ++j) EXPECT_EQ(packed[static_cast<std::size_t>(j)], 0);
  EXPECT_EQ(cpu::w4_nibble(packed[32], 0), -8);
  EXPECT_EQ(cpu::w4_nibble(packed[32], 1), 4);
  EXPECT_EQ(scales[2], 1.0f);
  EXPECT_EQ(scales[3], -1.0f);
  EXPECT_EQ(cpu::w4_nibble(packed[48], 0), -8);
  EXPECT_EQ(cpu::w4_nibble(packed[48], 1), 4);
  // Every scale is a bf16 value, and a group's error is at most the LPBQ row's.
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> r(256);
  for (auto& v : r) v = d(rng);
  std::vector<std::uint8_t> pf(128), pl(128);
  std::vector<float> sf(8), sl(8);
  quantize_w4_row(r.data(), 256, 32, pf.data(), sf.data(), W4Scales::Free);
  quantize_w4_row(r.data(), 256, 64, pl.data(), sl.data(), W4Scales::Lpbq);
  double ef = 0, el = 0;
  for (std::size_t c = 0; c < r.size(); ++c) {
    const double f = r[c] - cpu::w4_nibble(pf[c / 2], static_cast<int>(c % 2)) * static_cast<double>(sf[c / 32]);
    const double l = r[c] - cpu::w4_nibble(pl[c / 2], static_cast<int>(c % 2)) * static_cast<double>(sl[c / 32]);
    ef += f * f, el += l * l;
  }
  EXPECT_LT(ef, el);
  for (const float s : sf) EXPECT_EQ(bf16_to_f32(f32_to_bf16(s)), s);
  expect_error([&] { quantize_w4_row(w.data(), 96, 64, packed.data(), scales.data(), W4Scales::Free); },
               {"free scales", "32 columns", "64"});
  expect_error([&] { quantize_w4_row(w.data(), 80, 32, packed.data(), scales.data(), W4Scales::Free); },
               {"multiple of 32", "80"});
}

TEST(Quantize, W4PackingTiesAndZeroBlocks) {
  // Block 0: max 7 -> channel scale 2^-4; the integers filling columns 16..63 are exact
  // at m = 16 (scale 1) and nothing else, so m = 16 and the ties are exact.
  // Block 1: all zeros -> q 0 (every m is exact: the largest, 16, is taken).
  std::vector<float> w(128, 0.0f);
  const float g0[] = {1, -2, 7, -7, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 6.5f, -6.5f, 1.5f, -1.5f, 0, 3};
  const int want[] = {1, -2, 7, -7, 2, 4, -2, -4, 0, 0, 6, -6, 2, -2, 0, 3};
  const float fill[] = {7, -7, 6, -6, 5, -5, 4, -4};
  for (std::size_t i = 0; i < 16; ++i) w[i] = g0[i];
  for (std::size_t i = 16; i < 64; ++i) w[i] = fill[i % 8];
  std::vector<std::uint8_t> packed(64, 0xAA);
  std::vector<float> scales(4);
  EXPECT_EQ(quantize_w4_row(w.data(), 128, 64, packed.data(), scales.data()), 0x1p-4f);
  EXPECT_EQ(scales[0], 1.0f);
  EXPECT_EQ(scales[1], 1.0f);
  EXPECT_EQ(scales[2], 1.0f);
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(cpu::w4_nibble(packed[i / 2], static_cast<int>(i % 2)), want[i]) << i;
  // Column 2j in the low nibble, 2j + 1 in the high one, two's complement.
  EXPECT_EQ(packed[0], 0xE1);                                          // 1 | (-2 & 0xF) << 4
  EXPECT_EQ(packed[1], 0x97);                                          // 7 | (-7 & 0xF) << 4
  for (std::size_t j = 32; j < 64; ++j) EXPECT_EQ(packed[j], 0) << j;  // block 1

  EXPECT_EQ(cpu::w4_nibble(0x8F, 0), -1);
  EXPECT_EQ(cpu::w4_nibble(0x8F, 1), -8);
  EXPECT_EQ(cpu::w4_nibble(0x70, 1), 7);
}

TEST(Quantize, F16RowAndErrors) {
  const std::vector<float> w = {1.0f, 1.0f / 3.0f, -65504.0f, 1e-8f};
  std::vector<std::uint16_t> h(w.size());
  quantize_f16_row(w.data(), 4, h.data());
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(h[i], f32_to_f16(w[i]));

  const std::vector<float> big = {1.0f, 70000.0f};
  expect_error([&] { quantize_f16_row(big.data(), 2, h.data()); }, {"70000", "column 1", "f16"});
  std::vector<float> bad(64, 1.0f);
  bad[37] = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { quantize_matrix(bad.data(), 2, 32, WeightFormat::W8); }, {"row 1", "column 5", "not finite"});
  bad[37] = std::numeric_limits<float>::infinity();
  expect_error([&] { quantize_matrix(bad.data(), 2, 32, WeightFormat::W4, 32); }, {"row 1", "column 5", "not finite"});
  expect_error([&] { quantize_matrix(bad.data(), 1, 48, WeightFormat::W4, 32); }, {"multiple of 32", "48"});
  expect_error([&] { quantize_matrix(bad.data(), 1, 32, WeightFormat::W4); }, {"multiple of 64", "32"});
}

}  // namespace
}  // namespace qhx
