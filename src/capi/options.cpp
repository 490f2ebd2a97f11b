// The C API's option and timing structs: their defaults, the qhx_*_init
// functions, and the translation of generation options to the C++ API.
#include "capi/versioned_structs.hpp"

namespace qhx::capi {

qhx_pipeline_options default_pipeline_options() {
  qhx_pipeline_options o{};
  o.struct_size = sizeof o;
  o.image_cache_mb = -1;
  o.want_images = 0;  // as the C++ default: a bundle's text manifest if it has one
  o.threads = 0;
  o.weights_in_memory = 0;
  return o;
}

qhx_generation_options default_generation_options() {
  qhx_generation_options o{};
  o.struct_size = sizeof o;
  o.max_new_tokens = 0;
  o.use_manifest_sampling = 1;
  const qhx::SamplingParams s;  // the C++ defaults are HF's neutral values
  o.greedy = s.greedy ? 1 : 0;
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.top_p = s.top_p;
  o.min_p = s.min_p;
  o.repetition_penalty = s.repetition_penalty;
  o.presence_penalty = s.presence_penalty;
  o.seed = s.seed;
  o.frequency_penalty = s.frequency_penalty;
  return o;
}

qhx::GenerationOptions to_cpp(const qhx_generation_options& o) {
  qhx::GenerationOptions g;
  if (o.max_new_tokens > 0) g.max_new_tokens = o.max_new_tokens;
  if (o.use_manifest_sampling == 0) {
    qhx::SamplingParams s;
    s.greedy = o.greedy != 0;
    s.temperature = o.temperature;
    s.top_k = o.top_k;
    s.top_p = o.top_p;
    s.min_p = o.min_p;
    s.repetition_penalty = o.repetition_penalty;
    s.presence_penalty = o.presence_penalty;
    s.seed = o.seed;
    s.frequency_penalty = o.frequency_penalty;  // the default 0 from a version 2 caller's struct
    g.sampling = s;
  }
  for (std::size_t i = 0; i < o.n_stop; ++i) g.stop.emplace_back(o.stop[i]);  // checked by answer()
  if (o.resize != nullptr) g.resize = o.resize;
  if (o.on_text != nullptr) {
    const qhx_stream_callback cb = o.on_text;
    void* user = o.user;
    g.on_text = [cb, user](std::string_view text) {
      return cb(text.data(), text.size(), user) == 0;
    };
  }
  g.keep_step_logits = o.keep_step_logits != 0;
  g.speculate = o.speculate;  // the default 0 from an older caller's struct; checked by the pipeline
  return g;
}

int read_generation_options(const qhx_generation_options* in, qhx_generation_options& out, const char* function) {
  out = default_generation_options();
  if (in == nullptr) return QHX_OK;
  if (const int st = check_struct_size(in, kGenerationOptionsV2, function, "options", "qhx_generation_options");
      st != QHX_OK)
    return st;
  read_versioned(in, out);
  // A version 3 struct ends inside version 4's filler, or a stray size inside its field: not the caller's.
  if (in->struct_size < kGenerationOptionsV4) out.speculate = 0;
  return QHX_OK;
}

}  // namespace qhx::capi

using namespace qhx::capi;

extern "C" {

int qhx_pipeline_options_init_sized(qhx_pipeline_options* options, size_t struct_size) {
  return init_sized(options, struct_size, kPipelineOptionsV2, default_pipeline_options(),
                    "qhx_pipeline_options_init_sized", "options", "qhx_pipeline_options");
}

// The parentheses keep the header's qhx_*_init macros off these definitions.
int(qhx_pipeline_options_init)(qhx_pipeline_options* options) {
  if (options == nullptr) return null_argument("qhx_pipeline_options_init", "options");
  return qhx_pipeline_options_init_sized(options, kPipelineOptionsV5);
}

int qhx_image_cache_stats_init_sized(qhx_image_cache_stats* stats, size_t struct_size) {
  return init_sized(stats, struct_size, kImageCacheStatsV2, qhx_image_cache_stats{}, "qhx_image_cache_stats_init_sized",
                    "stats", "qhx_image_cache_stats");
}

int(qhx_image_cache_stats_init)(qhx_image_cache_stats* stats) {
  if (stats == nullptr) return null_argument("qhx_image_cache_stats_init", "stats");
  return qhx_image_cache_stats_init_sized(stats, kImageCacheStatsV5);
}

int qhx_generation_options_init_sized(qhx_generation_options* options, size_t struct_size) {
  return init_sized(options, struct_size, kGenerationOptionsV2, default_generation_options(),
                    "qhx_generation_options_init_sized", "options", "qhx_generation_options");
}

int(qhx_generation_options_init)(qhx_generation_options* options) {
  if (options == nullptr) return null_argument("qhx_generation_options_init", "options");
  return qhx_generation_options_init_sized(options, kGenerationOptionsV5);
}

int qhx_pipeline_default_sampling(const qhx_pipeline* pipe, qhx_generation_options* options) {
  constexpr const char* fn = "qhx_pipeline_default_sampling";
  if (pipe == nullptr) return null_argument(fn, "pipe");
  if (options == nullptr) return null_argument(fn, "options");
  if (const int st = check_struct_size(options, kGenerationOptionsV2, fn, "options", "qhx_generation_options");
      st != QHX_OK)
    return st;
  return guarded(fn, [&]() -> int {
    // The version 2 fields lie inside any accepted struct_size; frequency_penalty is checked.
    const qhx::SamplingParams& s = pipe->pipe->default_sampling();
    options->use_manifest_sampling = 0;
    options->greedy = s.greedy ? 1 : 0;
    options->temperature = s.temperature;
    options->top_k = s.top_k;
    options->top_p = s.top_p;
    options->min_p = s.min_p;
    options->repetition_penalty = s.repetition_penalty;
    options->presence_penalty = s.presence_penalty;
    options->seed = s.seed;
    if (options->struct_size >= kGenerationOptionsV3) options->frequency_penalty = s.frequency_penalty;
    return QHX_OK;
  });
}

int qhx_timings_init_sized(qhx_timings* timings, size_t struct_size) {
  return init_sized(timings, struct_size, kTimingsV2, qhx_timings{}, "qhx_timings_init_sized", "timings",
                    "qhx_timings");
}

int(qhx_timings_init)(qhx_timings* timings) {
  if (timings == nullptr) return null_argument("qhx_timings_init", "timings");
  return qhx_timings_init_sized(timings, kTimingsV5);
}

}  // extern "C"
