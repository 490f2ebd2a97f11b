// The flags every tool that runs a model shares (qhx_generate, qhx_chat, qhx_serve,
// qhx_bench), defined once so their names, checks, help and meaning cannot drift apart
// (llama.cpp's common/arg.cpp is the model). A tool adds the groups it takes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/cli.hpp"
#include "qhexrt/pipeline.hpp"
#include "qhexrt/sampling.hpp"

namespace qhx_cli {

// How tokens are drawn: each flag given overrides the plan's default.
struct SamplingFlags {
  std::optional<float> temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
  std::optional<std::int32_t> top_k;
  std::optional<std::uint64_t> seed;

  void add_to(App& app);
  // `plan` (the plan's sampling) with every flag given applied, validated.
  qhx::SamplingParams apply(qhx::SamplingParams plan) const;
};

// How the runtime runs: threads, the weights' residency, the image-feature cache.
struct RuntimeFlags {
  int threads = 0;  // 0: one per logical CPU
  bool weights_in_memory = false;
  std::optional<std::int64_t> image_cache_mb;

  void add_to(App& app);
  // Sets the kernels' worker threads when --threads was given (a warning, as "TOOL: warning:
  // ...", when capped at the CPUs there are).
  void apply_threads(const char* tool) const;
  qhx::PipelineOptions pipeline_options() const;
};

// --speculate ngram[:K] | off: exact speculative decoding from n-gram drafts.
struct SpeculateFlag {
  std::string value;

  void add_to(App& app);
  std::int64_t tokens() const;  // drafts per step; 0 when not given
};

}  // namespace qhx_cli
