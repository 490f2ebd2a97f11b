// Host-side image preprocessing of Qwen3-VL ("stage F" of the seed), in f32:
// the processor's rescale/normalize and patch flattening (spec §3.4–§3.6) and
// the learned position embedding interpolated from its 48×48 table (§4.2).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/weights.hpp"

namespace qhx::qwen3vl {

struct PatchLayout {
  std::int64_t patch = 16, temporal = 2, merge = 2;
};

// pixel_values [gh·gw, 3·temporal·patch²] from an RGB8 image (HWC) whose sides
// are multiples of patch·merge. Rows in 2×2 merge-window order; columns in
// (channel, frame, y, x) order; value = (x − 127.5) / 127.5 in f32 (the fast
// processor's formula), the single frame repeated `temporal` times.
std::vector<float> pixel_values(const std::uint8_t* rgb, std::int64_t height, std::int64_t width,
                                const PatchLayout& layout);

// The position embedding of every patch of a t×gh×gw grid, [t·gh·gw, hidden],
// in merge-window order: bilinear over the square table [side², hidden] with
// align-corners coordinates computed exactly as torch.linspace in f32.
std::vector<float> interpolate_pos_embed(const cpu::WeightMatrix& table, std::int64_t t, std::int64_t gh,
                                         std::int64_t gw, std::int64_t merge);

}  // namespace qhx::qwen3vl
