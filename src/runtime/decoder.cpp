#include "runtime/decoder.hpp"

#include <algorithm>

#include "qhexrt/error.hpp"
#include "runtime/run_context.hpp"

namespace qhx {
namespace {

// The state contract: the graph's KV cache is the session's, whatever the graph calls it.
class StateDecoder final : public Decoder {
 public:
  explicit StateDecoder(Graph& llm) : Decoder(llm, llm.output("hidden").shape[1]) {
    for (const char* name : {"embeds", "positions", "start", "deepstack", "image_mask"}) (void)llm.input(name);
    for (const IoSpec& s : llm.inputs)
      if (s.role == IoRole::State) {
        if (state_ != nullptr)
          fail("graph \"", llm.name, "\": more than one state input; this runtime drives one KV cache");
        state_ = &s;
      }
    if (state_ == nullptr) fail("graph \"", llm.name, "\": no state input (a KV cache) to run a conversation over");
  }
  std::int64_t block() const override { return 0; }
  std::int64_t room() const override { return 0; }

  const float* run(KvManager& kv, const DecoderStep& s) override {
    const std::int64_t T = s.tokens, H = hidden_size_;
    std::int64_t start = s.start;
    // Buffers kept here: the decode loop allocates nothing once warm.
    if (hidden_.size() < static_cast<std::size_t>(T * H)) hidden_.resize(static_cast<std::size_t>(T * H));
    const std::uint8_t* mask = s.image_mask;
    if (mask == nullptr) {
      if (no_mask_.size() < static_cast<std::size_t>(T)) no_mask_.assign(static_cast<std::size_t>(T), 0);
      mask = no_mask_.data();
    }
    llm_.run({{"embeds", {DType::F32, {T, H}, const_cast<float*>(s.embeds)}},
              {"positions", {DType::I32, {3, T}, const_cast<std::int32_t*>(s.positions)}},
              {"start", {DType::I64, {1}, &start}},
              {state_->name, {state_->dtype, state_->shape, kv.state(llm_, *state_)}},
              {"deepstack", {DType::F32, {s.n_deepstack, T, H}, const_cast<float*>(s.deepstack)}},
              {"image_mask", {DType::U8, {T}, const_cast<std::uint8_t*>(mask)}}},
             {{"hidden", {DType::F32, {T, H}, hidden_.data()}}});
    return hidden_.data();
  }

 private:
  const IoSpec* state_ = nullptr;
  std::vector<float> hidden_;          // [T, H]
  std::vector<std::uint8_t> no_mask_;  // [T] zeros, for steps without images
};

// The block contract: the KV manager pads the step to the block and keeps the past.
class BlockDecoder final : public Decoder {
 public:
  BlockDecoder(Graph& llm, const ModelFamily& family)
      : Decoder(llm, llm.input("inputs_embeds").shape[1]), family_(family) {
    for (const char* name : {"inputs_embeds", "attention_mask", "rope_cos", "rope_sin", "past_key", "past_value"})
      (void)llm.input(name);
    for (const char* name : {"hidden", "new_key", "new_value"}) (void)llm.output(name);
    const IoSpec& pk = llm.input("past_key");
    block_ = llm.input("inputs_embeds").shape[0];
    past_ = pk.shape[0];
    half_ = llm.input("rope_cos").shape[1];
    if (half_ != family.rope_width())
      fail("graph \"", llm.name, "\": rope_cos rows of ", half_, " for a model whose rope tables are ",
           family.rope_width(), " wide");
    std::int64_t inner = 1;  // elements of one layer's keys of one token
    for (std::size_t d = 2; d < pk.shape.size(); ++d) inner *= pk.shape[d];
    // The cache in the graph's own layout when it takes fp16 in place (an NPU graph): one
    // slab per group of layers it runs together; else f32 rows, converted per call.
    if (pk.f16 && !pk.layer_groups.empty() && llm.output("new_key").f16) {
      layout_.dtype = DType::F16;
      for (const auto layers : pk.layer_groups) layout_.widths.push_back(layers * inner);
    } else {
      layout_.widths = {pk.shape.size() > 1 ? pk.shape[1] * inner : inner};
    }
    mask_dtype_ = llm.input("attention_mask").f16 ? DType::F16 : DType::F32;
    deepstack_ = llm.has_input("deepstack") ? &llm.input("deepstack") : nullptr;
  }
  std::int64_t block() const override { return block_; }
  std::int64_t room() const override { return past_; }

  const float* run(KvManager& kv, const DecoderStep& s) override {
    const std::int64_t T = s.tokens, AR = block_, H = hidden_size_, CL = past_ + AR;
    if (T > AR) fail("graph \"", llm_.name, "\": ", T, " tokens for a block of ", AR);
    if (s.start > past_)
      fail("graph \"", llm_.name, "\": ", s.start, " tokens are cached, but a block of ", AR, " in a context of ", CL,
           " has room for a past of ", past_, " (a smaller block continues from there)");
    const KvManager::BlockCache cache = kv.block_cache(CL, layout_);
    if (no_mask_.size() < static_cast<std::size_t>(T)) no_mask_.assign(static_cast<std::size_t>(T), 0);
    const std::uint8_t* mask = s.image_mask != nullptr ? s.image_mask : no_mask_.data();
    BlockInputs& b = kv.prepare_block(family_, AR, past_, H, half_, cache, mask_dtype_, s.embeds, s.positions, T,
                                      s.start, s.deepstack, s.n_deepstack, mask);
    const std::vector<std::int64_t>& past_shape = llm_.input("past_key").shape;
    const std::vector<std::int64_t>& new_shape = llm_.output("new_key").shape;
    const DType kv_dtype = layout_.dtype;
    const std::int64_t slab = kv_dtype == DType::F16 ? CL : 0, new_slab = kv_dtype == DType::F16 ? AR : 0;
    std::vector<Binding> ins{{"inputs_embeds", {DType::F32, {AR, H}, b.embeds.data()}},
                             {"attention_mask", {mask_dtype_, {AR, CL}, const_cast<void*>(b.mask)}},
                             {"rope_cos", {DType::F32, {AR, half_}, b.cos.data()}},
                             {"rope_sin", {DType::F32, {AR, half_}, b.sin.data()}},
                             {"past_key", {kv_dtype, past_shape, cache.keys, slab}},
                             {"past_value", {kv_dtype, past_shape, cache.values, slab}}};
    // A decode block graph (AR 1) has no DeepStack input: its tokens are generated text.
    if (deepstack_ != nullptr) {
      const std::int64_t want = deepstack_->shape[0] < 0 ? s.n_deepstack : deepstack_->shape[0];
      if (s.n_deepstack > want)
        fail("graph \"", llm_.name, "\": ", s.n_deepstack, " DeepStack layers for a graph that takes ", want);
      b.deepstack.resize(static_cast<std::size_t>(want * AR * H), 0.0f);
      ins.push_back({"deepstack", {DType::F32, {want, AR, H}, b.deepstack.data()}});
    } else if (s.n_deepstack > 0 && std::any_of(mask, mask + T, [](std::uint8_t m) { return m != 0; })) {
      fail("graph \"", llm_.name, "\" takes no DeepStack features, but its block holds image tokens ",
           "(image tokens go through the prefill graph)");
    }
    const Binding out[] = {{"hidden", {DType::F32, {AR, H}, b.hidden.data()}},
                           {"new_key", {kv_dtype, new_shape, b.new_keys.data(), new_slab}},
                           {"new_value", {kv_dtype, new_shape, b.new_values.data(), new_slab}}};
    const std::uint64_t before = llm_.delegate->boundary_bytes();
    llm_.run(ins, out);
    BlockStats& stats = kv.block_stats();
    stats.host_bytes += llm_.delegate->boundary_bytes() - before;
    ++stats.calls;
    stats.padded_tokens += AR - T;
    kv.write_block_rows(cache, AR, s.start, T);
    return b.hidden.data();
  }

 private:
  const ModelFamily& family_;
  std::int64_t block_ = 0, past_ = 0, half_ = 0;
  BlockLayout layout_;
  DType mask_dtype_ = DType::F32;
  const IoSpec* deepstack_ = nullptr;
  std::vector<std::uint8_t> no_mask_;  // [T] zeros, for steps without images
};

}  // namespace

std::unique_ptr<Decoder> Decoder::of(Graph& llm, const ModelFamily& family) {
  switch (llm.contract) {
    case GraphContract::DecoderState: return std::make_unique<StateDecoder>(llm);
    case GraphContract::DecoderBlock: return std::make_unique<BlockDecoder>(llm, family);
    case GraphContract::Plain: break;
  }
  fail("graph \"", llm.name, "\" is not a language model: its kind declares neither decoder contract ",
       "(docs/manifest.md, \"Decoder contracts\")");
}

void check_lm_head(const Graph& lm_head) {
  (void)lm_head.input("x");
  (void)lm_head.output("y");
}

void run_decoder_step(Decoder& decoder, Graph& lm_head, KvManager& kv, const DecoderStep& step,
                      std::vector<float>& out) {
  const float* hidden = decoder.run(kv, step);
  const std::int64_t rows = std::min(step.logit_rows, step.tokens);
  if (rows <= 0) return;  // a chunk before the prompt's last: the lm-head is not run
  const std::int64_t H = decoder.hidden_size(), V = lm_head.output("y").shape[1];
  out.resize(static_cast<std::size_t>(rows * V));
  const std::uint64_t before = lm_head.delegate->boundary_bytes();
  lm_head.run({{"x", {DType::F32, {rows, H}, const_cast<float*>(hidden + (step.tokens - rows) * H)}}},
              {{"y", {DType::F32, {rows, V}, out.data()}}});
  kv.block_stats().host_bytes += lm_head.delegate->boundary_bytes() - before;
}

}  // namespace qhx
