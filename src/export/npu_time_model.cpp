#include "qhexrt/npu_time_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "qhexrt/error.hpp"

namespace qhx::npu {
namespace {

// The reference design on SM8750 (docs/qnn.md): W8A16, context 1,024, 512x512 images.
constexpr ReferenceMs kRef;
constexpr double kRefVisionMs = kRef.vision, kRefDecodeMs = kRef.decode, kRefLmHeadMs = kRef.lm_head;
constexpr std::int64_t kRefContext = 1024, kRefImage = 512;

// Counts of one model's graphs, per call, for a given weight format.
struct Shape {
  double dec_weights = 0, vis_weights = 0, head_weights = 0;  // matrix elements
  std::int64_t layers = 0, vis_layers = 0, kv_row = 0;        // kv_row: K+V elements per token over all layers
  double attn_macs_per_row_per_past = 0;                      // QK^T and AV over one past row
  std::int64_t hidden = 0;
};

Shape shape_of(const Qwen3VLConfig& cfg) {
  const auto& t = cfg.text;
  const auto& v = cfg.vision;
  const double H = static_cast<double>(t.hidden_size), I = static_cast<double>(t.intermediate_size);
  const double q = static_cast<double>(t.num_attention_heads * t.head_dim);
  const double kv = static_cast<double>(t.num_key_value_heads * t.head_dim);
  Shape s;
  s.layers = t.num_hidden_layers;
  s.dec_weights = static_cast<double>(s.layers) * (H * q + 2 * H * kv + q * H + 3 * H * I);
  s.head_weights = static_cast<double>(t.vocab_size) * H;
  const double Hv = static_cast<double>(v.hidden_size), Iv = static_cast<double>(v.intermediate_size);
  const double merged = Hv * static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  const double mergers = 1.0 + static_cast<double>(v.deepstack_visual_indexes.size());
  s.vis_layers = v.depth;
  s.vis_weights = static_cast<double>(v.depth) * (4 * Hv * Hv + 2 * Hv * Iv) +
                  mergers * (merged * merged + merged * static_cast<double>(v.out_hidden_size));
  s.kv_row = 2 * t.num_hidden_layers * t.num_key_value_heads * t.head_dim;
  s.attn_macs_per_row_per_past = 2.0 * static_cast<double>(s.layers) * q;
  s.hidden = t.hidden_size;
  return s;
}

// The vision graph's MACs for n patches: the matrices per patch, attention over all of
// them, the mergers per merged token.
double vision_macs(const Qwen3VLConfig& cfg, const Shape& s, double n) {
  const auto& v = cfg.vision;
  const double Hv = static_cast<double>(v.hidden_size);
  const double per_layer = 4 * Hv * Hv + 2 * Hv * static_cast<double>(v.intermediate_size);
  const double merge = static_cast<double>(v.spatial_merge_size * v.spatial_merge_size);
  const double matrices = static_cast<double>(v.depth) * per_layer;
  const double merger_w = s.vis_weights - matrices;
  return n * matrices + static_cast<double>(v.depth) * 2 * n * n * Hv + n / merge * merger_w;
}

double patches(const Qwen3VLConfig& cfg, std::int64_t image) {
  const double side = static_cast<double>(image / cfg.vision.patch_size);
  return side * side;
}

// Solves the SM8750 figures from the reference design's three measurements on the 2B:
// each measurement is linear in 1/bandwidth, the per-layer cost and 1/throughput.
SocFigures calibrate() {
  const Qwen3VLConfig c = reference_shapes();
  const Shape s = shape_of(c);
  const double kv = static_cast<double>(s.kv_row) * (kRefContext - 1) * 2;  // fp16 past
  const double n = patches(c, kRefImage);
  // rows: {bytes, layers, MACs} . {1/BW, layer, 1/TP} = ms
  const std::array<std::array<double, 4>, 3> a{{
      {s.head_weights, 0, s.head_weights, kRefLmHeadMs},
      {s.dec_weights + kv, static_cast<double>(s.layers),
       s.dec_weights + s.attn_macs_per_row_per_past * (kRefContext - 1), kRefDecodeMs},
      {s.vis_weights, static_cast<double>(s.vis_layers), vision_macs(c, s, n), kRefVisionMs},
  }};
  const auto det = [](const std::array<std::array<double, 3>, 3>& m) {
    return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
           m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  };
  std::array<std::array<double, 3>, 3> m{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) m[i][j] = a[i][j];
  const double d = det(m);
  std::array<double, 3> x{};
  for (int k = 0; k < 3; ++k) {
    auto mk = m;
    for (int i = 0; i < 3; ++i) mk[i][k] = a[i][3];
    x[k] = det(mk) / d;  // ms per byte, ms per layer, ms per MAC
  }
  return {"SM8750", 1e-6 / x[0], x[1], 1e-9 / x[2],
          "solved from the reference design on SM8750: vision 161 ms, decode 96 ms (context 1,024), int8 lm-head "
          "11 ms"};
}

}  // namespace

Qwen3VLConfig reference_shapes() {
  Qwen3VLConfig c;
  c.text.vocab_size = 151936, c.text.hidden_size = 2048, c.text.intermediate_size = 6144;
  c.text.num_hidden_layers = 28, c.text.num_attention_heads = 16, c.text.num_key_value_heads = 8;
  c.text.head_dim = 128;
  c.vision.depth = 24, c.vision.hidden_size = 1024, c.vision.intermediate_size = 4096, c.vision.patch_size = 16;
  c.vision.spatial_merge_size = 2, c.vision.out_hidden_size = 2048, c.vision.deepstack_visual_indexes = {5, 11, 17};
  return c;
}

const std::vector<SocFigures>& soc_figures() {
  static const std::vector<SocFigures> figures = [] {
    const SocFigures ref = calibrate();
    // Other SoCs: the bandwidth by LPDDR5X peak (SM8650 8,533 MT/s, SM8750 and SM8850 10,667
    // MT/s, 64-bit), the NPU by Qualcomm's stated generation gains (SM8750 +45% over
    // SM8650, SM8850 +37% over SM8750), the per-layer cost with the NPU.
    const auto scaled = [&](const char* soc, double bw, double npu, const char* basis) {
      return SocFigures{soc, ref.weight_gbs * bw, ref.layer_ms / npu, ref.tmacs * npu, basis};
    };
    return std::vector<SocFigures>{
        scaled("SM8650", 8533.0 / 10667.0, 1 / 1.45,
               "SM8750's, scaled: LPDDR5X 8,533 vs 10,667 MT/s; NPU 1/1.45 (Qualcomm: SM8750 +45%)"),
        ref,
        scaled("SM8850", 1.0, 1.37, "SM8750's, scaled: LPDDR5X 10,667 MT/s as SM8750; NPU x1.37 (Qualcomm: +37%)")};
  }();
  return figures;
}

const SocFigures& soc_figures(const std::string& soc) {
  for (const auto& f : soc_figures())
    if (f.soc == soc) return f;
  fail("the device time model knows SM8650, SM8750 and SM8850, not \"", soc, "\"");
}

double bytes_per_weight(const std::string& weights, std::int64_t w4_block) {
  if (weights == "w8") return 1.0;
  if (weights == "w4") return 0.5 + 2.0 / static_cast<double>(w4_block);
  fail("the device time model prices w8 or w4 weights, not \"", weights, "\"");
}

double block_knee(const Qwen3VLConfig& cfg, const std::string& soc, const std::string& weights) {
  const SocFigures& f = soc_figures(soc);
  const Shape s = shape_of(cfg);
  const double fixed_ms =
      s.dec_weights * bytes_per_weight(weights) / (f.weight_gbs * 1e6) + static_cast<double>(s.layers) * f.layer_ms;
  const double row_ms = s.dec_weights / (f.tmacs * 1e9);
  return fixed_ms / row_ms;
}

Prediction predict(const Qwen3VLConfig& cfg, const std::string& soc, const std::string& weights, const Blocks& b) {
  const SocFigures& f = soc_figures(soc);
  const Shape s = shape_of(cfg);
  const double bpw = bytes_per_weight(weights);
  const auto ms = [&](double bytes, double layers, double macs) {
    return bytes / (f.weight_gbs * 1e6) + layers * f.layer_ms + macs / (f.tmacs * 1e9);
  };
  Prediction p;
  p.soc = soc, p.weights = weights, p.context = b.context, p.verify_block = b.verify;
  const double n = patches(cfg, b.image_size);
  const double vm = vision_macs(cfg, s, n);
  p.graphs.push_back({"vision", static_cast<std::int64_t>(n), s.vis_weights * bpw, 0, vm,
                      ms(s.vis_weights * bpw, static_cast<double>(s.vis_layers), vm)});
  const auto block = [&](const char* name, std::int64_t rows) {
    const double past = static_cast<double>(b.context - rows);
    const double kv = static_cast<double>(s.kv_row) * past * 2;
    const double macs = static_cast<double>(rows) * (s.dec_weights + s.attn_macs_per_row_per_past * past);
    const double w = s.dec_weights * bpw;
    p.graphs.push_back({name, rows, w, kv, macs, ms(w + kv, static_cast<double>(s.layers), macs)});
    return p.graphs.back().ms;
  };
  block("prefill", b.prefill);
  if (b.short_chunk > 0) block("short", b.short_chunk);
  const double verify_ms = b.verify > 0 ? block("verify", b.verify) : 0;
  const double decode_ms = block("decode", 1);
  const double head_ms = ms(s.head_weights, 0, s.head_weights);  // int8 whatever the decoder's format
  p.graphs.push_back({"lm_head", 1, s.head_weights, 0, s.head_weights, head_ms});
  p.decode_ms_per_token = decode_ms + head_ms;
  if (b.verify > 0) {
    const double K = static_cast<double>(b.verify - 1);
    const double head_rows = ms(s.head_weights, 0, s.head_weights * (K + 1));
    for (const double a : {0.5, 0.7, 0.9}) {
      const double tokens = (1 - std::pow(a, K + 1)) / (1 - a);  // expected tokens per verify run
      p.acceptance.push_back(a);
      p.spec_ms_per_token.push_back((verify_ms + (K + 1) * head_ms) / tokens);
      p.spec_ms_per_token_batched_head.push_back((verify_ms + head_rows) / tokens);
    }
  }
  return p;
}

ContextMemory context_memory(const Qwen3VLConfig& cfg, const std::string& weights, const Blocks& b,
                             std::int64_t parts) {
  const Shape s = shape_of(cfg);
  const double layer_bytes = s.dec_weights * bytes_per_weight(weights);
  ContextMemory m;
  m.parts = parts > 0 ? parts : std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(layer_bytes / 400e6)));
  // The first parts hold one layer more when the layers do not divide evenly.
  const std::int64_t layers = (s.layers + m.parts - 1) / m.parts;
  const double share = static_cast<double>(layers) / static_cast<double>(s.layers);
  const double CL = static_cast<double>(b.context);
  m.weight_bytes = layer_bytes * share;
  m.kv_bytes = static_cast<double>(s.kv_row) * CL * 2 * share;
  for (const std::int64_t ar : {b.prefill, b.short_chunk, b.verify, std::int64_t{1}})
    if (ar > 0) m.mask_bytes += static_cast<double>(ar) * CL * 2;
  m.scores_bytes = static_cast<double>(b.prefill) * CL * static_cast<double>(cfg.text.num_attention_heads) * 2;
  return m;
}

}  // namespace qhx::npu
