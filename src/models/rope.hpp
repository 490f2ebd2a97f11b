// Rotary position embeddings: the angle tables, computed the way transformers
// computes them in f32 (spec §5.5), for any model that rotates with rotate_half.
#pragma once

#include <cstdint>
#include <vector>

namespace qhx::nn {

// inv_freq[k] = 1 / theta^(2k / dim) for k < dim/2, rounded once to f32.
std::vector<float> rope_inv_freq(double theta, std::int64_t dim);

// The position axis (0 = T, 1 = H, 2 = W) each of the dim/2 frequencies reads
// under Qwen3-VL's interleaved multimodal RoPE: frequency k is H when
// k % 3 == 1 and k < 3·section[1], W when k % 3 == 2 and k < 3·section[2],
// T otherwise ("THWTHW…TT").
std::vector<std::uint8_t> mrope_interleaved_axes(const std::vector<std::int64_t>& section, std::int64_t half);

// cos, sin [tokens, 2·half]: angle(t, k) = f32(pos[axis(k)][t] · inv_freq[k]),
// both halves equal. `pos` is [3, tokens] (T, H, W rows).
void mrope_cos_sin(const std::int32_t* pos, std::int64_t tokens, const std::vector<float>& inv_freq,
                   const std::vector<std::uint8_t>& axes, float* cos, float* sin);

}  // namespace qhx::nn
