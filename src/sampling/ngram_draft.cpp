#include "sampling/ngram_draft.hpp"

#include <algorithm>

namespace qhx {

void ngram_draft(std::span<const std::int32_t> seq, std::int64_t k, std::vector<std::int32_t>& out, int max_n) {
  out.clear();
  const auto L = static_cast<std::int64_t>(seq.size());
  if (k <= 0) return;
  for (std::int64_t n = std::min<std::int64_t>(max_n, L - 1); n >= 1; --n) {
    const auto suffix = seq.subspan(static_cast<std::size_t>(L - n));
    // Latest first: a recent repetition predicts the continuation best. The
    // match must end before the suffix itself so a token follows it.
    for (std::int64_t s = L - n - 1; s >= 0; --s) {
      if (!std::equal(suffix.begin(), suffix.end(), seq.begin() + s)) continue;
      const std::int64_t from = s + n, to = std::min(L, from + k);
      out.assign(seq.begin() + from, seq.begin() + to);
      return;
    }
  }
}

}  // namespace qhx
