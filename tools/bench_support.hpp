// What qhx_bench measures beside the pipeline: this process's memory, the
// machine's limits (the roofline tool's JSON), medians, speculation's expected
// speed-up, and whether a graph runs on the int8 path.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qhx_bench {

using nlohmann::json;

double peak_rss_mb();  // this process's peak resident set, MB

// MB of this process's memory mapped in 2 MiB pages: file pages (the weights'
// mappings, when the page cache holds them in 2 MiB folios: mapped_file.cpp)
// and anonymous ones (weights read into memory, KV caches). -1 where
// /proc/self/smaps_rollup cannot be read.
std::pair<double, double> huge_mapped_mb();

double median(std::vector<double> v);

json read_json(const std::filesystem::path& p);  // throws qhx::Error naming the file

struct Roofline {
  double read_gbs = 0, fp32_gflops = 0, int8_gops = 0;
  int threads = 0;
  json raw;
};

// The roofline tool's JSON at `path`; nullopt when there is none (or no usable figures).
std::optional<Roofline> load_roofline(const std::string& path);

// Draft lengths K whose verification step (K drafts checked in one pass) is timed.
inline constexpr std::int64_t kVerifyDrafts[] = {2, 4, 8};

// Expected speed-up of greedy speculation with K drafts over plain decode when each
// draft is accepted with probability a (independently): a step then emits
// (1 - a^(K+1)) / (1 - a) tokens at cost step_ms, against one token per plain_ms.
double speculation_speedup(double a, std::int64_t K, double step_ms, double plain_ms);

// Whether a CPU graph of `manifest` multiplies int8 by int8: its weights file
// stores `probe` as I8 (w8) or U8 (w4) and the entry keeps the default "activations": "int8".
bool graph_uses_int8(const std::filesystem::path& dir, const json& manifest, const std::string& graph,
                     const std::string& probe);

}  // namespace qhx_bench
