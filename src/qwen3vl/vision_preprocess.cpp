#include "qwen3vl/vision_preprocess.hpp"

#include <algorithm>
#include <cmath>

#include "qhexrt/error.hpp"

namespace qhx::qwen3vl {

std::vector<float> pixel_values(const std::uint8_t* rgb, std::int64_t height, std::int64_t width,
                                const PatchLayout& L) {
  const std::int64_t p = L.patch, gh = height / p, gw = width / p, mw = gw / L.merge;
  if (height % (p * L.merge) != 0 || width % (p * L.merge) != 0)
    fail("image of ", width, "x", height, " is not a multiple of ", p * L.merge, " on both sides");
  const std::int64_t cols = 3 * L.temporal * p * p;
  std::vector<float> out(static_cast<std::size_t>(gh * gw * cols));
  for (std::int64_t r = 0; r < gh * gw; ++r) {
    const std::int64_t window = r / (L.merge * L.merge), j = r % (L.merge * L.merge);
    const std::int64_t py = (window / mw) * L.merge + j / L.merge, px = (window % mw) * L.merge + j % L.merge;
    float* row = out.data() + r * cols;
    for (std::int64_t c = 0; c < 3; ++c)
      for (std::int64_t f = 0; f < L.temporal; ++f)
        for (std::int64_t y = 0; y < p; ++y)
          for (std::int64_t x = 0; x < p; ++x) {
            const std::uint8_t v = rgb[((py * p + y) * width + (px * p + x)) * 3 + c];
            row[((c * L.temporal + f) * p + y) * p + x] = (static_cast<float>(v) - 127.5f) / 127.5f;
          }
  }
  return out;
}

}  // namespace qhx::qwen3vl
