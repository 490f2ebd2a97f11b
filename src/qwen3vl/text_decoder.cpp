#include "qwen3vl/text_decoder.hpp"

#include <cmath>
#include <cstring>
#include <optional>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/kernel_plan.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "common/debug_dump.hpp"
#include "nn/attention.hpp"
#include "nn/mlp.hpp"
#include "nn/rope.hpp"
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

class TextDecoder final : public Delegate {
 public:
  void init(const GraphBlob& blob) override;
  std::vector<IoSpec> input_specs() const override;
  std::vector<IoSpec> output_specs() const override;
  void execute(std::span<const TensorRef> inputs, std::span<const TensorRef> outputs) override;

 private:
  std::string name_;
  Qwen3VLTextConfig cfg_;
  std::int64_t ctx_ = 0, max_t_ = 0;
  bool kv_f16_ = false;  // "kv_cache": "f16"
  std::optional<Checkpoint> ckpt_;  // mapped; the weights below point into it
  std::vector<Layer> layers_;
  std::vector<float> final_norm_;  // [hidden]
  std::vector<float> inv_freq_;    // [head_dim / 2]
  std::vector<std::uint8_t> axes_;
  const cpu::KernelSet* k_ = &cpu::active_kernels();

  // Workspace, sized once for max_t_ tokens.
  std::vector<float> h_, x_, cos_, sin_;  // h_: residual [T, hidden]; x_: normed; cos/sin [T, head_dim]
  nn::AttentionScratch attn_scratch_;
  nn::SwiGluScratch mlp_scratch_;
};

void TextDecoder::init(const GraphBlob& blob) {
  name_ = blob.name;
  cfg_ = load_qwen3vl_config(blob_file(blob, "config")).text;
  ckpt_.emplace(Checkpoint::open(blob_file(blob, "weights")));
  const Checkpoint& ck = *ckpt_;
  ctx_ = blob.context_length;
  max_t_ = blob.max_tokens_per_call;
  if (ctx_ <= 0 || max_t_ <= 0) fail("graph \"", name_, "\": context length and prefill chunk must be positive");
  if (const auto it = blob.spec.find("kv_cache"); it != blob.spec.end()) {
    if (!it->is_string() || (*it != "f32" && *it != "f16"))
      fail("graph \"", name_, "\": \"kv_cache\" must be \"f32\" or \"f16\", not ", it->dump());
    kv_f16_ = *it == "f16";
  }

  const std::int64_t hidden = cfg_.hidden_size, hd = cfg_.head_dim, hq = cfg_.num_attention_heads,
                     hkv = cfg_.num_key_value_heads, inter = cfg_.intermediate_size;
  const std::string p = "model.language_model.";
  const cpu::KernelPlan plan = cpu::kernel_plan(blob);
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
  cos_.resize(T * static_cast<std::size_t>(hd));
  sin_.resize(cos_.size());
  attn_scratch_ = nn::AttentionScratch(max_t_, hq, hkv, hd);
  mlp_scratch_ = nn::SwiGluScratch(max_t_, inter);
}

std::vector<IoSpec> TextDecoder::input_specs() const {
  const std::int64_t h = cfg_.hidden_size;
  return {{"embeds", DType::F32, {-1, h}},
          {"positions", DType::I32, {3, -1}},
          {"start", DType::I64, {1}},
          {"kv_cache", kv_f16_ ? DType::F16 : DType::F32,
           {cfg_.num_hidden_layers, 2, ctx_, cfg_.num_key_value_heads, cfg_.head_dim},
           IoRole::State},
          {"deepstack", DType::F32, {-1, -1, h}},
          {"image_mask", DType::U8, {-1}}};
}

std::vector<IoSpec> TextDecoder::output_specs() const { return {{"hidden", DType::F32, {-1, cfg_.hidden_size}}}; }

void TextDecoder::execute(std::span<const TensorRef> in, std::span<const TensorRef> out) {
  const auto ispecs = input_specs();
  const auto ospecs = output_specs();
  check_io(name_, ispecs, in, "input");
  check_io(name_, ospecs, out, "output");
  const std::int64_t T = in[0].shape[0];
  const std::int64_t start = in[2].as<std::int64_t>()[0];
  const std::int64_t hidden = cfg_.hidden_size;
  if (T < 1 || T > max_t_) fail("graph \"", name_, "\": ", T, " tokens in one call; the plan allows 1..", max_t_);
  if (in[1].shape[1] != T || out[0].shape[0] != T || in[5].shape[0] != T || in[4].shape[1] != T)
    fail("graph \"", name_, "\": positions, image_mask, deepstack and hidden must all have ", T, " tokens");
  if (start < 0 || start + T > ctx_)
    fail("graph \"", name_, "\": tokens ", start, "..", start + T - 1, " do not fit the context of ", ctx_);
  const std::int64_t n_deepstack = in[4].shape[0];
  if (n_deepstack > cfg_.num_hidden_layers) fail("graph \"", name_, "\": more deepstack inputs than layers");

  float* h = h_.data();
  std::memcpy(h, in[0].data, static_cast<std::size_t>(T * hidden) * sizeof(float));
  debug::dump("hidden.embed", h, {T, hidden});
  nn::mrope_cos_sin(in[1].as<std::int32_t>(), T, inv_freq_, axes_, cos_.data(), sin_.data());

  const auto* mask = in[5].as<std::uint8_t>();
  const auto* deepstack = in[4].as<const float>();
  auto* kv = in[3].as<std::byte>();
  const std::int64_t kv_layer = 2 * ctx_ * cfg_.num_key_value_heads * cfg_.head_dim;  // elements
  const std::int64_t kv_size = kv_f16_ ? 2 : 4;  // bytes per element
  const nn::AttentionShape shape{cfg_.num_attention_heads, cfg_.num_key_value_heads, cfg_.head_dim,
                                 static_cast<float>(cfg_.rms_norm_eps)};
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const auto li = static_cast<std::int64_t>(l);
    std::byte* k_cache = kv + li * kv_layer * kv_size;
    const nn::KvCache cache{k_cache, k_cache + kv_layer / 2 * kv_size, kv_f16_};
    k_->rms_norm(h, L.input_norm.data(), T, hidden, static_cast<float>(cfg_.rms_norm_eps), x_.data());
    nn::self_attention(*k_, L.attn, shape, x_.data(), T, start, cos_.data(), sin_.data(), cache, attn_scratch_, h);
    k_->rms_norm(h, L.post_norm.data(), T, hidden, static_cast<float>(cfg_.rms_norm_eps), x_.data());
    nn::swiglu_mlp(*k_, L.mlp, x_.data(), T, mlp_scratch_, h);
    if (debug::dumping()) debug::dump("hidden.layer" + std::to_string(l), h, {T, hidden});
    if (li < n_deepstack) {  // DeepStack: visual features join the residual stream at image tokens
      const float* ds = deepstack + li * T * hidden;
      for (std::int64_t t = 0; t < T; ++t)
        if (mask[t] != 0) k_->add_inplace(h + t * hidden, ds + t * hidden, hidden);
    }
  }
  k_->rms_norm(h, final_norm_.data(), T, hidden, static_cast<float>(cfg_.rms_norm_eps), out[0].as<float>());
  debug::dump("hidden.final_norm", out[0].as<float>(), {T, hidden});
}

}  // namespace

std::unique_ptr<Delegate> make_text_decoder() { return std::make_unique<TextDecoder>(); }

}  // namespace qhx::qwen3vl
