// Helpers of the quantizer and bundle-writer tests (test_quant.cpp, test_bundle_writer.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace qhx::test {

// n values of N(0, scale).
inline std::vector<float> random_row(std::mt19937& rng, std::size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// |w - deq| <= scale / 2, allowing for the two f32 roundings (w / scale and q * scale).
inline void expect_within_half_step(float w, float deq, float scale) {
  const double err = std::abs(static_cast<double>(w) - deq);
  ASSERT_LE(err, scale * 0.5 * (1 + 1e-6)) << "w " << w << " deq " << deq << " scale " << scale;
}

}  // namespace qhx::test
