#include "export/bundle_manifests.hpp"

#include <utility>

#include "common/durable_file.hpp"
#include "qhexrt/error.hpp"
#include "runtime/manifest.hpp"

namespace qhx {

FileDigest write_manifest(const std::filesystem::path& path, const nlohmann::json& manifest) {
  return write_file_durably(path, manifest.dump(2) + "\n");
}

BundleFiles bundle_file_names(const std::string& weights, std::int64_t image_size) {
  const std::string s = std::to_string(image_size);
  BundleFiles f;
  f.vision = "vis_native_" + s + ".bin";
  f.llm = "llm_shared_" + s + ".bin";
  f.lm_head = "lmhead_wqo.bin";
  f.embed = weights == "f32" ? "embed_f32.bin" : "embed_f16.bin";  // f32 bundles keep the table exact
  f.patch_embed = "vis_patch_embed_f32.bin";
  f.patch_bias = "vis_patch_embed_bias_f32.bin";
  f.pos_embed = "vis_pos_embed_f32.bin";
  f.image_size = image_size;
  f.weights = weights;
  return f;
}

std::string model_name(std::string_view family, std::uint64_t parameters) {
  std::string label = std::to_string(parameters);
  for (const auto& [unit, letter] : {std::pair<std::uint64_t, const char*>{1'000'000'000'000, "t"},
                                     {1'000'000'000, "b"},
                                     {1'000'000, "m"},
                                     {1'000, "k"}})
    if (parameters >= unit) {
      label = std::to_string(parameters / unit) + letter;
      break;
    }
  return std::string(family) + "-" + label;
}

std::string vlm_manifest_name(const BundleFiles& f) {
  return f.model + "-vlm-" + std::to_string(f.image_size) + ".json";
}

std::string text_manifest_name(const BundleFiles& f) {
  return f.model + "-text-" + std::to_string(f.image_size) + ".json";
}

namespace {

nlohmann::json common(const BundleFiles& f, const std::string& name, const HfDirPlan& hf) {
  nlohmann::json m = {{"qhexrt_manifest", kManifestVersion},
                      {"name", name},
                      {"model", "qwen3vl"},
                      {"config", "config.json"},
                      {"tokenizer", "tokenizer.json"},
                      {"chat_template", f.chat_template},
                      {"context_length", f.context},
                      {"prefill_chunk", f.prefill_chunk},
                      {"max_new_tokens", 256}};
  add_generation_keys(hf, m);  // sampling, stop_tokens, stop_token_ids
  return m;
}

// w8 and w4 graphs say how they compute: "int8" (the default, stated so a user
// sees the knob) quantizes activations per row; "f16" rounds them to fp16; "f32" keeps them
// exact (docs/manifest.md).
void add_activations(const BundleFiles& f, nlohmann::json& graph) {
  if (!f.activations.empty())
    graph["activations"] = f.activations;
  else if (f.weights == "w8" || f.weights == "w4")
    graph["activations"] = "int8";
}

nlohmann::json llm_graphs(const BundleFiles& f) {
  nlohmann::json g = {
      {"llm", {{"backend", "cpu"}, {"kind", "qwen3vl.text_decoder"}, {"config", "config.json"}, {"weights", f.llm}}},
      {"lm_head", {{"backend", "cpu"}, {"kind", "linear"}, {"weights", f.lm_head}, {"tensor", "lm_head.weight"}}}};
  add_activations(f, g["llm"]);
  add_activations(f, g["lm_head"]);
  // Quantized bundles keep the KV cache in f16 (half the memory and the bytes
  // decode reads, as llama.cpp does) unless told otherwise; f32 and f16 bundles keep it exact.
  if (!f.kv_cache.empty())
    g["llm"]["kv_cache"] = f.kv_cache;
  else if (f.weights == "w8" || f.weights == "w4")
    g["llm"]["kv_cache"] = "f16";
  return g;
}

nlohmann::json table(const std::string& file, const std::string& tensor) {
  return {{"file", file}, {"tensor", tensor}};
}

}  // namespace

nlohmann::json vlm_manifest(const BundleFiles& f, const HfDirPlan& hf) {
  nlohmann::json m = common(f, "qwen3vl-vlm-" + std::to_string(f.image_size) + "-" + f.weights, hf);
  // The seed's fixed resize; the processor's limits for a request that asks for "native".
  m["image"] = {
      {"resize", "fixed"}, {"size", f.image_size}, {"min_pixels", hf.min_pixels}, {"max_pixels", hf.max_pixels}};
  m["tables"] = {{"embed", table(f.embed, "model.language_model.embed_tokens.weight")},
                 {"patch_embed", table(f.patch_embed, "model.visual.patch_embed.proj.weight")},
                 {"patch_bias", table(f.patch_bias, "model.visual.patch_embed.proj.bias")},
                 {"pos_embed", table(f.pos_embed, "model.visual.pos_embed.weight")}};
  m["graphs"] = llm_graphs(f);
  m["graphs"]["vision"] = {
      {"backend", "cpu"}, {"kind", "qwen3vl.vision_encoder"}, {"config", "config.json"}, {"weights", f.vision}};
  add_activations(f, m["graphs"]["vision"]);
  m["stages"] = qwen3vl_vlm_stages();
  return m;
}

nlohmann::json text_manifest(const BundleFiles& f, const HfDirPlan& hf) {
  nlohmann::json m = common(f, "qwen3vl-text-" + std::to_string(f.image_size) + "-" + f.weights, hf);
  m["tables"] = {{"embed", table(f.embed, "model.language_model.embed_tokens.weight")}};
  m["graphs"] = llm_graphs(f);
  // "mode": "chunked" runs the prompt in prefill_chunk blocks; "decode_over_prompt"
  // feeds it one token per call through the same graph, as the seed's text plan does.
  m["stages"] = qwen3vl_text_stages("chunked");
  return m;
}

namespace {

// A graph entry of the generator's description (tools/qnn/make_qnn_bundle.py, qnn_graphs.json).
nlohmann::json qnn_graph(const nlohmann::json& g, std::int64_t soc_model) {
  return {{"backend", "qnn-htp"},
          {"kind", "qnn.context_graph"},
          {"context_binary", g.at("file")},
          {"graph", g.at("graph")},
          {"soc_model", soc_model}};
}

// The decoder's prefill or decode graph over its parts: the weight-shared binaries a
// device runs, and their non-shared twins, which the x86-64 emulator runs instead.
nlohmann::json qnn_decoder(const nlohmann::json& desc, const std::string& which, std::int64_t soc_model) {
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& p : desc.at("llm_parts")) {
    nlohmann::json part = {{"context_binary", p.at("shared").at("file")},
                           {"graph", p.at("shared").at("graphs").at(which)}};
    if (p.contains("twins")) {
      part["emulator_binary"] = p.at("twins").at(which).at("file");
      part["emulator_graph"] = p.at("twins").at(which).at("graph");
    }
    parts.push_back(std::move(part));
  }
  return {{"backend", "qnn-htp"},
          {"kind", "qnn.context_graph"},
          {"contract", "decoder_block"},
          {"soc_model", soc_model},
          {"parts", parts}};
}

bool has_role(const nlohmann::json& desc, const char* role) {
  return desc.at("llm_parts").at(0).at("shared").at("graphs").contains(role);
}

// The CPU plan's stages with the language model split into its block graphs: the prompt
// through `prefill_graph` (and the short graph for remainders, the decode graph past
// their room), decode through "decode" (speculation through "verify").
nlohmann::json on_graphs(nlohmann::json stages, const std::string& prefill_graph, const nlohmann::json& desc) {
  for (auto& st : stages) {
    if (st["op"] == "prefill") st["graph"] = prefill_graph;
    if (st["op"] == "prefill" && prefill_graph != "decode") {
      st["tail_graph"] = "decode";
      if (has_role(desc, "short")) {
        st["short_graph"] = "short";
        st["block_knee"] = desc.at("block_knee");
      }
    }
    if (st["op"] == "decode") {
      st["graph"] = "decode";
      if (has_role(desc, "verify")) st["verify_graph"] = "verify";
    }
  }
  return stages;
}

nlohmann::json qnn_common(const BundleFiles& f, const std::string& name, const HfDirPlan& hf,
                          const nlohmann::json& desc) {
  nlohmann::json m = common(f, name, hf);
  const std::int64_t soc = desc.at("soc_model");
  m["graphs"] = {{"lm_head", qnn_graph(desc.at("lm_head"), soc)}};
  for (const char* role : {"prefill", "short", "verify", "decode"})
    if (has_role(desc, role)) m["graphs"][role] = qnn_decoder(desc, role, soc);
  m["graphs"]["lm_head"]["row_blocks"] = true;  // a [1, hidden] graph serves any number of rows
  m["tables"] = {{"embed", table(f.embed, "model.language_model.embed_tokens.weight")}};
  return m;
}

}  // namespace

nlohmann::json qnn_vlm_manifest(const BundleFiles& f, const HfDirPlan& hf, const nlohmann::json& desc) {
  nlohmann::json m = qnn_common(
      f, "qwen3vl-vlm-" + std::to_string(f.image_size) + "-qnn-" + desc.at("soc").get<std::string>(), hf, desc);
  // The vision graph was prepared for one image size: every image is resized to it.
  m["image"] = {{"resize", "fixed"}, {"size", f.image_size}};
  m["tables"]["patch_embed"] = table(f.patch_embed, "model.visual.patch_embed.proj.weight");
  m["tables"]["patch_bias"] = table(f.patch_bias, "model.visual.patch_embed.proj.bias");
  m["tables"]["pos_embed"] = table(f.pos_embed, "model.visual.pos_embed.weight");
  m["graphs"]["vision"] = qnn_graph(desc.at("vision"), desc.at("soc_model"));
  m["stages"] = on_graphs(qwen3vl_vlm_stages(), "prefill", desc);
  return m;
}

nlohmann::json qnn_text_manifest(const BundleFiles& f, const HfDirPlan& hf, const nlohmann::json& desc) {
  nlohmann::json m = qnn_common(
      f, "qwen3vl-text-" + std::to_string(f.image_size) + "-qnn-" + desc.at("soc").get<std::string>(), hf, desc);
  // The prompt through the block graphs, as the VLM plan's; a bundle of decode and prefill
  // graphs alone (--short-chunk 0) keeps the seed's text plan, the prompt through the
  // decode graph one token at a time ("mode": "decode_over_prompt").
  m["stages"] = has_role(desc, "short") ? on_graphs(qwen3vl_text_stages("chunked"), "prefill", desc)
                                        : on_graphs(qwen3vl_text_stages("decode_over_prompt"), "decode", desc);
  return m;
}

}  // namespace qhx
