// "patch_embed": Qwen3-VL's host stage F, in f32, for every image whose features are
// needed and not in the image cache: pixel values (normalized, patchified in
// merge-window order), then the host backend's "qwen3vl.patch_embed" graph (the patch
// embedding plus the interpolated learned position embedding). Output: the vision
// graph's input [N, vision_hidden] in RunContext::Image::vision_hidden.
#include <vector>

#include "common/debug_dump.hpp"
#include "qhexrt/error.hpp"
#include "qwen3vl/family.hpp"
#include "qwen3vl/vision_preprocess.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

// {"weights": file, "tensor": name} of the table a stage argument names.
nlohmann::json table_entry(const ManifestStage& st, const Resources& res, const char* key) {
  const Table& t = res.table(stage_ref(st, key));
  return {{"weights", t.path.string()}, {"tensor", t.tensor}};
}

class PatchEmbedStage final : public Stage {
 public:
  PatchEmbedStage(const ManifestStage& st, const Resources& res) {
    const auto& vc = qwen3vl::config_of(*res.family).vision;
    layout_ = {vc.patch_size, vc.temporal_patch_size, vc.spatial_merge_size};
    if (vc.in_channels != 3) fail(st.path, ": only 3-channel (RGB) vision input is supported");
    graph_.emplace(host_graph(res, st.path, "qwen3vl.patch_embed",
                              {{"patch_weight", table_entry(st, res, "patch_weight")},
                               {"patch_bias", table_entry(st, res, "patch_bias")},
                               {"pos_embed", table_entry(st, res, "pos_embed")},
                               {"in_channels", vc.in_channels},
                               {"temporal_patch_size", vc.temporal_patch_size},
                               {"patch_size", vc.patch_size},
                               {"spatial_merge_size", vc.spatial_merge_size},
                               {"hidden_size", vc.hidden_size},
                               {"num_position_embeddings", vc.num_position_embeddings}}));
    hidden_ = vc.hidden_size;
  }

  void run(RunContext& ctx) override {
    for (auto& im : ctx.images) {
      if (!im.needed) continue;
      if ((im.features = ctx.res.image_cache.find(im.key))) {
        ++ctx.result.timings.image_cache_hits;
        continue;
      }
      const auto t0 = Clock::now();
      ensure_pixels(ctx, im);
      embed_patches(im);
      ctx.result.timings.vision_ms += ms_since(t0);
    }
  }

 private:
  // im.vision_hidden [n, hidden] = patch embedding of its pixels + the interpolated position embedding.
  void embed_patches(RunContext::Image& im) {
    auto px = qwen3vl::pixel_values(im.rgb.data(), im.height, im.width, layout_);
    const std::int64_t n = im.gh * im.gw, cols = static_cast<std::int64_t>(px.size()) / n;
    debug::dump("vision.pixel_values", px.data(), {n, cols});
    im.vision_hidden.resize(static_cast<std::size_t>(n * hidden_));
    std::int64_t grid[3] = {im.t, im.gh, im.gw};
    graph_->run({{"pixel_values", {DType::F32, {n, cols}, px.data()}}, {"grid_thw", {DType::I64, {3}, grid}}},
                {{"hidden", {DType::F32, {n, hidden_}, im.vision_hidden.data()}}});
  }

  qwen3vl::PatchLayout layout_;
  std::optional<Graph> graph_;
  std::int64_t hidden_ = 0;
};

}  // namespace

std::unique_ptr<Stage> make_patch_embed_stage(const ManifestStage& stage, Resources& res) {
  return std::make_unique<PatchEmbedStage>(stage, res);
}

}  // namespace qhx
