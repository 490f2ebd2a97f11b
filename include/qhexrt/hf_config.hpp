// qhexrt/hf_config.hpp — a Qwen3-VL config.json as a typed, validated struct.
//
// transformers writes config.json with save_pretrained(), which leaves out
// values equal to the class defaults; missing keys therefore take the
// defaults of transformers' Qwen3VL*Config classes (transformers 4.57), never
// guesses of ours. Both lines' spellings are accepted:
//   - RoPE: the 4.57 "rope_scaling" + "rope_theta" and the 5.x "rope_parameters" (with
//     rope_theta inside); 5.x also gives the vision tower "rope_parameters"
//     ({"rope_type": "axial", "rope_theta": 10000.0}), whose theta is honoured;
//   - vision_config.model_type: "qwen3_vl" (4.57) or "qwen3_vl_vision" (5.x);
//   - the checkpoint dtype: "dtype" (4.56 and later) or "torch_dtype" (earlier).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace qhx {

struct Qwen3VLTextConfig {
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;
  std::string hidden_act;  // "silu"
  double rms_norm_eps = 0;
  double rope_theta = 0;
  std::string rope_type;                    // "default"
  std::vector<std::int64_t> mrope_section;  // sums to head_dim / 2, e.g. [24, 20, 20]
  bool mrope_interleaved = true;
  std::int64_t max_position_embeddings = 0;
  bool attention_bias = false;
  bool tie_word_embeddings = false;  // text_config's own flag
  std::string dtype;                 // text_config's dtype / torch_dtype ("" when absent)
};

struct Qwen3VLVisionConfig {
  std::int64_t depth = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_heads = 0;
  std::int64_t intermediate_size = 0;
  std::string hidden_act;  // "gelu_pytorch_tanh"
  std::int64_t in_channels = 0;
  std::int64_t patch_size = 0;
  std::int64_t temporal_patch_size = 0;
  std::int64_t spatial_merge_size = 0;
  std::int64_t out_hidden_size = 0;
  std::int64_t num_position_embeddings = 0;  // a perfect square (48 x 48 = 2304)
  std::vector<std::int64_t> deepstack_visual_indexes;
  // The 2-D (axial) vision RoPE: inv_freq[k] = 1 / rope_theta^(4k / head_dim). 4.57 hard-codes
  // 10000; 5.x reads vision_config.rope_parameters.rope_theta (default 10000).
  std::string rope_type = "axial";  // "axial" (5.x's "default" means the same)
  double rope_theta = 10000.0;
};

struct Qwen3VLConfig {
  std::int64_t image_token_id = 0;
  std::int64_t video_token_id = 0;
  std::int64_t vision_start_token_id = 0;
  std::int64_t vision_end_token_id = 0;
  bool tie_word_embeddings = false;  // top-level flag
  std::string dtype;                 // top-level dtype / torch_dtype ("" when absent)
  Qwen3VLTextConfig text;
  Qwen3VLVisionConfig vision;
};

// Parses and validates. `source` names the input in error messages (a path).
// Throws qhx::Error naming the source, the JSON path of the field and the problem.
Qwen3VLConfig parse_qwen3vl_config(std::string_view json_text, std::string_view source);
Qwen3VLConfig load_qwen3vl_config(const std::filesystem::path& config_json);

}  // namespace qhx
