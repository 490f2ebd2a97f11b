// The check of KernelSet::linear_then's step contract, shared by the kernel suites.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/block_step.hpp"

namespace qhx::cpu {

// run(step) computes y [m, n] with `step` (KernelSet::linear_then's contract):
// every element is handed to the step exactly once, only once its value is final
// (equal to `want`), and what the step writes stays. The step here doubles its block.
template <class Run>
void expect_step_sees_final_blocks(int m, int n, const std::vector<float>& want, Run&& run, const std::string& what) {
  std::vector<float> y(want.size(), std::numeric_limits<float>::quiet_NaN());
  const auto visits = std::make_unique<std::atomic<int>[]>(want.size());
  std::atomic<int> early{0}, outside{0};
  auto step = [&](std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
    if (r0 < 0 || r1 > m || r0 >= r1 || c0 < 0 || c1 > n || c0 >= c1) {
      ++outside;
      return;
    }
    for (std::int64_t i = r0; i < r1; ++i)
      for (std::int64_t j = c0; j < c1; ++j) {
        const auto e = static_cast<std::size_t>(i * n + j);
        if (std::memcmp(&y[e], &want[e], 4) != 0) ++early;
        ++visits[e];
        y[e] *= 2.0f;
      }
  };
  run(y.data(), block_step(step));
  ASSERT_EQ(outside.load(), 0) << what << ": a block outside the output";
  ASSERT_EQ(early.load(), 0) << what << ": elements handed to the step before their final value";
  for (std::size_t e = 0; e < want.size(); ++e) {
    ASSERT_EQ(visits[e].load(), 1) << what << ": element " << e << " visited " << visits[e].load() << " times";
    ASSERT_EQ(y[e], want[e] * 2.0f) << what << " at " << e;
  }
}

}  // namespace qhx::cpu
