// Prompt-lookup speculation: the n-gram drafter on hand-built sequences, and
// greedy generation on the tiny checkpoints (tests/reference) that must give
// the same tokens, logits bit for bit, text and stop reason with and without
// speculation, including the next turn of a session after a speculative one.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "qhexrt/session.hpp"
#include "sampling/ngram_draft.hpp"
#include "sampling/sampler.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

std::vector<std::int32_t> draft(std::vector<std::int32_t> seq, std::int64_t k) {
  std::vector<std::int32_t> out{99};  // cleared by the call
  ngram_draft(seq, k, out);
  return out;
}

TEST(NgramDraft, LongestRecentSuffixProposesWhatFollowedIt) {
  // "1 2 3" recurs: the continuation after its earlier occurrence.
  EXPECT_EQ(draft({1, 2, 3, 4, 5, 6, 1, 2, 3}, 2), (std::vector<std::int32_t>{4, 5}));
  // The trigram "7 2 3" never occurred before, the bigram "2 3" did (most recent: before 9).
  EXPECT_EQ(draft({2, 3, 8, 2, 3, 9, 7, 2, 3}, 3), (std::vector<std::int32_t>{9, 7, 2}));
  // Only the last token recurs; the draft stops at the end of the sequence.
  EXPECT_EQ(draft({5, 6, 7, 5}, 8), (std::vector<std::int32_t>{6, 7, 5}));
  EXPECT_TRUE(draft({1, 2, 3, 4}, 4).empty());  // nothing recurs
  EXPECT_TRUE(draft({1, 1}, 0).empty());
  EXPECT_TRUE(draft({}, 3).empty());
  EXPECT_EQ(draft({4, 4}, 3), (std::vector<std::int32_t>{4}));
}

TEST(ParseSpeculate, AcceptsNgramWithAnOptionalLengthAndRefusesTheRest) {
  EXPECT_EQ(parse_speculate("ngram"), 4);
  EXPECT_EQ(parse_speculate("ngram:1"), 1);
  EXPECT_EQ(parse_speculate("ngram:16"), 16);
  EXPECT_EQ(parse_speculate("off"), 0);
  for (const char* bad : {"foo", "ngram:", "ngram:x", "ngram:4x", "ngram4", ""})
    test::expect_error([&] { parse_speculate(bad); }, {"expected ngram"});
  for (const char* bad : {"ngram:0", "ngram:17", "ngram:-2"})
    test::expect_error([&] { parse_speculate(bad); }, {"must be in [1, 16]"});
}

std::filesystem::path checkpoint(const std::string& config) {
  return test::cache_dir() / "reference" / config / "checkpoint";
}
std::filesystem::path image(const char* name) { return test::cache_dir() / "reference" / "images" / name; }

GenerationOptions greedy(std::int64_t n, std::int64_t speculate) {
  GenerationOptions o;
  o.max_new_tokens = n;
  SamplingParams s;
  s.greedy = true;
  o.sampling = s;
  o.keep_step_logits = true;
  o.speculate = speculate;
  return o;
}

void expect_same(const GenerationResult& a, const GenerationResult& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  EXPECT_EQ(a.text, b.text) << what;
  EXPECT_EQ(a.stop_reason, b.stop_reason) << what;
  ASSERT_EQ(a.step_logits.size(), b.step_logits.size()) << what;
  EXPECT_TRUE(a.step_logits == b.step_logits) << what << ": step logits differ";
}

class SpeculateTest : public ::testing::TestWithParam<std::string> {
 protected:
  SpeculateTest() : pipe_(Pipeline::open(checkpoint(GetParam()))) {}

  GenerationResult answer(const std::vector<Message>& turns, const GenerationOptions& o) {
    Session s(pipe_);
    return s.respond(turns, o);
  }
  Pipeline pipe_;
};

const std::string kRepetitive =
    "one two three four one two three four one two three four one two three four one two three four one two";

TEST_P(SpeculateTest, GreedyTextIsIdenticalAndDraftsAreAccepted) {
  const std::vector<Message> turns{Message::text("user", kRepetitive)};
  const GenerationResult plain = answer(turns, greedy(40, 0));
  EXPECT_EQ(plain.draft_tokens, 0);
  std::int64_t accepted = 0;
  for (const std::int64_t k : {1, 2, 4, 8, 16}) {
    const GenerationResult spec = answer(turns, greedy(40, k));
    expect_same(plain, spec, "k " + std::to_string(k));
    EXPECT_GT(spec.draft_tokens, 0) << "k " << k;
    EXPECT_LE(spec.accepted_tokens, spec.draft_tokens);
    // Each graph run yields one chosen token plus the drafts it accepted.
    EXPECT_LT(spec.timings.decode_steps, static_cast<std::int64_t>(spec.tokens.size()) - spec.accepted_tokens + 1);
    accepted += spec.accepted_tokens;
  }
  EXPECT_GT(accepted, 0) << "no draft was ever accepted: the test does not exercise acceptance";
}

// Sampling draws once per token from that token's exact logits whether or not
// it speculates, so a seed gives the same tokens: the output distribution is
// the model's (a draft is accepted with probability p(draft)).
TEST_P(SpeculateTest, SampledOutputWithPenaltiesIsIdenticalForEverySeed) {
  const std::vector<Message> turns{Message::text("user", kRepetitive)};
  std::int64_t drafted = 0;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    GenerationOptions p = greedy(24, 0), s = greedy(24, 4);
    SamplingParams sp;
    sp.temperature = 0.3f;
    sp.top_k = 5;
    sp.top_p = 0.9f;
    sp.repetition_penalty = 1.05f;
    sp.frequency_penalty = 0.2f;
    sp.seed = seed;
    p.sampling = s.sampling = sp;
    const GenerationResult a = answer(turns, p), b = answer(turns, s);
    expect_same(a, b, "seed " + std::to_string(seed));
    drafted += b.draft_tokens;
  }
  EXPECT_GT(drafted, 0);
}

// Pearson's chi-square of the sampled tokens' ranks: each token falls in the bin
// of its rank in its own step's distribution (0 = most likely, ..., kBins − 1 and
// beyond), and a bin expects the sum over steps of that rank's probability. Steps
// may each have another distribution; the statistic has kBins − 1 degrees of freedom.
constexpr int kRankBins = 6;
double rank_chi_square(const std::vector<std::vector<float>>& dists, const std::vector<std::int32_t>& drawn) {
  std::array<double, kRankBins> expected{}, observed{};
  for (std::size_t i = 0; i < dists.size(); ++i) {
    const std::vector<float>& p = dists[i];
    std::vector<std::int32_t> order;  // the tokens with mass (top-k keeps a few), most likely first
    for (std::size_t t = 0; t < p.size(); ++t)
      if (p[t] > 0) order.push_back(static_cast<std::int32_t>(t));
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return p[a] > p[b]; });
    for (std::size_t r = 0; r < order.size(); ++r) {
      const std::size_t bin = std::min<std::size_t>(r, kRankBins - 1);
      expected[bin] += p[static_cast<std::size_t>(order[r])];
      if (order[r] == drawn[i]) observed[bin] += 1;
    }
  }
  double chi2 = 0;
  for (int b = 0; b < kRankBins; ++b) chi2 += (observed[b] - expected[b]) * (observed[b] - expected[b]) / expected[b];
  return chi2;
}

// With sampling, speculation keeps a draft only when the token drawn from that
// position's own exact row equals it, so what it emits must follow the model's
// distribution: the ranks of every token sampled with speculation on (drafts
// accepted among them) fit each step's distribution, and the same tokens are
// refused against a wrong one (half the temperature), so the test can fail.
// One checkpoint (tiny_b): 1,536 tokens take seconds, each step's logits kept.
TEST(Speculate, SampledTokensFollowTheModelsDistribution) {
  Pipeline pipe = Pipeline::open(checkpoint("tiny_b"));
  const auto answer = [&](const std::vector<Message>& turns, const GenerationOptions& o) {
    Session s(pipe);
    return s.respond(turns, o);
  };
  const std::vector<Message> turns{Message::text("user", kRepetitive)};
  SamplingParams sp;
  sp.temperature = 0.6f;
  sp.top_k = 10;
  std::vector<std::vector<float>> dists, sharper;
  std::vector<std::int32_t> drawn;
  std::int64_t accepted = 0;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    GenerationOptions o = greedy(64, 4);
    sp.seed = seed;
    o.sampling = sp;
    const GenerationResult r = answer(turns, o);
    accepted += r.accepted_tokens;
    const std::size_t vocab = static_cast<std::size_t>(r.vocab);
    ASSERT_EQ(r.step_logits.size(), r.tokens.size() * vocab);
    for (std::size_t i = 0; i < r.tokens.size(); ++i) {
      for (const float temp : {sp.temperature, 0.3f}) {
        std::vector<float> row(r.step_logits.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                               r.step_logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
        SamplingParams q = sp;
        q.temperature = temp;
        std::vector<float> probs;
        Sampler(q).distribution(row, {}, probs);
        (temp == sp.temperature ? dists : sharper).push_back(std::move(probs));
      }
      drawn.push_back(r.tokens[i]);
    }
  }
  EXPECT_GT(accepted, 20) << "too few drafts accepted: the test would not exercise speculation's acceptance";
  // 5 degrees of freedom: P(chi2 > 25.7) = 1e-4 (the seeds are fixed, so the run is too).
  const double chi2 = rank_chi_square(dists, drawn), wrong = rank_chi_square(sharper, drawn);
  std::printf("rank chi-square over %zu tokens (%lld accepted drafts): %.2f; against temperature 0.3: %.2f\n",
              drawn.size(), static_cast<long long>(accepted), chi2, wrong);
  EXPECT_LT(chi2, 25.7);
  EXPECT_GT(wrong, 25.7);
}

TEST_P(SpeculateTest, ForcedTokensAreVerifiedSeveralARun) {
  const std::vector<Message> turns{Message::text("user", "hi")};
  GenerationOptions p = greedy(20, 0), s = greedy(20, 4);
  p.forced_tokens = s.forced_tokens = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22};
  const GenerationResult a = answer(turns, p), b = answer(turns, s);
  expect_same(a, b, "forced");
  EXPECT_GT(b.accepted_tokens, 4);  // forced tokens drafted ahead are always accepted
  EXPECT_LT(b.timings.decode_steps, a.timings.decode_steps);
}

TEST_P(SpeculateTest, GreedyImagePromptIsIdentical) {
  const std::vector<Message> turns{
      {"user",
       {ContentPart::image_part(ImageSource::file(image("img256x320.png"))),
        ContentPart::text_part("Describe the picture. Describe the picture. Describe the picture.")}}};
  const GenerationResult plain = answer(turns, greedy(24, 0));
  const GenerationResult spec = answer(turns, greedy(24, 4));
  expect_same(plain, spec, "image");
  EXPECT_GT(spec.draft_tokens, 0);
}

TEST_P(SpeculateTest, EveryBudgetAndStopStringEndsAsPlainDecode) {
  const std::vector<Message> turns{Message::text("user", kRepetitive)};
  const GenerationResult full = answer(turns, greedy(30, 0));
  for (std::int64_t n = 1; n <= 30; n += 3) {
    const GenerationResult plain = answer(turns, greedy(n, 0));
    const GenerationResult spec = answer(turns, greedy(n, 4));
    expect_same(plain, spec, "budget " + std::to_string(n));
    EXPECT_LE(static_cast<std::int64_t>(spec.tokens.size()), n);
  }
  // A stop string taken from the middle of the plain answer.
  ASSERT_GE(full.text.size(), 6u);
  for (const std::size_t cut : {std::size_t{2}, full.text.size() / 2, full.text.size() - 2}) {
    GenerationOptions p = greedy(30, 0), s = greedy(30, 4);
    p.stop = s.stop = {full.text.substr(cut, 2)};
    std::string streamed_p, streamed_s;
    p.on_text = [&](std::string_view t) {
      streamed_p += t;
      return true;
    };
    s.on_text = [&](std::string_view t) {
      streamed_s += t;
      return true;
    };
    const GenerationResult a = answer(turns, p), b = answer(turns, s);
    expect_same(a, b, "stop at " + std::to_string(cut));
    EXPECT_EQ(streamed_p, streamed_s);
  }
  // Cancelling from the stream after a few pieces.
  for (const std::int64_t spec_k : {0, 4}) {
    GenerationOptions o = greedy(30, spec_k);
    int pieces = 0;
    o.on_text = [&](std::string_view) {
      return ++pieces < 5;
    };
    const GenerationResult r = answer(turns, o);
    EXPECT_EQ(r.stop_reason, "cancelled");
    EXPECT_EQ(pieces, 5) << "k " << spec_k;
  }
}

TEST_P(SpeculateTest, NextTurnAfterASpeculativeTurnReusesTheCacheCorrectly) {
  Session plain(pipe_), spec(pipe_);
  const Message first = Message::text("user", kRepetitive);
  const Message second = Message::text("user", "two three four one two three");
  expect_same(plain.send(first, greedy(20, 0)), spec.send(first, greedy(20, 4)), "turn 1");
  EXPECT_EQ(plain.cached_tokens(), spec.cached_tokens());
  const GenerationResult a = plain.send(second, greedy(12, 0));
  const GenerationResult b = spec.send(second, greedy(12, 0));
  expect_same(a, b, "turn 2");
  EXPECT_EQ(a.cached_tokens, b.cached_tokens);
  EXPECT_GT(b.cached_tokens, 0);
}

TEST_P(SpeculateTest, DraftLengthOutOfRangeIsRefused) {
  const std::vector<Message> turns{Message::text("user", "hi")};
  test::expect_error([&] { answer(turns, greedy(4, -1)); }, {"speculate", "outside [0, 16]"});
  test::expect_error([&] { answer(turns, greedy(4, 17)); }, {"speculate", "outside [0, 16]"});
}

INSTANTIATE_TEST_SUITE_P(TinyConfigs, SpeculateTest, ::testing::Values("tiny_a", "tiny_b"));

}  // namespace
}  // namespace qhx
