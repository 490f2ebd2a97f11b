#include "cli/model_flags.hpp"

#include <cstdio>
#include <exception>

#include "qhexrt/session.hpp"

namespace qhx_cli {

void SamplingFlags::add_to(App& app) {
  app.add_option("--temp", temp, "temperature; 0 = greedy (default: the plan's)")->check(NonNegativeNumber);
  app.add_option("--top-k", top_k, "keep the k most likely tokens (0 = off)")->check(NonNegativeNumber);
  app.add_option("--top-p", top_p, "nucleus sampling threshold in (0, 1]");
  app.add_option("--min-p", min_p, "drop tokens below min_p x the top probability, in [0, 1]");
  app.add_option("--repeat-penalty", repeat_penalty, "repetition penalty (1 = off)");
  app.add_option("--presence-penalty", presence_penalty, "presence penalty (0 = off)");
  app.add_option("--frequency-penalty", frequency_penalty, "frequency penalty, times each token's count (0 = off)");
  app.add_option("--seed", seed, "random seed for sampling");
}

qhx::SamplingParams SamplingFlags::apply(qhx::SamplingParams s) const {
  if (temp) {
    s.temperature = *temp;
    s.greedy = *temp == 0.0f;
  }
  if (top_k) s.top_k = *top_k;
  if (top_p) s.top_p = *top_p;
  if (min_p) s.min_p = *min_p;
  if (repeat_penalty) s.repetition_penalty = *repeat_penalty;
  if (presence_penalty) s.presence_penalty = *presence_penalty;
  if (frequency_penalty) s.frequency_penalty = *frequency_penalty;
  if (seed) s.seed = *seed;
  s.validate();
  return s;
}

void RuntimeFlags::add_to(App& app) {
  app.add_option("--threads", threads, "the CPU kernels' worker threads (default: one per logical CPU)")
      ->check(PositiveNumber);
  app.add_flag("--weights-in-memory", weights_in_memory,
               "read the weights decode streams into memory in 2 MiB pages instead of mapping them: slower open, "
               "faster decode (docs/bundle.md, Mapped files)");
  app.add_option("--image-cache-mb", image_cache_mb, "bound of the image-feature cache (default 256; 0: off)")
      ->check(NonNegativeNumber);
}

void RuntimeFlags::apply_threads(const char* tool) const {
  if (threads <= 0) return;
  std::string warning;
  qhx::set_threads(threads, &warning);  // the CPU kernels' pool, capped at the CPUs there are
  if (!warning.empty()) std::fprintf(stderr, "%s: warning: %s\n", tool, warning.c_str());
}

qhx::PipelineOptions RuntimeFlags::pipeline_options() const {
  qhx::PipelineOptions o;
  o.image_cache_mb = image_cache_mb;
  o.weights_in_memory = weights_in_memory;
  return o;
}

void SpeculateFlag::add_to(App& app) {
  app.add_option("--speculate", value,
                 "exact speculative decoding from n-gram drafts: ngram (4 tokens), ngram:K (K in 1..16) or off; "
                 "greedy answers are unchanged")
      ->check(Check(
          [](std::string& v) {
            try {
              qhx::parse_speculate(v);
              return std::string();
            } catch (const std::exception& e) {
              return std::string(e.what());
            }
          },
          "ngram[:K]"));
}

std::int64_t SpeculateFlag::tokens() const { return value.empty() ? 0 : qhx::parse_speculate(value); }

}  // namespace qhx_cli
