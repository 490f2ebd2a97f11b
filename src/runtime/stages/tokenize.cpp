// "tokenize": the request -> prompt ids, through the manifest's chat template.
#include "qhexrt/error.hpp"
#include "qwen3vl/chat_template.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class TokenizeStage final : public Stage {
 public:
  void run(RunContext& ctx) override {
    const GenerationRequest& req = ctx.request;
    const Manifest& m = ctx.res.manifest;
    std::string text;
    if (req.raw || m.chat_template == "none") {
      if (req.system) fail("--system needs the chat template (this request is raw)");
      text = req.prompt;
    } else {
      std::vector<qwen3vl::ChatMessage> messages;
      if (req.system) messages.push_back({"system", {{qwen3vl::ContentItem::Kind::Text, *req.system}}});
      messages.push_back({"user", {{qwen3vl::ContentItem::Kind::Text, req.prompt}}});
      text = qwen3vl::render_chat(messages, /*add_generation_prompt=*/true);
    }
    ctx.ids = ctx.res.tokenizer->encode(text);
    if (ctx.ids.empty()) fail("the prompt is empty: nothing to generate from");
    const auto L = static_cast<std::int64_t>(ctx.ids.size());
    if (L >= m.context_length)
      fail("the prompt is ", L, " tokens; it does not fit the context of ", m.context_length,
           " tokens (with room for at least one generated token)");
    if (L + ctx.max_new_tokens > m.context_length)
      fail("the prompt (", L, " tokens) plus ", ctx.max_new_tokens, " new tokens exceeds the context of ",
           m.context_length, " tokens; ask for at most ", m.context_length - L, " new tokens");
    ctx.result.prompt_tokens = ctx.ids;
  }
};

}  // namespace

std::unique_ptr<Stage> make_tokenize_stage(const ManifestStage&, Resources&) {
  return std::make_unique<TokenizeStage>();
}

}  // namespace qhx
