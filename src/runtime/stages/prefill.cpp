// "prefill": the prompt past the reused prefix through the language model in
// chunks of the manifest's prefill_chunk tokens, filling the session's KV
// cache from position P on; ends with the logits of the last prompt position.
#include <algorithm>
#include <limits>

#include "common/debug_dump.hpp"
#include "qhexrt/error.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class PrefillStage final : public Stage {
 public:
  PrefillStage(std::unique_ptr<Decoder> llm, Graph& lm_head, std::unique_ptr<Decoder> tail,
               std::unique_ptr<Decoder> short_graph, double knee, bool one_by_one)
      : llm_(std::move(llm)),
        head_(lm_head),
        tail_(std::move(tail)),
        short_(std::move(short_graph)),
        knee_(knee),
        one_by_one_(one_by_one) {}

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
    if (short_) plan_blocks(L - P);
    for (std::int64_t s = P, T = 0; s < L; s += T) {
      Decoder& g = short_ ? cheapest(L - s, s) : s > room && tail != nullptr ? *tail : *llm_;
      T = std::min(&g == tail ? 1 : &g == short_.get() ? short_->block() : chunk, L - s);
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
  // With a short block graph: the cheapest mix of blocks for every remainder up to R. A call
  // of block b costs 1 + b / knee (its weight stream, then its rows: docs/qnn.md, "Device
  // time model"); the cost depends on the remainder alone, so one table serves the prompt.
  void plan_blocks(std::int64_t R) {
    graphs_ = {llm_.get(), short_.get()};
    if (tail_) graphs_.push_back(tail_.get());
    std::vector<double> cost(static_cast<std::size_t>(R + 1), 0.0);
    first_.assign(static_cast<std::size_t>(R + 1), 0);
    for (std::int64_t r = 1; r <= R; ++r) {
      double& best = cost[static_cast<std::size_t>(r)];
      best = std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < graphs_.size(); ++i) {
        const double c = 1.0 + static_cast<double>(graphs_[i]->block()) / knee_ +
                         cost[static_cast<std::size_t>(std::max<std::int64_t>(0, r - graphs_[i]->block()))];
        if (c < best) best = c, first_[static_cast<std::size_t>(r)] = i;
      }
    }
  }
  // The graph of the next call through the R tokens left at position s (plan_blocks has run
  // for at least R); a graph whose past input cannot hold s gives way to the next smaller one.
  Decoder& cheapest(std::int64_t R, std::int64_t s) const {
    for (std::size_t i = first_[static_cast<std::size_t>(R)]; i < graphs_.size(); ++i)
      if (graphs_[i]->block() == 1 || s <= graphs_[i]->room()) return *graphs_[i];
    fail("prefill: ", s,
         " tokens are cached, past the room of every block graph (the plan has no decode graph "
         "as its tail_graph)");
  }

  std::unique_ptr<Decoder> llm_;
  Graph& head_;
  std::unique_ptr<Decoder> tail_;   // null, or the graph that takes the prompt past the block graph's room
  std::unique_ptr<Decoder> short_;  // null, or a smaller block graph for remainders
  double knee_;                     // rows whose compute costs one call's weight stream
  bool one_by_one_;
  std::vector<Decoder*> graphs_;    // plan_blocks(): the block graphs, largest first, then the tail
  std::vector<std::size_t> first_;  // plan_blocks(): per remainder, the graph its first call takes
};

}  // namespace

std::unique_ptr<Stage> make_prefill_stage(const ManifestStage& stage, Resources& res) {
  auto llm = Decoder::of(res.graph(stage_ref(stage, "graph")), *res.family);
  Graph& head = res.graph(stage_ref(stage, "lm_head"));
  check_lm_head(head);
  std::unique_ptr<Decoder> tail, short_graph;
  if (stage.args.contains("tail_graph")) tail = Decoder::of(res.graph(stage_ref(stage, "tail_graph")), *res.family);
  double knee = 64;
  if (stage.args.contains("short_graph")) {
    if (res.manifest.version < 7)
      fail(stage.path, ".short_graph needs qhexrt_manifest >= 7 (this plan says ", res.manifest.version, ")");
    short_graph = Decoder::of(res.graph(stage_ref(stage, "short_graph")), *res.family);
    if (llm->block() == 0 || short_graph->block() == 0 || short_graph->block() >= llm->block())
      fail(stage.path, ".short_graph: a block graph with a smaller block than \"graph\"'s");
    if (const auto it = stage.args.find("block_knee"); it != stage.args.end()) {
      if (!it->is_number() || it->get<double>() <= 0)
        fail(stage.path, ".block_knee: expected a positive number (rows whose compute costs one call's weights)");
      knee = it->get<double>();
    }
  }
  std::string mode = "chunked";
  if (const auto it = stage.args.find("mode"); it != stage.args.end()) {
    if (!it->is_string()) fail(stage.path, ".mode: expected \"chunked\" or \"decode_over_prompt\"");
    mode = it->get<std::string>();
  }
  if (mode != "chunked" && mode != "decode_over_prompt")
    fail(stage.path, ".mode: expected \"chunked\" or \"decode_over_prompt\", got \"", mode, "\"");
  return std::make_unique<PrefillStage>(std::move(llm), head, std::move(tail), std::move(short_graph), knee,
                                        mode == "decode_over_prompt");
}

}  // namespace qhx
