// Taking weights out of a checkpoint for the CPU kernels, with the checks a
// wrong or mismatched file needs: the tensor exists, has the expected shape
// and a supported dtype. Matrices stay in the mapped file; vectors (norm
// weights, biases) are small and are widened to f32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/weights.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx::cpu {

// A [rows, cols] F32 or BF16 matrix. Throws qhx::Error naming the tensor.
WeightMatrix matrix_weight(const Checkpoint& ckpt, const std::string& name, std::int64_t rows, std::int64_t cols);

// A tensor of any shape read as a [rows, cols] matrix: its first dimension must
// be rows and the rest must flatten to cols (e.g. a Conv3d kernel [out, C, T, kh, kw]).
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
