// Host-side image preprocessing of Qwen3-VL (the first step of the seed's "stage F"),
// in f32: the processor's rescale/normalize and patch flattening (spec §3.4–§3.6).
// The rest of stage F (patch embedding, position embedding) is the CPU graph kind
// "qwen3vl.patch_embed" (backends/cpu/models/qwen3vl/patch_embed.hpp).
#pragma once

#include <cstdint>
#include <vector>

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

}  // namespace qhx::qwen3vl
