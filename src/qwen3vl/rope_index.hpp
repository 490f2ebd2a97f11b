// Qwen3-VL's 3-D rope positions for a prompt (transformers' get_rope_index, spec §6).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace qhx::qwen3vl {

struct ImageGrid {
  std::int64_t t, h, w;  // in patches, as image_grid_thw
};

struct RopeIndex {
  std::vector<std::int32_t> positions;  // [3, L]: rows T, H, W
  std::int64_t rope_delta = 0;          // decode token at sequence index p uses p + rope_delta on all axes
};

// Text tokens count up on all three axes; the image_pad run of image i gets
// (s + frame, s + row, s + col) over its merged grid (h/merge × w/merge);
// text after an image resumes at 1 + the largest position so far. Throws
// qhx::Error if the image_pad runs do not match the grids.
RopeIndex rope_index(std::span<const std::int32_t> ids, std::int32_t image_token_id, std::span<const ImageGrid> grids,
                     std::int64_t spatial_merge_size);

}  // namespace qhx::qwen3vl
