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

namespace {

// torch.linspace(0, end, n) in f32 on the CPU: the first half counts up from
// 0, the second half down from `end`, so both ends are exact.
std::vector<float> linspace_f32(float end, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n), 0.0f);
  if (n == 1) return v;
  const float step = end / static_cast<float>(n - 1);
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = i < n / 2 ? step * static_cast<float>(i)
                                               : end - step * static_cast<float>(n - 1 - i);
  return v;
}

}  // namespace

std::vector<float> interpolate_pos_embed(const cpu::WeightMatrix& table, std::int64_t t, std::int64_t gh,
                                         std::int64_t gw, std::int64_t merge) {
  const auto side = static_cast<std::int64_t>(std::lround(std::sqrt(static_cast<double>(table.rows))));
  if (side * side != table.rows) fail("position-embedding table of ", table.rows, " rows is not square");
  const std::int64_t hidden = table.cols;
  const auto ys = linspace_f32(static_cast<float>(side - 1), gh);
  const auto xs = linspace_f32(static_cast<float>(side - 1), gw);

  // Raster order first, as transformers computes it.
  std::vector<float> raster(static_cast<std::size_t>(gh * gw * hidden));
  std::vector<float> e00(static_cast<std::size_t>(hidden)), e01(e00.size()), e10(e00.size()), e11(e00.size());
  for (std::int64_t i = 0; i < gh; ++i) {
    const float y = ys[static_cast<std::size_t>(i)];
    const auto y0 = static_cast<std::int64_t>(y);  // truncation, as .int()
    const std::int64_t y1 = std::min(y0 + 1, side - 1);
    const float dy = y - static_cast<float>(y0);
    for (std::int64_t j = 0; j < gw; ++j) {
      const float x = xs[static_cast<std::size_t>(j)];
      const auto x0 = static_cast<std::int64_t>(x);
      const std::int64_t x1 = std::min(x0 + 1, side - 1);
      const float dx = x - static_cast<float>(x0);
      const float w00 = (1.0f - dy) * (1.0f - dx), w01 = (1.0f - dy) * dx, w10 = dy * (1.0f - dx), w11 = dy * dx;
      cpu::weight_row_to_f32(table, y0 * side + x0, e00.data());
      cpu::weight_row_to_f32(table, y0 * side + x1, e01.data());
      cpu::weight_row_to_f32(table, y1 * side + x0, e10.data());
      cpu::weight_row_to_f32(table, y1 * side + x1, e11.data());
      float* dst = raster.data() + (i * gw + j) * hidden;
      for (std::int64_t c = 0; c < hidden; ++c) {
        const auto u = static_cast<std::size_t>(c);
        dst[c] = ((e00[u] * w00 + e01[u] * w01) + e10[u] * w10) + e11[u] * w11;
      }
    }
  }
  // Then merge-window order, repeated for every frame.
  std::vector<float> out(static_cast<std::size_t>(t * gh * gw * hidden));
  const std::int64_t mw = gw / merge;
  for (std::int64_t f = 0; f < t; ++f)
    for (std::int64_t r = 0; r < gh * gw; ++r) {
      const std::int64_t window = r / (merge * merge), j = r % (merge * merge);
      const std::int64_t py = (window / mw) * merge + j / merge, px = (window % mw) * merge + j % merge;
      std::copy_n(raster.data() + (py * gw + px) * hidden, hidden, out.data() + (f * gh * gw + r) * hidden);
    }
  return out;
}

}  // namespace qhx::qwen3vl
