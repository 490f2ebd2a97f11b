// "detokenize": the generated ids -> text (special tokens dropped, as chat
// output is), cut before the first stop string; a <think>...</think> part
// goes to the result's reasoning, the rest is the answer; and the end of the
// text stream.
#include "runtime/stage.hpp"
#include "runtime/stop_strings.hpp"

namespace qhx {
namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == '\n' || s.front() == ' ')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  return s;
}

class DetokenizeStage final : public Stage {
 public:
  void run(RunContext& ctx) override {
    std::vector<std::int32_t> ids;
    const std::int32_t vocab = ctx.res.tokenizer->vocab_size();
    for (const auto id : ctx.result.tokens)  // ids past the tokenizer (padding rows of the lm-head) have no text
      if (id >= 0 && id < vocab) ids.push_back(id);
    std::string text = ctx.res.tokenizer->decode(ids, /*skip_special=*/true);
    if (const auto at = StopStrings(ctx.options.stop).find_in(text); at != std::string::npos) text.resize(at);
    ctx.full_text = text;
    // A thinking model opens its answer with <think> (or its generation prompt did) and closes it with </think>.
    if (const auto close = text.find(kThinkClose); close != std::string::npos) {
      std::string_view reasoning = std::string_view(text).substr(0, close);
      if (reasoning.substr(0, kThinkOpen.size()) == kThinkOpen) reasoning.remove_prefix(kThinkOpen.size());
      ctx.result.reasoning = std::string(trim(reasoning));
      std::string_view answer = std::string_view(text).substr(close + kThinkClose.size());
      while (!answer.empty() && answer.front() == '\n') answer.remove_prefix(1);
      ctx.result.text = std::string(answer);
    } else {
      ctx.result.text = std::move(text);
    }
    if (ctx.options.on_text && !ctx.held_text.empty()) ctx.options.on_text(ctx.held_text);
  }
};

}  // namespace

std::unique_ptr<Stage> make_detokenize_stage(const ManifestStage&, Resources&) {
  return std::make_unique<DetokenizeStage>();
}

}  // namespace qhx
