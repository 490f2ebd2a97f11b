// The QAIRT runtime libraries, loaded at run time: libQnnHtp.so (the HTP backend; on x86-64
// it emulates the Hexagon NPU) and libQnnSystem.so (reads a context binary's metadata).
// QHexRT has no link-time dependency on them: it builds and runs without them, and only a
// graph whose manifest entry names the qnn-htp backend loads them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/qnn/qnn_abi.hpp"

namespace qhx::qnn {

struct TensorInfo {
  std::uint32_t id = 0;
  std::string name;
  abi::TensorType type = abi::TensorType::AppWrite;
  abi::DataType dtype = abi::DataType::Float32;
  std::vector<std::uint32_t> dims;
  std::uint32_t tensor_version = 2;
};

struct GraphInfo {
  std::string name;
  std::vector<TensorInfo> inputs, outputs;
};

// What the QNN System API reads out of a context binary, copied (the API's memory is freed).
struct BinaryInfo {
  std::uint32_t version = 0;  // of the binary-info struct: 1, 2 or 3
  std::string build_id;       // the QAIRT build that prepared it
  std::string soc_version;
  abi::Version core_api{}, backend_api{};
  std::uint32_t soc_model = 0;  // Qnn_SocModel_t (version 3 only; 0 = not recorded)
  std::vector<GraphInfo> graphs;
};

// What read_binary_info keeps of the System API's answer, checked first: the library
// reports what the binary's bytes say, so versions, counts and ranks are untrusted.
BinaryInfo binary_info_from(const abi::BinaryInfo& info, const std::string& what);

// Where the libraries are looked for, in order: $QHX_QNN_LIB_DIR, $QHX_CACHE/qnn/lib,
// ~/.cache/qhexrt/qnn/lib (scripts/setup_qnn.sh links it to the pinned onnxruntime-qnn's
// library folder), then the dynamic loader's own search path (LD_LIBRARY_PATH; on a device).
std::vector<std::filesystem::path> library_search_dirs();

// Which libraries to load (the seed's command names them): each a path (holding a '/'),
// loaded as it is, or a file name looked for in library_search_dirs(). Takes effect at the
// first Runtime::get(); naming others once the runtime is loaded is an error.
struct LibraryNames {
  std::string htp = "libQnnHtp.so", system = "libQnnSystem.so";
};
void request_libraries(const LibraryNames& names);

// One dlopen made while looking for the libraries: the path given to dlopen (a bare file
// name for the loader's search path) and, when it was not loaded, why (dlerror's text).
struct LoadAttempt {
  std::filesystem::path path;
  std::string error;  // empty: loaded
};

// The loaded libraries and the HTP backend (and device, where the backend has one). One per
// process: QNN backends refuse to be initialised twice in a process.
class Runtime {
 public:
  // The process's runtime, loaded on first use from library_search_dirs(). Throws qhx::Error
  // naming every path tried and how to point QHexRT at the libraries.
  static Runtime& get();
  // get(), telling where it looked: `attempts` receives the runtime's attempts() or, when
  // loading fails (it throws as get() does), every path tried.
  static Runtime& get(std::vector<LoadAttempt>& attempts);
  // Loads the libraries from `dirs` only (empty path = the loader's search path); throws as
  // get() does, after writing every path tried to `*attempts` (if given). For tests of the
  // error path; the runtime it returns must not be used when get() has loaded another copy.
  static std::unique_ptr<Runtime> load(const std::vector<std::filesystem::path>& dirs, const LibraryNames& names = {},
                                       std::vector<LoadAttempt>* attempts = nullptr);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const abi::CoreInterface& core() const { return *core_; }
  const abi::SystemInterface& system() const { return *system_; }
  std::filesystem::path htp_path() const { return htp_path_; }
  std::filesystem::path system_path() const { return system_path_; }
  // The files the loader mapped (resolved: where a bare name was found on the loader's path).
  std::filesystem::path htp_file() const;
  std::filesystem::path system_file() const;
  // Every dlopen made by load(), in order, up to the pair that was used.
  const std::vector<LoadAttempt>& attempts() const { return attempts_; }
  std::string provider_name() const;        // of the core interface chosen
  abi::Version system_api_version() const;  // of the System interface chosen
  std::string build_id() const;             // QnnBackend_getBuildId
  abi::ApiVersion api_version() const;
  abi::Handle backend() const { return backend_; }
  abi::Handle device() const { return device_; }

  // Reads a context binary's metadata. Throws qhx::Error naming the call and its error code.
  BinaryInfo read_binary_info(std::span<const std::byte> binary, const std::string& what) const;
  // "QnnContext_createFromBinary failed: error 5005 (...)" text for an error handle.
  std::string describe(const char* call, abi::ErrorHandle err) const;

 private:
  Runtime() = default;
  void* htp_lib_ = nullptr;
  void* system_lib_ = nullptr;
  std::filesystem::path htp_path_, system_path_;
  std::vector<LoadAttempt> attempts_;
  const abi::CoreInterface* core_ = nullptr;
  const abi::SystemInterface* system_ = nullptr;
  abi::Handle log_ = nullptr;
  abi::Handle backend_ = nullptr;
  abi::Handle device_ = nullptr;
};

// A context created from a binary, and its graphs. Not copyable; frees the context.
class Context {
 public:
  Context(const Runtime& rt, std::span<const std::byte> binary, const std::string& what);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const BinaryInfo& info() const { return info_; }
  // The graph named `name` (its metadata and its handle). Throws qhx::Error listing the
  // graphs the binary holds when it has none by that name.
  const GraphInfo& graph_info(const std::string& name) const;
  abi::Handle graph(const std::string& name);
  // Runs a graph with client buffers, one per tensor of graph_info(name), in its order.
  void execute(const std::string& name, std::span<void* const> inputs, std::span<void* const> outputs);

 private:
  const Runtime& rt_;
  std::string what_;
  BinaryInfo info_;
  abi::Handle context_ = nullptr;
  std::vector<std::pair<std::string, abi::Handle>> graphs_;
  std::map<std::string, std::pair<std::vector<abi::Tensor>, std::vector<abi::Tensor>>> records_;  // per graph: in, out
};

std::size_t dtype_bytes(abi::DataType dt);  // 0 for types the backend does not pass
std::string dtype_label(abi::DataType dt);
// "SM8750, HTP v79" for the Qnn_SocModel_t numbers a message is likeliest to meet.
std::string soc_label(std::uint32_t soc_model);

}  // namespace qhx::qnn
