// "tokenize": the request -> prompt ids, through the manifest's chat template.
#include "qhexrt/error.hpp"
#include "qwen3vl/chat_template.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

constexpr std::string_view kImageMarker = "<image>";

// The user's turn: the prompt's text with an image at each "<image>" marker,
// or all images first when the prompt has no marker.
std::vector<qwen3vl::ContentItem> user_content(const std::string& prompt, std::size_t n_images) {
  using Item = qwen3vl::ContentItem;
  std::vector<Item> items;
  std::size_t markers = 0;
  for (auto at = prompt.find(kImageMarker); at != std::string::npos; at = prompt.find(kImageMarker, at + 1)) ++markers;
  if (markers == 0) {
    items.assign(n_images, Item{Item::Kind::Image, ""});
    items.push_back({Item::Kind::Text, prompt});
    return items;
  }
  if (markers != n_images) fail("the prompt has ", markers, " <image> markers for ", n_images, " image(s)");
  std::size_t from = 0;
  for (auto at = prompt.find(kImageMarker); at != std::string::npos; at = prompt.find(kImageMarker, from)) {
    if (at > from) items.push_back({Item::Kind::Text, prompt.substr(from, at - from)});
    items.push_back({Item::Kind::Image, ""});
    from = at + kImageMarker.size();
  }
  if (from < prompt.size()) items.push_back({Item::Kind::Text, prompt.substr(from)});
  return items;
}

// Each image's single <|image_pad|> becomes t·gh·gw / merge² pads, as the processor does.
std::vector<std::int32_t> expand_image_pads(const std::vector<std::int32_t>& ids, const RunContext& ctx) {
  const auto pad = static_cast<std::int32_t>(ctx.res.config.image_token_id);
  const std::int64_t merge = ctx.res.config.vision.spatial_merge_size;
  std::vector<std::int32_t> out;
  std::size_t image = 0;
  for (const auto id : ids) {
    if (id != pad) {
      out.push_back(id);
      continue;
    }
    if (image == ctx.images.size()) fail("the prompt has more image placeholders than images");
    const auto& im = ctx.images[image++];
    out.insert(out.end(), static_cast<std::size_t>(im.t * im.gh * im.gw / (merge * merge)), pad);
  }
  if (image != ctx.images.size()) fail("the prompt has fewer image placeholders than images (raw prompts need them)");
  return out;
}

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
      messages.push_back({"user", user_content(req.prompt, ctx.images.size())});
      text = qwen3vl::render_chat(messages, /*add_generation_prompt=*/true);
    }
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
  }
};

}  // namespace

std::unique_ptr<Stage> make_tokenize_stage(const ManifestStage&, Resources&) {
  return std::make_unique<TokenizeStage>();
}

}  // namespace qhx
