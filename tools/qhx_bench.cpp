// qhx_bench — QHexRT's speed, measured through its own API (qhx::Pipeline), and
// as fractions of this machine's limits (scripts/bench.sh measures them once
// with the shared roofline tool and caches them as JSON).
//
//   qhx_bench [--bundle DIR] [--roofline FILE] [--runs N] [--quick] [--threads N] [--json]
//
// Figures, each the median of N runs:
//   vision_ms        vision encode of assets/sample.png at 512x512 (the VLM manifest)
//   ttft_ms          "Describe this image." with that image, request start to first token
//   prefill_tok_s    a raw prompt of exactly 320 tokens through the text manifest
//   decode ms/token  after a prompt of 512 and of 1,024 tokens, over forced decode steps,
//                    through the text plan with a larger context (PipelineOptions::context_length)
//   load_ms          Pipeline::open of the VLM manifest; peak_rss_mb (getrusage) once the
//                    caption runs are done (the decode sections' sessions add KV caches of their own);
//                    file_pages_2mib_mb / anon_pages_2mib_mb: memory mapped in 2 MiB pages during
//                    decode (/proc/self/smaps_rollup: FilePmdMapped, AnonHugePages)
//   long_context     with --long-context N, for the f16 and the 8-bit KV cache: prefill of an
//                    N-token prompt, decode at N and at 512 tokens of context, and decode's
//                    fraction of read bandwidth at N counting the weights and the cache rows
//                    a step reads (layers x 2 x kv_heads x N rows)
//                    (speed_vs_512: the median of per-run ratios, the two contexts run back to back)
//   verify_steps_512 per K in {2, 4, 8}: ms of one speculation step that verifies K drafts
//                    (forced tokens as the drafts, all accepted) against a plain decode step
//                    run just before it (the median of the runs' ratios), and the expected
//                    speed-up (1 - a^(K+1)) / (1 - a) · plain / step at acceptance rates
//                    a = 0.5, 0.7, 0.9 (random weights show no real acceptance)
//   adjacent fractions  decode at 512 and at N: also against the read bandwidth probed just
//                    before and just after each run's decode steps (`qhx_bench --bandwidth-probe`:
//                    the roofline's read figure, in a child process; the prompt is prefilled by a
//                    session's first turn, the steps decode in its second). The host's bandwidth
//                    for two threads flips between two levels on a shared host
//                    within seconds, so only runs whose two probes agree within 10% count
//                    (stable_runs), against the mean of their probes
// Fractions (n/a without the roofline file; a limit is the better of its 1-thread and
// all-threads figures):
//   decode_bw_fraction    = bytes of LLM + lm-head weights per token x tok/s / read bandwidth
//   prefill_flop_fraction = 2 * params_llm * tokens / prefill time / peak
//   vision_flop_fraction  = (2 * params_vision * patches + attention) / vision time / peak
// where peak is the int8 dot-product peak when the graph's matrices take the int8
// path (w8 weights, "activations": "int8", the default), else the fp32 FMA peak.
// Progress goes to stderr; stdout has the table, or with --json one JSON object.
#include "cli/cli.hpp"
#include "cli/model_flags.hpp"
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bandwidth_probe.hpp"
#include "bench_measure.hpp"
#include "bench_report.hpp"
#include "bench_support.hpp"
#include "npu_model_report.hpp"
#include "qhexrt/doctor.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/pipeline.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace qhx_bench;

namespace {

constexpr std::int64_t kPrefillTokens = 320;

struct Flags {
  std::string bundle, roofline, image = "assets/sample.png", npu_model, soc = "SM8750";
  int runs = 0;
  std::int64_t decode_steps = 0, long_context = 0;
  bool quick = false, as_json = false, bandwidth_probe = false;
  qhx_cli::RuntimeFlags runtime;  // --threads, --weights-in-memory, --image-cache-mb
};

std::string default_bundle() {
  const char* cache = std::getenv("QHX_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path base = cache && *cache ? fs::path(cache) : fs::path(home ? home : ".") / ".cache" / "qhexrt";
  return (base / "bundles" / "random_2b-w8").string();
}

// The bundle's one manifest of a kind (qhx::find_bundle_manifests: with or without images).
fs::path find_manifest(const fs::path& bundle, const std::string& kind) {
  const qhx::BundleManifests all = qhx::find_bundle_manifests(bundle);
  const auto& hits = kind == "vlm" ? all.vlm : all.text;
  if (hits.size() != 1) qhx::fail(bundle.string(), ": expected one ", kind, " manifest, found ", hits.size());
  return hits[0];
}

void add_flags(qhx_cli::App& app, Flags& f) {
  app.add_option("--bundle", f.bundle, "bundle directory (qhx_export output)");
  app.add_option("--roofline", f.roofline, "roofline JSON (scripts/bench.sh caches it); fractions are n/a without");
  app.add_option("--image", f.image, "image for the vision and TTFT figures");
  app.add_option("--runs", f.runs, "runs per figure (median); default 3, 1 with --quick")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("--decode-steps", f.decode_steps, "forced decode steps per decode figure; default 16, 4 with --quick")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("--long-context", f.long_context,
                 "also prefill an N-token prompt and decode at N tokens of context, with the f16 and the 8-bit KV "
                 "cache (e.g. 4096; 0, the default: skip)")
      ->check(qhx_cli::NonNegativeNumber);
  app.add_option("--npu-model", f.npu_model,
                 "only print the device time model for DIR (a qnn-htp bundle, or any directory with a Qwen3-VL "
                 "config.json): per graph call its weight bytes, MACs and predicted ms on --soc, ms per token for "
                 "W8 and W4 with and without speculation (docs/qnn.md)");
  app.add_option("--soc", f.soc, "with --npu-model: SM8650, SM8750 (default) or SM8850")
      ->check(qhx_cli::IsMember({"SM8650", "SM8750", "SM8850"}));
  app.add_flag("--quick", f.quick, "one run per figure and fewer decode steps");
  app.add_flag("--json", f.as_json, "print one JSON object");
  f.runtime.add_to(app);
  app.add_flag("--bandwidth-probe", f.bandwidth_probe,
               "only measure the read bandwidth now with --threads threads and print GB/s (what the decode "
               "figures are also compared with, run just before and after each)");
}

BenchSetup setup_from(const Flags& f) {
  BenchSetup b;
  std::string warning;
  b.threads_used = qhx::set_threads(f.runtime.threads, &warning);
  if (!warning.empty()) std::fprintf(stderr, "qhx_bench: warning: %s\n", warning.c_str());
  b.dir = f.bundle;
  if (!fs::is_directory(b.dir)) qhx::fail(f.bundle, ": no such bundle directory (scripts/bench.sh builds one)");
  if (!fs::exists(f.image)) qhx::fail(f.image, ": no such image (run from the repository root, or give --image)");
  b.vlm_manifest = find_manifest(b.dir, "vlm");
  b.text_manifest = find_manifest(b.dir, "text");
  b.image = f.image;
  b.runs = f.runs != 0 ? f.runs : (f.quick ? 1 : 3);
  b.decode_steps = f.decode_steps != 0 ? f.decode_steps : (f.quick ? 4 : 16);
  b.options = f.runtime.pipeline_options();
  return b;
}

// What the runs measured, before medians and fractions.
struct Measured {
  CaptionFigures caption;
  double peak_rss_caption_mb = 0;  // before the decode sections
  std::vector<double> prefill_ms;
  DecodeFigures decode;
  json long_context = json::array();
};

json verification_json(const VerifyFigures& v) {
  json verify = json::array();
  for (std::size_t i = 0; i < v.step_ms.size(); ++i) {
    const std::int64_t K = kVerifyDrafts[i];
    json speedup = json::object();
    // The speed-up from the cost in plain steps: step_ms / plain_ms = cost_vs_plain.
    for (const double a : {0.5, 0.7, 0.9})
      speedup[std::to_string(a).substr(0, 3)] = speculation_speedup(a, K, v.cost_vs_plain[i], 1.0);
    verify.push_back({{"drafts", K},
                      {"step_ms", v.step_ms[i]},
                      {"plain_step_ms", v.plain_ms},
                      {"cost_vs_plain_step", v.cost_vs_plain[i]},
                      {"speedup_at_acceptance", speedup}});
  }
  return verify;
}

// The figures as one JSON object: medians, work done and fractions of the roofline's limits.
json figures(const Flags& flags, const BenchSetup& b, const ModelCost& c, Measured m,
             const std::optional<Roofline>& roof, double wall_s) {
  const double vis = median(m.caption.vision_ms), ttft = median(m.caption.ttft_ms), pre = median(m.prefill_ms);
  const double dec512 = median(m.decode.at512), dec1024 = median(m.decode.at1024);
  const double prefill_tok_s = kPrefillTokens / (pre / 1000.0);
  const double decode_tok_s = 1000.0 / dec512;
  const double merged = static_cast<double>(m.caption.image_tokens), patches = merged * c.merge * c.merge;
  const double vision_flops = 2 * c.params_vis_patch * patches + 2 * c.params_vis_merge * merged +
                              c.depth * 4 * patches * patches * c.vision_hidden;  // QK^T and AV over all patches
  const double prefill_flops = 2 * c.params_llm * static_cast<double>(kPrefillTokens);
  json frac_decode = nullptr, frac_prefill = nullptr, frac_vision = nullptr;
  const json text_m = read_json(b.text_manifest);
  const bool llm_int8 = graph_uses_int8(b.dir, text_m, "llm", "model.language_model.layers.0.mlp.up_proj.weight");
  const bool vis_int8 =
      graph_uses_int8(b.dir, read_json(b.vlm_manifest), "vision", "model.visual.blocks.0.mlp.linear_fc1.weight");
  const auto peak = [&](bool int8) {
    return (int8 && roof->int8_gops > 0 ? roof->int8_gops : roof->fp32_gflops) * 1e9;
  };
  if (roof) {
    frac_decode = c.bytes_per_token * decode_tok_s / (roof->read_gbs * 1e9);
    frac_prefill = prefill_flops / (pre / 1000.0) / peak(llm_int8);
    frac_vision = vision_flops / (vis / 1000.0) / peak(vis_int8);
  }
  const auto& adjacent = m.decode.at512_adjacent;
  json j = {
      {"bundle", fs::absolute(b.dir).string()},
      {"runs", b.runs},
      {"int8_kernel", qhx::diagnose().cpu.int8_kernel},
      {"threads", flags.runtime.threads},
      {"weights_in_memory", b.options.weights_in_memory},
      {"threads_used", b.threads_used},
      {"decode_steps", b.decode_steps},
      {"vision_ms", vis},
      {"image_tokens", m.caption.image_tokens},
      {"vision_gflop", vision_flops / 1e9},
      {"vision_flop_fraction", frac_vision},
      {"vision_peak", vis_int8 ? "int8" : "fp32"},
      {"ttft_ms", ttft},
      {"prefill_tokens", kPrefillTokens},
      {"prefill_ms", pre},
      {"prefill_tok_s", prefill_tok_s},
      {"prefill_gflop", prefill_flops / 1e9},
      {"prefill_flop_fraction", frac_prefill},
      {"prefill_peak", llm_int8 ? "int8" : "fp32"},
      {"decode_ms_per_token_512", dec512},
      {"decode_ms_per_token_1024", dec1024},
      {"decode_tok_s", decode_tok_s},
      {"decode_tok_s_1024", 1000.0 / dec1024},
      {"weight_bytes_per_token", c.bytes_per_token},
      {"decode_bw_fraction", frac_decode},
      {"decode_bw_fraction_adjacent", adjacent.empty() ? json(nullptr) : json(median(adjacent))},
      {"decode_stable_runs", adjacent.size()},
      {"load_ms", m.caption.load_ms},
      {"peak_rss_mb", m.peak_rss_caption_mb},
      {"file_pages_2mib_mb", m.decode.huge_pages.first},
      {"anon_pages_2mib_mb", m.decode.huge_pages.second},
      {"wall_s", wall_s},
  };
  j["verify_steps_512"] = verification_json(m.decode.verify);
  for (json& f : m.long_context)
    if (roof)
      f["bw_fraction"] = (c.bytes_per_token + f["kv_bytes_per_token"].get<double>()) /
                         (f["decode_ms_per_token"].get<double>() / 1000.0) / (roof->read_gbs * 1e9);
  if (!m.long_context.empty()) j["long_context"] = m.long_context;
  if (roof) {
    j["roofline"] = {{"threads", roof->threads},
                     {"read_gbs", roof->read_gbs},
                     {"fp32_gflops", roof->fp32_gflops},
                     {"int8_gops", roof->int8_gops}};
  }
  return j;
}

int run(const Flags& flags) {
  const BenchSetup b = setup_from(flags);
  const json text_m = read_json(b.text_manifest);
  const ModelCost cost =
      model_cost(b.dir, text_m, read_json(b.dir / text_m.value("config", std::string("config.json"))));
  const auto t_start = std::chrono::steady_clock::now();
  Measured m;
  m.caption = measure_caption(b);
  m.peak_rss_caption_mb = peak_rss_mb();
  m.prefill_ms = measure_prefill(b, kPrefillTokens);
  m.decode = measure_decode(b, cost);
  if (flags.long_context > 0)
    for (const std::string kv : {"f16", "i8"})
      m.long_context.push_back(measure_long_context(b, cost, flags.long_context, kv));
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  const auto roof = load_roofline(flags.roofline);
  const json j = figures(flags, b, cost, std::move(m), roof, wall_s);
  if (flags.as_json)
    std::cout << j.dump() << std::endl;
  else
    print_report(j, roof ? roof->raw.value("int8_isa", std::string("?")) : std::string());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"qhx_bench: QHexRT speed through its own API, and as fractions of the machine's limits"};
  Flags flags;
  flags.bundle = default_bundle();
  add_flags(app, flags);
  QHX_CLI_PARSE(app, argc, argv);
  if (flags.bandwidth_probe) {
    const int threads =
        flags.runtime.threads > 0 ? flags.runtime.threads : static_cast<int>(std::thread::hardware_concurrency());
    std::printf("%.3f\n", measure_read_bandwidth(threads));
    return 0;
  }
  try {
    if (!flags.npu_model.empty()) return npu_model_report(flags.npu_model, flags.soc, flags.as_json);
    return run(flags);
  } catch (const std::exception& e) {
    std::cerr << "qhx_bench: error: " << e.what() << std::endl;
    return 1;
  }
}
