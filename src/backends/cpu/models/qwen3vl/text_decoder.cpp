#include "backends/cpu/models/qwen3vl/text_decoder.hpp"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <utility>
#include <optional>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/kernel_plan.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "common/debug_dump.hpp"
#include "common/line_aligned.hpp"
#include "backends/cpu/nn/attention.hpp"
#include "backends/cpu/nn/mlp.hpp"
#include "backends/cpu/nn/kv_touch.hpp"
#include "models/rope.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/hf_config.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx::qwen3vl {
namespace {

struct Layer {
  std::vector<float> input_norm, post_norm;  // [hidden]
  nn::AttentionWeights attn;
  nn::SwiGluWeights mlp;
};

// The decoder's layers over a KV cache (kv_spec's layout); both contracts below run it.
class DecoderCore {
 public:
  void init(const GraphBlob& blob, std::int64_t ctx, std::int64_t max_t);
  const Qwen3VLTextConfig& config() const { return cfg_; }
  std::int64_t ctx() const { return ctx_; }
  std::int64_t max_t() const { return max_t_; }
  nn::KvStore kv_store() const { return kv_store_; }
  const std::string& name() const { return name_; }
  // The cache as the graph's state tensor: [layers, 2, ctx, kv_heads, head_dim] of
  // f32, [layers, 2, kv_heads, ctx, head_dim] of f16, or [layers, 2, kv_heads, ctx,
  // head_dim + 4] bytes (i8): the compact caches keep each head's rows together,
  // one sequential stream for decode's attention.
  IoSpec kv_spec() const {
    const std::int64_t L = cfg_.num_hidden_layers, hkv = cfg_.num_key_value_heads, d = cfg_.head_dim;
    if (kv_store_ == nn::KvStore::I8) return {"kv_cache", DType::I8, {L, 2, hkv, ctx_, d + 4}, IoRole::State};
    if (kv_store_ == nn::KvStore::F16) return {"kv_cache", DType::F16, {L, 2, hkv, ctx_, d}, IoRole::State};
    return {"kv_cache", DType::F32, {L, 2, ctx_, hkv, d}, IoRole::State};
  }
  void cos_sin(const std::int32_t* positions, std::int64_t T, float* cos, float* sin) const {
    nn::mrope_cos_sin(positions, T, inv_freq_, axes_, cos, sin);
  }
  // hidden_out [T, hidden] = the final-normed states of embeds [T, hidden] at
  // indices start.., with cos/sin [T, head_dim]; writes the tokens' keys and
  // values into kv; adds deepstack [n, T, hidden] after layers 0..n-1 where mask is set.
  void forward(const float* embeds, std::int64_t T, std::int64_t start, const float* cos, const float* sin,
               std::byte* kv, const float* deepstack, std::int64_t n_deepstack, const std::uint8_t* mask,
               float* hidden_out);

 private:
  std::string name_;
  Qwen3VLTextConfig cfg_;
  std::int64_t ctx_ = 0, max_t_ = 0;
  // The cache as touch_ahead's regions (kv_spec's layout): a layer's keys or values, or
  // (i8 and f16, head-major) one head of them; a region's rows are kv_layer_bytes() / 2 split so.
  nn::KvRegions kv_regions(std::byte* kv) const {
    const std::int64_t per_half = kv_store_ == nn::KvStore::F32 ? 1 : cfg_.num_key_value_heads;
    return {kv, cfg_.num_hidden_layers * 2 * per_half, ctx_, kv_layer_bytes() / 2 / per_half / ctx_};
  }
  // touch_ahead's reach, at least 64 rows and no further: a prefill pays for the pages it
  // touches ahead, and those are the ones its first 64 decode steps would fault (a prompt
  // ending just short of a page boundary).
  static constexpr std::int64_t kTouchReach = 64;
  std::int64_t kv_layer_bytes() const {  // one layer's keys and values
    const std::int64_t hkv = cfg_.num_key_value_heads, d = cfg_.head_dim;
    switch (kv_store_) {
      case nn::KvStore::I8: return 2 * hkv * ctx_ * (d + 4);
      case nn::KvStore::F16: return 2 * ctx_ * hkv * d * 2;
      case nn::KvStore::F32: break;
    }
    return 2 * ctx_ * hkv * d * 4;
  }
  nn::KvStore kv_store_ = nn::KvStore::F32;  // "kv_cache": "f32", "f16" or "i8"
  std::optional<Checkpoint> ckpt_;           // mapped; the weights below point into it
  std::vector<Layer> layers_;
  std::vector<float> final_norm_;  // [hidden]
  std::vector<float> inv_freq_;    // [head_dim / 2]
  std::vector<std::uint8_t> axes_;
  const cpu::KernelSet* k_ = &cpu::active_kernels();

  // Workspace, sized once for max_t_ tokens.
  LineFloats h_, x_;  // h_: residual [T, hidden]; x_: normed
  nn::AttentionScratch attn_scratch_;
  nn::SwiGluScratch mlp_scratch_;
};

void DecoderCore::init(const GraphBlob& blob, std::int64_t ctx, std::int64_t max_t) {
  name_ = blob.name;
  cfg_ = load_qwen3vl_config(blob_file(blob, "config")).text;
  const cpu::KernelPlan plan = cpu::kernel_plan(blob);
  ckpt_.emplace(cpu::open_streamed_weights(blob_file(blob, "weights"), plan,
                                           blob.weights_in_memory));  // every decode step reads it all
  const Checkpoint& ck = *ckpt_;
  ctx_ = ctx;
  max_t_ = max_t;
  if (ctx_ <= 0 || max_t_ <= 0) fail("graph \"", name_, "\": context length and prefill chunk must be positive");
  if (const auto it = blob.spec.find("kv_cache"); it != blob.spec.end()) {
    if (!it->is_string() || (*it != "f32" && *it != "f16" && *it != "i8"))
      fail("graph \"", name_, "\": \"kv_cache\" must be \"f32\", \"f16\" or \"i8\", not ", it->dump());
    kv_store_ = *it == "f16" ? nn::KvStore::F16 : *it == "i8" ? nn::KvStore::I8 : nn::KvStore::F32;
  }

  const std::int64_t hidden = cfg_.hidden_size, hd = cfg_.head_dim, hq = cfg_.num_attention_heads,
                     hkv = cfg_.num_key_value_heads, inter = cfg_.intermediate_size;
  const std::string p = "model.language_model.";
  k_ = plan.kernels;
  for (std::int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const std::string lp = p + "layers." + std::to_string(l) + ".";
    Layer L;
    L.input_norm = cpu::vector_weight(ck, lp + "input_layernorm.weight", hidden);
    L.post_norm = cpu::vector_weight(ck, lp + "post_attention_layernorm.weight", hidden);
    L.attn.q = cpu::linear_weight(ck, lp + "self_attn.q_proj", hq * hd, hidden, cfg_.attention_bias);
    L.attn.k = cpu::linear_weight(ck, lp + "self_attn.k_proj", hkv * hd, hidden, cfg_.attention_bias);
    L.attn.v = cpu::linear_weight(ck, lp + "self_attn.v_proj", hkv * hd, hidden, cfg_.attention_bias);
    L.attn.o = cpu::linear_weight(ck, lp + "self_attn.o_proj", hidden, hq * hd, cfg_.attention_bias);
    L.attn.q_norm = cpu::vector_weight(ck, lp + "self_attn.q_norm.weight", hd);
    L.attn.k_norm = cpu::vector_weight(ck, lp + "self_attn.k_norm.weight", hd);
    L.mlp.gate = cpu::linear_weight(ck, lp + "mlp.gate_proj", inter, hidden, false);
    L.mlp.up = cpu::linear_weight(ck, lp + "mlp.up_proj", inter, hidden, false);
    L.mlp.down = cpu::linear_weight(ck, lp + "mlp.down_proj", hidden, inter, false);
    for (cpu::Linear* m : {&L.attn.q, &L.attn.k, &L.attn.v, &L.attn.o, &L.mlp.gate, &L.mlp.up, &L.mlp.down})
      cpu::prepare(plan, m->w);
    layers_.push_back(std::move(L));
  }
  final_norm_ = cpu::vector_weight(ck, p + "norm.weight", hidden);
  inv_freq_ = nn::rope_inv_freq(cfg_.rope_theta, hd);
  axes_ = nn::mrope_interleaved_axes(cfg_.mrope_section, hd / 2);

  const auto T = static_cast<std::size_t>(max_t_);
  h_.resize(T * static_cast<std::size_t>(hidden));
  x_.resize(h_.size());
  attn_scratch_ = nn::AttentionScratch(max_t_, hq, hkv, hd);
  mlp_scratch_ = nn::SwiGluScratch(max_t_, inter);
}

void DecoderCore::forward(const float* embeds, std::int64_t T, std::int64_t start, const float* cos_in,
                          const float* sin_in, std::byte* kv, const float* deepstack, std::int64_t n_deepstack,
                          const std::uint8_t* mask, float* hidden_out) {
  const std::int64_t hidden = cfg_.hidden_size;
  float* h = h_.data();
  std::memcpy(h, embeds, static_cast<std::size_t>(T * hidden) * sizeof(float));
  debug::dump("hidden.embed", h, {T, hidden});
  const std::int64_t kv_layer = kv_layer_bytes();
  nn::touch_ahead(kv_regions(kv), start, T, kTouchReach);  // page faults spread over the steps (nn/kv_touch.hpp)
  const nn::AttentionShape shape{cfg_.num_attention_heads, cfg_.num_key_value_heads, cfg_.head_dim,
                                 static_cast<float>(cfg_.rms_norm_eps)};
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const auto li = static_cast<std::int64_t>(l);
    std::byte* k_cache = kv + li * kv_layer;
    const nn::KvCache cache{k_cache, k_cache + kv_layer / 2, kv_store_, ctx_};
    k_->rms_norm(h, L.input_norm.data(), T, hidden, static_cast<float>(cfg_.rms_norm_eps), x_.data());
    nn::self_attention(*k_, L.attn, shape, x_.data(), T, start, cos_in, sin_in, cache, attn_scratch_, h);
    k_->rms_norm(h, L.post_norm.data(), T, hidden, static_cast<float>(cfg_.rms_norm_eps), x_.data());
    nn::swiglu_mlp(*k_, L.mlp, x_.data(), T, mlp_scratch_, h);
    if (debug::dumping()) debug::dump("hidden.layer" + std::to_string(l), h, {T, hidden});
    if (li < n_deepstack) {  // DeepStack: visual features join the residual stream at image tokens
      const float* ds = deepstack + li * T * hidden;
      for (std::int64_t t = 0; t < T; ++t)
        if (mask[t] != 0) k_->add_inplace(h + t * hidden, ds + t * hidden, hidden);
    }
  }
  k_->rms_norm(h, final_norm_.data(), T, hidden, static_cast<float>(cfg_.rms_norm_eps), hidden_out);
  debug::dump("hidden.final_norm", hidden_out, {T, hidden});
}

// Kind "qwen3vl.text_decoder": the KV cache is a state tensor the graph updates in place.
class TextDecoder final : public Delegate {
 public:
  void init(const GraphBlob& blob) override {
    core_.init(blob, blob.context_length, blob.max_tokens_per_call);
    cos_.resize(static_cast<std::size_t>(core_.max_t() * core_.config().head_dim));
    sin_.resize(cos_.size());
  }
  GraphContract contract() const override { return GraphContract::DecoderState; }
  std::vector<IoSpec> input_specs() const override;
  std::vector<IoSpec> output_specs() const override;
  void execute(std::span<const TensorRef> inputs, std::span<const TensorRef> outputs) override;

 private:
  DecoderCore core_;
  std::vector<float> cos_, sin_;  // [max_t, head_dim]
};

std::vector<IoSpec> TextDecoder::input_specs() const {
  const std::int64_t h = core_.config().hidden_size;
  return {{"embeds", DType::F32, {-1, h}},
          {"positions", DType::I32, {3, -1}},
          {"start", DType::I64, {1}},
          core_.kv_spec(),
          {"deepstack", DType::F32, {-1, -1, h}},
          {"image_mask", DType::U8, {-1}}};
}

std::vector<IoSpec> TextDecoder::output_specs() const {
  return {{"hidden", DType::F32, {-1, core_.config().hidden_size}}};
}

void TextDecoder::execute(std::span<const TensorRef> in, std::span<const TensorRef> out) {
  const auto ispecs = input_specs();
  const auto ospecs = output_specs();
  check_io(core_.name(), ispecs, in, "input");
  check_io(core_.name(), ospecs, out, "output");
  const std::int64_t T = in[0].shape[0];
  const std::int64_t start = in[2].as<std::int64_t>()[0];
  if (T < 1 || T > core_.max_t())
    fail("graph \"", core_.name(), "\": ", T, " tokens in one call; the plan allows 1..", core_.max_t());
  if (in[1].shape[1] != T || out[0].shape[0] != T || in[5].shape[0] != T || in[4].shape[1] != T)
    fail("graph \"", core_.name(), "\": positions, image_mask, deepstack and hidden must all have ", T, " tokens");
  if (start < 0 || start + T > core_.ctx())
    fail("graph \"", core_.name(), "\": tokens ", start, "..", start + T - 1, " do not fit the context of ",
         core_.ctx());
  const std::int64_t n_ds = in[4].shape[0];
  if (n_ds > core_.config().num_hidden_layers) fail("graph \"", core_.name(), "\": more deepstack inputs than layers");

  core_.cos_sin(in[1].as<std::int32_t>(), T, cos_.data(), sin_.data());
  core_.forward(in[0].as<const float>(), T, start, cos_.data(), sin_.data(), in[3].as<std::byte>(),
                in[4].as<const float>(), n_ds, in[5].as<std::uint8_t>(), out[0].as<float>());
}

// Kind "qwen3vl.text_decoder_ar": the NPU graphs' contract (docs/manifest.md),
// a fixed block of AR tokens over a fixed context CL with the KV cache kept by
// the host: the past comes in, only the block's new keys and values go out,
// and the host gives the additive attention mask and the rope tables. This CPU
// version is the contract's reference: it takes the masks a host builds for a
// sequence (valid past rows first, causal within the block, padding rows fully
// masked) and runs the same layers as the state kind, so its results equal
// that kind's bit for bit. It copies the valid past into its own cache on every
// call, which a state graph never does: it is for proving the stages, not for speed.
class TextDecoderAr final : public Delegate {
 public:
  void init(const GraphBlob& blob) override {
    const auto it = blob.spec.find("block");
    if (it == blob.spec.end() || !it->is_number_integer() || it->get<std::int64_t>() < 1)
      fail("graph \"", blob.name, "\": \"block\" (the tokens of one call, e.g. 320 or 1) must be a positive integer");
    ar_ = it->get<std::int64_t>();
    if (ar_ >= blob.context_length)
      fail("graph \"", blob.name, "\": block ", ar_, " leaves no past in a context of ", blob.context_length);
    if (const auto kv = blob.spec.find("kv_cache"); kv != blob.spec.end() && *kv != "f32")
      fail("graph \"", blob.name, "\": this kind keeps its KV in f32 (\"kv_cache\" ", kv->dump(), ")");
    core_.init(blob, blob.context_length, ar_);
    const auto& c = core_.config();
    row_ = c.num_hidden_layers * c.num_key_value_heads * c.head_dim;
    kv_.resize(static_cast<std::size_t>(2 * core_.ctx() * row_));
    cos_.resize(static_cast<std::size_t>(ar_ * c.head_dim));
    sin_.resize(cos_.size());
    ones_.assign(static_cast<std::size_t>(ar_), 1);
  }

  GraphContract contract() const override { return GraphContract::DecoderBlock; }
  std::vector<IoSpec> input_specs() const override {
    const auto& c = core_.config();
    const std::int64_t past = core_.ctx() - ar_, half = c.head_dim / 2;
    return {{"inputs_embeds", DType::F32, {ar_, c.hidden_size}},
            {"attention_mask", DType::F32, {ar_, core_.ctx()}},
            {"rope_cos", DType::F32, {ar_, half}},
            {"rope_sin", DType::F32, {ar_, half}},
            {"past_key", DType::F32, {past, c.num_hidden_layers, c.num_key_value_heads, c.head_dim}},
            {"past_value", DType::F32, {past, c.num_hidden_layers, c.num_key_value_heads, c.head_dim}},
            {"deepstack", DType::F32, {-1, ar_, c.hidden_size}}};
  }
  std::vector<IoSpec> output_specs() const override {
    const auto& c = core_.config();
    return {{"hidden", DType::F32, {ar_, c.hidden_size}},
            {"new_key", DType::F32, {ar_, c.num_hidden_layers, c.num_key_value_heads, c.head_dim}},
            {"new_value", DType::F32, {ar_, c.num_hidden_layers, c.num_key_value_heads, c.head_dim}}};
  }

  void execute(std::span<const TensorRef> in, std::span<const TensorRef> out) override {
    const auto ispecs = input_specs();
    const auto ospecs = output_specs();
    check_io(core_.name(), ispecs, in, "input");
    check_io(core_.name(), ospecs, out, "output");
    const auto& c = core_.config();
    const std::int64_t CL = core_.ctx(), hd = c.head_dim, half = hd / 2, H = c.hidden_size;
    const auto [T, V] = read_mask(in[1].as<const float>());
    const std::int64_t n_ds = in[6].shape[0];
    if (n_ds > c.num_hidden_layers) fail("graph \"", core_.name(), "\": more deepstack inputs than layers");
    // The valid past into the cache layout the layers use: [layers, 2, CL, kv_heads, head_dim].
    const std::int64_t per_layer = c.num_key_value_heads * hd;
    auto cache_row = [&](std::int64_t layer, int kv, std::int64_t pos) {
      return kv_.data() + ((layer * 2 + kv) * CL + pos) * per_layer;
    };
    for (int kv = 0; kv < 2; ++kv) {
      const float* src = in[4 + kv].as<const float>();
      for (std::int64_t p = 0; p < V; ++p)
        for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
          std::copy_n(src + p * row_ + l * per_layer, per_layer, cache_row(l, kv, p));
    }
    for (std::int64_t t = 0; t < T; ++t)  // the rope tables' halves are equal (rotate_half)
      for (std::int64_t k = 0; k < hd; ++k) {
        cos_[static_cast<std::size_t>(t * hd + k)] = in[2].as<const float>()[t * half + k % half];
        sin_[static_cast<std::size_t>(t * hd + k)] = in[3].as<const float>()[t * half + k % half];
      }
    // The layers take DeepStack as [n_ds, T, H]; the contract's is [n_ds, AR, H].
    const float* ds = in[6].as<const float>();
    if (T < ar_ && n_ds > 1) {
      ds_.resize(static_cast<std::size_t>(n_ds * T * H));
      for (std::int64_t d = 0; d < n_ds; ++d) std::copy_n(ds + d * ar_ * H, T * H, ds_.data() + d * T * H);
      ds = ds_.data();
    }
    float* hidden = out[0].as<float>();
    std::fill_n(hidden, ar_ * H, 0.0f);
    core_.forward(in[0].as<const float>(), T, V, cos_.data(), sin_.data(), reinterpret_cast<std::byte*>(kv_.data()), ds,
                  n_ds, ones_.data(), hidden);
    for (int kv = 0; kv < 2; ++kv) {
      float* dst = out[1 + kv].as<float>();
      std::fill_n(dst, ar_ * row_, 0.0f);
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
          std::copy_n(cache_row(l, kv, V + t), per_layer, dst + t * row_ + l * per_layer);
    }
  }

 private:
  // The mask's valid rows T and valid past V: rows 0..T-1 each attend past
  // columns [0, V) and block columns [0, row]; rows T.. attend nothing.
  std::pair<std::int64_t, std::int64_t> read_mask(const float* mask) const {
    const std::int64_t CL = core_.ctx(), past = CL - ar_;
    auto attends = [&](std::int64_t r, std::int64_t col) {
      const float m = mask[r * CL + col];
      if (m == 0.0f) return true;
      if (m <= kMasked) return false;
      fail("graph \"", core_.name(), "\": attention_mask[", r, "][", col, "] is ", m,
           "; this graph takes 0 (attend) or <= ", kMasked, " (masked)");
    };
    std::int64_t T = 0;
    while (T < ar_ && attends(T, past + T)) ++T;
    if (T == 0) fail("graph \"", core_.name(), "\": attention_mask: row 0 does not attend to itself (no token to run)");
    std::int64_t V = 0;
    while (V < past && attends(0, V)) ++V;
    for (std::int64_t r = 0; r < ar_; ++r)
      for (std::int64_t col = 0; col < CL; ++col) {
        const bool want = r < T && (col < past ? col < V : col - past <= r);
        if (attends(r, col) != want)
          fail("graph \"", core_.name(), "\": attention_mask[", r, "][", col, "] ", want ? "masks" : "attends",
               "; this graph takes a sequence's mask: ", V, " past rows, then causal over ", T,
               " tokens, then padding");
      }
    return {T, V};
  }

  static constexpr float kMasked = -1000.0f;
  DecoderCore core_;
  std::int64_t ar_ = 0, row_ = 0;  // row_: floats of one token's keys (or values) over all layers
  std::vector<float> kv_;          // [layers, 2, CL, kv_heads, head_dim]
  std::vector<float> cos_, sin_;   // [AR, head_dim]
  std::vector<float> ds_;          // [n_ds, T, hidden]: the block's DeepStack rows, packed
  std::vector<std::uint8_t> ones_;
};

}  // namespace

std::unique_ptr<Delegate> make_text_decoder() { return std::make_unique<TextDecoder>(); }
std::unique_ptr<Delegate> make_text_decoder_ar() { return std::make_unique<TextDecoderAr>(); }

}  // namespace qhx::qwen3vl
