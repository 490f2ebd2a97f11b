// "decode": the generation loop. Each step samples a token from the latest
// logits and emits it (Emitter: streams its text, held back while it may be the
// start of a stop string; stops on a stop token, a stop string or the caller's
// cancel), stops at the token budget, and otherwise runs that token through the
// model (embed -> llm -> lm_head) at position p + rope_delta on all three rope
// axes. Every token it runs joins the session's cache.
//
// Speculation (GenerationOptions::speculate; Verifier): the token just
// chosen runs together with up to K tokens drafted by prompt lookup, one graph
// run of T = K + 1 rows with logits for every row. Draft j is accepted when
// the token chosen from row j - 1 equals it; row j then already holds the next
// logits, so the loop goes on without a graph run. The first mismatch (or the
// last row) runs the chosen token again with fresh drafts at its own position,
// overwriting the cache rows of the rejected drafts; session.ids only ever
// holds tokens that were chosen. Stops, budget and streaming see exactly the
// token sequence of plain decode, one token at a time.
#include <algorithm>

#include "qhexrt/error.hpp"
#include "runtime/decoder.hpp"
#include "runtime/stage.hpp"
#include "runtime/stop_strings.hpp"
#include "sampling/ngram_draft.hpp"

namespace qhx {
namespace {

// Emission: what a chosen token does to the answer. It joins the output, ends the answer
// on a stop token, a stop string or the caller's cancel, and streams its text (held back
// while it may be the start of a stop string).
class Emitter {
 public:
  Emitter(RunContext& ctx, Resources& res)
      : ctx_(ctx), res_(res), stops_(ctx.options.stop), on_text_(ctx.options.on_text) {
    if (!ctx.stream) ctx.stream.emplace(*res.tokenizer, /*skip_special=*/true);
  }

  // Emits `tok`; false when the answer ends with it (ctx.result.stop says why).
  bool emit(std::int32_t tok) {
    GenerationResult& out = ctx_.result;
    out.tokens.push_back(tok);
    if (std::find(res_.stop_ids.begin(), res_.stop_ids.end(), tok) != res_.stop_ids.end())
      return end(StopReason::StopToken);
    if (tok < res_.tokenizer->vocab_size()) {
      const std::string piece = stops_.push(ctx_.stream->push(tok));
      if (stops_.stopped()) {
        if (on_text_ && !piece.empty()) on_text_(piece);
        return end(StopReason::StopString);
      }
      if (on_text_ && !piece.empty() && !on_text_(piece)) return end(StopReason::Cancelled);
    }
    return true;
  }

  // What the stream still holds back (a possible start of a stop string that never came).
  void finish() {
    const StopReason why = ctx_.result.stop;
    if (why != StopReason::StopString && why != StopReason::Cancelled) {
      ctx_.held_text = stops_.push(ctx_.stream->flush());
      ctx_.held_text += stops_.flush();
    }
    ctx_.stream.reset();
  }

 private:
  bool end(StopReason why) {
    ctx_.result.stop = why;
    return false;
  }

  RunContext& ctx_;
  Resources& res_;
  StopStrings stops_;
  const std::function<bool(std::string_view)>& on_text_;
};

// Speculative verification (GenerationOptions::speculate, forced tokens): the token just
// chosen runs together with up to K drafts in one graph run of K + 1 rows, with logits for
// every row. Draft j is verified when the token chosen from row j - 1 equals it: its keys
// and values are already cached, and row j holds the next logits.
class Verifier {
 public:
  Verifier(std::int64_t max_drafts, std::int64_t vocab) : K_(max_drafts), V_(vocab) {}

  // Copies this step's logits out of the last verification run, if it holds them.
  void next_logits(std::vector<float>& logits) const {
    if (live_) std::copy_n(rows_.data() + row_ * static_cast<std::size_t>(V_), V_, logits.data());
  }
  // Whether `tok` is the draft of the current row (then the step needs no graph run).
  bool accept(std::int32_t tok) {
    if (!live_ || row_ >= drafts_.size() || drafts_[row_] != tok) return false;
    ++row_;
    return true;
  }
  // The drafts for the run after `step`: forced tokens when there are, else by prompt lookup,
  // only as far as the budget can use (the last row's logits choose token step + k + 1).
  const std::vector<std::int32_t>& draft(std::int64_t step, std::int64_t max_new_tokens,
                                         const std::vector<std::int32_t>& forced,
                                         const std::vector<std::int32_t>& history) {
    live_ = false;
    const std::int64_t k = std::min(K_, max_new_tokens - step - 2);
    drafts_.clear();
    if (k > 0 && !forced.empty()) {
      const auto from = static_cast<std::size_t>(step + 1);
      if (from < forced.size())
        drafts_.assign(
            forced.begin() + static_cast<std::ptrdiff_t>(from),
            forced.begin() + static_cast<std::ptrdiff_t>(std::min(forced.size(), from + static_cast<std::size_t>(k))));
    } else if (k > 0) {
      ngram_draft(history, k, drafts_);
    }
    return drafts_;
  }
  // The run's logits [drafts + 1, V] land here; row 0 is the next step's.
  std::vector<float>& rows() {
    live_ = true;
    row_ = 0;
    return rows_;
  }

 private:
  std::int64_t K_, V_;
  std::vector<std::int32_t> drafts_;
  std::vector<float> rows_;  // [drafts_.size() + 1, V] logits of the last verification run
  std::size_t row_ = 0;      // the row of rows_ this step samples from
  bool live_ = false;        // rows_ holds the current logits
};

class DecodeStage final : public Stage {
 public:
  DecodeStage(std::unique_ptr<Decoder> llm, std::unique_ptr<Decoder> verify, Graph& lm_head, std::string table)
      : llm_(std::move(llm)), verify_(std::move(verify)), head_(lm_head), table_(std::move(table)) {}

  void run(RunContext& ctx) override {
    Resources& res = ctx.res;
    const Table& table = res.matrix_table(table_);
    if (ctx.logits.empty()) fail("decode: no logits to sample from (the plan needs a \"prefill\" stage first)");
    GenerationResult& out = ctx.result;
    Sampler sampler(ctx.sampling);
    Emitter emitter(ctx, res);
    std::vector<std::int32_t> history = ctx.ids;  // the penalties see the prompt and the output
    const auto L = static_cast<std::int64_t>(ctx.ids.size());
    // Sampling needs no separate acceptance rule: each token is still drawn
    // from its own exact row (one draw per token, as plain decode), and a draft
    // counts as accepted when the draw equals it. That accepts draft d with
    // probability p(d) and otherwise yields a draw from p restricted to the
    // other tokens, which is the speculative rule for a deterministic draft,
    // and with the same seed gives the very same tokens. A block graph's rows
    // are fixed: it decodes one token a step.
    // Forced tokens are known ahead: they are the drafts (always accepted), so
    // teacher forcing verifies K + 1 of them per graph run, and a benchmark
    // can time full verification steps on weights that never repeat.
    const auto& forced = ctx.options.forced_tokens;
    Verifier verifier(drafts_per_run(ctx), static_cast<std::int64_t>(ctx.logits.size()));

    const auto t_decode = Clock::now();
    const BlockStats before = ctx.session.kv.block_stats();
    out.stop = StopReason::MaxNewTokens;
    for (std::int64_t step = 0; step < ctx.max_new_tokens; ++step) {
      verifier.next_logits(ctx.logits);
      if (ctx.options.keep_step_logits)
        out.step_logits.insert(out.step_logits.end(), ctx.logits.begin(), ctx.logits.end());
      const std::int32_t tok = static_cast<std::size_t>(step) < forced.size() ? forced[static_cast<std::size_t>(step)]
                                                                              : sampler.sample(ctx.logits, history);
      history.push_back(tok);
      if (step == 0) out.timings.ttft_ms = ms_since(ctx.started);
      if (!emitter.emit(tok)) break;
      if (step + 1 == ctx.max_new_tokens) break;  // budget spent: no need for the next logits

      if (tok < 0 || tok >= table.rows()) fail("decode: sampled token ", tok, " has no embedding");
      const std::int64_t p = L + step;  // sequence index of this token
      if (verifier.accept(tok)) {
        ctx.session.ids.push_back(tok);
        ++out.accepted_tokens;
        continue;
      }
      const auto& drafts = verifier.draft(step, ctx.max_new_tokens, forced, history);
      const std::uint64_t step_before = ctx.session.kv.block_stats().host_bytes;
      if (drafts.empty()) {
        run_one(ctx, table, tok, p);
      } else {
        run_verification(ctx, table, tok, drafts, p, verifier.rows());
        out.draft_tokens += static_cast<std::int64_t>(drafts.size());
      }
      out.block_graphs.step_host_bytes = ctx.session.kv.block_stats().host_bytes - step_before;
      ctx.session.ids.push_back(tok);
      ++out.timings.decode_steps;
    }
    emitter.finish();
    const BlockStats& after = ctx.session.kv.block_stats();
    out.block_graphs.decode_calls = after.calls - before.calls;
    out.block_graphs.decode_host_bytes = after.host_bytes - before.host_bytes;
    out.stop_reason = stop_reason_name(out.stop);
    if (out.timings.decode_steps > 0)
      out.timings.decode_ms_per_token = ms_since(t_decode) / static_cast<double>(out.timings.decode_steps);
  }

 private:
  // `tok` through the model at sequence index p (position p + rope_delta on all three axes).
  void run_one(RunContext& ctx, const Table& table, std::int32_t tok, std::int64_t p) {
    x_.resize(static_cast<std::size_t>(table.cols()));
    table.gather(&tok, 1, x_.data());
    std::int32_t pos[3];
    std::fill(std::begin(pos), std::end(pos), static_cast<std::int32_t>(p + ctx.rope_delta));
    const DecoderStep step{.embeds = x_.data(), .positions = pos, .tokens = 1, .start = p, .logit_rows = 1};
    run_decoder_step(*llm_, head_, ctx.session.kv, step, ctx.logits);
  }

  // `tok` and `drafts` through the model at [p, p + 1 + drafts), with logits for every row.
  void run_verification(RunContext& ctx, const Table& table, std::int32_t tok, const std::vector<std::int32_t>& drafts,
                        std::int64_t p, std::vector<float>& logits) {
    const auto T = static_cast<std::int64_t>(drafts.size()) + 1;
    rows_in_.assign(1, tok);
    rows_in_.insert(rows_in_.end(), drafts.begin(), drafts.end());
    for (const std::int32_t d : drafts)
      if (d < 0 || d >= table.rows()) fail("decode: drafted token ", d, " has no embedding");
    rows_x_.resize(static_cast<std::size_t>(T * table.cols()));
    table.gather(rows_in_.data(), T, rows_x_.data());
    rows_pos_.resize(static_cast<std::size_t>(3 * T));
    for (int a = 0; a < 3; ++a)
      for (std::int64_t t = 0; t < T; ++t)
        rows_pos_[static_cast<std::size_t>(a * T + t)] = static_cast<std::int32_t>(p + t + ctx.rope_delta);
    const DecoderStep step{
        .embeds = rows_x_.data(), .positions = rows_pos_.data(), .tokens = T, .start = p, .logit_rows = T};
    run_decoder_step(verify_ ? *verify_ : *llm_, head_, ctx.session.kv, step, logits);
  }

  // The drafts a verification run takes. A state graph takes any number of rows; a block
  // decode graph one, so a plan speculates there through its verify graph (block K + 1),
  // and asking for more drafts than it holds, or for any without one, is an error rather
  // than a silent plain decode.
  std::int64_t drafts_per_run(const RunContext& ctx) const {
    const std::int64_t want = ctx.options.speculate;
    if (llm_->block() == 0) return want;
    if (!verify_) {
      if (want > 0)
        fail("speculate ", want, ": this plan's decode graph runs one token per call and the plan has no verify ",
             "graph (a qnn-htp bundle exported with --verify-block 0, or one written before verify graphs)");
      return 0;
    }
    const std::int64_t room = verify_->block() - 1;
    if (want > room)
      fail("speculate ", want, " is beyond this plan's verify graph, which holds the token and ", room,
           " drafts (its block of ", verify_->block(), "); ask for at most ", room);
    return want;
  }

  std::unique_ptr<Decoder> llm_;
  std::unique_ptr<Decoder> verify_;  // null, or the block graph that checks the drafts
  Graph& head_;
  std::string table_;
  std::vector<float> x_, rows_x_;                 // embeddings of the rows a step runs
  std::vector<std::int32_t> rows_in_, rows_pos_;  // a verification run's tokens and positions
};

}  // namespace

std::unique_ptr<Stage> make_decode_stage(const ManifestStage& stage, Resources& res) {
  auto llm = Decoder::of(res.graph(stage_ref(stage, "graph")), *res.family);
  std::unique_ptr<Decoder> verify;
  if (stage.args.contains("verify_graph")) {
    if (res.manifest.version < 7)
      fail(stage.path, ".verify_graph needs qhexrt_manifest >= 7 (this plan says ", res.manifest.version, ")");
    verify = Decoder::of(res.graph(stage_ref(stage, "verify_graph")), *res.family);
    if (llm->block() != 1 || verify->block() < 2)
      fail(stage.path, ".verify_graph: a block graph of 2 or more rows beside a decode graph of 1");
  }
  Graph& head = res.graph(stage_ref(stage, "lm_head"));
  check_lm_head(head);
  std::string table = stage_ref(stage, "table");
  (void)res.matrix_table(table);
  return std::make_unique<DecodeStage>(std::move(llm), std::move(verify), head, std::move(table));
}

}  // namespace qhx
