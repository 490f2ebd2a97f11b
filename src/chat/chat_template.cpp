// The public ChatTemplate over the Jinja renderer (src/chat/jinja.hpp).
#include "qhexrt/chat_template.hpp"

#include <nlohmann/json.hpp>

#include "chat/jinja.hpp"
#include "chat/template_file.hpp"
#include "common/json_limits.hpp"
#include "qhexrt/error.hpp"

namespace qhx {

struct ChatTemplate::Impl {
  std::string name, source;
  chat::Template tmpl;
};

ChatTemplate ChatTemplate::parse(std::string_view source, const std::string& name) {
  return ChatTemplate(
      std::make_shared<const Impl>(Impl{name, std::string(source), chat::Template::parse(source, name)}));
}

std::optional<ChatTemplate> ChatTemplate::from_checkpoint(const std::filesystem::path& dir) {
  auto found = chat::find_checkpoint_template(dir);
  if (!found) return std::nullopt;
  return parse(found->text, found->path.string());
}

ChatTemplate ChatTemplate::load(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) {
    auto t = from_checkpoint(path);
    if (!t)
      fail(
          path.string(),
          ": no chat template (chat_template.json, chat_template.jinja, processor_config.json, tokenizer_config.json)");
    return *t;
  }
  return parse(chat::load_template_file(path), path.string());
}

const std::string& ChatTemplate::name() const { return impl_->name; }
const std::string& ChatTemplate::source() const { return impl_->source; }

std::string ChatTemplate::render_json(std::string_view context_json) const {
  check_json_depth(context_json, impl_->name);
  nlohmann::ordered_json context;
  try {
    context = nlohmann::ordered_json::parse(context_json);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number past double
    fail(impl_->name, ": the template's context is not JSON (", e.what(), ")");
  }
  if (!context.is_object()) fail(impl_->name, ": the template's context must be a JSON object");
  return impl_->tmpl.render(context);
}

std::string ChatTemplate::render(const std::vector<Message>& messages, bool add_generation_prompt) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Message& m : messages) {
    nlohmann::ordered_json msg;
    msg["role"] = m.role;
    if (m.content.size() == 1 && m.content[0].kind == ContentPart::Kind::Text) {
      msg["content"] = m.content[0].text;  // as a client's plain string arrives
    } else {
      nlohmann::ordered_json parts = nlohmann::ordered_json::array();
      for (const ContentPart& p : m.content) {
        if (p.kind == ContentPart::Kind::Image) {
          parts.push_back({{"type", "image"}});
        } else {
          parts.push_back({{"type", "text"}, {"text", p.text}});
        }
      }
      msg["content"] = std::move(parts);
    }
    list.push_back(std::move(msg));
  }
  // The variables transformers' apply_chat_template passes without tools or documents.
  nlohmann::ordered_json context = {{"messages", std::move(list)},
                                    {"tools", nullptr},
                                    {"documents", nullptr},
                                    {"add_generation_prompt", add_generation_prompt}};
  return impl_->tmpl.render(context);
}

}  // namespace qhx
