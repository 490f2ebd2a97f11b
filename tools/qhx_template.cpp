// qhx_template — render a Hugging Face chat template as transformers'
// apply_chat_template(messages, tokenize=False) does.
//
//   qhx_template --template FILE [--messages FILE.json] [--context FILE.json]
//                [--add-generation-prompt] [--bos-token S] [--eos-token S]
//
// FILE is a .jinja file, a chat_template.json or a tokenizer_config.json (its
// "chat_template"), or a checkpoint directory (searched as the runtime does).
// The context is {messages, tools: null, documents: null, add_generation_prompt,
// bos_token, eos_token} (the tokens only when given) plus the keys of
// --context, which win. The text goes to stdout byte for byte.
#include "cli/cli.hpp"
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "qhexrt/chat_template.hpp"
#include "qhexrt/error.hpp"

namespace {

using Json = nlohmann::ordered_json;

// Parsed into an ordered_json so dict keys keep the file's order, as json.load does.
Json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) qhx::fail(path, ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return Json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number past double
    qhx::fail(path, ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"Render a Hugging Face chat template (Jinja) with a conversation"};
  std::string template_path, messages_path, context_path, bos, eos;
  bool add_generation_prompt = false;
  app.add_option("--template", template_path,
                 ".jinja file, chat_template.json, tokenizer_config.json or checkpoint directory")
      ->required();
  app.add_option("--messages", messages_path, "JSON file: the list of messages");
  app.add_option("--context", context_path, "JSON file: an object of further template variables");
  app.add_flag("--add-generation-prompt", add_generation_prompt, "end with the assistant's generation prompt");
  auto* bos_opt = app.add_option("--bos-token", bos, "the bos_token variable");
  auto* eos_opt = app.add_option("--eos-token", eos, "the eos_token variable");
  QHX_CLI_PARSE(app, argc, argv);

  try {
    const qhx::ChatTemplate tmpl = qhx::ChatTemplate::load(template_path);
    Json context = {{"messages", Json::array()},
                    {"tools", nullptr},
                    {"documents", nullptr},
                    {"add_generation_prompt", add_generation_prompt}};
    if (!messages_path.empty()) {
      context["messages"] = read_json(messages_path);
      if (!context["messages"].is_array()) qhx::fail(messages_path, ": expected a JSON list of messages");
    }
    if (*bos_opt) context["bos_token"] = bos;
    if (*eos_opt) context["eos_token"] = eos;
    if (!context_path.empty()) {
      const Json extra = read_json(context_path);
      if (!extra.is_object()) qhx::fail(context_path, ": expected a JSON object");
      for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
    }
    const std::string text = tmpl.render_json(context.dump());
    std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::cout.flush();
  } catch (const std::exception& e) {
    std::cerr << "qhx_template: error: " << e.what() << "\n";
    return 1;
  }
  return std::cout ? 0 : 1;
}
