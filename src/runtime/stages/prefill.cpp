// "prefill": the prompt through the language model in chunks of the
// manifest's prefill_chunk tokens, filling the KV cache; ends with the logits
// of the last prompt position.
#include <algorithm>

#include "qhexrt/error.hpp"
#include "qwen3vl/rope_index.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class PrefillStage final : public Stage {
 public:
  PrefillStage(std::string llm, std::string lm_head) : llm_(std::move(llm)), lm_head_(std::move(lm_head)) {}

  void run(RunContext& ctx) override {
    const auto t0 = Clock::now();
    Resources& res = ctx.res;
    Graph& llm = res.graph(llm_);
    Graph& head = res.graph(lm_head_);
    const auto L = static_cast<std::int64_t>(ctx.ids.size());
    const std::int64_t H = llm.outputs[0].shape[1];
    if (static_cast<std::int64_t>(ctx.embeds.size()) != L * H)
      fail("prefill: no embeddings for the prompt (the plan needs an \"embed\" stage before \"prefill\")");

    const auto index = qwen3vl::rope_index(ctx.ids, static_cast<std::int32_t>(res.config.image_token_id), {},
                                           res.config.vision.spatial_merge_size);
    ctx.positions = index.positions;
    ctx.rope_delta = index.rope_delta;

    const std::int64_t chunk = res.manifest.prefill_chunk;
    std::vector<std::int32_t> pos(static_cast<std::size_t>(3 * chunk));
    std::vector<float> logits;
    for (std::int64_t s = 0; s < L; s += chunk) {
      const std::int64_t T = std::min(chunk, L - s);
      for (int a = 0; a < 3; ++a)  // the chunk's [3, T] slice of the [3, L] positions
        std::copy_n(ctx.positions.begin() + a * L + s, T, pos.begin() + a * T);
      const bool all_rows = ctx.request.keep_prompt_logits;
      run_llm_step(res, llm, head, ctx.embeds.data() + s * H, pos.data(), T, s, nullptr, 0, nullptr, all_rows,
                   logits);
      if (all_rows) ctx.result.prompt_logits.insert(ctx.result.prompt_logits.end(), logits.begin(), logits.end());
    }
    const std::int64_t V = head.outputs[0].shape[1];
    ctx.logits.assign(logits.end() - V, logits.end());
    ctx.result.vocab = V;
    ctx.result.timings.prefill_ms = ms_since(t0);
  }

 private:
  std::string llm_, lm_head_;
};

}  // namespace

std::unique_ptr<Stage> make_prefill_stage(const ManifestStage& stage, Resources& res) {
  std::string llm = stage_ref(stage, "graph");
  std::string head = stage_ref(stage, "lm_head");
  (void)res.graph(llm);
  (void)res.graph(head);
  return std::make_unique<PrefillStage>(std::move(llm), std::move(head));
}

}  // namespace qhx
