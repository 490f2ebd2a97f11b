#include "sampling/ngram_draft.hpp"

#include <algorithm>
#include <charconv>
#include <string>

#include "qhexrt/error.hpp"
#include "qhexrt/session.hpp"

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

std::int64_t parse_speculate(std::string_view spec) {
  if (spec == "off") return 0;
  if (spec == "ngram") return 4;  // acceptance past a few drafted tokens falls off; 4 rows cost little more than 1
  constexpr std::string_view prefix = "ngram:";
  if (spec.substr(0, prefix.size()) == prefix) {
    const std::string_view num = spec.substr(prefix.size());
    std::int64_t k = 0;
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), k);
    if (ec == std::errc() && end == num.data() + num.size() && !num.empty()) {
      if (k < 1 || k > kMaxSpeculate)
        fail("--speculate ", std::string(spec), ": the draft length must be in [1, ", kMaxSpeculate, "]");
      return k;
    }
  }
  fail("--speculate ", std::string(spec), ": expected ngram, ngram:K (K in [1, ", kMaxSpeculate, "]) or off");
}

}  // namespace qhx
