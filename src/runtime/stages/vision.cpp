// "vision": the vision graph over stage F's output of each image to encode ->
// its features for the language model and the DeepStack features of the
// tapped blocks, kept in the image-feature cache. One image per call: the
// encoder attends within an image only, so this equals one call over all.
#include <memory>

#include "common/debug_dump.hpp"
#include "qhexrt/error.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class VisionStage final : public Stage {
 public:
  VisionStage(std::string graph, std::int64_t fixed_patches)
      : graph_(std::move(graph)), fixed_patches_(fixed_patches) {}

  void run(RunContext& ctx) override {
    Graph& g = ctx.res.graph(graph_);
    const std::int64_t hidden = g.input("hidden").shape[1], out = g.output("image_embeds").shape[1];
    const std::int64_t n_ds = g.output("deepstack").shape[0];
    for (auto& im : ctx.images) {
      if (!im.needed || im.features) continue;
      const auto t0 = Clock::now();
      const std::int64_t n = static_cast<std::int64_t>(im.vision_hidden.size()) / hidden;
      if (n == 0) fail("vision: no patch embeddings (the plan needs a \"patch_embed\" stage before \"vision\")");
      if (fixed_patches_ > 0 && n != fixed_patches_)
        fail("vision: graph \"", graph_, "\" takes images of ", fixed_patches_, " patches; this one has ", n,
             " (the plan must resize every image to the size the graph was prepared for)");
      std::int64_t grid[] = {im.t, im.gh, im.gw};
      auto f = std::make_shared<ImageFeatures>();
      f->tokens = im.n_pads;
      f->width = out;
      f->n_deepstack = n_ds;
      f->embeds.resize(static_cast<std::size_t>(f->tokens * out));
      f->deepstack.resize(static_cast<std::size_t>(n_ds * f->tokens * out));
      std::vector<Binding> in{{"hidden", {DType::F32, {n, hidden}, im.vision_hidden.data()}}};
      if (g.has_input("grid_thw")) in.push_back({"grid_thw", {DType::I64, {1, 3}, grid}});
      if (g.has_input("rope_cos")) {  // a graph without the rope inside: the host computes its tables
        const std::int64_t width = g.input("rope_cos").shape[1];
        cos_.resize(static_cast<std::size_t>(n * width));
        sin_.resize(cos_.size());
        ctx.res.family->vision_rope_tables({im.t, im.gh, im.gw}, n, width, cos_.data(), sin_.data());
        in.push_back({"rope_cos", {DType::F32, {n, width}, cos_.data()}});
        in.push_back({"rope_sin", {DType::F32, {n, width}, sin_.data()}});
      }
      const Binding outs[] = {{"image_embeds", {DType::F32, {f->tokens, out}, f->embeds.data()}},
                              {"deepstack", {DType::F32, {n_ds, f->tokens, out}, f->deepstack.data()}}};
      g.run(in, outs);
      if (debug::dumping()) {  // what any backend's vision graph returns, for diffing backends
        debug::dump("vision.image_embeds", f->embeds.data(), {f->tokens, out});
        debug::dump("vision.deepstack_all", f->deepstack.data(), {n_ds * f->tokens, out});
      }
      im.vision_hidden = {};
      ctx.res.image_cache.insert(im.key, f);
      im.features = std::move(f);
      ++ctx.result.timings.images_encoded;
      ctx.result.timings.vision_ms += ms_since(t0);
    }
    for (const auto& im : ctx.images) ctx.result.timings.image_tokens += im.needed ? im.n_pads : 0;
  }

 private:
  std::string graph_;
  std::int64_t fixed_patches_;    // > 0: the graph takes images of this many patches only
  std::vector<float> cos_, sin_;  // [n, width] rope tables, for graphs that take them
};

}  // namespace

std::unique_ptr<Stage> make_vision_stage(const ManifestStage& stage, Resources& res) {
  std::string graph = stage_ref(stage, "graph");
  const Graph& g = res.graph(graph);
  const std::int64_t patches = g.input("hidden").shape[0];
  // Where the graph gets the patches' positions: their grid, or rope tables the host computes.
  if (!g.has_input("grid_thw")) {
    (void)g.input("rope_cos");
    (void)g.input("rope_sin");
  }
  (void)g.output("image_embeds");
  (void)g.output("deepstack");
  return std::make_unique<VisionStage>(std::move(graph), patches > 0 ? patches : 0);
}

}  // namespace qhx
