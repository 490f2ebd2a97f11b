#include "backends/qnn/qnn_runtime.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "qhexrt/error.hpp"

namespace qhx::qnn {
namespace {

std::string version_str(const abi::Version& v) { return cat(v.major, ".", v.minor, ".", v.patch); }

// Forwards QNN's log to stderr when QHX_QNN_LOG is set (1 error .. 5 debug): the HTP
// backend explains a refused binary there in more words than its error code.
void log_to_stderr(const char* fmt, std::uint32_t level, std::uint64_t, va_list args) {
  std::fprintf(stderr, "[qnn %u] ", level);
  std::vfprintf(stderr, fmt, args);
  std::fputc('\n', stderr);
}

}  // namespace

std::vector<std::filesystem::path> library_search_dirs() {
  std::vector<std::filesystem::path> dirs;
  if (const char* d = std::getenv("QHX_QNN_LIB_DIR"); d != nullptr && *d != '\0') return {d};
  if (const char* c = std::getenv("QHX_CACHE"); c != nullptr && *c != '\0')
    dirs.emplace_back(std::filesystem::path(c) / "qnn/lib");
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    const auto home = std::filesystem::path(h) / ".cache/qhexrt/qnn/lib";
    if (dirs.empty() || dirs.front() != home) dirs.push_back(home);  // QHX_CACHE is often ~/.cache/qhexrt
  }
  dirs.emplace_back();  // the dynamic loader's search path
  return dirs;
}

std::size_t dtype_bytes(abi::DataType dt) {
  switch (dt) {
    case abi::DataType::Float16: return 2;
    case abi::DataType::Float32: return 4;
    case abi::DataType::Int32: return 4;
    case abi::DataType::Int8: return 1;
    case abi::DataType::UInt8: return 1;
    case abi::DataType::Bool8: return 1;
    default: return 0;
  }
}

std::string dtype_label(abi::DataType dt) {
  switch (dt) {
    case abi::DataType::Float16: return "float16";
    case abi::DataType::Float32: return "float32";
    case abi::DataType::BFloat16: return "bfloat16";
    case abi::DataType::Int8: return "int8";
    case abi::DataType::Int16: return "int16";
    case abi::DataType::Int32: return "int32";
    case abi::DataType::Int64: return "int64";
    case abi::DataType::UInt8: return "uint8";
    case abi::DataType::Bool8: return "bool";
    default: return cat("qnn-datatype-0x", std::hex, static_cast<std::uint32_t>(dt));
  }
}

namespace {

std::mutex g_runtime_mutex;
Runtime* g_runtime = nullptr;
LibraryNames g_names;

bool is_path(const std::string& s) { return s.find('/') != std::string::npos; }

}  // namespace

void request_libraries(const LibraryNames& names) {
  std::lock_guard lock(g_runtime_mutex);
  if (g_runtime != nullptr && (names.htp != g_names.htp || names.system != g_names.system))
    fail("qnn-htp: the QAIRT libraries are already loaded from ", g_runtime->htp_path().string(), " and ",
         g_runtime->system_path().string(), "; a process loads them once");
  g_names = names;
}

std::string soc_label(std::uint32_t m) {
  switch (m) {
    case 43: return "SM8550, HTP v73";
    case 57: return "SM8650, HTP v75";
    case 69: return "SM8750, HTP v79";
    case 87: return "SM8850, HTP v81";
    default: return "see Qnn_SocModel_t";
  }
}

// While the libraries load, stdout goes to stderr: they print a banner ("# LIBNATIVE: ...")
// on stdout, where it would land in the middle of generated text or a tool's JSON.
struct StdoutToStderr {
  int saved = -1;
  StdoutToStderr() {
    std::fflush(stdout);
    saved = dup(STDOUT_FILENO);
    if (saved >= 0) dup2(STDERR_FILENO, STDOUT_FILENO);
  }
  ~StdoutToStderr() {
    std::fflush(stdout);
    if (saved >= 0) {
      dup2(saved, STDOUT_FILENO);
      close(saved);
    }
  }
};

std::unique_ptr<Runtime> Runtime::load(const std::vector<std::filesystem::path>& search_dirs, const LibraryNames& names,
                                       std::vector<LoadAttempt>* attempts) {
  const StdoutToStderr quiet;
  std::unique_ptr<Runtime> rt(new Runtime());
  std::string tried;
  const std::string htp_name = names.htp, system_name = names.system;
  auto open = [&](const std::filesystem::path& p) -> void* {
    void* h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string why;
    if (h == nullptr) {
      const char* e = dlerror();
      why = e != nullptr ? e : "not loadable";
      tried += cat("\n  ", p.string(), ": ", why);
    }
    rt->attempts_.push_back({p, why});
    return h;
  };
  // Named by path, a library is loaded from there and nowhere else.
  const std::vector<std::filesystem::path> one{std::filesystem::path()};
  const auto& dirs = is_path(htp_name) && is_path(system_name) ? one : search_dirs;
  // Looked up by name, libQnnHtp.so and libQnnSystem.so must come from the same folder (the
  // same QAIRT build). Both are tried in every folder, so a report can say where each one is.
  for (const auto& dir : dirs) {
    const std::filesystem::path htp =
        dir.empty() || is_path(htp_name) ? std::filesystem::path(htp_name) : dir / htp_name;
    const std::filesystem::path sys =
        dir.empty() || is_path(system_name) ? std::filesystem::path(system_name) : dir / system_name;
    void* h = open(htp);
    void* s = open(sys);
    if (h == nullptr || s == nullptr) {
      if (h != nullptr) dlclose(h);
      if (s != nullptr) dlclose(s);
      continue;
    }
    rt->htp_lib_ = h;
    rt->system_lib_ = s;
    rt->htp_path_ = htp;
    rt->system_path_ = sys;
    break;
  }
  if (attempts != nullptr) *attempts = rt->attempts_;
  if (rt->htp_lib_ == nullptr)
    fail("qnn-htp: cannot load the QAIRT runtime libraries ", htp_name, " and ", system_name, "; tried:", tried,
         "\nSet QHX_QNN_LIB_DIR to the folder holding them (on x86-64: the onnxruntime_qnn folder of the pinned "
         "onnxruntime-qnn wheel, which scripts/setup_qnn.sh installs and links as $QHX_CACHE/qnn/lib).");

  auto get_core = reinterpret_cast<abi::GetCoreProviders>(dlsym(rt->htp_lib_, "QnnInterface_getProviders"));
  auto get_sys = reinterpret_cast<abi::GetSystemProviders>(dlsym(rt->system_lib_, "QnnSystemInterface_getProviders"));
  if (get_core == nullptr) fail("qnn-htp: ", rt->htp_path_.string(), " has no QnnInterface_getProviders");
  if (get_sys == nullptr) fail("qnn-htp: ", rt->system_path_.string(), " has no QnnSystemInterface_getProviders");

  const abi::CoreInterface** cores = nullptr;
  std::uint32_t n = 0;
  if (auto e = get_core(&cores, &n); e != 0 || n == 0)
    fail("qnn-htp: QnnInterface_getProviders failed: error ", abi::error_code(e), ", ", n, " providers");
  std::string seen;
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto& v = cores[i]->api_version.core;
    seen += cat(i ? ", " : "", cores[i]->provider_name != nullptr ? cores[i]->provider_name : "?", " (API ",
                version_str(v), ")");
    if (rt->core_ == nullptr && v.major == abi::kCoreApiMajor) rt->core_ = cores[i];
  }
  if (rt->core_ == nullptr)
    fail("qnn-htp: no provider in ", rt->htp_path_.string(), " speaks QNN API ", abi::kCoreApiMajor,
         ".x (found: ", seen, ")");

  const abi::SystemInterface** systems = nullptr;
  if (auto e = get_sys(&systems, &n); e != 0 || n == 0)
    fail("qnn-htp: QnnSystemInterface_getProviders failed: error ", abi::error_code(e), ", ", n, " providers");
  for (std::uint32_t i = 0; i < n && rt->system_ == nullptr; ++i)
    if (systems[i]->system_api_version.major == abi::kSystemApiMajor) rt->system_ = systems[i];
  if (rt->system_ == nullptr)
    fail("qnn-htp: no provider in ", rt->system_path_.string(), " speaks QNN System API ", abi::kSystemApiMajor, ".x");

  const auto& fn = rt->core_->fn;
  if (const char* lv = std::getenv("QHX_QNN_LOG"); lv != nullptr && *lv != '\0') {
    if (auto e = fn.log_create(log_to_stderr, static_cast<std::uint32_t>(std::atoi(lv)), &rt->log_); e != 0)
      rt->log_ = nullptr;  // logging is a diagnostic aid; run without it
  }
  if (auto e = fn.backend_create(rt->log_, nullptr, &rt->backend_); e != 0)
    fail("qnn-htp: ", rt->describe("QnnBackend_create", e));
  // The HTP backend has devices (the NPU and its cores); a backend without them answers
  // "not supported", and contexts are then created with no device.
  if (auto e = fn.device_create(rt->log_, nullptr, &rt->device_); e != 0) rt->device_ = nullptr;
  return rt;
}

Runtime& Runtime::get() {
  std::vector<LoadAttempt> ignored;
  return get(ignored);
}

Runtime& Runtime::get(std::vector<LoadAttempt>& attempts) {
  // Never destroyed: at exit the QAIRT libraries tear down their own state first
  // (their destructors were registered after this static's), so freeing the
  // backend then would read freed memory (AddressSanitizer caught it). The
  // backend lives as long as the process; the pointer keeps it reachable.
  std::lock_guard lock(g_runtime_mutex);
  if (g_runtime == nullptr)
    g_runtime = load(library_search_dirs(), g_names, &attempts).release();  // a failure is retried on the next call
  attempts = g_runtime->attempts_;
  return *g_runtime;
}

namespace {

// The file the loader mapped for `lib`, found through one of its symbols.
std::filesystem::path loaded_file(void* lib, const char* symbol, const std::filesystem::path& fallback) {
  Dl_info info{};
  void* sym = lib != nullptr ? dlsym(lib, symbol) : nullptr;
  if (sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr && *info.dli_fname != '\0') {
    std::error_code ec;
    const auto p = std::filesystem::weakly_canonical(info.dli_fname, ec);
    return ec ? std::filesystem::path(info.dli_fname) : p;
  }
  return fallback;
}

}  // namespace

std::filesystem::path Runtime::htp_file() const {
  return loaded_file(htp_lib_, "QnnInterface_getProviders", htp_path_);
}
std::filesystem::path Runtime::system_file() const {
  return loaded_file(system_lib_, "QnnSystemInterface_getProviders", system_path_);
}
std::string Runtime::provider_name() const { return core_->provider_name != nullptr ? core_->provider_name : ""; }
abi::Version Runtime::system_api_version() const { return system_->system_api_version; }

Runtime::~Runtime() {
  if (core_ != nullptr) {
    if (device_ != nullptr) core_->fn.device_free(device_);
    if (backend_ != nullptr) core_->fn.backend_free(backend_);
    if (log_ != nullptr) core_->fn.log_free(log_);
  }
  // The libraries stay loaded: QNN backends keep process-wide state that is not safe to
  // unmap and map again in one process.
}

std::string Runtime::build_id() const {
  const char* id = nullptr;
  if (core_->fn.backend_get_build_id(&id) != 0 || id == nullptr) return "?";
  return id;
}

abi::ApiVersion Runtime::api_version() const {
  abi::ApiVersion v{};
  if (auto e = core_->fn.backend_get_api_version(&v); e != 0)
    fail("qnn-htp: ", describe("QnnBackend_getApiVersion", e));
  return v;
}

std::string Runtime::describe(const char* call, abi::ErrorHandle err) const {
  std::string s = cat(call, " failed: error ", abi::error_code(err));
  const char* msg = nullptr;
  if (core_ != nullptr && core_->fn.error_get_message != nullptr && core_->fn.error_get_message(err, &msg) == 0 &&
      msg != nullptr && *msg != '\0')
    s += cat(" (", msg, ")");
  return s;
}

namespace {

constexpr std::uint64_t kMaxTensorBytes = 0xFFFFFFFFu;  // Qnn_ClientBuffer_t's dataSize is a uint32

TensorInfo copy_tensor(const abi::Tensor& t, const std::string& what) {
  if (t.version != 1 && t.version != 2)
    fail("qnn-htp: ", what, ": tensor record version ", t.version, " is not 1 or 2 (a newer QNN API?)");
  const abi::TensorV1& v = t.v1;  // version 2 starts with version 1's fields
  TensorInfo info;
  info.tensor_version = t.version;
  info.id = v.id;
  info.name = v.name != nullptr ? v.name : "";
  info.type = v.type;
  info.dtype = v.data_type;
  if (v.rank > 8 || (v.rank > 0 && v.dims == nullptr))
    fail("qnn-htp: ", what, ": tensor \"", info.name, "\" has rank ", v.rank, " (a layout mismatch?)");
  info.dims.assign(v.dims, v.dims + v.rank);
  // The backend allocates the dims' product in elements (f32 on the stage side: up to 4
  // bytes each) and hands QNN the byte count as a 32-bit client-buffer size; dims whose
  // product passes that would wrap into a buffer smaller than what QNN writes.
  std::uint64_t elements = 1;
  for (const std::uint32_t d : info.dims) {
    if (d != 0 && elements > kMaxTensorBytes / 4 / d)
      fail("qnn-htp: ", what, ": tensor \"", info.name, "\" is larger than a QNN client buffer (4 GiB)");
    elements *= d;
  }
  return info;
}

}  // namespace

BinaryInfo Runtime::read_binary_info(std::span<const std::byte> binary, const std::string& what) const {
  const auto& fn = system_->fn;
  abi::Handle sys = nullptr;
  if (auto e = fn.context_create(&sys); e != 0)
    fail("qnn-htp: ", what, ": QnnSystemContext_create failed: error ", abi::error_code(e));
  struct Free {
    const abi::SystemFunctions& fn;
    abi::Handle h;
    ~Free() { fn.context_free(h); }
  } free_sys{fn, sys};
  const abi::BinaryInfo* bi = nullptr;
  std::uint64_t size = 0;
  // The API takes a non-const pointer but only reads the buffer.
  if (auto e = fn.context_get_binary_info(sys, const_cast<std::byte*>(binary.data()), binary.size(), &bi, &size);
      e != 0 || bi == nullptr)
    fail("qnn-htp: ", what, ": QnnSystemContext_getBinaryInfo failed: error ", abi::error_code(e),
         " (not a QNN context binary, or a corrupt one)");
  return binary_info_from(*bi, what);
}

BinaryInfo binary_info_from(const abi::BinaryInfo& bi, const std::string& what) {
  BinaryInfo out;
  out.version = bi.version;
  std::uint32_t num_graphs = 0;
  const abi::GraphInfo* graphs = nullptr;
  const char* build = nullptr;
  const char* soc = nullptr;
  if (bi.version == 1 || bi.version == 2) {
    build = bi.v1.build_id;
    soc = bi.v1.soc_version;
    out.core_api = bi.v1.core_api;
    out.backend_api = bi.v1.backend_api;
    num_graphs = bi.v1.num_graphs;
    graphs = bi.v1.graphs;
  } else if (bi.version == 3) {
    build = bi.v3.build_id;
    soc = bi.v3.soc_version;
    out.core_api = bi.v3.core_api;
    out.backend_api = bi.v3.backend_api;
    out.soc_model = bi.v3.soc_model;
    num_graphs = bi.v3.num_graphs;
    graphs = bi.v3.graphs;
  } else {
    fail("qnn-htp: ", what, ": context-binary info version ", bi.version,
         " is not one this QHexRT reads (1, 2, 3); a newer QAIRT?");
  }
  out.build_id = build != nullptr ? build : "";
  out.soc_version = soc != nullptr ? soc : "";
  if (num_graphs > 0 && graphs == nullptr) fail("qnn-htp: ", what, ": binary info lists graphs but no array");
  for (std::uint32_t g = 0; g < num_graphs; ++g) {
    const abi::GraphInfo& gi = graphs[g];
    if (gi.version < 1 || gi.version > 3)
      fail("qnn-htp: ", what, ": graph-info version ", gi.version, " is not 1, 2 or 3");
    GraphInfo info;
    info.name = gi.v1.name != nullptr ? gi.v1.name : "";
    if ((gi.v1.num_inputs > 0 && gi.v1.inputs == nullptr) || (gi.v1.num_outputs > 0 && gi.v1.outputs == nullptr))
      fail("qnn-htp: ", what, ": graph \"", info.name, "\" lists tensors but no array");
    for (std::uint32_t i = 0; i < gi.v1.num_inputs; ++i) info.inputs.push_back(copy_tensor(gi.v1.inputs[i], what));
    for (std::uint32_t i = 0; i < gi.v1.num_outputs; ++i) info.outputs.push_back(copy_tensor(gi.v1.outputs[i], what));
    out.graphs.push_back(std::move(info));
  }
  return out;
}

Context::Context(const Runtime& rt, std::span<const std::byte> binary, const std::string& what)
    : rt_(rt), what_(what), info_(rt.read_binary_info(binary, what)) {
  if (auto e = rt.core().fn.context_create_from_binary(rt.backend(), rt.device(), nullptr, binary.data(), binary.size(),
                                                       &context_, nullptr);
      e != 0)
    fail("qnn-htp: ", what, ": ", rt.describe("QnnContext_createFromBinary", e), "; the binary was prepared by QAIRT ",
         info_.build_id.empty() ? "?" : info_.build_id, " for SoC ",
         info_.soc_version.empty() ? "?" : info_.soc_version,
         info_.soc_model != 0 ? cat(" (Qnn_SocModel_t ", info_.soc_model, ")") : std::string(), "; the backend is ",
         rt.htp_path().string(), " (", rt.build_id(),
         "). Context binaries are pinned to one HTP arch and QAIRT version: re-prepare it for this one.");
}

Context::~Context() {
  if (context_ != nullptr) rt_.core().fn.context_free(context_, nullptr);
}

const GraphInfo& Context::graph_info(const std::string& name) const {
  for (const auto& g : info_.graphs)
    if (g.name == name) return g;
  std::string names;
  for (const auto& g : info_.graphs) names += cat(names.empty() ? "" : ", ", "\"", g.name, "\"");
  fail("qnn-htp: ", what_, ": no graph \"", name, "\" in the context binary; it holds ",
       names.empty() ? std::string("no graphs") : names);
}

abi::Handle Context::graph(const std::string& name) {
  for (const auto& [n, h] : graphs_)
    if (n == name) return h;
  graph_info(name);  // a clear error for an absent name, before QNN's own
  abi::Handle h = nullptr;
  if (auto e = rt_.core().fn.graph_retrieve(context_, name.c_str(), &h); e != 0)
    fail("qnn-htp: ", what_, ": graph \"", name, "\": ", rt_.describe("QnnGraph_retrieve", e));
  graphs_.emplace_back(name, h);
  return h;
}

void Context::execute(const std::string& name, std::span<void* const> inputs, std::span<void* const> outputs) {
  const GraphInfo& gi = graph_info(name);
  abi::Handle h = graph(name);
  if (inputs.size() != gi.inputs.size() || outputs.size() != gi.outputs.size())
    fail("qnn-htp: ", what_, ": graph \"", name, "\" takes ", gi.inputs.size(), " inputs and ", gi.outputs.size(),
         " outputs, got ", inputs.size(), " and ", outputs.size());
  // Tensor records built once from the binary's metadata (QNN matches them by id and
  // name); each call only points them at its buffers, so a decode step allocates nothing.
  auto& [in, out] = records_[name];
  auto build = [](const std::vector<TensorInfo>& infos, std::vector<abi::Tensor>& ts) {
    ts.resize(infos.size());
    for (std::size_t i = 0; i < infos.size(); ++i) {
      const TensorInfo& ti = infos[i];
      abi::Tensor t{};
      t.version = ti.tensor_version;
      // Written through the version-2 view, whose first member is the version-1 record.
      abi::TensorV1& v = t.v2.base;
      if (ti.tensor_version == 2) t.v2.sparse.layout = 0x7FFFFFFF;  // undefined: dense tensors
      v.id = ti.id;
      v.name = ti.name.c_str();
      v.type = ti.type;
      v.data_format = 0;
      v.data_type = ti.dtype;
      v.quantize.definition = 0x7FFFFFFF;  // undefined: float tensors carry no encoding
      v.quantize.encoding = 0x7FFFFFFF;
      v.rank = static_cast<std::uint32_t>(ti.dims.size());
      v.dims = const_cast<std::uint32_t*>(ti.dims.data());
      v.mem_type = abi::MemType::Raw;
      std::size_t bytes = dtype_bytes(ti.dtype);
      for (const auto d : ti.dims) bytes *= d;
      v.client_buf.size = static_cast<std::uint32_t>(bytes);
      ts[i] = t;
    }
  };
  if (in.size() != gi.inputs.size() || out.size() != gi.outputs.size()) {
    build(gi.inputs, in);
    build(gi.outputs, out);
  }
  for (std::size_t i = 0; i < in.size(); ++i) in[i].v2.base.client_buf.data = inputs[i];
  for (std::size_t i = 0; i < out.size(); ++i) out[i].v2.base.client_buf.data = outputs[i];
  if (auto e = rt_.core().fn.graph_execute(h, in.data(), static_cast<std::uint32_t>(in.size()), out.data(),
                                           static_cast<std::uint32_t>(out.size()), nullptr, nullptr);
      e != 0)
    fail("qnn-htp: ", what_, ": graph \"", name, "\": ", rt_.describe("QnnGraph_execute", e));
}

}  // namespace qhx::qnn
