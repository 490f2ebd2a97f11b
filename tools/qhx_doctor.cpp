// qhx_doctor [MANIFEST] [--json]: what this machine offers QHexRT (CPU features and the
// kernels chosen, threads, the QAIRT libraries and their versions) and, for a plan, what
// it needs (files, QNN context binaries against the plan and the libraries, memory) and, for
// a bundle, whether its files still match its checksums.json.
// Exit 0 when nothing is wrong, 1 with the problems listed, 2 on a usage error.
#include "cli/cli.hpp"
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <string>

#include "qhexrt/doctor.hpp"
#include "qhexrt/qhexrt.h"

namespace {

std::string join(const std::vector<std::string>& v, const char* sep = " ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string bytes_str(std::uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1ull << 30));
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1ull << 20));
  else if (b >= (1ull << 10))
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / (1ull << 10));
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

nlohmann::json to_json(const qhx::DoctorReport& r) {
  using nlohmann::json;
  const auto& c = r.cpu;
  json j = {{"version", qhx_version()},
            {"ok", r.ok()},
            {"problems", r.problems},
            {"warnings", r.warnings},
            {"cpu",
             {{"arch", c.arch},
              {"features", c.features},
              {"simd_targets", c.simd_targets},
              {"simd_target", c.simd_target},
              {"kernel_set", c.kernel_set},
              {"int8_kernel", c.int8_kernel},
              {"int8_kernels", c.int8_kernels},
              {"hardware_threads", c.hardware_threads},
              {"threads", c.threads}}}};
  const auto& q = r.qnn;
  json libs = json::array();
  for (const auto& l : q.libraries) libs.push_back({{"name", l.name}, {"path", l.path}, {"tried", l.tried}});
  j["qnn"] = {{"loaded", q.loaded},           {"error", q.error},
              {"search_dirs", q.search_dirs}, {"libraries", libs},
              {"build_id", q.build_id},       {"provider", q.provider},
              {"core_api", q.core_api},       {"backend_api", q.backend_api},
              {"system_api", q.system_api}};
  if (r.manifest) {
    const auto& m = *r.manifest;
    json graphs = json::array();
    for (const auto& g : m.graphs) {
      json bins = json::array();
      for (const auto& b : g.binaries) {
        json jb = {{"key", b.key},
                   {"path", b.path},
                   {"exists", b.exists},
                   {"bytes", b.bytes},
                   {"read", b.read},
                   {"error", b.error},
                   {"build_id", b.build_id},
                   {"soc_version", b.soc_version},
                   {"soc_model", b.soc_model},
                   {"graphs", b.graphs}};
        jb["soc_name"] = b.soc_name;
        jb["plan_soc_model"] = b.plan_soc_model ? json(*b.plan_soc_model) : json(nullptr);
        bins.push_back(std::move(jb));
      }
      graphs.push_back(
          {{"name", g.name}, {"backend", g.backend}, {"kind", g.kind}, {"files", g.files}, {"binaries", bins}});
    }
    const auto& mem = m.memory;
    j["manifest"] = {{"path", m.path},
                     {"name", m.name},
                     {"graphs", graphs},
                     {"memory",
                      {{"mapped_bytes", mem.mapped_bytes},
                       {"kv_cache_bytes", mem.kv_cache_bytes},
                       {"context_length", mem.context_length},
                       {"layers", mem.layers},
                       {"kv_heads", mem.kv_heads},
                       {"head_dim", mem.head_dim},
                       {"kv_value_bytes", mem.kv_value_bytes},
                       {"needed_bytes", mem.mapped_bytes + mem.kv_cache_bytes},
                       {"available_bytes", mem.available_bytes}}}};
    if (const auto& n = m.npu_context)
      j["manifest"]["npu_context"] = {{"per_context_bytes", n->per_context_bytes},
                                      {"binary_bytes", n->binary_bytes},
                                      {"kv_bytes", n->kv_bytes},
                                      {"limit_bytes", n->limit_bytes},
                                      {"context_length", n->context_length}};
  }
  if (r.bundle_files) {
    const auto& b = *r.bundle_files;
    j["bundle_files"] = {{"dir", b.dir},
                         {"has_checksums", b.has_checksums},
                         {"files", b.files},
                         {"problems", b.problems},
                         {"unlisted", b.unlisted}};
  }
  return j;
}

void print_text(const qhx::DoctorReport& r) {
  const auto& c = r.cpu;
  std::printf("qhx_doctor (QHexRT %s)\n\nCPU\n", qhx_version());
  std::printf("  arch            %s\n", c.arch.c_str());
  std::printf("  ISA features    %s\n", c.features.empty() ? "(none detected)" : join(c.features).c_str());
  std::printf("  SIMD targets    %s (Highway, best first)\n", join(c.simd_targets).c_str());
  std::printf("  kernels         %s, dispatched to %s\n", c.kernel_set.c_str(), c.simd_target.c_str());
  std::printf("  int8 kernel     %s (available: %s)\n", c.int8_kernel.c_str(), join(c.int8_kernels, ", ").c_str());
  std::printf("  threads         %d available, %d used by default\n", c.hardware_threads, c.threads);

  const auto& q = r.qnn;
  std::printf("\nQNN (QAIRT runtime libraries)\n");
  std::string dirs;
  for (const auto& d : q.search_dirs)
    dirs += (dirs.empty() ? "" : ", ") + (d.empty() ? std::string("(loader path)") : d);
  std::printf("  searched        %s\n", dirs.c_str());
  for (const auto& l : q.libraries) {
    if (!l.path.empty()) {
      std::printf("  %-15s %s\n", l.name.c_str(), l.path.c_str());
    } else {
      std::printf("  %-15s not found; tried:\n", l.name.c_str());
      for (const auto& t : l.tried) std::printf("                    %s\n", t.c_str());
    }
  }
  if (q.loaded) {
    std::printf("  QAIRT build     %s (provider %s)\n", q.build_id.c_str(), q.provider.c_str());
    std::printf("  API versions    core %s, HTP backend %s, System %s\n", q.core_api.c_str(), q.backend_api.c_str(),
                q.system_api.c_str());
  }

  if (r.manifest) {
    const auto& m = *r.manifest;
    std::printf("\nPlan %s%s\n", m.path.c_str(), m.name.empty() ? "" : (" (" + m.name + ")").c_str());
    for (const auto& g : m.graphs) {
      std::printf("  graph %-9s %s %s\n", g.name.c_str(), g.backend.c_str(), g.kind.c_str());
      for (const auto& f : g.files) std::printf("    file          %s\n", f.c_str());
      for (const auto& b : g.binaries) {
        std::printf("    %s %s%s\n", b.key.c_str(), b.path.c_str(),
                    b.exists ? (" (" + bytes_str(b.bytes) + ")").c_str() : " (missing)");
        if (b.read) {
          std::string plan = b.plan_soc_model ? "plan: " + std::to_string(*b.plan_soc_model) : "plan: not stated";
          const char* verdict = !b.plan_soc_model ? "" : *b.plan_soc_model == b.soc_model ? ", matches" : ", MISMATCH";
          std::printf("      SoC model   %u (%s%s%s; %s%s)\n", b.soc_model, b.soc_name.c_str(),
                      b.soc_version.empty() ? "" : ", ", b.soc_version.c_str(), plan.c_str(), verdict);
          std::printf("      QAIRT       %s\n", b.build_id.c_str());
          std::printf("      graphs      %s\n", join(b.graphs, ", ").c_str());
        }
      }
    }
    const auto& mem = m.memory;
    // A row of head_dim values; an 8-bit cache's rows carry their 4-byte scale too.
    const std::string row = mem.kv_value_bytes == 1
                                ? "(" + std::to_string(mem.head_dim) + " + 4) x 1 B"
                                : std::to_string(mem.head_dim) + " x " + std::to_string(mem.kv_value_bytes) + " B";
    std::printf(
        "  memory          needs %s: files %s + KV cache %s (%lld ctx x %lld layers x %lld kv heads x 2 x %s); "
        "available %s\n",
        bytes_str(mem.mapped_bytes + mem.kv_cache_bytes).c_str(), bytes_str(mem.mapped_bytes).c_str(),
        bytes_str(mem.kv_cache_bytes).c_str(), static_cast<long long>(mem.context_length),
        static_cast<long long>(mem.layers), static_cast<long long>(mem.kv_heads), row.c_str(),
        mem.available_bytes != 0 ? bytes_str(mem.available_bytes).c_str() : "unknown");
    if (const auto& n = m.npu_context)
      std::printf(
          "  NPU context     needs %s of a device's ~%s per process domain (binary %s + KV cache %s at context "
          "%lld, masks and scores)\n",
          bytes_str(n->per_context_bytes).c_str(), bytes_str(n->limit_bytes).c_str(),
          bytes_str(n->binary_bytes).c_str(), bytes_str(n->kv_bytes).c_str(),
          static_cast<long long>(n->context_length));
  }
  if (r.bundle_files) {
    const auto& b = *r.bundle_files;
    std::printf("\nBundle files %s\n", b.dir.c_str());
    if (b.problems.empty())
      std::printf("  checksums       %zu files match checksums.json (XXH3-128)\n", b.files);
    else
      std::printf("  checksums       %zu problem(s) in %zu files checked against checksums.json (below)\n",
                  b.problems.size(), b.files);
    if (!b.unlisted.empty()) std::printf("  not covered     %s\n", join(b.unlisted, ", ").c_str());
  }
  if (!r.warnings.empty()) {
    std::printf("\nWarnings\n");
    for (const auto& w : r.warnings) std::printf("  - %s\n", w.c_str());
  }
  if (!r.problems.empty()) {
    std::printf("\nProblems\n");
    for (const auto& p : r.problems) std::printf("  - %s\n", p.c_str());
  }
  std::printf("\n%s\n", r.ok() ? "OK" : (std::to_string(r.problems.size()) + " problem(s)").c_str());
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"Diagnose a QHexRT deployment: the CPU and kernels, the QAIRT libraries, and a plan's needs"};
  std::string manifest;
  bool json = false;
  app.add_option("manifest", manifest, "a manifest, bundle folder or checkpoint directory to check (optional)");
  app.add_flag("--json", json, "print one JSON object instead of text");
  if (const int rc = app.parse(argc, argv); rc >= 0) return rc == 0 ? 0 : 2;
  try {
    // (The QAIRT libraries' load banner goes to stderr: the runtime sends it there.)
    const qhx::DoctorReport r = qhx::diagnose(manifest);
    if (json)
      std::printf("%s\n", to_json(r).dump(2).c_str());
    else
      print_text(r);
    std::fflush(stdout);
    return r.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qhx_doctor: %s\n", e.what());
    return 1;
  }
}
