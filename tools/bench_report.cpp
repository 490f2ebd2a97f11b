#include "bench_report.hpp"

#include <cstdint>
#include <cstdio>
#include <string>

namespace qhx_bench {

void print_report(const json& j, const std::string& int8_isa) {
  const int runs = j["runs"].get<int>();
  const auto frac = [](const json& v) {
    if (v.is_null()) return std::string("n/a");
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", v.get<double>());
    return std::string(b);
  };
  std::printf("qhx_bench: %s (median of %d run%s, %lld decode steps, threads %d, weights %s)\n",
              j["bundle"].get<std::string>().c_str(), runs, runs == 1 ? "" : "s",
              static_cast<long long>(j["decode_steps"].get<std::int64_t>()), j["threads_used"].get<int>(),
              j["weights_in_memory"].get<bool>() ? "read into memory" : "mapped");
  std::printf("  %-34s %10.1f ms   (%lld image tokens, %.1f GFLOP)   fraction of %s peak %s\n", "vision encode 512x512",
              j["vision_ms"].get<double>(), static_cast<long long>(j["image_tokens"].get<std::int64_t>()),
              j["vision_gflop"].get<double>(), j["vision_peak"].get<std::string>().c_str(),
              frac(j["vision_flop_fraction"]).c_str());
  std::printf("  %-34s %10.2f tok/s (%.1f ms)   fraction of %s peak %s\n", "prefill 320 tokens",
              j["prefill_tok_s"].get<double>(), j["prefill_ms"].get<double>(),
              j["prefill_peak"].get<std::string>().c_str(), frac(j["prefill_flop_fraction"]).c_str());
  std::printf(
      "  %-34s %10.2f ms/token (%.2f tok/s)   fraction of read bandwidth %s (of the bandwidth probed around "
      "the steps: %s, %lld of %d runs stable)\n",
      "decode at 512 context", j["decode_ms_per_token_512"].get<double>(), j["decode_tok_s"].get<double>(),
      frac(j["decode_bw_fraction"]).c_str(), frac(j["decode_bw_fraction_adjacent"]).c_str(),
      static_cast<long long>(j["decode_stable_runs"].get<std::int64_t>()), runs);
  std::printf("  %-34s %10.2f ms/token (%.2f tok/s)\n", "decode at 1024 context",
              j["decode_ms_per_token_1024"].get<double>(), j["decode_tok_s_1024"].get<double>());
  for (const auto& v : j["verify_steps_512"]) {
    const std::string what = "verify " + std::to_string(v["drafts"].get<std::int64_t>()) + " drafts, 512 context";
    std::printf(
        "  %-34s %10.2f ms/step (%.2fx a plain step, %.2f ms, run beside it)   speed-up at acceptance 0.5 / "
        "0.7 / 0.9: %.2f / %.2f / %.2f\n",
        what.c_str(), v["step_ms"].get<double>(), v["cost_vs_plain_step"].get<double>(),
        v["plain_step_ms"].get<double>(), v["speedup_at_acceptance"]["0.5"].get<double>(),
        v["speedup_at_acceptance"]["0.7"].get<double>(), v["speedup_at_acceptance"]["0.9"].get<double>());
  }
  for (const auto& f : j.value("long_context", json::array())) {
    const std::string kv = f["kv_cache"].get<std::string>(), n = std::to_string(f["context"].get<std::int64_t>());
    std::printf("  %-34s %10.2f tok/s (%.1f ms)\n", ("prefill " + n + " tokens, " + kv + " KV").c_str(),
                f["prefill_tok_s"].get<double>(), f["prefill_ms"].get<double>());
    const std::string around = f["read_gbs_adjacent"].is_null()
                                   ? std::string("n/a")
                                   : std::to_string(f["read_gbs_adjacent"].get<double>()).substr(0, 4) + " GB/s";
    std::printf(
        "  %-34s %10.2f ms/token (%.2f tok/s)   fraction of read bandwidth %s (of %s probed around "
        "the steps: %s, %lld of %d runs stable) (weights + %.1f MB of KV); %.3f of its speed at 512 (%.2f ms/token)\n",
        ("decode at " + n + " context, " + kv + " KV").c_str(), f["decode_ms_per_token"].get<double>(),
        1000.0 / f["decode_ms_per_token"].get<double>(), frac(f["bw_fraction"]).c_str(), around.c_str(),
        frac(f["bw_fraction_adjacent"]).c_str(), static_cast<long long>(f["stable_runs"].get<std::int64_t>()), runs,
        f["kv_bytes_per_token"].get<double>() / 1e6, f["speed_vs_512"].get<double>(),
        f["decode_ms_per_token_512"].get<double>());
  }
  std::printf("  %-34s %10.1f ms\n", "TTFT \"Describe this image.\" 512x512", j["ttft_ms"].get<double>());
  std::printf("  %-34s %10.1f ms\n", "load (VLM manifest)", j["load_ms"].get<double>());
  std::printf("  %-34s %10.1f MB\n", "peak RSS (caption runs)", j["peak_rss_mb"].get<double>());
  std::printf("  %-34s %10.1f MB\n", "weight bytes per decoded token", j["weight_bytes_per_token"].get<double>() / 1e6);
  std::printf("  %-34s %10.1f MB file, %.1f MB anonymous (during decode)\n", "mapped in 2 MiB pages",
              j["file_pages_2mib_mb"].get<double>(), j["anon_pages_2mib_mb"].get<double>());
  if (j.contains("roofline")) {
    const json& r = j["roofline"];
    std::printf("  machine (roofline, %d threads): read %.1f GB/s, fp32 %.1f GFLOP/s, int8 %.1f GOP/s (%s)\n",
                r["threads"].get<int>(), r["read_gbs"].get<double>(), r["fp32_gflops"].get<double>(),
                r["int8_gops"].get<double>(), int8_isa.c_str());
  } else
    std::printf("  machine limits: n/a (no roofline JSON; scripts/bench.sh measures them)\n");
  // Fractions of the int8 peak above 1 mean the products ran on a unit the
  // roofline does not measure (AMX tiles beside its AVX-512 VNNI peak).
  std::printf("  int8 kernel %s\n", j["int8_kernel"].get<std::string>().c_str());
  std::printf("  wall time %.1f s\n", j["wall_s"].get<double>());
}

}  // namespace qhx_bench
