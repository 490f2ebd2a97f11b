// bench_block_host — what a decode step of an NPU block decoder costs the host, apart from
// the graph calls: the KV manager's inputs, mask and new rows, and the conversions the
// qnn-htp backend makes at the graph boundary (f32 <-> fp16 of the inputs bound by copy,
// the hidden row and the lm-head's logits). The graphs are stand-ins that compute nothing,
// with the qnn-htp decoder's contract at Qwen3-VL-2B shapes: 28 layers in 4 parts, 8 KV
// heads of 128, hidden 2,048, vocabulary 151,936, fp16 tensors, the KV cache bound in place.
//
//   bench_block_host [--context 4096] [--steps 200] [--json]
//
// Prints the median and worst host time per decode step at the end of the context, its host
// bytes, and for comparison the time to convert the whole past f32 -> fp16 once (what a
// step cost the host before the cache was bound in place). Figures, not a test.
#include "cli/cli.hpp"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include "backends/delegate.hpp"
#include "common/half.hpp"
#include "models/model_family.hpp"
#include "qhexrt/hf_config.hpp"
#include "qhexrt/npu_time_model.hpp"
#include "qwen3vl/family.hpp"
#include "runtime/decoder.hpp"
#include "runtime/run_context.hpp"

namespace {

using namespace qhx;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kLayers = 28, kParts = 4, kKvHeads = 8, kHeadDim = 128, kHidden = 2048, kVocab = 151936;

// Converts what the qnn-htp backend converts (f32 bindings of fp16 tensors) and leaves the
// fp16 bindings in place, as it does; computes nothing.
class BoundaryOnly final : public Delegate {
 public:
  BoundaryOnly(std::vector<IoSpec> in, std::vector<IoSpec> out, GraphContract c)
      : in_(std::move(in)), out_(std::move(out)), contract_(c) {}
  void init(const GraphBlob&) override {}
  std::vector<IoSpec> input_specs() const override { return in_; }
  std::vector<IoSpec> output_specs() const override { return out_; }
  GraphContract contract() const override { return contract_; }
  std::uint64_t boundary_bytes() const override { return moved_; }
  void execute(std::span<const TensorRef> in, std::span<const TensorRef> out) override {
    for (const auto& t : in) convert(t, true);
    for (const auto& t : out) convert(t, false);
  }

 private:
  void convert(const TensorRef& t, bool input) {
    if (t.dtype != DType::F32) return;  // fp16: the graph's own buffer
    const auto n = static_cast<std::size_t>(t.numel());
    staging_.resize(std::max(staging_.size(), n));
    auto* f = static_cast<float*>(t.data);
    if (input)
      for (std::size_t i = 0; i < n; ++i) staging_[i] = f32_to_f16(f[i]);
    else
      for (std::size_t i = 0; i < n; ++i) f[i] = f16_to_f32(staging_[i]);
    moved_ += 6 * n;
  }
  std::vector<IoSpec> in_, out_;
  GraphContract contract_;
  std::vector<std::uint16_t> staging_;
  std::uint64_t moved_ = 0;
};

IoSpec f16_spec(std::string name, std::vector<std::int64_t> shape, bool kv = false) {
  IoSpec s(std::move(name), DType::F32, std::move(shape));
  s.f16 = true;
  if (kv) s.layer_groups.assign(kParts, kLayers / kParts);
  return s;
}

Graph make_graph(const std::string& name, std::vector<IoSpec> in, std::vector<IoSpec> out, GraphContract c) {
  Graph g;
  g.name = name;
  g.delegate = std::make_unique<BoundaryOnly>(in, out, c);
  g.inputs = std::move(in);
  g.outputs = std::move(out);
  for (IoSpec& s : g.outputs) s.role = IoRole::Output;
  g.contract = c;
  return g;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"bench_block_host: host time per decode step of an NPU block decoder at 2B shapes"};
  std::int64_t context = 4096, steps = 200;
  bool as_json = false;
  app.add_option("--context", context, "context length CL (default 4096)")->check(qhx_cli::Range(512, 1 << 17));
  app.add_option("--steps", steps, "decode steps timed, at the end of the context (default 200)")
      ->check(qhx_cli::Range(1, 400));
  app.add_flag("--json", as_json, "print one JSON object");
  QHX_CLI_PARSE(app, argc, argv);
  try {
    Qwen3VLConfig cfg = npu::reference_shapes();
    cfg.text.rope_theta = 5000000, cfg.text.mrope_section = {24, 20, 20}, cfg.text.max_position_embeddings = 262144;
    cfg.vision.num_heads = 16, cfg.vision.in_channels = 3, cfg.vision.temporal_patch_size = 2;
    cfg.vision.num_position_embeddings = 2304;
    const auto family = std::make_unique<qwen3vl::Family>(cfg);
    const std::int64_t CL = context, half = kHeadDim / 2;
    const std::vector<std::int64_t> past{CL - 1, kLayers, kKvHeads, kHeadDim}, row{1, kLayers, kKvHeads, kHeadDim};
    Graph decode = make_graph(
        "decode",
        {f16_spec("inputs_embeds", {1, kHidden}), f16_spec("attention_mask", {1, CL}), f16_spec("rope_cos", {1, half}),
         f16_spec("rope_sin", {1, half}), f16_spec("past_key", past, true), f16_spec("past_value", past, true)},
        {f16_spec("hidden", {1, kHidden}), f16_spec("new_key", row, true), f16_spec("new_value", row, true)},
        GraphContract::DecoderBlock);
    Graph head =
        make_graph("lm_head", {f16_spec("x", {-1, kHidden})}, {f16_spec("y", {-1, kVocab})}, GraphContract::Plain);
    auto decoder = Decoder::of(decode, *family);
    KvManager kv;
    std::vector<float> embeds(kHidden, 0.5f), logits;
    std::vector<double> us;
    std::uint64_t bytes = 0;
    for (std::int64_t i = 0; i < steps + 1; ++i) {
      const std::int64_t p = CL - 1 - steps + i - 1;
      const std::int32_t pos[3] = {static_cast<std::int32_t>(p), static_cast<std::int32_t>(p),
                                   static_cast<std::int32_t>(p)};
      const DecoderStep step{.embeds = embeds.data(), .positions = pos, .tokens = 1, .start = p, .logit_rows = 1};
      const std::uint64_t b0 = kv.block_stats().host_bytes;
      const auto t0 = Clock::now();
      run_decoder_step(*decoder, head, kv, step, logits);
      const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (i == 0) continue;  // the first step builds the mask of its block size once
      us.push_back(t);
      bytes = kv.block_stats().host_bytes - b0;
    }
    // Before: every step converted the whole past (keys and values) f32 -> fp16.
    const auto n_past = static_cast<std::size_t>((CL - 1) * kLayers * kKvHeads * kHeadDim * 2);
    std::vector<float> f(n_past, 0.25f);
    std::vector<std::uint16_t> h(n_past);
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < n_past; ++i) h[i] = f32_to_f16(f[i]);
    const double old_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const double med = median(us), worst = *std::max_element(us.begin(), us.end());
    if (as_json) {
      std::cout << nlohmann::json{{"context", CL},
                                  {"steps", steps},
                                  {"median_us", med},
                                  {"max_us", worst},
                                  {"host_bytes_per_step", bytes},
                                  {"whole_past_conversion_ms", old_ms}}
                       .dump()
                << std::endl;
    } else {
      std::printf("context %lld, 2B shapes (28 layers in 4 parts), %lld decode steps at its end:\n",
                  static_cast<long long>(CL), static_cast<long long>(steps));
      std::printf("  host time per decode step outside the graphs: median %.1f us, worst %.1f us\n", med, worst);
      std::printf("  host bytes per decode step: %llu (of which the lm-head's logits %lld)\n",
                  static_cast<unsigned long long>(bytes), static_cast<long long>(6 * kVocab));
      std::printf("  for comparison, converting the whole past f32 -> fp16 once: %.1f ms (%.0f MB of f32)\n", old_ms,
                  static_cast<double>(n_past) * 4 / 1e6);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_block_host: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
