#include "sampling/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>

#include "qhexrt/error.hpp"

namespace qhx {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

// The first head of candidates top-p sorts; it grows 4x per round, so a
// flat distribution costs O(n log n) in total and a peaked one O(n).
constexpr std::size_t kTopPFirstChunk = 64;

using Ids = std::vector<std::int32_t>;

bool is_greedy(const SamplingParams& p) { return p.greedy || p.temperature == 0.0f; }

// Uniform in [0, 1) from the top 53 bits. std::uniform_real_distribution's
// algorithm is implementation-defined; this keeps draws identical across
// standard libraries.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Higher logit first; the lower id breaks ties so every run orders alike.
auto by_logit_desc(std::span<const float> logits) {
  return [logits](std::int32_t a, std::int32_t b) {
    const float la = logits[static_cast<std::size_t>(a)];
    const float lb = logits[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
}

float at(std::span<const float> logits, std::int32_t id) { return logits[static_cast<std::size_t>(id)]; }

float max_logit(std::span<const float> logits, const Ids& ids) {
  float m = kNegInf;
  for (const std::int32_t id : ids) m = std::max(m, at(logits, id));
  return m;
}

// Unnormalized softmax term in float, as torch computes it: float exp is
// about twice as fast as double, and sums are accumulated in double.
float rel_exp(std::span<const float> logits, std::int32_t id, float max) { return std::exp(at(logits, id) - max); }

void check_history(std::span<const std::int32_t> history, std::size_t vocab) {
  for (const std::int32_t id : history)
    if (id < 0 || static_cast<std::size_t>(id) >= vocab)
      fail("sampler: history token id ", id, " is outside the vocabulary [0, ", vocab, ")");
}

// Later stages compare and exponentiate logits; NaN would break the sort's
// ordering and +inf the softmax, so both are reported instead (torch's
// multinomial rejects such distributions too).
void check_logits(std::span<const float> logits) {
  bool any_finite = false;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (std::isnan(l) || l == kPosInf) fail("sampler: logit of token ", i, " is ", l);
    any_finite = any_finite || l != kNegInf;
  }
  if (!any_finite) fail("sampler: all ", logits.size(), " logits are -inf");
}

// HF gathers the logits of input_ids, penalizes them and scatters them back,
// so a token that occurs many times is still penalized once by the repetition
// and presence penalties; the frequency penalty scales with the count.
void apply_penalties(const SamplingParams& p, std::span<float> logits, std::span<const std::int32_t> history,
                     std::vector<std::uint32_t>& counts) {
  if (p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return;
  counts.resize(logits.size());
  for (const std::int32_t id : history) ++counts[static_cast<std::size_t>(id)];
  for (const std::int32_t id : history) {
    const auto i = static_cast<std::size_t>(id);
    if (counts[i] == 0) continue;  // already penalized
    float& l = logits[i];
    if (p.repetition_penalty != 1.0f) l = l < 0.0f ? l * p.repetition_penalty : l / p.repetition_penalty;
    l -= p.presence_penalty + p.frequency_penalty * static_cast<float>(counts[i]);
    counts[i] = 0;
  }
}

// torch.argmax returns the first maximum, and so does max_element.
std::int32_t argmax(std::span<const float> logits) {
  return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

void apply_temperature(std::span<float> logits, float temperature) {
  if (temperature == 1.0f) return;
  for (float& l : logits) l /= temperature;
}

// Drops order[keep..] from the candidates.
void drop_tail(std::span<float> logits, Ids& order, std::size_t keep) {
  for (std::size_t i = keep; i < order.size(); ++i) logits[static_cast<std::size_t>(order[i])] = kNegInf;
  order.resize(keep);
}

// The k-th largest logit, by one streaming pass with a size-k heap (front =
// the smallest kept): past the first tokens nearly every logit fails a single
// comparison, several times faster than nth_element over all ids.
float kth_largest(std::span<const float> logits, std::size_t k, Ids& heap) {
  const auto desc = by_logit_desc(logits);
  heap.resize(k);
  std::iota(heap.begin(), heap.end(), 0);
  std::make_heap(heap.begin(), heap.end(), desc);
  float kth = at(logits, heap.front());
  for (std::size_t i = k; i < logits.size(); ++i) {
    if (!(logits[i] > kth)) continue;
    std::pop_heap(heap.begin(), heap.end(), desc);
    heap.back() = static_cast<std::int32_t>(i);
    std::push_heap(heap.begin(), heap.end(), desc);
    kth = at(logits, heap.front());
  }
  return kth;
}

// Fills `order` with the candidates (ascending ids). HF removes
// `logits < topk(logits, k).values[-1]`: every token tied with the k-th
// largest survives, so more than k may.
void keep_top_k(std::span<float> logits, std::int32_t top_k, Ids& order) {
  const auto k = static_cast<std::size_t>(top_k);
  if (k == 0 || k >= logits.size()) {
    order.resize(logits.size());
    std::iota(order.begin(), order.end(), 0);
    return;
  }
  const float kth = kth_largest(logits, k, order);
  order.clear();
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] >= kth)
      order.push_back(static_cast<std::int32_t>(i));
    else
      logits[i] = kNegInf;
  }
}

// HF sorts ascending and removes a token when its cumulative probability
// (itself plus everything below it) is <= 1 - top_p. Seen from the top that
// is: a token survives iff the mass strictly above it is < top_p. So only the
// head needs sorting, and it is sorted in growing chunks until it holds top_p.
void keep_top_p(std::span<float> logits, float top_p, Ids& order) {
  if (top_p >= 1.0f) return;
  const float m = max_logit(logits, order);
  double z = 0.0;
  for (const std::int32_t id : order) z += static_cast<double>(rel_exp(logits, id, m));
  const double target = static_cast<double>(top_p) * z;  // unnormalized, saves a division per token

  const auto desc = by_logit_desc(logits);
  std::size_t sorted = 0;
  std::size_t chunk = kTopPFirstChunk;
  std::size_t kept = 0;
  double above = 0.0;
  while (kept < order.size() && above < target) {
    if (kept == sorted) {
      // nth_element + sort rather than partial_sort, whose heap is several
      // times slower once the head reaches tens of thousands of tokens.
      const auto first = order.begin() + static_cast<std::ptrdiff_t>(sorted);
      sorted = std::min(order.size(), sorted + chunk);
      const auto last = order.begin() + static_cast<std::ptrdiff_t>(sorted);
      std::nth_element(first, last - 1, order.end(), desc);
      std::sort(first, last, desc);
      chunk *= 4;
    }
    above += static_cast<double>(rel_exp(logits, order[kept], m));
    ++kept;
  }
  drop_tail(logits, order, kept);
}

// HF removes p < min_p * p_max with p = softmax(logits); dividing by p_max
// leaves exp(logit - max_logit) < min_p, with no normalizer. The maximum
// itself always survives (exp(0) = 1 >= min_p).
void keep_min_p(std::span<float> logits, float min_p, Ids& order) {
  if (min_p <= 0.0f) return;
  const float m = max_logit(logits, order);
  std::size_t w = 0;
  for (const std::int32_t id : order) {
    if (rel_exp(logits, id, m) < min_p)
      logits[static_cast<std::size_t>(id)] = kNegInf;
    else
      order[w++] = id;
  }
  order.resize(w);
}

void softmax(std::span<const float> logits, const Ids& order, std::vector<float>& probs) {
  const float m = max_logit(logits, order);
  probs.resize(order.size());
  double z = 0.0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    probs[i] = rel_exp(logits, order[i], m);
    z += static_cast<double>(probs[i]);
  }
  for (float& p : probs) p = static_cast<float>(static_cast<double>(p) / z);
}

std::size_t draw(const std::vector<float>& probs, std::mt19937_64& rng) {
  const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
  const double target = uniform01(rng) * total;
  double cum = 0.0;
  std::size_t last_positive = 0;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    cum += static_cast<double>(probs[i]);
    last_positive = i;
    if (cum > target) return i;
  }
  return last_positive;  // target within rounding of total
}

}  // namespace

void SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    fail("sampling: temperature must be a finite number >= 0, got ", temperature);
  if (top_k < 0) fail("sampling: top_k must be >= 0 (0 = off), got ", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("sampling: top_p must be in (0, 1], got ", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("sampling: min_p must be in [0, 1], got ", min_p);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    fail("sampling: repetition_penalty must be a finite number > 0, got ", repetition_penalty);
  if (!std::isfinite(presence_penalty)) fail("sampling: presence_penalty must be finite, got ", presence_penalty);
  if (!std::isfinite(frequency_penalty)) fail("sampling: frequency_penalty must be finite, got ", frequency_penalty);
}

Sampler::Sampler(const SamplingParams& params) : p_(params), rng_(params.seed) { p_.validate(); }

void Sampler::select(std::span<float> logits, std::span<const std::int32_t> history) {
  check_history(history, logits.size());
  apply_penalties(p_, logits, history, counts_);
  if (is_greedy(p_)) {
    check_logits(logits);
    order_.assign(1, argmax(logits));
    probs_.assign(1, 1.0f);
    return;
  }
  apply_temperature(logits, p_.temperature);
  check_logits(logits);
  order_.reserve(logits.size());  // the most candidates there can be: no reallocation later
  keep_top_k(logits, p_.top_k, order_);
  keep_top_p(logits, p_.top_p, order_);
  keep_min_p(logits, p_.min_p, order_);
  softmax(logits, order_, probs_);
}

std::int32_t Sampler::sample(std::span<float> logits, std::span<const std::int32_t> history) {
  select(logits, history);
  if (is_greedy(p_)) return order_.front();
  return order_[draw(probs_, rng_)];
}

void Sampler::distribution(std::span<float> logits, std::span<const std::int32_t> history, std::vector<float>& probs) {
  select(logits, history);
  probs.assign(logits.size(), 0.0f);
  for (std::size_t i = 0; i < order_.size(); ++i) probs[static_cast<std::size_t>(order_[i])] = probs_[i];
}

}  // namespace qhx
