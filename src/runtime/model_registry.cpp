// The model families this build knows, by the manifest's "model" name: one table, which the
// lookup and its error message both read.
#include "models/model_family.hpp"
#include "qhexrt/error.hpp"
#include "qwen3vl/family.hpp"

namespace qhx {
namespace {

struct FamilyEntry {
  std::string_view name;
  std::unique_ptr<ModelFamily> (*load)(const std::filesystem::path& config_json);
};

std::unique_ptr<ModelFamily> load_qwen3vl(const std::filesystem::path& config_json) {
  return std::make_unique<qwen3vl::Family>(load_qwen3vl_config(config_json));
}

constexpr FamilyEntry kFamilies[] = {{"qwen3vl", load_qwen3vl}};

}  // namespace

std::unique_ptr<ModelFamily> load_model_family(std::string_view model, const std::filesystem::path& config_json) {
  for (const FamilyEntry& f : kFamilies)
    if (f.name == model) return f.load(config_json);
  std::string known;
  for (const auto& n : model_families()) known += (known.empty() ? "\"" : ", \"") + n + "\"";
  fail("unsupported model \"", model, "\" (this build knows ", known, ")");
}

std::vector<std::string> model_families() {
  std::vector<std::string> names;
  for (const FamilyEntry& f : kFamilies) names.emplace_back(f.name);
  return names;
}

}  // namespace qhx
