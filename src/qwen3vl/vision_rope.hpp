// The vision encoder's 2-D (axial) rotary tables, shared by the CPU encoder,
// which computes them per call, and the vision stage, which hands them to a
// fixed-size graph that takes them as inputs (the NPU's vision graph).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qhexrt/hf_config.hpp"

namespace qhx::qwen3vl {

class VisionRope {
 public:
  explicit VisionRope(const Qwen3VLVisionConfig& cfg);
  std::int64_t head_dim() const { return head_dim_; }
  // cos/sin [n, width] for the patches of images `grid` ([t, h, w] per image, in
  // patches), rows in the 2x2 merge-window order. width = head_dim gives the
  // rotation's full tables; width = head_dim / 2 their first half, which is
  // all a graph needs (the two halves are equal under rotate_half).
  void tables(std::span<const std::int64_t> grid, std::int64_t n, std::int64_t width, float* cos, float* sin) const;

 private:
  std::int64_t merge_ = 2, head_dim_ = 0;
  std::vector<float> inv_freq_;  // [head_dim / 4]: one frequency set for rows, the same for columns
};

}  // namespace qhx::qwen3vl
