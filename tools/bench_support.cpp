#include "bench_support.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>

#include "qhexrt/error.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx_bench {

namespace fs = std::filesystem;

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

std::pair<double, double> huge_mapped_mb() {
  std::ifstream in("/proc/self/smaps_rollup");
  if (!in) return {-1, -1};
  double file_kb = 0, anon_kb = 0;
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key) {
    if (key == "FilePmdMapped:" && in >> kb >> unit)
      file_kb = kb;
    else if (key == "AnonHugePages:" && in >> kb >> unit)
      anon_kb = kb;
  }
  return {file_kb / 1024.0, anon_kb / 1024.0};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) qhx::fail(p.string(), ": cannot open");
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    qhx::fail(p.string(), ": not JSON: ", e.what());
  }
}

std::optional<Roofline> load_roofline(const std::string& path) {
  if (path.empty() || !fs::exists(path)) return std::nullopt;
  Roofline r;
  r.raw = read_json(path);
  // The machine's limit: the better of one thread and all threads (on a busy or
  // bandwidth-bound machine all threads can measure below one).
  r.read_gbs = std::max(r.raw.value("read_gbs_all", 0.0), r.raw.value("read_gbs_1t", 0.0));
  r.fp32_gflops = std::max(r.raw.value("fp32_gflops_all", 0.0), r.raw.value("fp32_gflops_1t", 0.0));
  r.int8_gops = std::max(r.raw.value("int8_gops_all", 0.0), r.raw.value("int8_gops_1t", 0.0));
  r.threads = r.raw.value("threads", 0);
  if (r.read_gbs <= 0 || r.fp32_gflops <= 0) return std::nullopt;
  return r;
}

double speculation_speedup(double a, std::int64_t K, double step_ms, double plain_ms) {
  const double tokens =
      a >= 1.0 ? static_cast<double>(K + 1) : (1.0 - std::pow(a, static_cast<double>(K + 1))) / (1.0 - a);
  return tokens * plain_ms / step_ms;
}

bool graph_uses_int8(const fs::path& dir, const json& manifest, const std::string& graph, const std::string& probe) {
  const json& g = manifest.at("graphs").at(graph);
  // Absent, the key means "int8" from manifest version 2 on, "f32" before (docs/manifest.md).
  const std::string absent = manifest.value("qhexrt_manifest", 1) >= 2 ? "int8" : "f32";
  if (g.value("activations", absent) != "int8") return false;
  const qhx::Checkpoint ck = qhx::Checkpoint::open(dir / g.at("weights").get<std::string>());
  const qhx::TensorView* t = ck.find(probe);
  if (t == nullptr) t = ck.find(probe + ".panels");  // a w8 matrix in the panel form (bundle format 2)
  return t != nullptr && (t->dtype == qhx::DType::I8 || t->dtype == qhx::DType::U8);
}

}  // namespace qhx_bench
