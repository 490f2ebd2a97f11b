// qhexrt/sampling.hpp — the parameters of token sampling (see src/sampling/sampler.hpp
// for the order of operations, which follows Hugging Face generate).
#pragma once

#include <cstdint>

namespace qhx {

struct SamplingParams {
  bool greedy = false;              // argmax; also implied by temperature == 0
  float temperature = 1.0f;         // > 0 unless greedy
  std::int32_t top_k = 0;           // 0 = off
  float top_p = 1.0f;               // 1 = off; keep the smallest set with cumulative probability >= top_p
  float min_p = 0.0f;               // 0 = off; drop tokens with p < min_p * p_max
  float repetition_penalty = 1.0f;  // 1 = off; HF: logit < 0 ? logit * r : logit / r, for tokens seen so far
  float presence_penalty = 0.0f;    // 0 = off; subtract once from the logit of every token seen so far
  float frequency_penalty = 0.0f;   // 0 = off; subtract this times the token's count so far (OpenAI's)
  std::uint64_t seed = 0;

  // Throws qhx::Error naming the parameter if a value is out of range.
  void validate() const;
};

}  // namespace qhx
