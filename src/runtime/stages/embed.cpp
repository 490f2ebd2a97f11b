// "embed": prompt ids -> embeddings [L, hidden] from a host-side table.
#include "backends/cpu/kernel_set.hpp"
#include "qhexrt/error.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class EmbedStage final : public Stage {
 public:
  explicit EmbedStage(std::string table) : table_(std::move(table)) {}
  void run(RunContext& ctx) override {
    const Table& t = ctx.res.table(table_);
    for (const auto id : ctx.ids)
      if (id < 0 || id >= t.matrix.rows)
        fail("token id ", id, " is outside the embedding table \"", table_, "\" (", t.matrix.rows, " rows)");
    ctx.embeds.resize(ctx.ids.size() * static_cast<std::size_t>(t.matrix.cols));
    cpu::reference_kernels().gather_rows(t.matrix, ctx.ids.data(), static_cast<std::int64_t>(ctx.ids.size()),
                                         ctx.embeds.data());
  }

 private:
  std::string table_;
};

}  // namespace

std::unique_ptr<Stage> make_embed_stage(const ManifestStage& stage, Resources& res) {
  std::string table = stage_ref(stage, "table");
  (void)res.table(table);
  return std::make_unique<EmbedStage>(std::move(table));
}

}  // namespace qhx
