// qhexrt/pipeline.hpp — the runtime's C++ API. A Pipeline is a loaded run plan
// (a manifest, or a Hugging Face checkpoint directory with the default plan):
// its graphs, tables and tokenizer, ready to generate. open() does all the
// loading (and all the checking it can do before a request); generate() runs
// the manifest's stages for one request.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

#include "qhexrt/sampling.hpp"
#include "qhexrt/tokenizer.hpp"

namespace qhx {

struct GenerationRequest {
  std::string prompt;
  std::optional<std::string> system;  // a system turn before the user's
  bool raw = false;                   // the prompt is fed as is, without the chat template
  // Images, placed in the user's turn at each "<image>" marker of the prompt,
  // or before the text when the prompt has no marker.
  std::vector<std::filesystem::path> images;
  std::optional<std::string> resize;              // "fixed" or "native"; default: the manifest's
  std::optional<std::int64_t> max_new_tokens;     // default: the manifest's
  std::optional<SamplingParams> sampling;         // default: the manifest's
  std::function<void(std::string_view)> on_text;  // streamed text, never half a UTF-8 character
  std::vector<std::string> stop;                  // stop strings (see GenerationOptions in qhexrt/session.hpp)
  // Teacher forcing: decode step i takes forced_tokens[i] instead of sampling
  // (the logits are still computed and kept), e.g. to measure top-1 agreement
  // of a quantized bundle along the fp32 model's own continuation.
  std::vector<std::int32_t> forced_tokens;
  bool keep_step_logits = false;    // the logits that chose each generated token
  bool keep_prompt_logits = false;  // the logits at every prompt position
  std::int64_t speculate = 0;       // n-gram draft length (see GenerationOptions)
};

struct Timings {
  double load_ms = 0;    // Pipeline::open
  double vision_ms = 0;  // image load, resize, stage F and the vision graph
  std::int64_t image_tokens = 0;
  double prefill_ms = 0;  // prompt through the graphs, up to the first logits
  double ttft_ms = 0;     // request start to the first generated token
  double decode_ms_per_token = 0;
  std::int64_t decode_steps = 0;      // graph runs after prefill
  std::int64_t images_encoded = 0;    // images that went through stage F and the vision graph
  std::int64_t image_cache_hits = 0;  // images whose features came from the image-feature cache
};

// Why an answer ended. GenerationResult::stop_reason spells it (stop_reason_name).
enum class StopReason : std::uint8_t { MaxNewTokens, StopToken, StopString, Cancelled };
// "max_new_tokens", "stop_token", "stop_string" or "cancelled".
const char* stop_reason_name(StopReason reason);

struct GenerationResult {
  std::vector<std::int32_t> prompt_tokens;  // after templating
  std::vector<std::int32_t> tokens;         // generated, including a final stop token if one ended it
  std::string text;                         // the answer: tokens decoded without special tokens, cut
                                            // before a stop string, without a <think> part
  std::string reasoning;                    // the <think>...</think> part of the output, if any
  StopReason stop = StopReason::MaxNewTokens;
  std::string stop_reason;           // stop_reason_name(stop), for programs that print it
  std::int64_t cached_tokens = 0;    // prompt tokens whose KV came from the session's cache
  std::int64_t vocab = 0;            // logits row width
  std::int64_t draft_tokens = 0;     // tokens speculation drafted and the model verified
  std::int64_t accepted_tokens = 0;  // drafted tokens the model agreed with (emitted or not)
  std::vector<float> step_logits;    // [tokens.size(), vocab] if requested
  std::vector<float> prompt_logits;  // [prompt_tokens.size() - cached_tokens, vocab] if requested
  Timings timings;
  // A decoder of fixed blocks (the qnn-htp graphs, docs/qnn.md): what this request's calls
  // cost the host. All zero for a plan without one.
  struct BlockGraphUse {
    std::int64_t graph_calls = 0;         // decoder calls, prompt and decode
    std::int64_t decode_calls = 0;        // of them, the decode steps'
    std::int64_t padded_tokens = 0;       // rows the calls ran as padding
    std::uint64_t host_bytes = 0;         // written or copied by the host for them (lm-head included)
    std::uint64_t decode_host_bytes = 0;  // of them, the decode steps'
    // The last decode step's, in the steady state: a session's first step at a block size
    // also builds that size's mask once, O(context).
    std::uint64_t step_host_bytes = 0;
  } block_graphs;
};

struct PipelineOptions {
  // Bound of the image-feature cache (vision features keyed by a hash of the
  // decoded, resized pixels; least recently used first out). Default: the
  // manifest's "image_cache_mb"; 0 turns the cache off.
  std::optional<std::int64_t> image_cache_mb;
  // The QAIRT libraries for qnn-htp graphs (the seed's command names them): each a
  // path, or a file name looked for where docs/qnn.md says. Empty: libQnnHtp.so and
  // libQnnSystem.so. A process loads them once; naming others later is an error.
  std::string qnn_backend_library, qnn_system_library;
  // Read the weights every decode step streams (a bundle's decoder and lm-head
  // files, when the kernels use their panel-form matrices in place) into this
  // process's memory in 2 MiB pages, instead of mapping them: opening reads
  // the files (~1.7 GB for the 2B), and decode runs faster where the mapping
  // would be in 4 KiB page-cache pages (they stop the
  // weight stream's prefetchers at every page; a mapping gets 2 MiB pages where
  // the page cache holds the file in 2 MiB folios). For a long-running server
  // that wants that speed whatever the page cache holds, and its weights immune
  // to the files changing; docs/bundle.md, "Mapped files".
  bool weights_in_memory = false;
  // The plan run over another context length (the KV cache's positions), as if its manifest
  // said so: every check of the manifest applies. Empty: the plan's.
  std::optional<std::int64_t> context_length;
  // The KV cache of the plan's CPU decoder graphs (kind qwen3vl.text_decoder) kept in this
  // dtype: "f32", "f16" or "i8" (docs/manifest.md, kv_cache). Empty: the plan's. A plan
  // without such a graph is refused.
  std::optional<std::string> kv_cache;
  // Every CPU graph of the plan computing with these activations: "int8", "f16" or "f32"
  // (docs/manifest.md, "activations"). Empty: the plan's. A plan without a CPU graph is refused.
  std::optional<std::string> activations;
};

struct ImageCacheStats {
  std::int64_t hits = 0, misses = 0, entries = 0, bytes = 0, capacity_bytes = 0;
};

// The manifests of a bundle folder (qhx_export's output, or any folder of plans): every
// .json file there that declares "qhexrt_manifest", parsed (a bad one throws, naming it);
// `vlm` those with image stages, `text` the others, each in file-name order. What
// Pipeline::open picks from when given the folder. Throws when `dir` is no folder.
struct BundleManifests {
  std::vector<std::filesystem::path> vlm, text;
};
BundleManifests find_bundle_manifests(const std::filesystem::path& dir);

// Sets the CPU kernels' worker threads (0: one per logical CPU). More threads
// than the machine has cores only slow every step down, so the count is capped
// at the cores there are; returns the count in effect, and `warning` (if given)
// receives a sentence when the request was capped.
int set_threads(int threads, std::string* warning = nullptr);

class Session;

class Pipeline {
 public:
  // `path` is a manifest (.json), a bundle folder (its manifest: the one with
  // image stages when `want_images`, else the text one), or a Hugging Face
  // checkpoint directory (then the default f32 CPU plan). Throws qhx::Error
  // naming what is wrong.
  static Pipeline open(const std::filesystem::path& path, const PipelineOptions& options = {},
                       bool want_images = false);

  // The plan open() would run for `path` (a manifest, bundle folder or
  // checkpoint directory), as indented JSON; nothing is loaded.
  static std::string plan(const std::filesystem::path& path, bool want_images = false);

  Pipeline(Pipeline&&) noexcept;
  Pipeline& operator=(Pipeline&&) noexcept;
  ~Pipeline();

  const Tokenizer& tokenizer() const;
  double load_ms() const;

  // Runs the stages for one request in a fresh session. Throws qhx::Error for
  // a request that cannot run (e.g. a prompt longer than the context), and
  // qhx::FileChangedError (naming the file) for this and every later request
  // once a file the pipeline mapped was truncated or rewritten: reopen it
  // (docs/bundle.md, "Mapped files"). Sizes are bounded (docs/limits.md).
  GenerationResult generate(const GenerationRequest& request);

  bool takes_images() const;  // the plan has image stages
  // Each graph of the plan and the backend running it ("cpu", "qnn-htp"), by the manifest's graph name.
  std::vector<std::pair<std::string, std::string>> graph_backends() const;
  const SamplingParams& default_sampling() const;  // the plan's sampling defaults
  std::int64_t context_length() const;
  ImageCacheStats image_cache_stats() const;

 private:
  friend class Session;
  struct Impl;
  explicit Pipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace qhx
