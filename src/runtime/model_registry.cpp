// The model families this build knows, by the manifest's "model" name.
#include "models/model_family.hpp"
#include "qhexrt/error.hpp"
#include "qwen3vl/family.hpp"

namespace qhx {

std::unique_ptr<ModelFamily> load_model_family(std::string_view model, const std::filesystem::path& config_json) {
  if (model == "qwen3vl") return std::make_unique<qwen3vl::Family>(load_qwen3vl_config(config_json));
  std::string known;
  for (const auto& n : model_families()) known += (known.empty() ? "\"" : ", \"") + n + "\"";
  fail("unsupported model \"", model, "\" (this build knows ", known, ")");
}

std::vector<std::string> model_families() { return {"qwen3vl"}; }

}  // namespace qhx
