// A stage is one step of a manifest's plan. It is built once when the
// pipeline opens (binding the graphs and tables it names, so a bad plan fails
// early) and run once per request.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

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

// Every op and its constructor: the one table (src/runtime/stages/stage_table.cpp), which
// known_stage_ops() (manifest.hpp) lists for the manifest's checks too.
using StageFactory = std::unique_ptr<Stage> (*)(const ManifestStage& stage, Resources& res);
struct StageOp {
  std::string_view op;
  StageFactory make;
};
std::span<const StageOp> stage_ops();

// Decodes and resizes an image's encoded bytes into im.rgb (and its size and pixel hash).
void decode_resized(RunContext& ctx, RunContext::Image& im, std::span<const std::uint8_t> bytes);
// Decodes an image the memo knew (its pixels were not needed until now).
void ensure_pixels(RunContext& ctx, RunContext::Image& im);

// Helpers shared by the stages that run the language model.
// The name of the graph or table the stage names under `key`; throws if absent.
std::string stage_ref(const ManifestStage& stage, const char* key);
}  // namespace qhx
