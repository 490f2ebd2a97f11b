#include "qwen3vl/vision_rope.hpp"

#include <cmath>

#include "qhexrt/error.hpp"

namespace qhx::qwen3vl {

// Rotary over head_dim/2 dimensions, half for the row and half for the column, with the
// config's vision theta (10000: 4.57 hard-codes it, 5.x reads vision_config.rope_parameters).
VisionRope::VisionRope(const Qwen3VLVisionConfig& cfg)
    : merge_(cfg.spatial_merge_size), head_dim_(cfg.hidden_size / cfg.num_heads) {
  const std::int64_t dim = head_dim_ / 2;
  for (std::int64_t i = 0; i < dim / 2; ++i)
    inv_freq_.push_back(static_cast<float>(
        1.0 / std::pow(cfg.rope_theta, static_cast<double>(static_cast<float>(2 * i) / static_cast<float>(dim)))));
}

// For the patch at (row, col) the angles are [row·inv_freq, col·inv_freq], twice.
void VisionRope::tables(std::span<const std::int64_t> grid, std::int64_t n, std::int64_t width, float* cos,
                        float* sin) const {
  const std::int64_t m = merge_, hd = head_dim_, q = static_cast<std::int64_t>(inv_freq_.size());
  if (width != hd && width != hd / 2) fail("vision rope: tables of width ", width, " for head_dim ", hd);
  std::int64_t r = 0;
  for (std::size_t img = 0; img < grid.size() / 3; ++img) {
    const std::int64_t t = grid[img * 3], gh = grid[img * 3 + 1], gw = grid[img * 3 + 2];
    for (std::int64_t f = 0; f < t; ++f)
      for (std::int64_t bh = 0; bh < gh / m; ++bh)
        for (std::int64_t bw = 0; bw < gw / m; ++bw)
          for (std::int64_t j = 0; j < m * m; ++j, ++r) {
            if (r >= n) fail("vision rope: the grids hold more than ", n, " patches");
            const auto row = static_cast<float>(bh * m + j / m), col = static_cast<float>(bw * m + j % m);
            for (std::int64_t i = 0; i < q; ++i) {
              const float a_row = row * inv_freq_[static_cast<std::size_t>(i)];
              const float a_col = col * inv_freq_[static_cast<std::size_t>(i)];
              for (std::int64_t base = 0; base < width; base += 2 * q) {
                cos[r * width + base + i] = static_cast<float>(std::cos(double{a_row}));
                sin[r * width + base + i] = static_cast<float>(std::sin(double{a_row}));
                cos[r * width + base + q + i] = static_cast<float>(std::cos(double{a_col}));
                sin[r * width + base + q + i] = static_cast<float>(std::sin(double{a_col}));
              }
            }
          }
  }
  if (r != n) fail("vision rope: the grids hold ", r, " patches, not ", n);
}

}  // namespace qhx::qwen3vl
