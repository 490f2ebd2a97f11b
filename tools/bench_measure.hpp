// qhx_bench's measurements, each over the public API (qhx::Pipeline, qhx::Session): the
// caption (vision and TTFT), prefill, decode at two contexts with the speculation's
// verification steps, and long contexts per KV cache. Each returns the runs' raw figures;
// qhx_bench.cpp turns them into medians and fractions of the machine's limits.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "qhexrt/pipeline.hpp"

namespace qhx_bench {

using nlohmann::json;

// What every measurement shares: the bundle's two plans and how to run them.
struct BenchSetup {
  std::filesystem::path dir, vlm_manifest, text_manifest;
  std::string image;  // for the vision and TTFT figures
  int runs = 3, threads_used = 1;
  std::int64_t decode_steps = 16;
  qhx::PipelineOptions options;  // what every pipeline opens with (the tools' runtime flags)
};

void log(const std::string& line);  // progress, to stderr

// The sizes the fractions are taken of, from the bundle's files and the config.
struct ModelCost {
  double bytes_per_token = 0;  // weight bytes a decoded token streams: the LLM's and the lm-head's
  double params_llm = 0;       // the text decoder's matrix weights
  double params_vis_patch = 0, params_vis_merge = 0;  // vision weights applied per patch, per merged token
  double merge = 0, depth = 0, vision_hidden = 0;
  double layers = 0, kv_heads = 0, head_dim = 0;
};
ModelCost model_cost(const std::filesystem::path& dir, const json& text_manifest, const json& config);

struct CaptionFigures {
  std::vector<double> vision_ms, ttft_ms;
  double load_ms = 0;
  std::int64_t image_tokens = 0;
};
// The VLM plan: load, vision encode and TTFT of "Describe this image." with the image.
CaptionFigures measure_caption(const BenchSetup& b);

// The text plan: prefill of a raw prompt of exactly `tokens` tokens, ms per run.
std::vector<double> measure_prefill(const BenchSetup& b, std::int64_t tokens);

struct VerifyFigures {
  double plain_ms = 0;                         // the plain steps measured beside them
  std::vector<double> step_ms, cost_vs_plain;  // per kVerifyDrafts: ms per step, its cost in plain steps
};
struct DecodeFigures {
  std::vector<double> at512, at1024;             // ms per token, per run
  std::vector<double> at512_adjacent;            // per stable run: decode's fraction of the bandwidth probed around it
  std::pair<double, double> huge_pages{-1, -1};  // huge_mapped_mb() while the decoder streams
  VerifyFigures verify;
};
// Decode at 512 and 1,024 tokens of context, then verification steps at 512.
DecodeFigures measure_decode(const BenchSetup& b, const ModelCost& cost);

// Prefill of an N-token prompt and decode at N and at 512 with the KV cache `kv`, as one
// JSON object of qhx_bench's "long_context" list ("bw_fraction" left null).
json measure_long_context(const BenchSetup& b, const ModelCost& cost, std::int64_t context, const std::string& kv);

}  // namespace qhx_bench
