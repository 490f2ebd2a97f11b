#include "chat/template_file.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/json_limits.hpp"
#include "qhexrt/error.hpp"

namespace qhx::chat {
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) qhx::fail(path.string(), ": cannot open the chat template file");
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  if (!ec) qhx::check_json_file_size(bytes, qhx::limits::kJsonFileBytes, path.string(), "limits::kJsonFileBytes");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The "chat_template" entry of a JSON file, or nullopt when it has none (or null).
std::optional<std::string> json_template(const fs::path& path) {
  nlohmann::json j;
  try {
    const std::string text = read_all(path);
    qhx::check_json_depth(text, path.string());
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number past double
    qhx::fail(path.string(), ": not valid JSON (", e.what(), ")");
  }
  if (!j.is_object()) qhx::fail(path.string(), ": expected a JSON object");
  const auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    // transformers' form for several named templates: [{"name": ..., "template": ...}].
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
          !entry["template"].is_string())
        qhx::fail(path.string(), ": \"chat_template\" list entries must be {\"name\", \"template\"} objects");
      if (entry["name"] == "default") return entry["template"].get<std::string>();
    }
    qhx::fail(path.string(), ": \"chat_template\" lists no template named \"default\"");
  }
  qhx::fail(path.string(), ": \"chat_template\" must be a string or a list of {name, template}");
}

}  // namespace

std::string load_template_file(const fs::path& path) {
  if (path.extension() != ".json") return read_all(path);
  std::optional<std::string> t = json_template(path);
  if (!t) qhx::fail(path.string(), ": no \"chat_template\" key");
  return std::move(*t);
}

std::optional<TemplateSource> find_checkpoint_template(const fs::path& dir) {
  if (!fs::is_directory(dir)) qhx::fail(dir.string(), ": not a directory");
  for (const char* name :
       {"chat_template.json", "chat_template.jinja", "processor_config.json", "tokenizer_config.json"}) {
    const fs::path p = dir / name;
    if (!fs::is_regular_file(p)) continue;
    if (p.extension() == ".jinja") return TemplateSource{p, read_all(p)};
    // A chat_template.json without the key is an error in transformers; the two
    // config files just may not carry one.
    std::optional<std::string> t = json_template(p);
    if (t) return TemplateSource{p, std::move(*t)};
    if (p.filename() == "chat_template.json") qhx::fail(p.string(), ": no \"chat_template\" key");
  }
  return std::nullopt;
}

}  // namespace qhx::chat
