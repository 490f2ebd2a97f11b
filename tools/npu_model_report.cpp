#include "npu_model_report.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "qhexrt/error.hpp"
#include "qhexrt/hf_config.hpp"
#include "qhexrt/npu_time_model.hpp"

namespace qhx_bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A bundle's prepared blocks (qnn_graphs.json); the exporter's defaults for a checkpoint.
qhx::npu::Blocks blocks_of(const fs::path& dir, std::string& weights) {
  qhx::npu::Blocks b;
  const fs::path desc_path = dir / "qnn_graphs.json";
  if (!fs::exists(desc_path)) return b;
  std::ifstream in(desc_path);
  const json d = json::parse(in, nullptr, false);
  if (d.is_discarded()) qhx::fail(desc_path.string(), ": not JSON");
  b.context = d.value("context_length", b.context);
  b.prefill = d.value("prefill_chunk", b.prefill);
  b.image_size = d.value("image_size", b.image_size);
  const json blocks = d.value("blocks", json::object());
  b.short_chunk = blocks.value("short", std::int64_t{0});
  b.verify = blocks.value("verify", std::int64_t{0});
  weights = d.value("weights", weights);
  return b;
}

json to_json(const qhx::npu::Prediction& p) {
  json graphs = json::array();
  for (const auto& g : p.graphs)
    graphs.push_back({{"graph", g.graph},
                      {"rows", g.rows},
                      {"weight_bytes", g.weight_bytes},
                      {"kv_bytes", g.kv_bytes},
                      {"macs", g.macs},
                      {"ms", g.ms}});
  return {{"soc", p.soc},
          {"weights", p.weights},
          {"context", p.context},
          {"graphs", graphs},
          {"decode_ms_per_token", p.decode_ms_per_token},
          {"verify_block", p.verify_block},
          {"acceptance", p.acceptance},
          {"spec_ms_per_token", p.spec_ms_per_token},
          {"spec_ms_per_token_batched_head", p.spec_ms_per_token_batched_head}};
}

void print(const qhx::npu::Prediction& p) {
  std::printf("\n%s weights (lm-head int8), context %lld:\n", p.weights.c_str(), static_cast<long long>(p.context));
  std::printf("  %-8s %6s %11s %9s %10s %9s\n", "graph", "rows", "weights MB", "KV MB", "GMAC", "ms/call");
  for (const auto& g : p.graphs)
    std::printf("  %-8s %6lld %11.1f %9.1f %10.2f %9.1f\n", g.graph.c_str(), static_cast<long long>(g.rows),
                g.weight_bytes / 1e6, g.kv_bytes / 1e6, g.macs / 1e9, g.ms);
  std::printf("  decode: %.1f ms/token (%.1f tok/s)\n", p.decode_ms_per_token, 1000 / p.decode_ms_per_token);
  for (std::size_t i = 0; i < p.acceptance.size(); ++i)
    std::printf(
        "  speculation, %lld drafts, acceptance %.1f: %.1f ms/token (lm-head per row, as bundled), "
        "%.1f ms/token (one lm-head call over the rows)\n",
        static_cast<long long>(p.verify_block - 1), p.acceptance[i], p.spec_ms_per_token[i],
        p.spec_ms_per_token_batched_head[i]);
}

}  // namespace

int npu_model_report(const std::string& dir_arg, const std::string& soc, bool as_json) {
  const fs::path dir = dir_arg;
  const qhx::Qwen3VLConfig cfg = qhx::load_qwen3vl_config(dir / "config.json");
  std::string weights = "w8";
  const qhx::npu::Blocks blocks = blocks_of(dir, weights);
  const auto& f = qhx::npu::soc_figures(soc);
  // The calibration: the reference design's shapes and blocks on SM8750, against its measurements.
  const auto cal = qhx::npu::predict(qhx::npu::reference_shapes(), "SM8750", "w8", {320, 0, 0, 1024, 512});
  const qhx::npu::ReferenceMs measured;
  const auto ms_of = [](const qhx::npu::Prediction& p, const char* g) {
    for (const auto& c : p.graphs)
      if (c.graph == g) return c.ms;
    return 0.0;
  };
  const json calibration = {{"vision", {ms_of(cal, "vision"), measured.vision}},
                            {"decode", {ms_of(cal, "decode"), measured.decode}},
                            {"lm_head", {ms_of(cal, "lm_head"), measured.lm_head}}};
  json out = {
      {"soc", f.soc},
      {"figures", {{"weight_gbs", f.weight_gbs}, {"layer_ms", f.layer_ms}, {"tmacs", f.tmacs}, {"basis", f.basis}}},
      {"w8", to_json(qhx::npu::predict(cfg, soc, "w8", blocks))},
      {"w4", to_json(qhx::npu::predict(cfg, soc, "w4", blocks))},
      {"bundle_weights", weights},
      {"calibration", calibration}};
  if (as_json) {
    std::cout << out.dump() << std::endl;
    return 0;
  }
  std::printf("device time model for %s on %s: %.1f GB/s weight stream, %.2f ms per layer, %.2f TMAC/s\n  (%s)\n",
              dir.string().c_str(), f.soc.c_str(), f.weight_gbs, f.layer_ms, f.tmacs, f.basis.c_str());
  std::printf("this bundle's weights: %s; prefill %lld, short %lld, verify %lld rows\n", weights.c_str(),
              static_cast<long long>(blocks.prefill), static_cast<long long>(blocks.short_chunk),
              static_cast<long long>(blocks.verify));
  for (const char* w : {"w8", "w4"}) print(qhx::npu::predict(cfg, soc, w, blocks));
  std::printf(
      "\ncalibration (Qwen3-VL-2B shapes, SM8750, W8, 512x512, context 1,024), predicted / measured: "
      "vision %.1f / %.0f ms, decode graph %.1f / %.0f ms, lm-head %.1f / %.0f ms\n",
      ms_of(cal, "vision"), measured.vision, ms_of(cal, "decode"), measured.decode, ms_of(cal, "lm_head"),
      measured.lm_head);
  return 0;
}

}  // namespace qhx_bench
