// A stage is one step of a manifest's plan. It is built once when the
// pipeline opens (binding the graphs and tables it names, so a bad plan fails
// early) and run once per request.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "runtime/decoder.hpp"
#include "runtime/manifest.hpp"
#include "runtime/run_context.hpp"

namespace qhx {

class Stage {
 public:
  virtual ~Stage() = default;
  virtual void run(RunContext& ctx) = 0;
};

// Throws qhx::Error naming the stage's JSON path if its arguments are wrong.
std::unique_ptr<Stage> make_stage(const ManifestStage& stage, Resources& res);

// One constructor per op (src/runtime/stages/*.cpp).
std::unique_ptr<Stage> make_load_images_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_patch_embed_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_vision_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_tokenize_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_embed_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_prefill_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_decode_stage(const ManifestStage& stage, Resources& res);
std::unique_ptr<Stage> make_detokenize_stage(const ManifestStage& stage, Resources& res);

// Decodes and resizes an image's encoded bytes into im.rgb (and its size and pixel hash).
void decode_resized(RunContext& ctx, RunContext::Image& im, std::span<const std::uint8_t> bytes);
// Decodes an image the memo knew (its pixels were not needed until now).
void ensure_pixels(RunContext& ctx, RunContext::Image& im);

// Helpers shared by the stages that run the language model.
// The name of the graph or table the stage names under `key`; throws if absent.
std::string stage_ref(const ManifestStage& stage, const char* key);
}  // namespace qhx
