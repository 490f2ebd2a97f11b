// A model family: what the generic runtime needs to know about a model that
// the manifest does not say — its config, its special tokens, how many tokens
// an image becomes, its positions (rope index), its built-in chat template.
// The manifest's "model" picks the family; the stages ask it, never a config
// struct of their own. Adding a family is adding a folder (src/qwen3vl/ is
// one) with a class that implements this and registers itself below.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qhexrt/session.hpp"

namespace qhx {

struct ImageGrid {
  std::int64_t t = 1, h = 0, w = 0;  // in patches (image_grid_thw)
};

struct Positions {
  std::vector<std::int32_t> ids;  // [axes, L]
  std::int64_t axes = 1;
  std::int64_t delta = 0;  // a token generated at sequence index p has position p + delta on every axis
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual std::string_view name() const = 0;
  virtual std::int64_t vocab_size() const = 0;  // rows of the language model's embedding and lm-head

  // --- images (a family without vision returns 0 / throws) ---------------------
  virtual std::int32_t image_token_id() const = 0;
  virtual std::int64_t patch_size() const = 0;
  // Image sides must be multiples of this (patch x merge).
  virtual std::int64_t image_size_factor() const = 0;
  // How many image-pad tokens an image of this grid becomes in the prompt.
  virtual std::int64_t image_tokens(const ImageGrid& grid) const = 0;
  // Host-side 2-D rope tables for vision graphs that take them (a fixed-size NPU
  // graph): cos/sin [n, width] for the n patches of `grid`, width the vision
  // head_dim or its half (the halves are equal under rotate_half).
  virtual void vision_rope_tables(const ImageGrid& grid, std::int64_t n, std::int64_t width, float* cos,
                                  float* sin) const = 0;

  // --- text -----------------------------------------------------------------------
  // Positions of the whole prompt `ids` with its images' grids in order.
  virtual Positions positions(std::span<const std::int32_t> ids, std::span<const ImageGrid> grids) const = 0;
  // Host-side rope tables for graphs that take them (the NPU contract):
  // cos/sin [T, head_dim/2] of positions [axes, T], the values the model's own
  // rotation uses (its two halves are equal under rotate_half).
  virtual void rope_tables(const std::int32_t* positions, std::int64_t T, float* cos, float* sin) const = 0;
  // The width of a row of rope_tables (head_dim / 2).
  virtual std::int64_t rope_width() const = 0;
  // The family's built-in chat template (the manifest's "chat_template": the family name).
  virtual std::string render_chat(const std::vector<Message>& messages, bool add_generation_prompt) const = 0;
};

// The family named `model`, with its config.json loaded and validated.
// Throws qhx::Error naming the known families when `model` is not one.
std::unique_ptr<ModelFamily> load_model_family(std::string_view model, const std::filesystem::path& config_json);
// The names `load_model_family` knows.
std::vector<std::string> model_families();

}  // namespace qhx
