#include "backends/cpu/nn/mlp.hpp"

namespace qhx::nn {

SwiGluScratch::SwiGluScratch(std::int64_t max_tokens, std::int64_t intermediate)
    : gate(static_cast<std::size_t>(max_tokens * intermediate)), up(gate.size()), out() {}

void swiglu_mlp(const cpu::KernelSet& k, const SwiGluWeights& w, const float* x, std::int64_t T, SwiGluScratch& sc,
                float* residual) {
  const std::int64_t hidden = w.down.w.rows, inter = w.gate.w.rows;
  if (sc.out.size() < static_cast<std::size_t>(T * hidden)) sc.out.resize(static_cast<std::size_t>(T * hidden));
  k.linear(x, T, w.gate.w, w.gate.bias_or_null(), sc.gate.data());
  k.linear(x, T, w.up.w, w.up.bias_or_null(), sc.up.data());
  k.silu_mul(sc.gate.data(), sc.up.data(), T * inter, sc.gate.data());
  k.linear(sc.gate.data(), T, w.down.w, w.down.bias_or_null(), sc.out.data());
  k.add_inplace(residual, sc.out.data(), T * hidden);
}

}  // namespace qhx::nn
