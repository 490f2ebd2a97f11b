// "detokenize": the generated ids -> text (special tokens dropped, as chat
// output is), and the end of the text stream.
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class DetokenizeStage final : public Stage {
 public:
  void run(RunContext& ctx) override {
    std::vector<std::int32_t> ids;
    const std::int32_t vocab = ctx.res.tokenizer->vocab_size();
    for (const auto id : ctx.result.tokens)  // ids past the tokenizer (padding rows of the lm-head) have no text
      if (id >= 0 && id < vocab) ids.push_back(id);
    ctx.result.text = ctx.res.tokenizer->decode(ids, /*skip_special=*/true);
    if (ctx.stream && ctx.request.on_text) ctx.request.on_text(ctx.stream->flush());
  }
};

}  // namespace

std::unique_ptr<Stage> make_detokenize_stage(const ManifestStage&, Resources&) {
  return std::make_unique<DetokenizeStage>();
}

}  // namespace qhx
