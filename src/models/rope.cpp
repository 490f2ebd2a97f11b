#include "models/rope.hpp"

#include <cmath>

namespace qhx::nn {

std::vector<float> rope_inv_freq(double theta, std::int64_t dim) {
  std::vector<float> inv(static_cast<std::size_t>(dim / 2));
  for (std::int64_t k = 0; k < dim / 2; ++k) {
    // transformers: 1.0 / base ** (arange(0, dim, 2).float() / dim), in f32.
    const float exponent = static_cast<float>(2 * k) / static_cast<float>(dim);
    inv[static_cast<std::size_t>(k)] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(exponent)));
  }
  return inv;
}

std::vector<std::uint8_t> mrope_interleaved_axes(const std::vector<std::int64_t>& section, std::int64_t half) {
  std::vector<std::uint8_t> axes(static_cast<std::size_t>(half), 0);
  for (std::int64_t k = 0; k < half; ++k) {
    if (k % 3 == 1 && k < 3 * section[1]) axes[static_cast<std::size_t>(k)] = 1;
    if (k % 3 == 2 && k < 3 * section[2]) axes[static_cast<std::size_t>(k)] = 2;
  }
  return axes;
}

void mrope_cos_sin(const std::int32_t* pos, std::int64_t tokens, const std::vector<float>& inv_freq,
                   const std::vector<std::uint8_t>& axes, float* cos, float* sin) {
  const auto half = static_cast<std::int64_t>(inv_freq.size());
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t k = 0; k < half; ++k) {
      const auto p = static_cast<float>(pos[axes[static_cast<std::size_t>(k)] * tokens + t]);
      const float angle = p * inv_freq[static_cast<std::size_t>(k)];
      // cos/sin of the f32 angle, evaluated in double and rounded once.
      const auto c = static_cast<float>(std::cos(static_cast<double>(angle)));
      const auto s = static_cast<float>(std::sin(static_cast<double>(angle)));
      cos[t * 2 * half + k] = cos[t * 2 * half + half + k] = c;
      sin[t * 2 * half + k] = sin[t * 2 * half + half + k] = s;
    }
  }
}

}  // namespace qhx::nn
