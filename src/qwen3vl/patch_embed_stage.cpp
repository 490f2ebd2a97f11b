// "patch_embed": Qwen3-VL's host stage F (so it lives with the family and computes with the
// host's f32 kernels, as the seed's host does), in f32 — pixel values of every image
// (normalized, patchified in merge-window order), the patch embedding (the
// Conv3d as one matrix multiply, with bias) plus the interpolated learned
// position embedding. Output: the vision graph's input [N, vision_hidden].
#include <algorithm>
#include <vector>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "common/debug_dump.hpp"
#include "qhexrt/error.hpp"
#include "qwen3vl/family.hpp"
#include "qwen3vl/vision_preprocess.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class PatchEmbedStage final : public Stage {
 public:
  PatchEmbedStage(const ManifestStage& st, const Resources& res) {
    const auto& vc = qwen3vl::config_of(*res.family).vision;
    layout_ = {vc.patch_size, vc.temporal_patch_size, vc.spatial_merge_size};
    const std::int64_t cols = vc.in_channels * vc.temporal_patch_size * vc.patch_size * vc.patch_size;
    if (vc.in_channels != 3) fail(st.path, ": only 3-channel (RGB) vision input is supported");
    // Three host tables: the patch embedding (a Conv3d kernel, read as [hidden, C·T·p·p]), its bias, and the
    // learned position embeddings [side², hidden].
    const Table& patch = res.table(stage_ref(st, "patch_weight"));
    const Table& bias = res.table(stage_ref(st, "patch_bias"));
    const Table& pos = res.table(stage_ref(st, "pos_embed"));
    patch_ = cpu::reshaped_matrix_weight(*patch.file, patch.tensor, vc.hidden_size, cols);
    bias_ = cpu::vector_weight(*bias.file, bias.tensor, vc.hidden_size);
    pos_ = cpu::matrix_weight(*pos.file, pos.tensor, vc.num_position_embeddings, vc.hidden_size);
    // A still image fills all T frames of a patch with the same pixels, so the
    // Conv3d over them equals a 2-D one whose kernel is the sum of the T frame
    // slices: half the multiply-adds (T = 2). Summing first rounds differently
    // from transformers' order only in the last bits of f32.
    const std::int64_t T = vc.temporal_patch_size, pp = vc.patch_size * vc.patch_size;
    frame_cols_ = vc.in_channels * pp;
    folded_.assign(static_cast<std::size_t>(patch_.rows * frame_cols_), 0.0f);
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (std::int64_t o = 0; o < patch_.rows; ++o) {
      cpu::weight_row_to_f32(patch_, o, row.data());
      for (std::int64_t c = 0; c < vc.in_channels; ++c)
        for (std::int64_t f = 0; f < T; ++f)
          for (std::int64_t i = 0; i < pp; ++i)
            folded_[static_cast<std::size_t>(o * frame_cols_ + c * pp + i)] += row[static_cast<std::size_t>((c * T + f) * pp + i)];
    }
    folded_w_ = {.data = folded_.data(), .dtype = DType::F32, .rows = patch_.rows, .cols = frame_cols_};
  }

  // Stage F for each image whose features are needed and not in the cache.
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
  void embed_patches(RunContext::Image& im) const {
    const std::int64_t hidden = patch_.rows;
    const auto px = qwen3vl::pixel_values(im.rgb.data(), im.height, im.width, layout_);
    const std::int64_t n = im.gh * im.gw;
    debug::dump("vision.pixel_values", px.data(), {n, static_cast<std::int64_t>(px.size()) / n});
    im.vision_hidden.resize(static_cast<std::size_t>(n * hidden));
    // The first frame of each patch row (all frames are the same image), against the folded kernel.
    const std::int64_t cols = static_cast<std::int64_t>(px.size()) / n, pp = frame_cols_ / 3, T = cols / frame_cols_;
    std::vector<float> frame(static_cast<std::size_t>(n * frame_cols_));
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < 3; ++c)
        std::copy_n(px.data() + r * cols + c * T * pp, pp, frame.data() + r * frame_cols_ + c * pp);
    cpu::active_kernels().linear(frame.data(), n, folded_w_, bias_.data(), im.vision_hidden.data());
    const auto pos = qwen3vl::interpolate_pos_embed(pos_, im.t, im.gh, im.gw, layout_.merge);
    debug::dump("vision.patch_embed", im.vision_hidden.data(), {n, hidden});
    debug::dump("vision.pos_embed", pos.data(), {n, hidden});
    cpu::active_kernels().add_inplace(im.vision_hidden.data(), pos.data(), n * hidden);
  }

  qwen3vl::PatchLayout layout_;
  cpu::WeightMatrix patch_, pos_;
  std::vector<float> bias_;
  std::int64_t frame_cols_ = 0;   // C·p·p
  std::vector<float> folded_;     // [hidden, C·p·p]: the kernel summed over its T frames
  cpu::WeightMatrix folded_w_;
};

}  // namespace

std::unique_ptr<Stage> make_patch_embed_stage(const ManifestStage& stage, Resources& res) {
  return std::make_unique<PatchEmbedStage>(stage, res);
}

}  // namespace qhx
