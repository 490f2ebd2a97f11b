#include "qhexrt/hf_config.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/json_limits.hpp"
#include "common/json_section.hpp"
#include "common/limits.hpp"
#include "common/mapped_file.hpp"
#include "qhexrt/error.hpp"

namespace qhx {

using Json = nlohmann::json;

namespace {

// Defaults of transformers 4.57's Qwen3VL*Config constructors. save_pretrained
// leaves a key out when it equals the class default, so these are what an
// absent key means.
namespace text_default {
constexpr std::int64_t vocab_size = 151936;
constexpr std::int64_t hidden_size = 4096;
constexpr std::int64_t intermediate_size = 22016;
constexpr std::int64_t num_hidden_layers = 32;
constexpr std::int64_t num_attention_heads = 32;
constexpr std::int64_t num_key_value_heads = 32;
constexpr std::int64_t head_dim = 128;
constexpr const char* hidden_act = "silu";
constexpr std::int64_t max_position_embeddings = 128000;
constexpr double rms_norm_eps = 1e-6;
constexpr bool tie_word_embeddings = false;
constexpr double rope_theta = 5000000.0;
constexpr bool attention_bias = false;
// Not constructor defaults: Qwen3VLTextRotaryEmbedding falls back to these
// when the rope dict lacks the key (rope_type "default", mrope_section
// [24, 20, 20]) and always interleaves, whatever mrope_interleaved says.
constexpr const char* rope_type = "default";
const std::vector<std::int64_t> mrope_section = {24, 20, 20};
constexpr bool mrope_interleaved = true;
}  // namespace text_default

namespace vision_default {
constexpr std::int64_t depth = 27;
constexpr std::int64_t hidden_size = 1152;
constexpr const char* hidden_act = "gelu_pytorch_tanh";
constexpr std::int64_t intermediate_size = 4304;
constexpr std::int64_t num_heads = 16;
constexpr std::int64_t in_channels = 3;
constexpr std::int64_t patch_size = 16;
constexpr std::int64_t spatial_merge_size = 2;
constexpr std::int64_t temporal_patch_size = 2;
constexpr std::int64_t out_hidden_size = 3584;
constexpr std::int64_t num_position_embeddings = 2304;
const std::vector<std::int64_t> deepstack_visual_indexes = {8, 16, 24};
// 4.57's Qwen3VLVisionRotaryEmbedding hard-codes theta 10000; 5.x's vision config
// defaults to rope_type "axial" and the base class's default_theta 10000.
constexpr const char* rope_type = "axial";
constexpr double rope_theta = 10000.0;
}  // namespace vision_default

namespace top_default {
constexpr std::int64_t image_token_id = 151655;
constexpr std::int64_t video_token_id = 151656;
constexpr std::int64_t vision_start_token_id = 151652;
constexpr std::int64_t vision_end_token_id = 151653;
constexpr bool tie_word_embeddings = false;
}  // namespace top_default

// A model_type other than ours (e.g. "qwen3_vl_moe") would parse into a
// plausible-looking struct for a model this runtime cannot run. `also` is a
// second accepted spelling (nullptr: none).
void check_model_type(const Section& s, const char* expected, const char* also = nullptr) {
  const std::string model_type = s.string("model_type", expected);
  if (model_type == expected || (also != nullptr && model_type == also)) return;
  s.fail_at("model_type",
            also == nullptr
                ? cat("is \"", model_type, "\", expected \"", expected, "\" (unsupported model)")
                : cat("is \"", model_type, "\", expected \"", expected, "\" or \"", also, "\" (unsupported model)"));
}

// "dtype" (transformers >= 4.56) or "torch_dtype" (earlier); both may be
// present in a file converted by hand, and must then agree. The tensors'
// own dtypes (safetensors) are what the runtime reads; this is checked so a
// broken value is reported, not silently kept.
std::string parse_dtype(const Section& s) {
  const bool has_new = s.has_value("dtype"), has_old = s.has_value("torch_dtype");
  const std::string d = has_new ? s.string("dtype", "") : "";
  const std::string td = has_old ? s.string("torch_dtype", "") : "";
  if (has_new && has_old && d != td)
    s.fail_at("torch_dtype", cat("is \"", td, "\" but dtype is \"", d, "\"; cannot tell which one applies"));
  const std::string v = has_new ? d : td;
  if (!v.empty() && v != "float32" && v != "bfloat16" && v != "float16")
    s.fail_at(has_new ? "dtype" : "torch_dtype",
              cat("unsupported dtype \"", v, "\" (expected \"float32\", \"bfloat16\" or \"float16\")"));
  return v;
}

// Fills rope_type, rope_theta, mrope_section and mrope_interleaved from either
// spelling: 4.57 {rope_scaling: {...}, rope_theta} or 5.x {rope_parameters: {..., rope_theta}}.
void parse_rope(const Section& text, Qwen3VLTextConfig& t) {
  const bool has_scaling = text.has_value("rope_scaling");
  const bool has_parameters = text.has_value("rope_parameters");
  if (has_scaling && has_parameters)
    text.fail_at("rope_parameters", "both rope_scaling and rope_parameters are set; cannot tell which one applies");
  if (!has_scaling && !has_parameters)
    text.fail_at("rope_scaling",
                 "missing or null; Qwen3-VL needs it for mrope_section (transformers 4.57 cannot build the "
                 "rotary embedding without it either)");

  const double outer_theta = text.number("rope_theta", text_default::rope_theta);
  const Section rope = text.object(has_scaling ? "rope_scaling" : "rope_parameters");
  // rope_parameters carries its own rope_theta; older 5.x files may still keep
  // it one level up. With neither, the two lines disagree (4.57's class
  // default is 5e6, 5.x's Qwen3VLTextConfig.default_theta 5e5), so refuse.
  if (has_parameters && rope.find("rope_theta") == nullptr && text.find("rope_theta") == nullptr)
    rope.fail_at("rope_theta",
                 "missing (transformers 5.x would take 500000, 4.57 5000000; write the value explicitly)");
  t.rope_theta = has_parameters ? rope.number("rope_theta", outer_theta) : outer_theta;
  // "type" is the pre-4.3x spelling of "rope_type".
  t.rope_type = rope.find("rope_type") != nullptr ? rope.string("rope_type", text_default::rope_type)
                                                  : rope.string("type", text_default::rope_type);
  t.mrope_section = rope.integer_list("mrope_section", text_default::mrope_section);
  t.mrope_interleaved = rope.boolean("mrope_interleaved", text_default::mrope_interleaved);
}

Qwen3VLTextConfig parse_text(const Section& s) {
  check_model_type(s, "qwen3_vl_text");
  Qwen3VLTextConfig t;
  t.vocab_size = s.integer("vocab_size", text_default::vocab_size);
  t.hidden_size = s.integer("hidden_size", text_default::hidden_size);
  t.intermediate_size = s.integer("intermediate_size", text_default::intermediate_size);
  t.num_hidden_layers = s.integer("num_hidden_layers", text_default::num_hidden_layers);
  t.num_attention_heads = s.integer("num_attention_heads", text_default::num_attention_heads);
  // transformers maps an explicit null to num_attention_heads (plain MHA).
  const Json* kv = s.find("num_key_value_heads");
  t.num_key_value_heads = kv != nullptr && kv->is_null()
                              ? t.num_attention_heads
                              : s.integer("num_key_value_heads", text_default::num_key_value_heads);
  t.head_dim = s.integer("head_dim", text_default::head_dim);
  t.hidden_act = s.string("hidden_act", text_default::hidden_act);
  t.rms_norm_eps = s.number("rms_norm_eps", text_default::rms_norm_eps);
  t.max_position_embeddings = s.integer("max_position_embeddings", text_default::max_position_embeddings);
  t.attention_bias = s.boolean("attention_bias", text_default::attention_bias);
  t.tie_word_embeddings = s.boolean("tie_word_embeddings", text_default::tie_word_embeddings);
  t.dtype = parse_dtype(s);
  parse_rope(s, t);
  return t;
}

// 5.x's vision rope_parameters: {"rope_type": "axial", "rope_theta": 10000.0}.
// Qwen3VLVisionRotaryEmbedding builds inv_freq from rope_theta and raises on
// any rope_type but "axial" (a "default" in the file is turned into "axial"
// when the config loads). 4.57 writes no such key and uses theta 10000.
void parse_vision_rope(const Section& s, Qwen3VLVisionConfig& v) {
  if (s.has_value("rope_scaling"))
    s.fail_at("rope_scaling", "the vision tower takes no RoPE scaling (transformers' axial vision RoPE has none)");
  v.rope_theta = vision_default::rope_theta;  // 4.57's, when the file names none
  const auto theta_from = [&v](const Section& sec) {
    v.rope_theta = sec.number("rope_theta", v.rope_theta);
    if (!std::isfinite(v.rope_theta) || v.rope_theta <= 0)
      sec.fail_at("rope_theta", cat("must be a finite number > 0, got ", v.rope_theta));
  };
  // A bare vision_config.rope_theta: 5.x moves it into rope_parameters when the config loads.
  if (s.find("rope_theta") != nullptr) theta_from(s);
  if (!s.has_value("rope_parameters")) return;
  const Section rope = s.object("rope_parameters");
  const char* type_key = rope.find("rope_type") != nullptr ? "rope_type" : "type";
  v.rope_type = rope.string(type_key, vision_default::rope_type);
  if (v.rope_type == "default") v.rope_type = "axial";
  if (v.rope_type != "axial")
    rope.fail_at(type_key,
                 cat("unsupported vision RoPE type \"", v.rope_type, "\" (only \"axial\", or \"default\" meaning it)"));
  theta_from(rope);
}

Qwen3VLVisionConfig parse_vision(const Section& s) {
  check_model_type(s, "qwen3_vl", "qwen3_vl_vision");
  Qwen3VLVisionConfig v;
  v.depth = s.integer("depth", vision_default::depth);
  v.hidden_size = s.integer("hidden_size", vision_default::hidden_size);
  v.num_heads = s.integer("num_heads", vision_default::num_heads);
  v.intermediate_size = s.integer("intermediate_size", vision_default::intermediate_size);
  v.hidden_act = s.string("hidden_act", vision_default::hidden_act);
  v.in_channels = s.integer("in_channels", vision_default::in_channels);
  v.patch_size = s.integer("patch_size", vision_default::patch_size);
  v.temporal_patch_size = s.integer("temporal_patch_size", vision_default::temporal_patch_size);
  v.spatial_merge_size = s.integer("spatial_merge_size", vision_default::spatial_merge_size);
  v.out_hidden_size = s.integer("out_hidden_size", vision_default::out_hidden_size);
  v.num_position_embeddings = s.integer("num_position_embeddings", vision_default::num_position_embeddings);
  v.deepstack_visual_indexes = s.integer_list("deepstack_visual_indexes", vision_default::deepstack_visual_indexes);
  parse_vision_rope(s, v);
  return v;
}

// ---------------------------------------------------------------------------
// Validation: every rule names the field it is about.

class Checker {
 public:
  explicit Checker(std::string_view source) : source_(source) {}

  void require(bool ok, std::string_view path, const std::string& problem) const {
    if (!ok) fail(source_, ": ", path, ": ", problem);
  }
  // A size: positive and bounded, so the products the model computes from
  // two of them and a layer count cannot overflow.
  void positive(std::int64_t v, std::string_view path) const {
    require(v > 0, path, cat("must be > 0, got ", v));
    require(v <= limits::kModelDimension, path,
            cat(v, " is over the limit of ", limits::kModelDimension, " (limits::kModelDimension, docs/limits.md)"));
  }
  void layers(std::int64_t v, std::string_view path) const {
    require(v > 0, path, cat("must be > 0, got ", v));
    require(v <= limits::kModelLayers, path,
            cat(v, " layers is over the limit of ", limits::kModelLayers, " (limits::kModelLayers, docs/limits.md)"));
  }
  void positive_finite(double v, std::string_view path) const {
    require(std::isfinite(v) && v > 0, path, cat("must be a finite number > 0, got ", v));
  }

 private:
  std::string_view source_;
};

bool is_perfect_square(std::int64_t n) {
  if (n < 0) return false;
  // The double sqrt can be off by one for large n; settle it in unsigned
  // integers, where (r + 1)^2 cannot overflow for any int64 n.
  const auto un = static_cast<std::uint64_t>(n);
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(n)));
  while (r > 0 && r * r > un) --r;
  while ((r + 1) * (r + 1) <= un) ++r;
  return r * r == un;
}

void validate_text(const Checker& c, const Qwen3VLTextConfig& t) {
  c.positive(t.vocab_size, "text_config.vocab_size");
  c.positive(t.hidden_size, "text_config.hidden_size");
  c.positive(t.intermediate_size, "text_config.intermediate_size");
  c.layers(t.num_hidden_layers, "text_config.num_hidden_layers");
  c.positive(t.num_attention_heads, "text_config.num_attention_heads");
  c.positive(t.num_key_value_heads, "text_config.num_key_value_heads");
  c.positive(t.head_dim, "text_config.head_dim");
  c.positive(t.max_position_embeddings, "text_config.max_position_embeddings");
  c.require(t.num_attention_heads % t.num_key_value_heads == 0, "text_config.num_key_value_heads",
            cat(t.num_key_value_heads, " does not divide num_attention_heads ", t.num_attention_heads));
  c.require(t.head_dim % 2 == 0, "text_config.head_dim", cat("must be even for RoPE, got ", t.head_dim));
  c.require(t.hidden_act == "silu", "text_config.hidden_act",
            cat("unsupported activation \"", t.hidden_act, "\" (only \"silu\")"));
  c.positive_finite(t.rms_norm_eps, "text_config.rms_norm_eps");
  c.positive_finite(t.rope_theta, "text_config.rope_theta");
  c.require(t.rope_type == "default", "text_config.rope_type",
            cat("unsupported RoPE type \"", t.rope_type, "\" (only \"default\")"));

  c.require(t.mrope_section.size() == 3, "text_config.mrope_section",
            cat("must have 3 entries (temporal, height, width), got ", t.mrope_section.size()));
  std::int64_t sum = 0;
  for (const std::int64_t s : t.mrope_section) {
    c.require(s > 0, "text_config.mrope_section", cat("entries must be > 0, got ", s));
    sum += s;
  }
  c.require(sum == t.head_dim / 2, "text_config.mrope_section",
            cat("entries sum to ", sum, " but head_dim / 2 is ", t.head_dim / 2));
}

void validate_vision(const Checker& c, const Qwen3VLVisionConfig& v, const Qwen3VLTextConfig& t) {
  c.layers(v.depth, "vision_config.depth");
  c.positive(v.hidden_size, "vision_config.hidden_size");
  c.positive(v.num_heads, "vision_config.num_heads");
  c.positive(v.intermediate_size, "vision_config.intermediate_size");
  c.positive(v.in_channels, "vision_config.in_channels");
  c.positive(v.patch_size, "vision_config.patch_size");
  c.positive(v.temporal_patch_size, "vision_config.temporal_patch_size");
  c.positive(v.out_hidden_size, "vision_config.out_hidden_size");
  c.positive(v.num_position_embeddings, "vision_config.num_position_embeddings");
  c.require(v.spatial_merge_size >= 1, "vision_config.spatial_merge_size",
            cat("must be >= 1, got ", v.spatial_merge_size));
  c.positive(v.spatial_merge_size, "vision_config.spatial_merge_size");
  c.require(v.hidden_size % v.num_heads == 0, "vision_config.num_heads",
            cat(v.num_heads, " does not divide hidden_size ", v.hidden_size));
  // head_dim / 2 angles per patch (half row, half column), each from head_dim / 4 frequencies.
  c.require((v.hidden_size / v.num_heads) % 4 == 0, "vision_config.num_heads",
            cat("the vision head dim ", v.hidden_size / v.num_heads, " must be a multiple of 4 for the 2-D RoPE"));
  c.require(v.hidden_act == "gelu_pytorch_tanh", "vision_config.hidden_act",
            cat("unsupported activation \"", v.hidden_act, "\" (only \"gelu_pytorch_tanh\")"));
  // Position embeddings are a square grid that gets interpolated to each image.
  c.require(is_perfect_square(v.num_position_embeddings), "vision_config.num_position_embeddings",
            cat("must be a perfect square, got ", v.num_position_embeddings));
  c.require(v.out_hidden_size == t.hidden_size, "vision_config.out_hidden_size",
            cat(v.out_hidden_size, " differs from text_config.hidden_size ", t.hidden_size));

  const auto& idx = v.deepstack_visual_indexes;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    c.require(idx[i] >= 0 && idx[i] < v.depth, "vision_config.deepstack_visual_indexes",
              cat("entry ", idx[i], " is outside [0, depth=", v.depth, ")"));
    c.require(i == 0 || idx[i - 1] < idx[i], "vision_config.deepstack_visual_indexes",
              "entries must be strictly increasing");
  }
  // Deepstack feature k is added after text layer k, so there must be enough layers.
  c.require(static_cast<std::int64_t>(idx.size()) <= t.num_hidden_layers, "vision_config.deepstack_visual_indexes",
            cat(idx.size(), " entries but text_config.num_hidden_layers is ", t.num_hidden_layers));
}

void validate_token_ids(const Checker& c, const Qwen3VLConfig& cfg) {
  const std::pair<const char*, std::int64_t> ids[] = {
      {"image_token_id", cfg.image_token_id},
      {"video_token_id", cfg.video_token_id},
      {"vision_start_token_id", cfg.vision_start_token_id},
      {"vision_end_token_id", cfg.vision_end_token_id},
  };
  for (const auto& [name, id] : ids)
    c.require(id >= 0 && id < cfg.text.vocab_size, name,
              cat(id, " is outside [0, text_config.vocab_size=", cfg.text.vocab_size, ")"));
}

Json parse_json(std::string_view text, std::string_view source) {
  check_json_text(text, source);
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    fail(source, ": invalid JSON: ", e.what());
  }
}

}  // namespace

Qwen3VLConfig parse_qwen3vl_config(std::string_view json_text, std::string_view source) {
  const Json root = parse_json(json_text, source);
  if (!root.is_object()) fail(source, ": expected a JSON object at the top level, got ", describe(root));
  const Section top(root, "", source);
  check_model_type(top, "qwen3_vl");

  Qwen3VLConfig cfg;
  cfg.image_token_id = top.integer("image_token_id", top_default::image_token_id);
  cfg.video_token_id = top.integer("video_token_id", top_default::video_token_id);
  cfg.vision_start_token_id = top.integer("vision_start_token_id", top_default::vision_start_token_id);
  cfg.vision_end_token_id = top.integer("vision_end_token_id", top_default::vision_end_token_id);
  cfg.tie_word_embeddings = top.boolean("tie_word_embeddings", top_default::tie_word_embeddings);
  cfg.dtype = parse_dtype(top);
  cfg.text = parse_text(top.object("text_config"));
  cfg.vision = parse_vision(top.object("vision_config"));

  const Checker checker(source);
  validate_text(checker, cfg.text);
  validate_vision(checker, cfg.vision, cfg.text);
  validate_token_ids(checker, cfg);
  return cfg;
}

Qwen3VLConfig load_qwen3vl_config(const std::filesystem::path& config_json) {
  const MappedFile file(config_json);  // throws naming the path
  return file.parse([&](const MappedFile& f) {
    return parse_qwen3vl_config(std::string_view(reinterpret_cast<const char*>(f.data()), f.size()),
                                config_json.string());
  });
}

}  // namespace qhx
