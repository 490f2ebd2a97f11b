// Token sampling: logits of one step -> the next token id.
//
// Order of operations follows Hugging Face `generate` (transformers 4.57,
// GenerationMixin._get_logits_processor with do_sample and one beam):
// repetition penalty, then presence and frequency penalties (not in HF; OpenAI's
// logit -= presence * [count > 0] + frequency * count, counted over the same history),
// then temperature, top-k, top-p, min-p, softmax, multinomial draw. Every
// warper keeps at least one token (HF's min_tokens_to_keep = 1 without beams);
// filtered tokens get logit -inf.
// greedy (or temperature == 0) takes the argmax of the penalized logits, the
// lowest id among equal maxima (as torch.argmax); the warpers are skipped, as
// in HF's greedy search.
//
// Ties: top-k keeps every token equal to the k-th largest logit (HF removes
// only logits < the k-th value), so more than k tokens may survive. Where HF's
// top-p boundary falls inside a group of equal logits, torch.sort's order
// decides which of them go; here the lower ids are kept.
//
// Draws come from std::mt19937_64 seeded with `seed`: the same seed gives the
// same tokens on every platform, but never the tokens PyTorch's generator would.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "qhexrt/sampling.hpp"

namespace qhx {

class Sampler {
 public:
  // Validates `params` (throws qhx::Error).
  explicit Sampler(const SamplingParams& params);

  // `logits` [vocab] is modified in place (penalties, warping). `history` is
  // every token id the penalties apply to: the prompt and the tokens generated
  // so far (HF applies the repetition penalty over the whole input_ids).
  // Throws qhx::Error for a history id outside [0, vocab), a NaN or +inf
  // logit, or logits that are all -inf. No allocation after the first call
  // (for a given vocab size).
  std::int32_t sample(std::span<float> logits, std::span<const std::int32_t> history);

  // The distribution sample() draws from: `probs` [vocab] is the softmax of
  // the processed logits (0 for filtered tokens; one-hot when greedy).
  // Consumes no randomness.
  void distribution(std::span<float> logits, std::span<const std::int32_t> history, std::vector<float>& probs);

 private:
  // Processes `logits` and leaves the surviving ids in order_ and their
  // probabilities in probs_.
  void select(std::span<float> logits, std::span<const std::int32_t> history);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::int32_t> order_;    // scratch: candidate ids, partially sorted by logit
  std::vector<float> probs_;           // scratch: probabilities of order_
  std::vector<std::uint32_t> counts_;  // scratch: occurrences in history (all zero between calls)
};

}  // namespace qhx
