// Qwen3-VL as a model family (src/models/model_family.hpp): its config, image
// tokens (a merged 2x2 window of 16-pixel patches each), 3-D M-RoPE positions
// (rope_index.hpp) and the Instruct chat template (chat_template.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "models/model_family.hpp"
#include "qhexrt/hf_config.hpp"
#include "qwen3vl/vision_rope.hpp"

namespace qhx::qwen3vl {

class Family final : public ModelFamily {
 public:
  explicit Family(Qwen3VLConfig config);
  const Qwen3VLConfig& config() const { return cfg_; }

  std::string_view name() const override { return "qwen3vl"; }
  std::int64_t vocab_size() const override { return cfg_.text.vocab_size; }
  std::int32_t image_token_id() const override { return static_cast<std::int32_t>(cfg_.image_token_id); }
  std::int64_t patch_size() const override { return cfg_.vision.patch_size; }
  std::int64_t image_size_factor() const override { return cfg_.vision.patch_size * cfg_.vision.spatial_merge_size; }
  std::int64_t image_tokens(const ImageGrid& g) const override;
  void vision_rope_tables(const ImageGrid& grid, std::int64_t n, std::int64_t width, float* cos,
                          float* sin) const override;
  Positions positions(std::span<const std::int32_t> ids, std::span<const ImageGrid> grids) const override;
  std::string render_chat(const std::vector<Message>& messages, bool add_generation_prompt) const override;
  void rope_tables(const std::int32_t* positions, std::int64_t T, float* cos, float* sin) const override;
  std::int64_t rope_width() const override { return cfg_.text.head_dim / 2; }

 private:
  Qwen3VLConfig cfg_;
  std::vector<float> inv_freq_;     // [head_dim / 2], the text rope's, computed once
  std::vector<std::uint8_t> axes_;  // the M-RoPE axis of each frequency
  VisionRope vision_rope_;
};

// The Qwen3-VL config behind a family (the stages only Qwen3-VL has, e.g. its stage F, need it).
// Throws qhx::Error when `family` is another model's.
const Qwen3VLConfig& config_of(const ModelFamily& family);

}  // namespace qhx::qwen3vl
