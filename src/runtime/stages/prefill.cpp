// "prefill": the prompt past the reused prefix through the language model in
// chunks of the manifest's prefill_chunk tokens, filling the session's KV
// cache from position P on; ends with the logits of the last prompt position.
#include <algorithm>

#include "common/debug_dump.hpp"
#include "qhexrt/error.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class PrefillStage final : public Stage {
 public:
  PrefillStage(std::unique_ptr<Decoder> llm, Graph& lm_head, std::unique_ptr<Decoder> tail, bool one_by_one)
      : llm_(std::move(llm)), head_(lm_head), tail_(std::move(tail)), one_by_one_(one_by_one) {}

  void run(RunContext& ctx) override {
    const auto t0 = Clock::now();
    Resources& res = ctx.res;
    const auto L = static_cast<std::int64_t>(ctx.ids.size());
    const std::int64_t P = ctx.reused;
    const std::int64_t H = llm_->hidden_size();
    if (static_cast<std::int64_t>(ctx.embeds.size()) != (L - P) * H)
      fail("prefill: no embeddings for the prompt (the plan needs an \"embed\" stage before \"prefill\")");

    // Positions of the whole prompt (they depend on every image before a token), of which rows P.. are run.
    std::vector<ImageGrid> grids;
    for (const auto& im : ctx.images) grids.push_back({im.t, im.gh, im.gw});
    const Positions index = res.family->positions(ctx.ids, grids);
    if (index.axes != 3) fail("prefill: the language model takes 3 position axes; the model family gives ", index.axes);
    ctx.positions = index.ids;
    ctx.rope_delta = index.delta;
    if (debug::dumping()) {
      const std::vector<float> as_float(ctx.positions.begin(), ctx.positions.end());
      debug::dump("rope.position_ids", as_float.data(), {3, L});
      const auto delta = static_cast<float>(ctx.rope_delta);
      debug::dump("rope.delta", &delta, {1});
    }

    // Which image (and which of its rows) each prompt token is: -1 for text.
    std::vector<std::int32_t> owner(static_cast<std::size_t>(L), -1);
    std::int64_t n_ds = 0;
    for (std::size_t i = 0; i < ctx.images.size(); ++i) {
      const auto& im = ctx.images[i];
      if (!im.needed) continue;
      std::fill_n(owner.begin() + im.first_pad, im.n_pads, static_cast<std::int32_t>(i));
      n_ds = std::max(n_ds, im.features->n_deepstack);
    }
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(L - P));
    for (std::int64_t i = P; i < L; ++i)
      mask[static_cast<std::size_t>(i - P)] = owner[static_cast<std::size_t>(i)] >= 0;

    // The session's cache is rewound to P; it grows chunk by chunk, so an
    // error part-way leaves it holding exactly the chunks that ran.
    ctx.session.ids.resize(static_cast<std::size_t>(P));
    // "decode_over_prompt" feeds the prompt one token per call, as the seed's decode graph does.
    std::int64_t chunk = one_by_one_ ? 1 : res.manifest.prefill_chunk;
    const std::int64_t block = llm_->block();
    if (block > 0) chunk = std::min(chunk, block);
    // A block graph takes a block while the past before it fits its past input; past
    // that, the rest of the prompt goes token by token through the tail graph (the
    // decode graph), as the context would otherwise be cut at CL - AR.
    const std::int64_t room = block > 0 ? llm_->room() : L;
    Decoder* tail = tail_.get();
    std::vector<std::int32_t> pos(static_cast<std::size_t>(3 * chunk));
    std::vector<float> ds(static_cast<std::size_t>(n_ds * chunk * H));
    std::vector<float> logits;
    for (std::int64_t s = P, T = 0; s < L; s += T) {
      Decoder& g = s > room && tail != nullptr ? *tail : *llm_;
      T = std::min(&g == tail ? 1 : chunk, L - s);
      for (int a = 0; a < 3; ++a)  // the chunk's [3, T] slice of the [3, L] positions
        std::copy_n(ctx.positions.begin() + a * L + s, T, pos.begin() + a * T);
      for (std::int64_t i = 0; i < T; ++i) {  // this chunk's [n_ds, T, H] slice (rows of text stay unused)
        const std::int32_t o = owner[static_cast<std::size_t>(s + i)];
        if (o < 0) continue;
        const auto& im = ctx.images[static_cast<std::size_t>(o)];
        const ImageFeatures& f = *im.features;
        const std::int64_t row = s + i - im.first_pad;
        for (std::int64_t d = 0; d < n_ds; ++d)
          std::copy_n(f.deepstack.data() + (d * f.tokens + row) * H, H, ds.data() + (d * T + i) * H);
      }
      const bool all_rows = ctx.options.keep_prompt_logits;
      const std::int64_t logit_rows = all_rows ? T : (s + T == L ? 1 : 0);  // the lm-head once, at the last token
      const DecoderStep step{.embeds = ctx.embeds.data() + (s - P) * H,
                             .positions = pos.data(),
                             .tokens = T,
                             .start = s,
                             .deepstack = ds.data(),
                             .n_deepstack = n_ds,
                             .image_mask = mask.data() + (s - P),
                             .logit_rows = logit_rows};
      run_decoder_step(g, head_, ctx.session.kv, step, logits);
      ctx.session.ids.insert(ctx.session.ids.end(), ctx.ids.begin() + s, ctx.ids.begin() + s + T);
      if (all_rows) ctx.result.prompt_logits.insert(ctx.result.prompt_logits.end(), logits.begin(), logits.end());
    }
    const std::int64_t V = head_.output("y").shape[1];
    ctx.logits.assign(logits.end() - V, logits.end());
    ctx.result.vocab = V;
    ctx.result.timings.prefill_ms = ms_since(t0);
  }

 private:
  std::unique_ptr<Decoder> llm_;
  Graph& head_;
  std::unique_ptr<Decoder> tail_;  // null, or the graph that takes the prompt past the block graph's room
  bool one_by_one_;
};

}  // namespace

std::unique_ptr<Stage> make_prefill_stage(const ManifestStage& stage, Resources& res) {
  auto llm = Decoder::of(res.graph(stage_ref(stage, "graph")), *res.family);
  Graph& head = res.graph(stage_ref(stage, "lm_head"));
  check_lm_head(head);
  std::unique_ptr<Decoder> tail;
  if (stage.args.contains("tail_graph")) tail = Decoder::of(res.graph(stage_ref(stage, "tail_graph")), *res.family);
  std::string mode = "chunked";
  if (const auto it = stage.args.find("mode"); it != stage.args.end()) {
    if (!it->is_string()) fail(stage.path, ".mode: expected \"chunked\" or \"decode_over_prompt\"");
    mode = it->get<std::string>();
  }
  if (mode != "chunked" && mode != "decode_over_prompt")
    fail(stage.path, ".mode: expected \"chunked\" or \"decode_over_prompt\", got \"", mode, "\"");
  return std::make_unique<PrefillStage>(std::move(llm), head, std::move(tail), mode == "decode_over_prompt");
}

}  // namespace qhx
