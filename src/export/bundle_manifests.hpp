// The two manifests of a bundle: the VLM plan (image -> text, fixed resize to
// the bundle's image size, as the seed) and the text plan (chat), over the
// same files. Sampling, stop tokens and the native resize's pixel limits come
// from the source checkpoint's generation_config.json and preprocessor_config.json
// (runtime/hf_dir_plan.hpp; today's defaults when it has none).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/file_digest.hpp"
#include "runtime/hf_dir_plan.hpp"

namespace qhx {

struct BundleFiles {
  std::string model;  // what the manifests are named after (model_name)
  std::string vision, llm, lm_head, embed, patch_embed, patch_bias, pos_embed;  // file names in the bundle
  std::int64_t image_size = 512, context = 1024, prefill_chunk = 320;
  std::string weights;                    // w8 | w4 | f16 | f32, for the manifests' names
  std::string chat_template = "qwen3vl";  // the family's built-in one, or the checkpoint's copied into the bundle
  std::string kv_cache;     // the decoder's "kv_cache" ("" : f16 in w8 and w4 bundles, else the default f32)
  std::string activations;  // every graph's "activations" ("": int8 in w8 and w4 bundles, else unstated: f32)
};

// Writes a manifest as indented JSON, durably; throws naming the file when it cannot be written.
FileDigest write_manifest(const std::filesystem::path& path, const nlohmann::json& manifest);

BundleFiles bundle_file_names(const std::string& weights, std::int64_t image_size);

// A bundle's manifests are named after its model (docs/bundle.md, "Files"): the family and a
// size label of the checkpoint's parameter count, rounded down in the largest of k, m, b, t it
// reaches: Qwen3-VL-2B's 2.1 billion give "qwen3vl-2b", Qwen3-VL-8B's 8.8 billion "qwen3vl-8b"
// (as the model is called; rounding to nearest would say 9b), the demo's toy "qwen3vl-44m".
std::string model_name(std::string_view family, std::uint64_t parameters);
// "<model>-vlm-<image size>.json" and "<model>-text-<image size>.json".
std::string vlm_manifest_name(const BundleFiles& f);
std::string text_manifest_name(const BundleFiles& f);

nlohmann::json vlm_manifest(const BundleFiles& f, const HfDirPlan& hf = {});
nlohmann::json text_manifest(const BundleFiles& f, const HfDirPlan& hf = {});
// A qnn-htp bundle's manifests, from the generator's description of what it prepared
// (qnn_graphs.json, tools/qnn/make_qnn_bundle.py): every graph on the HTP.
nlohmann::json qnn_vlm_manifest(const BundleFiles& f, const HfDirPlan& hf, const nlohmann::json& graphs);
nlohmann::json qnn_text_manifest(const BundleFiles& f, const HfDirPlan& hf, const nlohmann::json& graphs);

}  // namespace qhx
