// "embed": the ids to prefill (past the reused prefix) -> embeddings
// [L - P, hidden] from a host-side table, image-pad rows replaced by the
// image features.
#include <algorithm>

#include "qhexrt/error.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class EmbedStage final : public Stage {
 public:
  explicit EmbedStage(std::string table) : table_(std::move(table)) {}

  void run(RunContext& ctx) override {
    const Table& t = ctx.res.matrix_table(table_);
    const std::int64_t P = ctx.reused, L = static_cast<std::int64_t>(ctx.ids.size()), H = t.cols();
    for (const auto id : ctx.ids)
      if (id < 0 || id >= t.rows())
        fail("token id ", id, " is outside the embedding table \"", table_, "\" (", t.rows(), " rows)");
    ctx.embeds.resize(static_cast<std::size_t>((L - P) * H));
    t.gather(ctx.ids.data() + P, L - P, ctx.embeds.data());
    // The rows of each needed image's pads take its features, in order.
    for (const auto& im : ctx.images) {
      if (!im.needed) continue;
      if (!im.features)
        fail(
            "the prompt has image tokens but no image features (the plan needs \"patch_embed\" and \"vision\" stages)");
      if (im.features->tokens != im.n_pads || im.features->width != H)
        fail("image ", im.source->name(), ": ", im.features->tokens, " features of width ", im.features->width, " for ",
             im.n_pads, " image tokens of width ", H);
      for (std::int64_t r = std::max<std::int64_t>(0, P - im.first_pad); r < im.n_pads; ++r)
        std::copy_n(im.features->embeds.data() + r * H, H, ctx.embeds.data() + (im.first_pad + r - P) * H);
    }
  }

 private:
  std::string table_;
};

}  // namespace

std::unique_ptr<Stage> make_embed_stage(const ManifestStage& stage, Resources& res) {
  std::string table = stage_ref(stage, "table");
  (void)res.matrix_table(table);
  return std::make_unique<EmbedStage>(std::move(table));
}

}  // namespace qhx
