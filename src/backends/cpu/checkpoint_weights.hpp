// Taking weights out of a checkpoint for the CPU kernels, with the checks a
// wrong or mismatched file needs: the tensor exists, has the expected shape
// and a supported dtype. Matrices stay in the mapped file; vectors (norm
// weights, biases) are small and are widened to f32.
//
// A matrix's format follows from its stored dtype and its companion
// `<name>.scale` (docs/bundle.md, "Weight formats"):
//   F32 / BF16 / F16 [rows, cols], no scale           -> f32 / bf16 / f16
//   I8 [rows, cols]       + F32 scale [rows]           -> w8
//   U8 [rows, cols / 2]   + F32 scale [rows, cols / 32] -> w4 (cols % 32 == 0)
//   no <name>, but <name>.panels, .row_sums, .scale, .shape -> w8 in the panel
//                                                    form (stored_panels.hpp, bundle format 2)
// Anything else (a quantized matrix without its scale, a scale of the wrong
// shape or dtype, a scale next to a float matrix) is an error naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/weights.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx::cpu {

// A [rows, cols] matrix in any of the formats above. Throws qhx::Error naming the tensor.
WeightMatrix matrix_weight(const Checkpoint& ckpt, const std::string& name, std::int64_t rows, std::int64_t cols);

// The same, with [rows, cols] taken from the file (a 2-D tensor; a w4 matrix
// stores cols / 2 bytes per row, so its stored shape is not its logical one).
WeightMatrix matrix_weight(const Checkpoint& ckpt, const std::string& name);

// A tensor of any shape read as a [rows, cols] matrix: its first dimension must
// be rows and the rest must flatten to cols (e.g. a Conv3d kernel [out, C, T, kh, kw];
// for w4, to cols / 2 bytes). Same formats and scales as matrix_weight.
WeightMatrix reshaped_matrix_weight(const Checkpoint& ckpt, const std::string& name, std::int64_t rows,
                                    std::int64_t cols);

// A [n] vector widened to f32 (F32, BF16 or F16). Throws qhx::Error naming the tensor.
std::vector<float> vector_weight(const Checkpoint& ckpt, const std::string& name, std::int64_t n);

// A weight matrix plus its optional bias (empty = none).
struct Linear {
  WeightMatrix w;
  std::vector<float> bias;
  const float* bias_or_null() const { return bias.empty() ? nullptr : bias.data(); }
};

Linear linear_weight(const Checkpoint& ckpt, const std::string& prefix, std::int64_t out, std::int64_t in, bool bias);

}  // namespace qhx::cpu
