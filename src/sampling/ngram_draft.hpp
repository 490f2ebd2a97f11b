// Prompt-lookup drafting for speculative decoding: the tokens that followed
// an earlier occurrence of the sequence's latest n-gram are a cheap guess at
// what comes next (answers often quote their prompt or repeat themselves).
// The guess is only a proposal; decode verifies every drafted token against
// the model, so a bad draft costs compute but never changes the output.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace qhx {

// The most speculation a request may ask for: verification costs grow with
// the rows of a step, and past a few tokens acceptance falls off anyway.
inline constexpr std::int64_t kMaxSpeculate = 16;

// Up to `k` tokens that followed the most recent earlier occurrence of the
// longest suffix of `seq` (n from `max_n` down to 1) that occurred before.
// `out` is cleared first; empty when no suffix recurs or k <= 0.
void ngram_draft(std::span<const std::int32_t> seq, std::int64_t k, std::vector<std::int32_t>& out, int max_n = 3);

}  // namespace qhx
