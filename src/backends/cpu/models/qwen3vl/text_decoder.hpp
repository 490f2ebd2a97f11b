// Qwen3-VL's language model as a CPU graph (kind "qwen3vl.text_decoder"):
// token embeddings in, final-normed hidden states out, over a KV cache.
//
// inputs   embeds     f32 [T, hidden]              T <= the prefill chunk
//          positions  i32 [3, T]                   (T, H, W) rope positions, spec §6
//          start      i64 [1]                      absolute index of the first token = KV write offset
//          kv_cache   f32 [layers, 2, ctx, kv_heads, head_dim]   state: read and written
//                     (with the graph key "kv_cache": "f16", f16 [layers, 2, kv_heads,
//                     ctx, head_dim]; with "i8", i8 [layers, 2, kv_heads, ctx, head_dim + 4]:
//                     int8 rows with their f32 scale, backends/cpu/kv_cache_i8.hpp; docs/manifest.md)
//          deepstack  f32 [n_deepstack, T, hidden] added after layers 0..n-1 where image_mask is set
//          image_mask u8  [T]
// outputs  hidden     f32 [T, hidden]
//
// Prefill (T > 1, in chunks) and decode (T = 1) are the same graph over one
// weight set. Intermediates are dumped as hidden.embed, hidden.layer{l},
// hidden.final_norm (names of tests/reference).
#pragma once

#include <memory>

#include "backends/delegate.hpp"

namespace qhx::qwen3vl {

std::unique_ptr<Delegate> make_text_decoder();

// Kind "qwen3vl.text_decoder_ar": the same layers under the NPU graphs' contract
// (graph key "block" = AR tokens per call, context CL, f32):
// inputs   inputs_embeds  f32 [AR, hidden]
//          attention_mask f32 [AR, CL]   additive: 0 attends, <= -1000 masks; columns [0, CL-AR) are
//                                        the past, [CL-AR, CL) the block's own tokens
//          rope_cos/sin   f32 [AR, head_dim/2]   host-computed (M-RoPE)
//          past_key/value f32 [CL-AR, layers, kv_heads, head_dim]   sequence-major: the rows of
//                                        a longer cache's prefix are a valid past as they are
//          deepstack      f32 [n, AR, hidden]    added after layers 0..n-1 (zeros at text rows)
// outputs  hidden         f32 [AR, hidden]
//          new_key/value  f32 [AR, layers, kv_heads, head_dim]   the block's keys and values
std::unique_ptr<Delegate> make_text_decoder_ar();

}  // namespace qhx::qwen3vl
