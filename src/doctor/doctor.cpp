// qhx::diagnose (include/qhexrt/doctor.hpp): the machine, the QAIRT libraries and a
// plan's needs, gathered without loading the plan (no weights are mapped).
#include "qhexrt/doctor.hpp"

#include <algorithm>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "backends/cpu/kernels_fast.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "backends/qnn/qnn_runtime.hpp"
#include "common/mapped_file.hpp"
#include "doctor/qairt_version.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/pipeline.hpp"
#include "qhexrt/export.hpp"
#include "qhexrt/hf_config.hpp"
#include "runtime/manifest.hpp"

namespace qhx {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> cpu_features() {
  std::vector<std::string> f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
#define QHX_X86_FEATURE(name) \
  if (__builtin_cpu_supports(name)) f.emplace_back(name);
  QHX_X86_FEATURE("sse4.2")
  QHX_X86_FEATURE("avx")
  QHX_X86_FEATURE("avx2")
  QHX_X86_FEATURE("fma")
  QHX_X86_FEATURE("avx512f")
  QHX_X86_FEATURE("avx512bw")
  QHX_X86_FEATURE("avx512vl")
  QHX_X86_FEATURE("avx512vnni")
  QHX_X86_FEATURE("avx512bf16")
#undef QHX_X86_FEATURE
  // CPUID leaf 7 EDX bit 23 read directly: clang 14's __builtin_cpu_supports has no
  // "avx512fp16". Its avx512f check above covers the OS's saving of the ZMM state.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__builtin_cpu_supports("avx512f") && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 &&
      (edx & (1u << 23)) != 0)
    f.emplace_back("avx512fp16");
#elif defined(__aarch64__) && defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP);
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  (void)hw2;
#ifdef HWCAP_ASIMD
  if (hw & HWCAP_ASIMD) f.emplace_back("asimd");
#endif
#ifdef HWCAP_ASIMDHP
  if (hw & HWCAP_ASIMDHP) f.emplace_back("asimdhp");
#endif
#ifdef HWCAP_ASIMDDP
  if (hw & HWCAP_ASIMDDP) f.emplace_back("asimddp");
#endif
#ifdef HWCAP_SVE
  if (hw & HWCAP_SVE) f.emplace_back("sve");
#endif
#ifdef HWCAP2_SVE2
  if (hw2 & HWCAP2_SVE2) f.emplace_back("sve2");
#endif
#ifdef HWCAP2_I8MM
  if (hw2 & HWCAP2_I8MM) f.emplace_back("i8mm");
#endif
#ifdef HWCAP2_BF16
  if (hw2 & HWCAP2_BF16) f.emplace_back("bf16");
#endif
#endif
  return f;
}

const char* arch_name() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#elif defined(__arm__)
  return "arm";
#else
  return "unknown";
#endif
}

CpuReport cpu_report() {
  CpuReport r;
  r.arch = arch_name();
  r.features = cpu_features();
  for (const auto t : cpu::fast_kernels_targets()) r.simd_targets.emplace_back(t);
  r.simd_target = cpu::fast_kernels_target();
  r.kernel_set = cpu::active_kernels().name;
  r.int8_kernel = cpu::int8_kernel_best().name;
  for (const auto* k : cpu::int8_kernels_available()) r.int8_kernels.emplace_back(k->name);
  r.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  r.threads = cpu::num_threads();
  return r;
}

std::string version_str(const qnn::abi::Version& v) { return cat(v.major, ".", v.minor, ".", v.patch); }

// Loads the QAIRT libraries (once per process, as the qnn-htp backend does) and reports them.
QnnReport qnn_report(const qnn::Runtime** runtime) {
  QnnReport r;
  for (const auto& d : qnn::library_search_dirs()) r.search_dirs.push_back(d.string());
  std::vector<qnn::LoadAttempt> attempts;
  try {
    const qnn::Runtime& rt = qnn::Runtime::get(attempts);
    *runtime = &rt;
    r.loaded = true;
    r.build_id = rt.build_id();
    r.provider = rt.provider_name();
    const auto api = rt.api_version();
    r.core_api = version_str(api.core);
    r.backend_api = version_str(api.backend);
    r.system_api = version_str(rt.system_api_version());
  } catch (const Error& e) {
    r.error = e.what();
  }
  for (const char* lib : {"libQnnHtp.so", "libQnnSystem.so"}) {
    QnnLibraryReport l;
    l.name = lib;
    for (const auto& a : attempts) {
      if (a.path.filename() != lib) continue;
      if (a.error.empty()) continue;
      // dlerror's text usually starts with the path itself.
      const std::string prefix = a.path.string() + ": ";
      const std::string why = a.error.rfind(prefix, 0) == 0 ? a.error.substr(prefix.size()) : a.error;
      l.tried.push_back(cat(a.path.string(), ": ", why));
    }
    if (*runtime != nullptr)
      l.path = (l.name == "libQnnHtp.so" ? (*runtime)->htp_file() : (*runtime)->system_file()).string();
    r.libraries.push_back(std::move(l));
  }
  // Not found anywhere: one sentence with the paths (the libraries' own lists have the reasons).
  if (!r.loaded && !attempts.empty() &&
      std::all_of(attempts.begin(), attempts.end(), [](const auto& a) { return !a.error.empty(); })) {
    std::string tried;
    for (const auto& a : attempts) tried += cat(tried.empty() ? "" : ", ", a.path.string());
    r.error = cat("cannot load libQnnHtp.so and libQnnSystem.so (tried: ", tried,
                  "); set QHX_QNN_LIB_DIR to the folder holding both (on x86-64 scripts/setup_qnn.sh installs "
                  "them; on a device, the QAIRT SDK's lib/aarch64-* folder)");
  }
  return r;
}

std::uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  std::uint64_t kb = 0;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

// The bytes a file (or a folder's files) takes; 0 when absent.
std::uint64_t file_bytes(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return fs::file_size(p, ec);
  std::uint64_t n = 0;
  if (fs::is_directory(p, ec))
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.is_regular_file(ec) && e.path().extension() == ".safetensors") n += e.file_size(ec);
  return n;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A string in a graph entry names a file when its key says so or its extension does.
bool names_file(const std::string& key, const std::string& value) {
  const std::string leaf = key.substr(key.find_last_of('.') + 1);
  static const std::set<std::string> keys = {"weights", "config", "file", "context_binary", "emulator_binary"};
  if (keys.count(leaf.substr(0, leaf.find('['))) != 0) return true;
  for (const char* ext : {".bin", ".safetensors", ".json", ".onnx"})
    if (ends_with(value, ext)) return true;
  return false;
}

struct Checker {
  DoctorReport& report;
  const qnn::Runtime* rt = nullptr;

  void problem(std::string s) { report.problems.push_back(std::move(s)); }
  void warning(std::string s) { report.warnings.push_back(std::move(s)); }

  void check_binary(const std::string& graph, BinaryReport& b, const nlohmann::json& owner) {
    const std::string where = cat("graph \"", graph, "\": ", b.key, " ", b.path);
    std::error_code ec;
    b.exists = fs::is_regular_file(b.path, ec);
    if (!b.exists) {
      problem(cat(where, ": the file is missing (copy it beside the manifest, or re-export the plan)"));
      return;
    }
    b.bytes = file_bytes(b.path);
    if (rt == nullptr) return;  // the missing libraries are reported once, for the graph
    try {
      const MappedFile file(b.path);
      const auto info = rt->read_binary_info(std::span(file.data(), file.size()), b.path);
      b.read = true;
      b.build_id = info.build_id;
      b.soc_version = info.soc_version;
      b.soc_model = info.soc_model;
      b.soc_name = qnn::soc_label(info.soc_model);
      for (const auto& g : info.graphs) b.graphs.push_back(g.name);
    } catch (const Error& e) {
      b.error = e.what();
      problem(cat(where, ": ", e.what()));
      return;
    }
    if (b.plan_soc_model) {
      const std::uint32_t want = *b.plan_soc_model;
      if (b.soc_model == 0)
        problem(cat(where, ": the binary does not record its SoC model, so the plan's soc_model ", want,
                    " cannot be checked (re-prepare it with a QAIRT whose binaries record it, or drop soc_model)"));
      else if (b.soc_model != want)
        problem(cat(where, ": the binary was prepared for SoC model ", b.soc_model, " (", qnn::soc_label(b.soc_model),
                    "), the plan targets ", want, " (", qnn::soc_label(want), "): re-prepare it for SoC model ", want,
                    " (tools/qnn/make_qnn_graphs.py), or name the binary prepared for ", want));
    }
    const auto builds = doctor::check_qairt_builds(b.build_id, rt->build_id());
    if (!builds.message.empty())
      (builds.problem ? report.problems : report.warnings).push_back(cat(where, ": ", builds.message));
    const auto g = owner.find("graph");
    if (g != owner.end() && g->is_string()) {
      if (std::find(b.graphs.begin(), b.graphs.end(), g->get<std::string>()) == b.graphs.end()) {
        std::string names;
        for (const auto& n : b.graphs) names += cat(names.empty() ? "" : ", ", "\"", n, "\"");
        problem(cat(where, ": no graph \"", g->get<std::string>(), "\" in the binary; it holds ",
                    names.empty() ? std::string("no graphs") : names));
      }
    } else if (b.graphs.size() != 1 && b.key.find("emulator") == std::string::npos) {
      problem(cat(where, ": the binary holds ", b.graphs.size(), " graphs; name one with \"graph\""));
    }
  }

  // Every file the entry names, at any depth (e.g. parts[].context_binary), with the
  // soc_model that applies there (the nearest enclosing one).
  void walk(GraphReport& g, bool qnn, const fs::path& dir, const nlohmann::json& j, const nlohmann::json& owner,
            const std::string& key, std::optional<std::uint32_t> soc) {
    if (j.is_object()) {
      if (const auto s = j.find("soc_model"); s != j.end() && s->is_number_unsigned()) soc = s->get<std::uint32_t>();
      for (const auto& [k, v] : j.items()) {
        if (k == "backend" || k == "kind") continue;
        walk(g, qnn, dir, v, j, key.empty() ? k : cat(key, ".", k), soc);
      }
    } else if (j.is_array()) {
      for (std::size_t i = 0; i < j.size(); ++i) walk(g, qnn, dir, j[i], owner, cat(key, "[", i, "]"), soc);
    } else if (j.is_string()) {
      const std::string v = j.get<std::string>();
      if (!names_file(key, v)) return;
      const fs::path p = dir / v;
      if (qnn && ends_with(v, ".bin")) {
        BinaryReport b;
        b.key = key;
        b.path = p.string();
        // An emulator's binary is for the x86-64 simulation, not the device's SoC.
        if (key.find("emulator") == std::string::npos) b.plan_soc_model = soc;
        check_binary(g.name, b, owner);
        g.binaries.push_back(std::move(b));
      } else {
        g.files.push_back(p.string());
        std::error_code ec;
        if (!fs::exists(p, ec)) problem(cat("graph \"", g.name, "\": ", key, " ", p.string(), ": the file is missing"));
      }
    }
  }

  void check_manifest(const fs::path& path) {
    Manifest m;
    try {
      m = resolve_manifest(path, false);
    } catch (const Error& e) {
      problem(e.what());
      return;
    }
    ManifestReport mr;
    mr.path = m.source;
    mr.name = m.name;
    bool needs_qnn = false;
    for (const auto& [name, mg] : m.graphs) needs_qnn = needs_qnn || mg.backend == "qnn-htp";
    if (needs_qnn && rt == nullptr)
      problem(cat("the plan has qnn-htp graphs, but the QAIRT libraries do not load: ", report.qnn.error));
    else if (!needs_qnn && rt == nullptr && !report.qnn.error.empty())
      warning("QAIRT libraries (not needed by this plan): " + report.qnn.error);
    std::set<fs::path> mapped;
    auto add_mapped = [&](const fs::path& p) {
      std::error_code ec;
      const auto c = fs::weakly_canonical(p, ec);
      mapped.insert(ec ? p : c);
    };
    for (const auto& [name, mg] : m.graphs) {
      GraphReport g;
      g.name = name;
      g.backend = mg.backend;
      g.kind = mg.kind;
      walk(g, mg.backend == "qnn-htp", m.dir, mg.spec, mg.spec, "", std::nullopt);
      for (const auto& f : g.files)
        if (!ends_with(f, ".json")) add_mapped(f);  // configs are read, not mapped
      for (const auto& b : g.binaries) add_mapped(b.path);
      mr.graphs.push_back(std::move(g));
    }
    for (const auto& [name, t] : m.tables) {
      const fs::path p = m.dir / t.file;
      std::error_code ec;
      if (!fs::exists(p, ec)) problem(cat("table \"", name, "\": ", p.string(), ": the file is missing"));
      add_mapped(p);
    }
    for (const auto& p : mapped) mr.memory.mapped_bytes += file_bytes(p);

    MemoryReport& mem = mr.memory;
    mem.context_length = m.context_length;
    for (const auto& [name, mg] : m.graphs)
      if (mg.kind == "qwen3vl.text_decoder")
        if (const auto kv = mg.spec.find("kv_cache"); kv != mg.spec.end() && (*kv == "f16" || *kv == "i8"))
          mem.kv_value_bytes = *kv == "f16" ? 2 : 1;
    try {
      const auto cfg = load_qwen3vl_config(m.dir / m.config).text;
      mem.layers = cfg.num_hidden_layers;
      mem.kv_heads = cfg.num_key_value_heads;
      mem.head_dim = cfg.head_dim;
      // An 8-bit cache's rows carry their f32 scale (head_dim + 4 bytes).
      const std::int64_t row_bytes = mem.kv_value_bytes == 1 ? mem.head_dim + 4 : mem.head_dim * mem.kv_value_bytes;
      mem.kv_cache_bytes = static_cast<std::uint64_t>(mem.context_length * mem.layers * mem.kv_heads * row_bytes) * 2;
    } catch (const Error& e) {
      problem(cat("config ", (m.dir / m.config).string(), ": ", e.what()));
    }
    if (const fs::path desc = m.dir / "qnn_graphs.json"; fs::exists(desc)) {
      try {
        std::ifstream in(desc);
        const auto d = nlohmann::json::parse(in);
        if (const auto dm = d.find("device_memory"); dm != d.end()) {
          NpuContextReport n{dm->at("per_context_bytes"), dm->at("binary_bytes"), dm->at("kv_bytes"),
                             dm->at("limit_bytes"), d.value("context_length", std::int64_t{0})};
          if (n.per_context_bytes > n.limit_bytes)
            problem(cat("device memory: a decoder context needs ", n.per_context_bytes >> 20, " MiB, over the ",
                        n.limit_bytes >> 20,
                        " MiB a device's process domain holds: re-export with a shorter --context "
                        "or more --qnn-parts"));
          mr.npu_context = n;
        }
      } catch (const std::exception& e) {
        problem(cat(desc.string(), ": ", e.what()));
      }
    }
    mem.available_bytes = mem_available();
    const std::uint64_t need = mem.mapped_bytes + mem.kv_cache_bytes;
    if (mem.available_bytes != 0 && need > mem.available_bytes)
      problem(cat("memory: the plan needs ", need >> 20, " MiB (files ", mem.mapped_bytes >> 20, " MiB + KV cache ",
                  mem.kv_cache_bytes >> 20, " MiB), ", mem.available_bytes >> 20,
                  " MiB are available: free memory, or lower context_length"));
    report.manifest = std::move(mr);
  }
};

// A bundle folder (it holds manifests) without checksums.json predates them.
bool exported_bundle(const fs::path& dir) {
  try {
    const BundleManifests m = find_bundle_manifests(dir);
    return !m.vlm.empty() || !m.text.empty();
  } catch (const Error&) {
    return true;  // a manifest there that does not parse: still a bundle folder
  }
}

void check_bundle_files(const fs::path& plan, DoctorReport& report) {
  std::error_code ec;
  const fs::path dir = fs::is_directory(plan, ec) ? plan : plan.parent_path();
  if (dir.empty() || !fs::is_directory(dir, ec)) return;
  if (!fs::exists(dir / "checksums.json", ec)) {
    if (exported_bundle(dir))
      report.warnings.push_back(cat(dir.string(),
                                    ": no checksums.json (exported before QHexRT recorded checksums): "
                                    "its files cannot be checked; export it again to have them"));
    return;
  }
  const BundleCheck c = check_bundle(dir);
  report.bundle_files = BundleFilesReport{dir.string(), c.has_checksums, c.files, c.problems, c.unlisted};
  for (const auto& p : c.problems) report.problems.push_back(p + " (export the bundle again, or restore the file)");
}

}  // namespace

DoctorReport diagnose(const std::filesystem::path& plan) {
  DoctorReport report;
  report.cpu = cpu_report();
  const qnn::Runtime* rt = nullptr;
  report.qnn = qnn_report(&rt);
  if (plan.empty()) {
    if (!report.qnn.loaded)
      report.warnings.push_back("QAIRT libraries (needed only by plans with qnn-htp graphs): " + report.qnn.error);
    return report;
  }
  Checker c{report, rt};
  c.check_manifest(plan);
  check_bundle_files(plan, report);
  return report;
}

}  // namespace qhx
