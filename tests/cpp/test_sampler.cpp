// Sampler: each stage against values worked out by hand on tiny vocabularies.
// tests/python/test_sampler_vs_hf.py checks the same against transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <numeric>
#include <random>
#include <vector>

#include "qhexrt/error.hpp"
#include "sampling/sampler.hpp"
#include "test_support.hpp"

// Counts every global allocation so a test can prove sample() allocates
// nothing once warmed up.
namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace qhx {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> probs_of(const SamplingParams& params, std::vector<float> logits,
                            const std::vector<std::int32_t>& history = {}) {
  std::vector<float> probs;
  Sampler(params).distribution(logits, history, probs);
  return probs;
}

void expect_probs(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "token " << i;
}

// Logits whose softmax is exactly `p` (p sums to 1).
std::vector<float> log_of(const std::vector<double>& p) {
  std::vector<float> l;
  for (const double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

TEST(Sampler, NoWarperIsPlainSoftmax) {
  const auto got = probs_of({}, {0.0f, 1.0f, 2.0f});
  const double z = 1.0 + std::exp(1.0) + std::exp(2.0);
  expect_probs(got, {1.0 / z, std::exp(1.0) / z, std::exp(2.0) / z});
}

TEST(Sampler, TemperatureDividesLogits) {
  SamplingParams p;
  p.temperature = 0.5f;
  const auto got = probs_of(p, {0.0f, 1.0f});  // -> {0, 2}
  const double z = 1.0 + std::exp(2.0);
  expect_probs(got, {1.0 / z, std::exp(2.0) / z});
}

TEST(Sampler, TopKKeepsExactlyTheKLargest) {
  SamplingParams p;
  p.top_k = 2;
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 5.0f, 4.0f};
  std::vector<float> probs;
  Sampler(p).distribution(logits, {}, probs);
  const double e = std::exp(1.0);
  expect_probs(probs, {0, 0, 0, e / (e + 1), 1 / (e + 1)});
  // The filtered logits are -inf, the kept ones untouched (as HF's scores).
  EXPECT_EQ(logits, (std::vector<float>{-kInf, -kInf, -kInf, 5.0f, 4.0f}));
}

TEST(Sampler, TopKKeepsTiesWithTheKthValue) {
  SamplingParams p;
  p.top_k = 2;
  // k-th largest is 3; HF removes only logits < 3, so all three 3s stay.
  expect_probs(probs_of(p, {1.0f, 3.0f, 3.0f, 0.0f, 3.0f}), {0, 1.0 / 3, 1.0 / 3, 0, 1.0 / 3});
  // Ties *below* the k-th value are dropped with everything else.
  expect_probs(probs_of(p, {2.0f, 9.0f, 2.0f, 8.0f}),
               {0, std::exp(1.0) / (1 + std::exp(1.0)), 0, 1 / (1 + std::exp(1.0))});
}

TEST(Sampler, TopKAtLeastVocabKeepsAll) {
  SamplingParams p;
  p.top_k = 3;
  expect_probs(probs_of(p, {0.0f, 0.0f, 0.0f}), {1.0 / 3, 1.0 / 3, 1.0 / 3});
  p.top_k = 100;
  expect_probs(probs_of(p, {0.0f, 0.0f}), {0.5, 0.5});
}

TEST(Sampler, TopPKeepsSmallestHeadReachingP) {
  // Sorted: 0.5, 0.25, 0.15, 0.10 (shuffled ids). A token stays iff the
  // mass above it is < top_p.
  const std::vector<float> logits = log_of({0.15, 0.5, 0.10, 0.25});
  SamplingParams p;
  p.top_p = 0.3f;  // 0.5 alone already >= 0.3
  expect_probs(probs_of(p, logits), {0, 1, 0, 0});
  p.top_p = 0.7f;  // 0.5 < 0.7 so 0.25 stays; 0.75 >= 0.7 so 0.15 goes
  expect_probs(probs_of(p, logits), {0, 2.0 / 3, 0, 1.0 / 3});
  p.top_p = 0.76f;  // 0.75 < 0.76 so 0.15 stays too
  expect_probs(probs_of(p, logits), {0.15 / 0.9, 0.5 / 0.9, 0, 0.25 / 0.9});
  p.top_p = 1.0f;
  expect_probs(probs_of(p, logits), {0.15, 0.5, 0.10, 0.25});
}

TEST(Sampler, TopPAlwaysKeepsTheTopToken) {
  SamplingParams p;
  p.top_p = 1e-6f;
  expect_probs(probs_of(p, {0.0f, 4.0f, 1.0f}), {0, 1, 0});
}

TEST(Sampler, TopPRenormalizesAfterTopK) {
  // top-k leaves {0.5, 0.25, 0.15} -> {5/9, 2.5/9, 1.5/9}; top_p = 0.8 keeps
  // 5/9 (0.556 < 0.8) and 2.5/9 (0.833 >= 0.8 drops the third).
  SamplingParams p;
  p.top_k = 3;
  p.top_p = 0.8f;
  expect_probs(probs_of(p, log_of({0.15, 0.5, 0.10, 0.25})), {0, 2.0 / 3, 0, 1.0 / 3});
}

// HF's rule written out plainly: sort ascending, cumulative softmax, remove
// where it is <= 1 - top_p, keep the last.
std::vector<bool> hf_top_p_keep(const std::vector<float>& logits, double top_p) {
  std::vector<std::size_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return logits[a] < logits[b]; });
  double z = 0;
  for (const float l : logits) z += std::exp(static_cast<double>(l));
  std::vector<bool> keep(logits.size(), true);
  double cum = 0;
  for (std::size_t j = 0; j + 1 < idx.size(); ++j) {
    cum += std::exp(static_cast<double>(logits[idx[j]])) / z;
    if (cum <= 1 - top_p) keep[idx[j]] = false;
  }
  return keep;
}

TEST(Sampler, TopPOnWideVocabularyGrowsTheSortedHead) {
  // ~600 survivors out of 2000: more than the first sorted chunks, so the
  // incremental partial sort has to extend several times.
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  std::vector<float> logits(2000);
  for (float& l : logits) l = nd(gen);
  for (const float top_p : {0.3f, 0.9f, 0.999f}) {
    SamplingParams p;
    p.top_p = top_p;
    const auto got = probs_of(p, logits);
    const auto want = hf_top_p_keep(logits, static_cast<double>(top_p));
    std::size_t kept = 0;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      EXPECT_EQ(got[i] > 0.0f, want[i]) << "token " << i << " top_p " << top_p;
      kept += want[i] ? 1 : 0;
    }
    EXPECT_GT(kept, 64u) << "top_p " << top_p;
    EXPECT_LT(kept, logits.size()) << "top_p " << top_p;
  }
}

TEST(Sampler, MinPIsRelativeToTheMaxProbability) {
  SamplingParams p;
  p.min_p = 0.2f;  // threshold 0.2 * 0.5 = 0.1: drops 0.05 only
  expect_probs(probs_of(p, log_of({0.3, 0.5, 0.05, 0.15})), {0.3 / 0.95, 0.5 / 0.95, 0, 0.15 / 0.95});
}

TEST(Sampler, MinPAppliesAfterTemperature) {
  // T = 0.5 squares the probabilities: 0.25, 0.09, 0.0225, 0.0025 (/ 0.365).
  // Relative to the max: 1, 0.36, 0.09, 0.01; min_p = 0.2 keeps two. Before
  // temperature 0.15 / 0.5 = 0.3 would have survived.
  SamplingParams p;
  p.temperature = 0.5f;
  p.min_p = 0.2f;
  expect_probs(probs_of(p, log_of({0.5, 0.3, 0.15, 0.05})), {0.25 / 0.34, 0.09 / 0.34, 0, 0});
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegativeOnce) {
  SamplingParams p;
  p.greedy = true;
  p.repetition_penalty = 2.0f;
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
  const std::vector<std::int32_t> history = {0, 1, 0, 0, 1, 4};
  const std::int32_t id = Sampler(p).sample(logits, history);
  // Token 0 seen three times is still divided once (0.25 if compounded);
  // 0 stays 0 (not < 0, so divided).
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -4.0f, 1.0f, 0.5f, 0.0f}));
  EXPECT_EQ(id, 0);  // 1.0 ties with token 2: lowest id wins
}

TEST(Sampler, RepetitionPenaltyBelowOneRewards) {
  SamplingParams p;
  p.greedy = true;
  p.repetition_penalty = 0.5f;
  std::vector<float> logits = {3.0f, 2.0f, -1.0f};
  EXPECT_EQ(Sampler(p).sample(logits, std::vector<std::int32_t>{1, 2}), 1);
  EXPECT_EQ(logits, (std::vector<float>{3.0f, 4.0f, -0.5f}));
}

TEST(Sampler, PresencePenaltySubtractsOncePerDistinctToken) {
  SamplingParams p;
  p.greedy = true;
  p.presence_penalty = 0.5f;
  std::vector<float> logits = {1.0f, 1.0f, 1.0f};
  EXPECT_EQ(Sampler(p).sample(logits, std::vector<std::int32_t>{0, 0, 0, 2}), 1);
  EXPECT_EQ(logits, (std::vector<float>{0.5f, 1.0f, 0.5f}));
}

TEST(Sampler, PresencePenaltyFollowsRepetitionPenalty) {
  SamplingParams p;
  p.greedy = true;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 1.0f;
  std::vector<float> logits = {2.0f, -2.0f, 0.5f};
  // (2 / 2) - 1 = 0 and (-2 * 2) - 1 = -5; the other order would give 0.5 and -6.
  EXPECT_EQ(Sampler(p).sample(logits, std::vector<std::int32_t>{0, 1}), 2);
  EXPECT_EQ(logits, (std::vector<float>{0.0f, -5.0f, 0.5f}));
}

TEST(Sampler, FrequencyPenaltyScalesWithTheCount) {
  SamplingParams p;
  p.greedy = true;
  p.frequency_penalty = 0.25f;
  std::vector<float> logits = {2.0f, 1.75f, 1.0f, 0.0f};
  // Token 0 three times: 2 - 0.75; token 1 once: 1.75 - 0.25; token 3 twice: 0 - 0.5.
  // Penalized once per distinct token, token 0 would stay first (1.75 against 1.5).
  EXPECT_EQ(Sampler(p).sample(logits, std::vector<std::int32_t>{0, 3, 0, 1, 0, 3}), 1);
  EXPECT_EQ(logits, (std::vector<float>{1.25f, 1.5f, 1.0f, -0.5f}));
}

TEST(Sampler, FrequencyAndPresencePenaltiesAddAfterRepetition) {
  SamplingParams p;
  p.greedy = true;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 1.0f;
  std::vector<float> logits = {4.0f, -1.0f, 3.0f};
  // (4 / 2) - 0.5 - 2 * 1 = -0.5; (-1 * 2) - 0.5 - 1 = -3.5; token 2 untouched.
  EXPECT_EQ(Sampler(p).sample(logits, std::vector<std::int32_t>{0, 1, 0}), 2);
  EXPECT_EQ(logits, (std::vector<float>{-0.5f, -3.5f, 3.0f}));
  // The counts are cleared between calls: the same history penalizes the same again.
  Sampler s(p);
  for (int round = 0; round < 2; ++round) {
    std::vector<float> again = {4.0f, -1.0f, 3.0f};
    s.sample(again, std::vector<std::int32_t>{0, 1, 0});
    EXPECT_EQ(again, (std::vector<float>{-0.5f, -3.5f, 3.0f})) << "round " << round;
  }
}

TEST(Sampler, PenaltiesFeedTheDistribution) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  // {2, 0} -> {1, 0}
  const double e = std::exp(1.0);
  expect_probs(probs_of(p, {2.0f, 0.0f}, {0}), {e / (e + 1), 1 / (e + 1)});
}

TEST(Sampler, GreedyTakesFirstMaximum) {
  SamplingParams p;
  p.greedy = true;
  std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(Sampler(p).sample(logits, {}), 1);
  SamplingParams t0;
  t0.temperature = 0.0f;
  t0.top_k = 1;
  logits = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(Sampler(t0).sample(logits, {}), 1);
  expect_probs(probs_of(t0, {1.0f, 3.0f, 3.0f, 2.0f}), {0, 1, 0, 0});
}

std::vector<std::int32_t> draws(std::uint64_t seed, int n, const std::vector<float>& logits) {
  SamplingParams p;
  p.seed = seed;
  Sampler s(p);
  std::vector<std::int32_t> out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> work = logits;
    out.push_back(s.sample(work, {}));
  }
  return out;
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  const std::vector<float> logits = {0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
  EXPECT_EQ(draws(42, 200, logits), draws(42, 200, logits));
  EXPECT_NE(draws(42, 200, logits), draws(43, 200, logits));
}

TEST(Sampler, DrawsFollowTheDistribution) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f, -30.0f};
  SamplingParams p;
  p.seed = 1234;
  std::vector<float> want;
  std::vector<float> scratch = logits;
  Sampler(p).distribution(scratch, {}, want);

  constexpr int kDraws = 200000;
  std::vector<int> count(logits.size(), 0);
  Sampler s(p);
  for (int i = 0; i < kDraws; ++i) {
    std::vector<float> work = logits;
    ++count[static_cast<std::size_t>(s.sample(work, {}))];
  }
  // Pearson chi-square over the five tokens with real mass (4 degrees of
  // freedom): P(chi2 > 40) is about 4e-8, and the seed is fixed anyway.
  double chi2 = 0;
  for (std::size_t i = 0; i < 5; ++i) {
    const double expected = kDraws * static_cast<double>(want[i]);
    chi2 += (count[i] - expected) * (count[i] - expected) / expected;
  }
  EXPECT_LT(chi2, 40.0);
  EXPECT_EQ(count[5], 0);  // p ~ 1e-14
}

TEST(Sampler, DrawsOnlyKeptTokens) {
  SamplingParams p;
  p.top_k = 2;
  p.seed = 5;
  Sampler s(p);
  std::vector<int> count(4, 0);
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> logits = {1.0f, 0.9f, 0.0f, 1.1f};
    ++count[static_cast<std::size_t>(s.sample(logits, {}))];
  }
  EXPECT_EQ(count[1] + count[2], 0);
  EXPECT_GT(count[0], 800);
  EXPECT_GT(count[3], 800);
}

TEST(Sampler, NoAllocationAfterTheFirstCall) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 20;
  p.top_p = 0.8f;
  p.min_p = 0.01f;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 1.5f;
  p.frequency_penalty = 0.5f;
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> base(151936);
  for (float& l : base) l = nd(gen);
  const std::vector<std::int32_t> history = {5, 17, 5, 151935, 0};
  std::vector<float> logits = base;

  const long at_start = g_allocations.load();
  Sampler s(p);
  s.sample(logits, history);
  ASSERT_GT(g_allocations.load(), at_start) << "the counting operator new is not in use";
  SamplingParams wide = p;  // top-p over the whole vocabulary
  wide.top_k = 0;
  wide.top_p = 0.95f;
  Sampler s_wide(wide);
  logits = base;
  s_wide.sample(logits, history);

  const long before = g_allocations.load();
  for (int i = 0; i < 3; ++i) {
    std::copy(base.begin(), base.end(), logits.begin());
    s.sample(logits, history);
    std::copy(base.begin(), base.end(), logits.begin());
    s_wide.sample(logits, history);
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}

TEST(Sampler, ValidateNamesTheParameter) {
  const auto bad = [](auto mutate, const char* name) {
    SamplingParams p;
    mutate(p);
    test::expect_error([&] { p.validate(); }, {name});
    test::expect_error([&] { Sampler s(p); }, {name});
  };
  bad([](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  bad([](SamplingParams& p) { p.temperature = std::nanf(""); }, "temperature");
  bad([](SamplingParams& p) { p.temperature = kInf; }, "temperature");
  bad([](SamplingParams& p) { p.top_k = -1; }, "top_k");
  bad([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  bad([](SamplingParams& p) { p.top_p = 1.01f; }, "top_p");
  bad([](SamplingParams& p) { p.top_p = std::nanf(""); }, "top_p");
  bad([](SamplingParams& p) { p.min_p = -0.01f; }, "min_p");
  bad([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  bad([](SamplingParams& p) { p.min_p = std::nanf(""); }, "min_p");
  bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  bad([](SamplingParams& p) { p.repetition_penalty = -1.0f; }, "repetition_penalty");
  bad([](SamplingParams& p) { p.repetition_penalty = std::nanf(""); }, "repetition_penalty");
  bad([](SamplingParams& p) { p.presence_penalty = kInf; }, "presence_penalty");
  bad([](SamplingParams& p) { p.presence_penalty = std::nanf(""); }, "presence_penalty");
  bad([](SamplingParams& p) { p.frequency_penalty = -kInf; }, "frequency_penalty");
  bad([](SamplingParams& p) { p.frequency_penalty = std::nanf(""); }, "frequency_penalty");

  SamplingParams edge;  // the inclusive ends are valid
  edge.temperature = 0.0f;
  edge.top_p = 1.0f;
  edge.min_p = 1.0f;
  edge.presence_penalty = -2.0f;
  EXPECT_NO_THROW(edge.validate());
  edge.min_p = 0.0f;
  EXPECT_NO_THROW(edge.validate());
}

TEST(Sampler, RejectsBadInputs) {
  Sampler s(SamplingParams{});
  std::vector<float> logits = {0.0f, 1.0f};
  test::expect_error([&] { s.sample(logits, std::vector<std::int32_t>{2}); }, {"history", "2"});
  test::expect_error([&] { s.sample(logits, std::vector<std::int32_t>{-1}); }, {"history", "-1"});
  logits = {0.0f, std::nanf("")};
  test::expect_error([&] { s.sample(logits, {}); }, {"token 1", "nan"});
  logits = {-kInf, -kInf};
  test::expect_error([&] { s.sample(logits, {}); }, {"-inf"});
  std::vector<float> empty;
  test::expect_error([&] { s.sample(empty, {}); }, {"logits"});
}

TEST(Sampler, MinusInfLogitsAreNeverDrawn) {
  SamplingParams p;
  p.top_k = 3;  // the k-th largest is -inf: nothing extra removed, as in HF
  expect_probs(probs_of(p, {-kInf, 0.0f, -kInf, 0.0f}), {0, 0.5, 0, 0.5});
}

}  // namespace
}  // namespace qhx
