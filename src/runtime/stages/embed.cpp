// "embed": prompt ids -> embeddings [L, hidden] from a host-side table.
#include <algorithm>

#include "backends/cpu/kernel_set.hpp"
#include "qhexrt/error.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class EmbedStage final : public Stage {
 public:
  explicit EmbedStage(std::string table) : table_(std::move(table)) {}

  void run(RunContext& ctx) override {
    const Table& t = ctx.res.matrix_table(table_);
    for (const auto id : ctx.ids)
      if (id < 0 || id >= t.matrix.rows)
        fail("token id ", id, " is outside the embedding table \"", table_, "\" (", t.matrix.rows, " rows)");
    ctx.embeds.resize(ctx.ids.size() * static_cast<std::size_t>(t.matrix.cols));
    cpu::active_kernels().gather_rows(t.matrix, ctx.ids.data(), static_cast<std::int64_t>(ctx.ids.size()),
                                         ctx.embeds.data());
    scatter_image_features(ctx, t.matrix.cols);
  }

 private:
  // The rows of <|image_pad|> tokens are replaced, in order, by the image features.
  static void scatter_image_features(RunContext& ctx, std::int64_t hidden) {
    const auto pad = static_cast<std::int32_t>(ctx.res.config.image_token_id);
    const auto n_pads = static_cast<std::int64_t>(std::count(ctx.ids.begin(), ctx.ids.end(), pad));
    const auto n_features = static_cast<std::int64_t>(ctx.image_embeds.size()) / hidden;
    if (n_pads != n_features)
      fail("the prompt has ", n_pads, " image tokens but the images gave ", n_features, " features",
           n_features == 0 && n_pads > 0 ? " (no image, or no vision stage in the plan)" : "");
    std::int64_t next = 0;
    for (std::size_t i = 0; i < ctx.ids.size(); ++i)
      if (ctx.ids[i] == pad)
        std::copy_n(ctx.image_embeds.data() + (next++) * hidden, hidden,
                    ctx.embeds.data() + static_cast<std::int64_t>(i) * hidden);
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
