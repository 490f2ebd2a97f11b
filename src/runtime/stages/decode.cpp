// "decode": the generation loop. Each step samples a token from the latest
// logits, streams its text (held back while it may be the start of a stop
// string), stops on a stop token, a stop string, the token budget or the
// caller's cancel, and otherwise runs that token through the model
// (embed -> llm -> lm_head) at position p + rope_delta on all three rope axes.
// Every token it runs joins the session's cache.
//
// Speculation (GenerationOptions::speculate): the token just
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
#include "runtime/stage.hpp"
#include "runtime/stop_strings.hpp"
#include "sampling/ngram_draft.hpp"

namespace qhx {
namespace {

class DecodeStage final : public Stage {
 public:
  DecodeStage(std::string llm, std::string lm_head, std::string table)
      : llm_(std::move(llm)), lm_head_(std::move(lm_head)), table_(std::move(table)) {}

  void run(RunContext& ctx) override {
    Resources& res = ctx.res;
    Graph& llm = res.graph(llm_);
    Graph& head = res.graph(lm_head_);
    const Table& table = res.matrix_table(table_);
    if (ctx.logits.empty()) fail("decode: no logits to sample from (the plan needs a \"prefill\" stage first)");
    GenerationResult& out = ctx.result;
    Sampler sampler(ctx.sampling);
    StopStrings stops(ctx.options.stop);
    std::vector<std::int32_t> history = ctx.ids;  // the penalties see the prompt and the output
    const auto L = static_cast<std::int64_t>(ctx.ids.size());
    const std::int64_t H = table.cols();
    std::vector<float> x(static_cast<std::size_t>(H));
    std::int32_t pos[3];
    if (!ctx.stream) ctx.stream.emplace(*res.tokenizer, /*skip_special=*/true);
    const auto& on_text = ctx.options.on_text;
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
    const std::int64_t K = llm_block(llm) == 0 ? ctx.options.speculate : 0;
    std::vector<std::int32_t> drafts, rows_in;
    std::vector<float> rows_x;
    std::vector<std::int32_t> rows_pos;
    std::vector<float> step_rows;         // [drafts.size() + 1, V] logits of the last speculative run
    std::size_t row = 0;                  // the row of step_rows this step samples from
    bool spec_live = false;               // step_rows holds the current logits
    const std::int64_t V = static_cast<std::int64_t>(ctx.logits.size());

    const auto t_decode = Clock::now();
    out.stop_reason = "max_new_tokens";
    for (std::int64_t step = 0; step < ctx.max_new_tokens; ++step) {
      if (spec_live)  // this step's logits are row `row` of the last verification run
        std::copy_n(step_rows.data() + row * static_cast<std::size_t>(V), V, ctx.logits.data());
      if (ctx.options.keep_step_logits) out.step_logits.insert(out.step_logits.end(), ctx.logits.begin(), ctx.logits.end());
      const std::int32_t tok = static_cast<std::size_t>(step) < forced.size() ? forced[static_cast<std::size_t>(step)]
                                                                              : sampler.sample(ctx.logits, history);
      out.tokens.push_back(tok);
      history.push_back(tok);
      if (step == 0) out.timings.ttft_ms = ms_since(ctx.started);
      if (std::find(res.stop_ids.begin(), res.stop_ids.end(), tok) != res.stop_ids.end()) {
        out.stop_reason = "stop_token";
        break;
      }
      if (tok < res.tokenizer->vocab_size()) {
        const std::string piece = stops.push(ctx.stream->push(tok));
        if (stops.stopped()) {
          if (on_text && !piece.empty()) on_text(piece);
          out.stop_reason = "stop_string";
          break;
        }
        if (on_text && !piece.empty() && !on_text(piece)) {
          out.stop_reason = "cancelled";
          break;
        }
      }
      if (step + 1 == ctx.max_new_tokens) break;  // budget spent: no need for the next logits

      if (tok < 0 || tok >= table.rows()) fail("decode: sampled token ", tok, " has no embedding");
      const std::int64_t p = L + step;  // sequence index of this token
      if (spec_live && row < drafts.size() && drafts[row] == tok) {
        // Verified: its keys and values are already cached at p, and row + 1 holds the next logits.
        ctx.session.ids.push_back(tok);
        ++out.accepted_tokens;
        ++row;
        continue;
      }
      spec_live = false;
      // Drafts only as far as the budget can use: the last row's logits choose token step + k + 1.
      const std::int64_t k = std::min(K, ctx.max_new_tokens - step - 2);
      drafts.clear();
      if (k > 0 && !forced.empty()) {
        const auto from = static_cast<std::size_t>(step + 1);
        if (from < forced.size())
          drafts.assign(forced.begin() + static_cast<std::ptrdiff_t>(from),
                        forced.begin() + static_cast<std::ptrdiff_t>(std::min(forced.size(), from + static_cast<std::size_t>(k))));
      } else if (k > 0) {
        ngram_draft(history, k, drafts);
      }
      if (drafts.empty()) {
        table.gather(&tok, 1, x.data());
        std::fill(std::begin(pos), std::end(pos), static_cast<std::int32_t>(p + ctx.rope_delta));
        run_llm_step(llm, head, ctx.session, *res.family, x.data(), pos, 1, p, nullptr, 0, nullptr, 1, ctx.logits);
      } else {
        const auto T = static_cast<std::int64_t>(drafts.size()) + 1;
        rows_in.assign(1, tok);
        rows_in.insert(rows_in.end(), drafts.begin(), drafts.end());
        for (const std::int32_t d : drafts)
          if (d < 0 || d >= table.rows()) fail("decode: drafted token ", d, " has no embedding");
        rows_x.resize(static_cast<std::size_t>(T * H));
        table.gather(rows_in.data(), T, rows_x.data());
        rows_pos.resize(static_cast<std::size_t>(3 * T));
        for (int a = 0; a < 3; ++a)
          for (std::int64_t t = 0; t < T; ++t)
            rows_pos[static_cast<std::size_t>(a * T + t)] = static_cast<std::int32_t>(p + t + ctx.rope_delta);
        run_llm_step(llm, head, ctx.session, *res.family, rows_x.data(), rows_pos.data(), T, p, nullptr, 0, nullptr, T,
                     step_rows);
        out.draft_tokens += T - 1;
        spec_live = true;
        row = 0;
      }
      ctx.session.ids.push_back(tok);
      ++out.timings.decode_steps;
    }
    // What the stream still holds back (a possible start of a stop string that never came).
    if (out.stop_reason != "stop_string" && out.stop_reason != "cancelled") {
      ctx.held_text = stops.push(ctx.stream->flush());
      ctx.held_text += stops.flush();
    }
    ctx.stream.reset();
    if (out.timings.decode_steps > 0)
      out.timings.decode_ms_per_token = ms_since(t_decode) / static_cast<double>(out.timings.decode_steps);
  }

 private:
  std::string llm_, lm_head_, table_;
};

}  // namespace

std::unique_ptr<Stage> make_decode_stage(const ManifestStage& stage, Resources& res) {
  std::string llm = stage_ref(stage, "graph");
  std::string head = stage_ref(stage, "lm_head");
  std::string table = stage_ref(stage, "table");
  check_llm_contract(res.graph(llm), res.graph(head));
  (void)res.matrix_table(table);
  return std::make_unique<DecodeStage>(std::move(llm), std::move(head), std::move(table));
}

}  // namespace qhx
