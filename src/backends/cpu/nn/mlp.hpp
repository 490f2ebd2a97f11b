// SwiGLU feed-forward block: down(silu(gate(x)) ⊙ up(x)), added to the residual stream.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "common/line_aligned.hpp"

namespace qhx::nn {

struct SwiGluWeights {
  cpu::Linear gate, up, down;  // gate/up [inter, hidden], down [hidden, inter]
};

struct SwiGluScratch {
  SwiGluScratch() = default;
  SwiGluScratch(std::int64_t max_tokens, std::int64_t intermediate);
  LineFloats gate, up, out;  // gate/up [T, inter]; out [T, hidden]
};

// residual[T, hidden] += mlp(x[T, hidden]).
void swiglu_mlp(const cpu::KernelSet& k, const SwiGluWeights& w, const float* x, std::int64_t T, SwiGluScratch& scratch,
                float* residual);

}  // namespace qhx::nn
