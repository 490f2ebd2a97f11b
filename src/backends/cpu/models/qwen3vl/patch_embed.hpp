// The rest of Qwen3-VL's host stage F after pixel_values (qwen3vl/vision_preprocess.hpp),
// as a CPU graph (kind "qwen3vl.patch_embed"), in f32: the patch embedding (the Conv3d as
// one matrix multiply, with bias) plus the learned position embedding interpolated from
// its square table (spec §4.2). The entry names three tensors, each {"weights": file,
// "tensor": name}: "patch_weight" (a Conv3d kernel read as [hidden, C·T·p·p]),
// "patch_bias" [hidden] and "pos_embed" [side², hidden]; and the vision config's
// "in_channels", "temporal_patch_size", "patch_size", "spatial_merge_size", "hidden_size",
// "num_position_embeddings".
//
// inputs   pixel_values  f32 [N, C·T·p·p]   one image's patches in merge-window order
//          grid_thw      i64 [3]            (t, h, w) in patches; N = t·h·w
// outputs  hidden        f32 [N, hidden]    the vision encoder's input
//
// Intermediates are dumped as vision.patch_embed and vision.pos_embed.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/weights.hpp"
#include "backends/delegate.hpp"

namespace qhx::qwen3vl {

std::unique_ptr<Delegate> make_patch_embed();

// The position embedding of every patch of a t×gh×gw grid, [t·gh·gw, hidden],
// in merge-window order: bilinear over the square table [side², hidden] with
// align-corners coordinates computed exactly as torch.linspace in f32.
std::vector<float> interpolate_pos_embed(const cpu::WeightMatrix& table, std::int64_t t, std::int64_t gh,
                                         std::int64_t gw, std::int64_t merge);

}  // namespace qhx::qwen3vl
