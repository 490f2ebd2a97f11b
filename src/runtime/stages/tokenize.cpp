// "tokenize": the conversation -> prompt ids, through the chat template; then
// the longest prefix the session's cache already holds is kept (the rest is
// what this request prefills), and the images whose tokens fall past it are
// marked as needed.
#include <algorithm>

#include "common/limits.hpp"
#include "qhexrt/error.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

// Each image's single <|image_pad|> becomes t·gh·gw / merge² pads, as the processor does.
std::vector<std::int32_t> expand_image_pads(const std::vector<std::int32_t>& ids, RunContext& ctx) {
  const std::int32_t pad = ctx.res.family->image_token_id();
  std::vector<std::int32_t> out;
  std::size_t image = 0;
  for (const auto id : ids) {
    if (id != pad) {
      out.push_back(id);
      continue;
    }
    if (image == ctx.images.size()) fail("the prompt has more image placeholders than images");
    auto& im = ctx.images[image++];
    im.first_pad = static_cast<std::int64_t>(out.size());
    im.n_pads = ctx.res.family->image_tokens({im.t, im.gh, im.gw});
    out.insert(out.end(), static_cast<std::size_t>(im.n_pads), pad);
  }
  if (image != ctx.images.size()) fail("the prompt has fewer image placeholders than images (raw prompts need them)");
  return out;
}

class TokenizeStage final : public Stage {
 public:
  void run(RunContext& ctx) override {
    const Manifest& m = ctx.res.manifest;
    std::string text;
    if (ctx.input.raw) {
      text = ctx.input.raw_text;
    } else {
      if (m.chat_template == "none") fail(m.source, ": this plan has no chat template; give a raw prompt");
      text = ctx.res.chat_template ? ctx.res.chat_template->render(*ctx.input.messages, /*add_generation_prompt=*/true)
                                   : ctx.res.family->render_chat(*ctx.input.messages, /*add_generation_prompt=*/true);
    }
    if (text.size() > limits::kPromptBytes)
      fail("the prompt is ", text.size(), " bytes of text, over the limit of ", limits::kPromptBytes,
           " (limits::kPromptBytes, docs/limits.md)");
    ctx.ids = expand_image_pads(ctx.res.tokenizer->encode(text), ctx);
    if (ctx.ids.empty()) fail("the prompt is empty: nothing to generate from");
    const auto L = static_cast<std::int64_t>(ctx.ids.size());
    if (L >= m.context_length)
      fail("the prompt is ", L, " tokens; it does not fit the context of ", m.context_length,
           " tokens (with room for at least one generated token)");
    if (L + ctx.max_new_tokens > m.context_length)
      fail("the prompt (", L, " tokens) plus ", ctx.max_new_tokens, " new tokens exceeds the context of ",
           m.context_length, " tokens; ask for at most ", m.context_length - L, " new tokens");
    ctx.result.prompt_tokens = ctx.ids;

    // Reuse: the longest common prefix with what the cache holds, but at least
    // the last prompt token is run again, since its logits start the answer.
    const auto& cached = ctx.session.ids;
    const auto common =
        std::mismatch(ctx.ids.begin(), ctx.ids.end(), cached.begin(), cached.end()).first - ctx.ids.begin();
    ctx.reused = std::min<std::int64_t>(common, L - 1);
    ctx.result.cached_tokens = ctx.reused;
    for (auto& im : ctx.images) im.needed = im.first_pad + im.n_pads > ctx.reused;
  }
};

}  // namespace

std::unique_ptr<Stage> make_tokenize_stage(const ManifestStage&, Resources&) {
  return std::make_unique<TokenizeStage>();
}

}  // namespace qhx
