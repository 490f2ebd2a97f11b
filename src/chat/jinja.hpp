// A Jinja2-subset renderer for Hugging Face chat templates, with the
// environment transformers' apply_chat_template uses (trim_blocks,
// lstrip_blocks, loop controls, raise_exception, strftime_now, its tojson).
// docs/chat_template.md lists the supported subset.
//
// Every error is a qhx::Error "NAME:LINE:COL: ...": a syntax error, a
// construct outside the subset ("unsupported Jinja construct 'include'"),
// a render-time failure, or the template's own raise_exception(message).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace qhx::chat {

namespace jinja {
struct Program;
}

class Template {
 public:
  // Parses `source`; `name` is used in error messages (e.g. the file name).
  static Template parse(std::string_view source, std::string_view name);

  // Renders with `context` (a JSON object of variables). Dict keys iterate
  // and print in the order of the JSON object: an ordered_json keeps the
  // order of its source as Python's dicts do; a plain json sorts them.
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& context) const;

  const std::string& name() const;

 private:
  explicit Template(std::shared_ptr<const jinja::Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const jinja::Program> program_;
};

}  // namespace qhx::chat
