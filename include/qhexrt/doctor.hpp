// qhexrt/doctor.hpp — what this machine offers and what a plan needs, for a
// user diagnosing a deployment (qhx_doctor prints it): the CPU's features and
// the kernels chosen; the QAIRT libraries (libQnnHtp.so, libQnnSystem.so),
// where each was found or every path tried, and their versions; and for a
// plan, each graph's backend, kind and files, every QNN context binary's SoC
// model and QAIRT build against the plan's soc_model and the libraries', the
// graph names inside, and the memory the plan needs against what is available.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace qhx {

struct CpuReport {
  std::string arch;                       // "x86_64", "aarch64", ...
  std::vector<std::string> features;      // ISA extensions the CPU reports, of those the kernels use
  std::vector<std::string> simd_targets;  // Highway targets this build has and the CPU runs, best first
  std::string simd_target;                // the one the fast kernels dispatch to
  std::string kernel_set;                 // "fast", or "reference" (QHX_KERNELS=reference)
  std::string int8_kernel;                // the int8 path's kernel ("avx512vnni", "neon-dotprod", "portable")
  std::vector<std::string> int8_kernels;  // every int8 kernel the CPU runs
  int hardware_threads = 0;               // std::thread::hardware_concurrency()
  int threads = 0;                        // the kernels' threads: what a run uses unless set_threads() changes it
};

struct QnnLibraryReport {
  std::string name;                // "libQnnHtp.so", "libQnnSystem.so"
  std::string path;                // the file loaded; empty when it was not found
  std::vector<std::string> tried;  // "PATH: why not", for each place it did not load from
};

struct QnnReport {
  bool loaded = false;
  std::string error;                              // why not, when not loaded
  std::vector<std::string> search_dirs;           // in order; "" = the dynamic loader's search path
  std::vector<QnnLibraryReport> libraries;        // libQnnHtp.so, then libQnnSystem.so
  std::string build_id;                           // the libraries' QAIRT build, e.g. "v2.51.0.260929181845"
  std::string provider;                           // the core interface's provider, e.g. "HTP_QTI_AISW"
  std::string core_api, backend_api, system_api;  // "major.minor.patch"
};

struct BinaryReport {
  std::string key;   // where the graph entry names it: "context_binary", "parts[1].context_binary"
  std::string path;  // resolved against the manifest's folder
  bool exists = false;
  std::uint64_t bytes = 0;
  bool read = false;  // the System API read its metadata
  std::string error;  // why not, when not read
  std::string build_id, soc_version;
  std::uint32_t soc_model = 0;                  // recorded in the binary (0 = not recorded)
  std::string soc_name;                         // e.g. "SM8750, HTP v79"
  std::optional<std::uint32_t> plan_soc_model;  // the entry's "soc_model", if any
  std::vector<std::string> graphs;              // the graph names inside
};

struct GraphReport {
  std::string name, backend, kind;
  std::vector<std::string> files;      // the other files the entry names (weights, config), resolved
  std::vector<BinaryReport> binaries;  // a qnn-htp graph's context binaries
};

struct MemoryReport {
  std::uint64_t mapped_bytes = 0;    // the files the plan maps: its graphs' and tables'
  std::uint64_t kv_cache_bytes = 0;  // context_length x layers x kv_heads x 2 x a row's bytes (head_dim x value
                                     // bytes; head_dim + 4 for i8, whose rows carry a scale)
  std::int64_t context_length = 0, layers = 0, kv_heads = 0, head_dim = 0;
  int kv_value_bytes = 4;             // 4 (f32), 2 with the decoder's "kv_cache": "f16", 1 with "i8"
  std::uint64_t available_bytes = 0;  // MemAvailable of /proc/meminfo; 0 = unknown
};

// A qnn-htp bundle's largest decoder context on the device, from its qnn_graphs.json
// (qhx_export's estimate: the binary, its fp16 KV cache, masks, attention scores) against
// the ~3.5 GB a device's process domain holds.
struct NpuContextReport {
  std::uint64_t per_context_bytes = 0, binary_bytes = 0, kv_bytes = 0, limit_bytes = 0;
  std::int64_t context_length = 0;
};

struct ManifestReport {
  std::string path;  // the manifest the plan comes from
  std::string name;
  std::vector<GraphReport> graphs;
  MemoryReport memory;
  std::optional<NpuContextReport> npu_context;  // a qnn-htp bundle's
};

// A bundle's files against its checksums.json (as `qhx_export --check`), when the plan is a
// bundle folder or a manifest in one.
struct BundleFilesReport {
  std::string dir;
  bool has_checksums = false;
  std::size_t files = 0;              // files checksums.json lists, each read once
  std::vector<std::string> problems;  // a file missing, of another size or hash (also in DoctorReport::problems)
  std::vector<std::string> unlisted;  // files beside them it does not cover (not checked)
};

struct DoctorReport {
  CpuReport cpu;
  QnnReport qnn;
  std::optional<ManifestReport> manifest;
  std::optional<BundleFilesReport> bundle_files;
  std::vector<std::string> problems;  // what stops the plan from running, each with what to do
  std::vector<std::string> warnings;  // what may not stop it
  bool ok() const { return problems.empty(); }
};

// Examines this machine and, unless `plan` is empty, the plan Pipeline::open would
// run for it (a manifest, a bundle folder — its text manifest — or a checkpoint
// directory). Loads nothing but the QAIRT libraries and the metadata of the
// context binaries; maps no weights, but reads every file of a bundle that has a
// checksums.json once to check it (a file that differs is a problem naming it). What it finds wrong goes into `problems`
// (an unreadable manifest too); it throws only when out of memory. Without a
// plan, missing QAIRT libraries are a warning; with a plan that has a qnn-htp
// graph, a problem.
DoctorReport diagnose(const std::filesystem::path& plan = {});

}  // namespace qhx
