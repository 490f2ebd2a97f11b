#include "runtime/manifest.hpp"

#include <algorithm>

#include "models/model_family.hpp"
#include "qhexrt/chat_template.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/json_limits.hpp"
#include "common/json_section.hpp"
#include "common/limits.hpp"
#include "common/mapped_file.hpp"
#include "runtime/hf_dir_plan.hpp"

namespace qhx {
namespace {

std::int64_t positive(const Section& s, std::string_view key, std::int64_t fallback, bool required) {
  if (required && s.find(key) == nullptr) s.fail_at(key, "missing");
  const std::int64_t v = s.integer(key, fallback);
  if (v <= 0) s.fail_at(key, cat("must be > 0, got ", v));
  return v;
}

// positive() and at most `limit`: these sizes become allocations (the KV
// cache, an image's pixels) and factors of products that must not overflow.
std::int64_t bounded(const Section& s, std::string_view key, std::int64_t fallback, bool required, std::int64_t limit,
                     const char* limit_name) {
  const std::int64_t v = positive(s, key, fallback, required);
  if (v > limit) s.fail_at(key, cat(v, " is over the limit of ", limit, " (", limit_name, ", docs/limits.md)"));
  return v;
}

SamplingParams parse_sampling(const Section& s) {
  SamplingParams p;
  p.greedy = s.boolean("greedy", false);
  p.temperature = static_cast<float>(s.number("temperature", 1.0));
  p.top_k = static_cast<std::int32_t>(s.integer("top_k", 0));
  p.top_p = static_cast<float>(s.number("top_p", 1.0));
  p.min_p = static_cast<float>(s.number("min_p", 0.0));
  p.repetition_penalty = static_cast<float>(s.number("repetition_penalty", 1.0));
  p.presence_penalty = static_cast<float>(s.number("presence_penalty", 0.0));
  p.frequency_penalty = static_cast<float>(s.number("frequency_penalty", 0.0));
  p.seed = static_cast<std::uint64_t>(s.integer("seed", 0));
  try {
    p.validate();
  } catch (const Error& e) {
    s.fail_at("", e.what());
  }
  return p;
}

void reject_unknown_keys(const Section& s, const Json& obj, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : obj.items())
    if (std::find(known.begin(), known.end(), key) == known.end())
      s.fail_at(key, "unknown key (a typo, or a manifest for a newer QHexRT?)");
}

}  // namespace

Manifest parse_manifest(std::string_view json_text, const std::string& source, const std::filesystem::path& dir) {
  check_json_text(json_text, source);
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number past double
    fail(source, ": not valid JSON: ", e.what());
  }
  if (!root.is_object()) fail(source, ": expected a JSON object at the top level");
  const Section top(root, "", source);
  Manifest m;
  m.json = root;
  m.dir = dir;
  m.source = source;

  if (top.find("qhexrt_manifest") == nullptr) top.fail_at("qhexrt_manifest", "missing (the format version, e.g. 1)");
  m.version = top.integer("qhexrt_manifest", 0);
  if (m.version < 1) top.fail_at("qhexrt_manifest", cat("must be >= 1, got ", m.version));
  if (m.version > kManifestVersion)
    top.fail_at("qhexrt_manifest",
                cat("version ", m.version, " needs a newer QHexRT (this one reads up to ", kManifestVersion, ")"));
  reject_unknown_keys(
      top, root,
      {"qhexrt_manifest", "name", "model", "config", "tokenizer", "chat_template", "context_length", "prefill_chunk",
       "max_new_tokens", "sampling", "stop_tokens", "stop_token_ids", "image", "graphs", "tables", "stages"});

  m.name = top.string("name", "");
  m.model = top.string("model", "");
  if (const auto known = model_families(); std::find(known.begin(), known.end(), m.model) == known.end())
    top.fail_at("model", cat("unsupported model \"", m.model, "\" (this build knows \"qwen3vl\")"));
  m.config = top.string("config", "");
  if (m.config.empty()) top.fail_at("config", "missing (the model's config.json)");
  m.tokenizer = top.string("tokenizer", "");
  if (m.tokenizer.empty()) top.fail_at("tokenizer", "missing (a tokenizer.json)");
  // The model family's built-in template (its name), "none", or (version 4) a template file.
  m.chat_template = top.string("chat_template", m.model);
  if (m.chat_template.empty())
    top.fail_at("chat_template", "empty (the model's name, \"none\", or a chat template file)");
  constexpr auto kContext = limits::kContextLength;
  m.context_length = bounded(top, "context_length", 0, true, kContext, "limits::kContextLength");
  m.prefill_chunk = bounded(top, "prefill_chunk", 0, true, kContext, "limits::kContextLength");
  m.max_new_tokens = bounded(top, "max_new_tokens", 256, false, kContext, "limits::kContextLength");
  if (top.has_value("sampling")) m.sampling = parse_sampling(top.object("sampling"));

  if (const Json* stops = top.find("stop_tokens")) {
    if (!stops->is_array()) top.fail_at("stop_tokens", "expected an array of token strings");
    for (std::size_t i = 0; i < stops->size(); ++i) {
      if (!(*stops)[i].is_string()) top.fail_at(cat("stop_tokens[", i, "]"), "expected a token string");
      m.stop_tokens.push_back((*stops)[i].get<std::string>());
    }
  } else {
    m.stop_tokens = {"<|im_end|>", "<|endoftext|>"};
  }
  if (const Json* ids = top.find("stop_token_ids")) {
    if (m.version < 4)
      top.fail_at("stop_token_ids", cat("needs qhexrt_manifest >= 4 (this plan says ", m.version, ")"));
    if (!ids->is_array()) top.fail_at("stop_token_ids", cat("expected an array of token ids, got ", describe(*ids)));
    m.stop_token_ids = top.integer_list("stop_token_ids", {});
    for (std::size_t i = 0; i < m.stop_token_ids.size(); ++i)
      if (m.stop_token_ids[i] < 0)
        top.fail_at(cat("stop_token_ids[", i, "]"), cat("must be >= 0, got ", m.stop_token_ids[i]));
  }

  if (top.has_value("image")) {
    const Section im = top.object("image");
    reject_unknown_keys(im, root["image"], {"resize", "size", "min_pixels", "max_pixels", "max_decode_pixels"});
    m.image.resize = im.string("resize", "native");
    if (m.image.resize != "fixed" && m.image.resize != "native")
      im.fail_at("resize", cat("expected \"fixed\" or \"native\", got \"", m.image.resize, "\""));
    constexpr auto kPixels = limits::kImagePixels;
    constexpr auto kSide = std::int64_t{1} << 14;  // kSide * kSide == kPixels: a fixed resize's S x S
    static_assert(kSide * kSide == kPixels);
    m.image.size = bounded(im, "size", 512, false, kSide, "limits::kImagePixels as a square");
    m.image.min_pixels = bounded(im, "min_pixels", 65536, false, kPixels, "limits::kImagePixels");
    m.image.max_pixels = bounded(im, "max_pixels", 16777216, false, kPixels, "limits::kImagePixels");
    m.image.max_decode_pixels = bounded(im, "max_decode_pixels", 100'000'000, false, kPixels, "limits::kImagePixels");
    if (m.image.min_pixels > m.image.max_pixels) im.fail_at("min_pixels", "must not exceed max_pixels");
  }

  const Section graphs = top.object("graphs");
  for (const auto& [name, entry] : root["graphs"].items()) {
    const Section g = graphs.object(name);
    ManifestGraph mg;
    mg.backend = g.string("backend", "");
    mg.kind = g.string("kind", "");
    if (mg.backend.empty()) g.fail_at("backend", "missing (e.g. \"cpu\")");
    if (mg.kind.empty()) g.fail_at("kind", "missing (e.g. \"qwen3vl.text_decoder\")");
    if (const auto kv = entry.find("kv_cache"); kv != entry.end() && *kv == "i8" && m.version < 5)
      g.fail_at("kv_cache", cat("\"i8\" needs qhexrt_manifest >= 5 (this plan says ", m.version, ")"));
    if (const auto a = entry.find("activations"); a != entry.end() && *a == "f16" && m.version < 8)
      g.fail_at("activations", cat("\"f16\" needs qhexrt_manifest >= 8 (this plan says ", m.version, ")"));
    mg.spec = entry;
    m.graphs.emplace(name, std::move(mg));
  }
  if (top.has_value("tables")) {
    const Section tables = top.object("tables");
    for (const auto& [name, entry] : root["tables"].items()) {
      const Section t = tables.object(name);
      ManifestTable mt{t.string("file", ""), t.string("tensor", "")};
      if (mt.file.empty()) t.fail_at("file", "missing");
      if (mt.tensor.empty()) t.fail_at("tensor", "missing");
      m.tables.emplace(name, std::move(mt));
    }
  }

  const Json* stages = top.find("stages");
  if (stages == nullptr || !stages->is_array() || stages->empty())
    top.fail_at("stages", "expected a non-empty array of stages");
  for (std::size_t i = 0; i < stages->size(); ++i) {
    const std::string path = cat("stages[", i, "]");
    const Json& st = (*stages)[i];
    if (!st.is_object()) fail(source, ": ", path, ": expected an object");
    const Section s(st, path, source);
    ManifestStage ms{s.string("op", ""), st, path};
    const auto& ops = known_stage_ops();
    if (std::find(ops.begin(), ops.end(), ms.op) == ops.end())
      s.fail_at("op",
                cat("unknown stage \"", ms.op,
                    "\" (known: load_images, tokenize, patch_embed, vision, embed, prefill, decode, detokenize)"));
    // Every graph or table a stage names must exist.
    for (const char* key : {"graph", "lm_head", "tail_graph", "short_graph", "verify_graph"})
      if (s.has_value(key) && !m.graphs.contains(s.string(key, "")))
        s.fail_at(key, cat("no graph named \"", s.string(key, ""), "\" in \"graphs\""));
    for (const char* key : {"table", "patch_weight", "patch_bias", "pos_embed"})
      if (s.has_value(key) && !m.tables.contains(s.string(key, "")))
        s.fail_at(key, cat("no table named \"", s.string(key, ""), "\" in \"tables\""));
    m.stages.push_back(std::move(ms));
  }
  return m;
}

Manifest load_manifest(const std::filesystem::path& path) {
  const MappedFile file(path);
  return file.parse([&](const MappedFile& f) {
    const std::string_view text(reinterpret_cast<const char*>(f.data()), f.size());
    return parse_manifest(text, path.string(), path.parent_path());
  });
}

nlohmann::json qwen3vl_vlm_stages() {
  return {{{"op", "load_images"}},
          {{"op", "tokenize"}},
          {{"op", "patch_embed"},
           {"patch_weight", "patch_embed"},
           {"patch_bias", "patch_bias"},
           {"pos_embed", "pos_embed"}},
          {{"op", "vision"}, {"graph", "vision"}},
          {{"op", "embed"}, {"table", "embed"}},
          {{"op", "prefill"}, {"graph", "llm"}, {"lm_head", "lm_head"}},
          {{"op", "decode"}, {"graph", "llm"}, {"lm_head", "lm_head"}, {"table", "embed"}},
          {{"op", "detokenize"}}};
}

nlohmann::json qwen3vl_text_stages(const std::string& prefill_mode) {
  return {{{"op", "tokenize"}},
          {{"op", "embed"}, {"table", "embed"}},
          {{"op", "prefill"}, {"graph", "llm"}, {"lm_head", "lm_head"}, {"mode", prefill_mode}},
          {{"op", "decode"}, {"graph", "llm"}, {"lm_head", "lm_head"}, {"table", "embed"}},
          {{"op", "detokenize"}}};
}

namespace {

// The checkpoint's own template file, else the family's built-in one.
std::string checkpoint_template(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) return "qwen3vl";  // opening the plan will say what is missing
  const auto t = ChatTemplate::from_checkpoint(dir);
  return t ? t->name() : "qwen3vl";
}

}  // namespace

Manifest default_manifest_for_hf_dir(const std::filesystem::path& dir_in) {
  // Absolute file names, so that the plan (qhx_generate --print-plan) works from anywhere.
  const std::filesystem::path dir = std::filesystem::absolute(dir_in);
  const std::string weights =
      (dir /
       (std::filesystem::exists(dir / "model.safetensors") ? "model.safetensors" : "model.safetensors.index.json"))
          .string();
  const std::string config = (dir / "config.json").string();
  // The directory's own generation_config.json and preprocessor_config.json, when present.
  const HfDirPlan hf = hf_dir_plan(dir);
  Json j = {
      {"qhexrt_manifest", kManifestVersion},
      {"name", "hf-f32-cpu"},
      {"model", "qwen3vl"},
      {"config", config},
      {"tokenizer", (dir / "tokenizer.json").string()},
      {"chat_template", checkpoint_template(dir)},
      {"context_length", 4096},
      {"prefill_chunk", 320},
      {"max_new_tokens", 256},
      {"image", {{"resize", "native"}, {"min_pixels", hf.min_pixels}, {"max_pixels", hf.max_pixels}}},
      {"tables",
       {{"embed", {{"file", weights}, {"tensor", "model.language_model.embed_tokens.weight"}}},
        {"patch_embed", {{"file", weights}, {"tensor", "model.visual.patch_embed.proj.weight"}}},
        {"patch_bias", {{"file", weights}, {"tensor", "model.visual.patch_embed.proj.bias"}}},
        {"pos_embed", {{"file", weights}, {"tensor", "model.visual.pos_embed.weight"}}}}},
      {"graphs",
       {{"vision", {{"backend", "cpu"}, {"kind", "qwen3vl.vision_encoder"}, {"config", config}, {"weights", weights}}},
        {"llm", {{"backend", "cpu"}, {"kind", "qwen3vl.text_decoder"}, {"config", config}, {"weights", weights}}},
        {"lm_head",
         {{"backend", "cpu"},
          {"kind", "linear"},
          {"weights", weights},
          {"tensor", {"lm_head.weight", "model.language_model.embed_tokens.weight"}}}}}},
      {"stages", qwen3vl_vlm_stages()}};
  // sampling, stop_tokens (and stop_token_ids): the directory's generation_config.json, else
  // Qwen3-VL-Instruct's (HF generate's defaults for this model).
  add_generation_keys(hf, j);
  return parse_manifest(j.dump(), (dir / "(default plan)").string(), dir);
}

}  // namespace qhx
