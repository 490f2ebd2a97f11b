// What a Hugging Face checkpoint directory's own generation_config.json and
// preprocessor_config.json say about a run, as the plan keys they set
// (docs/manifest.md, "Plans from a checkpoint directory"). Used by the default
// plan of a checkpoint directory (default_manifest_for_hf_dir) and by the
// bundle manifests qhx_export writes.
//
// generation_config.json is read as transformers' GenerationConfig reads it:
// an absent key takes GenerationConfig's default (do_sample false, i.e.
// greedy; temperature 1, top_k 50, top_p 1, no min_p, repetition_penalty 1),
// and eos_token_id (an id or a list) becomes the plan's stop_token_ids. With
// no file, today's defaults stay: Qwen3-VL-Instruct's sampling (temperature
// 0.7, top_k 20, top_p 0.8) and the stop tokens <|im_end|>, <|endoftext|>.
//
// preprocessor_config.json gives the pixel limits of the native resize:
// size.shortest_edge / size.longest_edge, overridden by min_pixels /
// max_pixels when present (as both transformers lines do). Its patch_size,
// merge_size and temporal_patch_size must agree with config.json, and its
// image_mean / image_std must be the 0.5 that stage F normalizes with.
//
// Every error names the file and the key.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "qhexrt/hf_config.hpp"

namespace qhx {

struct HfDirPlan {
  nlohmann::json sampling = {{"temperature", 0.7}, {"top_k", 20}, {"top_p", 0.8}, {"repetition_penalty", 1.0}};
  std::vector<std::string> stop_tokens = {"<|im_end|>", "<|endoftext|>"};
  std::vector<std::int64_t> stop_token_ids;  // from eos_token_id; written only when the file gives them
  bool has_stop_token_ids = false;
  std::int64_t min_pixels = 65536;
  std::int64_t max_pixels = 16777216;
};

// Reads DIR/generation_config.json and DIR/preprocessor_config.json when they
// exist (the latter checked against DIR/config.json).
HfDirPlan hf_dir_plan(const std::filesystem::path& dir);

// The two readers, for tests; `source` names the file in errors. `vision` is
// config.json's vision_config, `config_source` its file name.
void apply_generation_config(std::string_view json_text, const std::string& source, HfDirPlan& plan);
void apply_preprocessor_config(std::string_view json_text, const std::string& source, const Qwen3VLVisionConfig& vision,
                               const std::string& config_source, HfDirPlan& plan);

// The plan keys: "sampling", "stop_tokens", "stop_token_ids" (when set) into a manifest object.
void add_generation_keys(const HfDirPlan& plan, nlohmann::json& manifest);

}  // namespace qhx
