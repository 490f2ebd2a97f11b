#include "runtime/hf_dir_plan.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/json_limits.hpp"
#include "common/json_section.hpp"
#include "qhexrt/error.hpp"

namespace qhx {
namespace {

Json parse_object(std::string_view text, const std::string& source) {
  check_json_text(text, source);
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    fail(source, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(source, ": expected a JSON object at the top level, got ", describe(j));
  return j;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail(p.string(), ": cannot read");
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(p, ec);
  if (!ec) check_json_file_size(bytes, limits::kJsonFileBytes, p.string(), "limits::kJsonFileBytes");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A number or null (null and absent take `fallback`, as GenerationConfig does).
double number_or(const Section& s, std::string_view key, double fallback) {
  return s.has_value(key) ? s.number(key, fallback) : fallback;
}
std::int64_t integer_or(const Section& s, std::string_view key, std::int64_t fallback) {
  return s.has_value(key) ? s.integer(key, fallback) : fallback;
}

}  // namespace

void apply_generation_config(std::string_view json_text, const std::string& source, HfDirPlan& plan) {
  const Json root = parse_object(json_text, source);
  const Section s(root, "", source);
  // transformers' GenerationConfig defaults (4.57 and 5.x alike).
  const bool do_sample = s.has_value("do_sample") ? s.boolean("do_sample", false) : false;
  const double temperature = number_or(s, "temperature", 1.0);
  const std::int64_t top_k = integer_or(s, "top_k", 50);
  const double top_p = number_or(s, "top_p", 1.0);
  const double min_p = number_or(s, "min_p", 0.0);
  const double repetition_penalty = number_or(s, "repetition_penalty", 1.0);
  if (!std::isfinite(temperature) || temperature < 0 || (do_sample && temperature == 0))
    s.fail_at("temperature", cat("must be a finite number ", do_sample ? "> 0 when do_sample is true" : ">= 0",
                                 ", got ", temperature));
  if (top_k < 0 || top_k > std::numeric_limits<std::int32_t>::max())
    s.fail_at("top_k", cat("must be >= 0 (0 = off), got ", top_k));
  if (!(top_p > 0 && top_p <= 1)) s.fail_at("top_p", cat("must be in (0, 1], got ", top_p));
  if (!(min_p >= 0 && min_p <= 1)) s.fail_at("min_p", cat("must be in [0, 1], got ", min_p));
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
    s.fail_at("repetition_penalty", cat("must be a finite number > 0, got ", repetition_penalty));
  // Beam search changes what generate returns; QHexRT decodes one sequence.
  if (const std::int64_t beams = integer_or(s, "num_beams", 1); beams != 1)
    s.fail_at("num_beams", cat(beams, " (beam search) is not supported; only 1"));

  plan.sampling = {{"greedy", !do_sample}, {"temperature", temperature},
                   {"top_k", top_k},       {"top_p", top_p},
                   {"min_p", min_p},       {"repetition_penalty", repetition_penalty}};

  if (s.has_value("eos_token_id")) {
    const Json& eos = *s.find("eos_token_id");
    std::vector<std::int64_t> ids;
    if (eos.is_array()) {
      ids = s.integer_list("eos_token_id", {});
    } else if (eos.is_number_integer()) {
      ids.push_back(s.integer("eos_token_id", 0));
    } else {
      s.fail_at("eos_token_id", cat("expected a token id or a list of token ids, got ", describe(eos)));
    }
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0)
        s.fail_at(eos.is_array() ? cat("eos_token_id[", i, "]") : "eos_token_id", cat("must be >= 0, got ", ids[i]));
    // generate() stops on these ids only: they replace the default stop tokens.
    plan.stop_tokens.clear();
    plan.stop_token_ids = std::move(ids);
    plan.has_stop_token_ids = true;
  }
}

void apply_preprocessor_config(std::string_view json_text, const std::string& source, const Qwen3VLVisionConfig& vision,
                               const std::string& config_source, HfDirPlan& plan) {
  const Json root = parse_object(json_text, source);
  const Section s(root, "", source);
  std::int64_t min_pixels = plan.min_pixels, max_pixels = plan.max_pixels;
  if (s.has_value("size")) {
    const Section size = s.object("size");
    if (size.find("shortest_edge") == nullptr || size.find("longest_edge") == nullptr)
      s.fail_at("size",
                "expected {\"shortest_edge\": MIN_PIXELS, \"longest_edge\": MAX_PIXELS} (a Qwen-VL processor's "
                "pixel limits)");
    min_pixels = size.integer("shortest_edge", 0);
    max_pixels = size.integer("longest_edge", 0);
  }
  // Both transformers lines let min_pixels / max_pixels override size.
  min_pixels = integer_or(s, "min_pixels", min_pixels);
  max_pixels = integer_or(s, "max_pixels", max_pixels);
  const char* min_key = s.has_value("min_pixels") ? "min_pixels" : "size.shortest_edge";
  const char* max_key = s.has_value("max_pixels") ? "max_pixels" : "size.longest_edge";
  if (min_pixels <= 0) s.fail_at(min_key, cat("must be > 0, got ", min_pixels));
  if (max_pixels <= 0) s.fail_at(max_key, cat("must be > 0, got ", max_pixels));
  if (min_pixels > max_pixels) s.fail_at(min_key, cat(min_pixels, " exceeds ", max_key, " ", max_pixels));

  const struct {
    const char* key;
    std::int64_t want;
    const char* config_key;
  } geometry[] = {{"patch_size", vision.patch_size, "vision_config.patch_size"},
                  {"merge_size", vision.spatial_merge_size, "vision_config.spatial_merge_size"},
                  {"temporal_patch_size", vision.temporal_patch_size, "vision_config.temporal_patch_size"}};
  for (const auto& g : geometry)
    if (s.has_value(g.key) && s.integer(g.key, 0) != g.want)
      s.fail_at(g.key, cat(s.integer(g.key, 0), " differs from ", config_source, "'s ", g.config_key, " ", g.want));

  // Stage F normalizes with (x - 127.5) / 127.5, i.e. mean 0.5 and std 0.5 per channel.
  for (const char* key : {"image_mean", "image_std"}) {
    if (!s.has_value(key)) continue;
    const Json& v = *s.find(key);
    const bool scalar = v.is_number() && v.get<double>() == 0.5;
    bool list = v.is_array() && !v.empty();
    for (std::size_t i = 0; list && i < v.size(); ++i) list = v[i].is_number() && v[i].get<double>() == 0.5;
    if (!scalar && !list)
      s.fail_at(key, cat(v.dump(), " is not supported (QHexRT normalizes with mean 0.5 and std 0.5 per channel)"));
  }
  plan.min_pixels = min_pixels;
  plan.max_pixels = max_pixels;
}

HfDirPlan hf_dir_plan(const std::filesystem::path& dir) {
  HfDirPlan plan;
  const std::filesystem::path gen = dir / "generation_config.json";
  if (std::filesystem::exists(gen)) apply_generation_config(read_file(gen), gen.string(), plan);
  const std::filesystem::path pre = dir / "preprocessor_config.json";
  if (std::filesystem::exists(pre)) {
    const std::filesystem::path cfg = dir / "config.json";
    apply_preprocessor_config(read_file(pre), pre.string(), load_qwen3vl_config(cfg).vision, cfg.string(), plan);
  }
  return plan;
}

void add_generation_keys(const HfDirPlan& plan, nlohmann::json& manifest) {
  manifest["sampling"] = plan.sampling;
  manifest["stop_tokens"] = plan.stop_tokens;
  if (plan.has_stop_token_ids) manifest["stop_token_ids"] = plan.stop_token_ids;
}

}  // namespace qhx
