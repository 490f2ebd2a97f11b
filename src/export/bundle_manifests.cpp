#include "export/bundle_manifests.hpp"

#include "runtime/manifest.hpp"

namespace qhx {

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
// sees the knob) quantizes activations per row; "f32" keeps them exact (docs/manifest.md).
void add_activations(const BundleFiles& f, nlohmann::json& graph) {
  if (f.weights == "w8" || f.weights == "w4") graph["activations"] = "int8";
}

nlohmann::json llm_graphs(const BundleFiles& f) {
  nlohmann::json g = {
      {"llm", {{"backend", "cpu"}, {"kind", "qwen3vl.text_decoder"}, {"config", "config.json"}, {"weights", f.llm}}},
      {"lm_head", {{"backend", "cpu"}, {"kind", "linear"}, {"weights", f.lm_head}, {"tensor", "lm_head.weight"}}}};
  add_activations(f, g["llm"]);
  add_activations(f, g["lm_head"]);
  // Quantized bundles keep the KV cache in f16 (half the memory and the bytes
  // decode reads, as llama.cpp does); f32 and f16 bundles keep it exact.
  if (f.weights == "w8" || f.weights == "w4") g["llm"]["kv_cache"] = "f16";
  return g;
}

nlohmann::json table(const std::string& file, const std::string& tensor) { return {{"file", file}, {"tensor", tensor}}; }

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

}  // namespace qhx
