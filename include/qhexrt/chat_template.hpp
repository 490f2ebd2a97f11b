// qhexrt/chat_template.hpp — Hugging Face chat templates (Jinja2, the subset
// documented in docs/chat_template.md), rendered as transformers'
// apply_chat_template renders them.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qhexrt/session.hpp"

namespace qhx {

class ChatTemplate {
 public:
  // Parses `source`; `name` (e.g. the file) is used in error messages, which
  // take the form NAME:LINE:COL: ... and name an unsupported construct.
  static ChatTemplate parse(std::string_view source, const std::string& name);
  // A .jinja file, a JSON file with a "chat_template" key (chat_template.json,
  // tokenizer_config.json, processor_config.json), or a checkpoint directory.
  static ChatTemplate load(const std::filesystem::path& path);
  // The template a checkpoint directory's processor uses (transformers' order
  // of precedence: chat_template.json, chat_template.jinja, processor_config.json,
  // tokenizer_config.json); nullopt when it has none.
  static std::optional<ChatTemplate> from_checkpoint(const std::filesystem::path& dir);

  const std::string& name() const;
  const std::string& source() const;

  // Renders with the variables of `context_json`, a JSON object (its key order is kept).
  std::string render_json(std::string_view context_json) const;
  // Renders `messages` (images as {"type": "image"} parts; a message of one
  // text part as a plain string) with add_generation_prompt.
  std::string render(const std::vector<Message>& messages, bool add_generation_prompt) const;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace qhx
