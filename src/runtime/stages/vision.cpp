// "vision": the vision graph over stage F's output -> image features for the
// language model and the DeepStack features of the tapped blocks.
#include "qhexrt/error.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class VisionStage final : public Stage {
 public:
  explicit VisionStage(std::string graph) : graph_(std::move(graph)) {}

  void run(RunContext& ctx) override {
    if (ctx.images.empty()) return;
    const auto t0 = Clock::now();
    Graph& g = ctx.res.graph(graph_);
    const std::int64_t hidden = g.inputs[0].shape[1], out = g.outputs[0].shape[1];
    const std::int64_t n = static_cast<std::int64_t>(ctx.vision_hidden.size()) / hidden;
    if (n == 0) fail("vision: no patch embeddings (the plan needs a \"patch_embed\" stage before \"vision\")");
    std::vector<std::int64_t> grid;
    for (const auto& im : ctx.images) grid.insert(grid.end(), {im.t, im.gh, im.gw});
    const auto n_img = static_cast<std::int64_t>(ctx.images.size());
    const std::int64_t merge = ctx.res.config.vision.spatial_merge_size;
    const std::int64_t merged = n / (merge * merge);
    ctx.n_deepstack = g.outputs[1].shape[0];
    ctx.image_embeds.resize(static_cast<std::size_t>(merged * out));
    ctx.deepstack.resize(static_cast<std::size_t>(ctx.n_deepstack * merged * out));
    const TensorRef ins[] = {{DType::F32, {n, hidden}, ctx.vision_hidden.data()}, {DType::I64, {n_img, 3}, grid.data()}};
    const TensorRef outs[] = {{DType::F32, {merged, out}, ctx.image_embeds.data()},
                              {DType::F32, {ctx.n_deepstack, merged, out}, ctx.deepstack.data()}};
    g.delegate->execute(ins, outs);
    ctx.result.timings.image_tokens = merged;
    ctx.result.timings.vision_ms += ms_since(t0);
  }

 private:
  std::string graph_;
};

}  // namespace

std::unique_ptr<Stage> make_vision_stage(const ManifestStage& stage, Resources& res) {
  std::string graph = stage_ref(stage, "graph");
  (void)res.graph(graph);
  return std::make_unique<VisionStage>(std::move(graph));
}

}  // namespace qhx
