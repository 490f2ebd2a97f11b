// The hook by which a product hands each finished block of its output to the
// next elementwise step (KernelSet::linear_then).
#pragma once

#include <cstdint>

namespace qhx::cpu {

// A step `linear_then` runs on each block of the output, rows [r0, r1) ×
// columns [c0, c1), as soon as the block is final: on the thread that computed
// it, while it is still in that core's cache. For elementwise work on a
// product's output (an activation, a residual add), which would otherwise be
// another pass over memory; the product's values are those of `linear` either way.
struct BlockStep {
  void (*run)(void* ctx, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1);
  void* ctx;
};
// A BlockStep calling f(r0, r1, c0, c1); f must outlive the step.
template <class F>
BlockStep block_step(F& f) {
  return {[](void* ctx, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
            (*static_cast<F*>(ctx))(r0, r1, c0, c1);
          },
          &f};
}

}  // namespace qhx::cpu
