// The manifest: QHexRT's declarative run plan (format documented in
// docs/manifest.md). It names the files, the graphs and which backend runs
// each, the host-side tables, the prompt format, the limits, the sampling
// defaults, and the ordered stages. The runtime executes exactly these stages.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sampling/sampler.hpp"

namespace qhx {

// The manifest format version this build reads. Compatibility rule: a reader
// accepts every version up to its own; a manifest that needs a newer reader
// is refused with a message naming both versions.
constexpr std::int64_t kManifestVersion = 8;

struct ManifestGraph {
  std::string backend;  // "cpu"
  std::string kind;     // what the graph computes, e.g. "qwen3vl.text_decoder"
  nlohmann::json spec;  // the whole entry, for the backend (file names, options)
};

struct ManifestTable {
  std::string file;    // a safetensors file or checkpoint, relative to the manifest
  std::string tensor;  // [rows, cols]
};

struct ManifestStage {
  std::string op;       // "tokenize", "embed", "prefill", "decode", "detokenize"
  nlohmann::json args;  // the whole entry
  std::string path;     // "stages[2]", for messages
};

// How images are brought to the vision encoder's input size.
struct ManifestImage {
  std::string resize = "native";       // "fixed": any image -> size x size; "native": smart_resize (aspect kept)
  std::int64_t size = 512;             // for "fixed"
  std::int64_t min_pixels = 65536;     // for "native" (the processor's shortest_edge)
  std::int64_t max_pixels = 16777216;  // for "native" (the processor's longest_edge)
  std::int64_t max_decode_pixels = 100'000'000;  // larger images are refused before decoding
};

struct Manifest {
  std::filesystem::path dir;  // relative file names resolve against it
  std::string source;         // where it came from, for messages
  nlohmann::json json;        // as parsed
  std::int64_t version = kManifestVersion;
  std::string name;
  std::string model;          // "qwen3vl"
  std::string config;         // the model's config.json
  std::string tokenizer;      // tokenizer.json
  std::string chat_template;  // "qwen3vl" or "none"
  std::int64_t context_length = 0;
  std::int64_t prefill_chunk = 0;
  std::int64_t max_new_tokens = 0;  // default for a request
  SamplingParams sampling;
  std::vector<std::string> stop_tokens;
  std::vector<std::int64_t> stop_token_ids;  // version 4: ids that also end generation
  ManifestImage image;
  std::map<std::string, ManifestGraph> graphs;
  std::map<std::string, ManifestTable> tables;
  std::vector<ManifestStage> stages;
};

// The stage ops this runtime implements, in no particular order.
const std::vector<std::string>& known_stage_ops();

// Parses and validates. Errors name `source`, the JSON path and what was expected.
Manifest parse_manifest(std::string_view json_text, const std::string& source, const std::filesystem::path& dir);
Manifest load_manifest(const std::filesystem::path& path);

// The stage lists of Qwen3-VL plans, shared by the default plan and the bundle
// manifests: image -> text (with the image stages), and text only.
nlohmann::json qwen3vl_vlm_stages();
nlohmann::json qwen3vl_text_stages(const std::string& prefill_mode = "chunked");

// The plan for a Hugging Face checkpoint directory: f32 on the CPU straight
// from its safetensors, tokenizer.json beside it.
Manifest default_manifest_for_hf_dir(const std::filesystem::path& dir);

// The plan Pipeline::open(path, ..., want_images) runs: a manifest file, a
// bundle folder's manifest (the image one when `want_images`, else the text
// one), or a checkpoint directory's default plan.
Manifest resolve_manifest(const std::filesystem::path& path, bool want_images);

}  // namespace qhx
