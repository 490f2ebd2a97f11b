// Qwen3-VL's vision tower after the patch embedding, as a CPU graph (kind
// "qwen3vl.vision_encoder"): the ViT blocks with 2-D RoPE and full attention
// within each image, the DeepStack mergers tapped after the configured blocks,
// and the main patch merger (spec §4.3–§4.7).
//
// inputs   hidden     f32 [N, vision_hidden]   patch embeddings + position embeddings (host stage F),
//                                              rows in 2×2 merge-window order
//          grid_thw   i64 [images, 3]          (t, h, w) in patches per image; Σ t·h·w = N
// outputs  image_embeds  f32 [N/4, out_hidden]
//          deepstack     f32 [n_deepstack, N/4, out_hidden]
//
// Intermediates are dumped as vision.block{i}, vision.deepstack{k}, vision.merger.
#pragma once

#include <memory>

#include "backends/delegate.hpp"

namespace qhx::qwen3vl {

std::unique_ptr<Delegate> make_vision_encoder();

}  // namespace qhx::qwen3vl
