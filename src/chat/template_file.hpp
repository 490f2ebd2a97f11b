// Where chat templates live in Hugging Face checkpoints, and reading them.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace qhx::chat {

// The template text in `path`: a raw Jinja file (any name not ending in
// .json, e.g. chat_template.jinja), or a JSON file with a "chat_template" key
// (chat_template.json, tokenizer_config.json, processor_config.json) holding
// either the template string or a list of {"name", "template"} of which the
// one named "default" is used. Throws qhx::Error naming the file otherwise.
std::string load_template_file(const std::filesystem::path& path);

struct TemplateSource {
  std::filesystem::path path;  // the file it came from
  std::string text;
};

// The template a checkpoint directory's processor uses, in transformers
// 4.57's order (processing_utils.ProcessorMixin.get_processor_dict, then the
// tokenizer's fallback in tokenization_utils_base):
//   chat_template.json > chat_template.jinja > processor_config.json's
//   "chat_template" > tokenizer_config.json's "chat_template".
// nullopt when none of them holds one.
std::optional<TemplateSource> find_checkpoint_template(const std::filesystem::path& dir);

}  // namespace qhx::chat
