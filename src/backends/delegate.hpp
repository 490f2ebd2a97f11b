// The backend interface. A manifest's graph entry names a backend and a kind;
// the backend builds a Delegate from it (init), and stages run it (execute)
// with tensors they own. Stages never learn which backend runs a graph, so an
// NPU delegate that loads a context binary drops in beside the CPU one.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qhexrt/dtype.hpp"

namespace qhx {

// A view of a tensor passed to or from a graph; the caller owns the memory.
struct TensorRef {
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  void* data = nullptr;
  // For a tensor whose IoSpec has layer_groups: > 0 when the data is group-major, each
  // group's [rows, its layers, ...] a slab of group_rows rows (>= shape[0]), slabs back
  // to back in group order (how a KV manager keeps a split decoder's cache); 0: plain.
  std::int64_t group_rows = 0;

  std::int64_t numel() const;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// What a tensor is to a graph. A state tensor (a KV cache) is passed with the
// inputs, read and written in place, and outlives the call: the runtime keeps
// it per session, never per graph.
enum class IoRole : std::uint8_t { Input, State, Output };

// One named input or output of a graph: the graph's contract with the stages,
// which bind tensors by these names. A dimension of -1 varies per call.
struct IoSpec {
  IoSpec() = default;
  IoSpec(std::string n, DType d, std::vector<std::int64_t> s, IoRole r = IoRole::Input)
      : name(std::move(n)), dtype(d), shape(std::move(s)), role(r) {}

  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  IoRole role = IoRole::Input;  // outputs are IoRole::Output whatever they say
  // An F32 tensor the graph holds as IEEE fp16: a binding may give it F16 data instead,
  // which the backend then reads or writes in place (no conversion, no copy).
  bool f16 = false;
  // A KV tensor [rows, layers, ...] of a decoder that runs its layers in groups (parts):
  // the layers of each group, in order; such a tensor may be bound group-major
  // (TensorRef::group_rows). Empty: not a KV tensor.
  std::vector<std::int64_t> layer_groups;
};

// How the stages drive a graph (docs/manifest.md, "Decoder contracts"): a language model
// under the state contract (it keeps its KV cache as a state input) or the block contract
// (a fixed block over a KV cache the host keeps); any other graph is bound by name alone.
enum class GraphContract : std::uint8_t { Plain, DecoderState, DecoderBlock };

// What a manifest graph entry hands to a backend.
struct GraphBlob {
  std::string name;           // the manifest's key for the graph (for messages)
  std::string kind;           // what the graph computes, e.g. "qwen3vl.text_decoder"
  std::filesystem::path dir;  // relative file names in `spec` resolve against it
  nlohmann::json spec;        // the whole manifest entry
  std::int64_t context_length = 0;
  std::int64_t max_tokens_per_call = 0;  // the prefill chunk: the largest T one execute() sees
  std::int64_t manifest_version = 0;     // the plan's qhexrt_manifest (a key's default may depend on it)
  std::int64_t image_patches = 0;        // one image's patches when the plan resizes every image to one
                                         // size (0: not known); a vision graph sizes its buffers for it at load
  bool weights_in_memory = false;        // PipelineOptions::weights_in_memory
};

// A graph a backend has prepared. Inputs and outputs are passed in the order
// of input_specs() and output_specs() (the runtime orders the stages' named
// bindings so); a state tensor (IoRole::State, e.g. a KV cache) is an input
// the graph also writes.
class Delegate {
 public:
  virtual ~Delegate() = default;
  virtual void init(const GraphBlob& blob) = 0;
  virtual std::vector<IoSpec> input_specs() const = 0;
  virtual std::vector<IoSpec> output_specs() const = 0;
  virtual void execute(std::span<const TensorRef> inputs, std::span<const TensorRef> outputs) = 0;
  // The contract the graph's kind (or, for a kind that runs any graph, its entry) declares.
  virtual GraphContract contract() const { return GraphContract::Plain; }
  // Bytes the host has copied or converted at this graph's boundary so far (read plus
  // written); 0 for a backend whose graphs take the stages' buffers as they are.
  virtual std::uint64_t boundary_bytes() const { return 0; }
};

using DelegateFactory = std::function<std::unique_ptr<Delegate>()>;

// Backends register their kinds when the registry is first used (the built-in ones are
// listed in backends/builtin_backends.cpp).
void register_delegate(const std::string& backend, const std::string& kind, DelegateFactory factory);

// The backend that computes on the host's CPU. The runtime's own host-side work (a
// table's rows, Qwen3-VL's stage F) runs on its graph kinds, so the runtime reaches the
// CPU through this registry like any other backend.
inline constexpr const char* kHostBackend = "cpu";

// Process-wide settings of a backend, given before its first graph: "threads" for the
// host backend, "htp_library" / "system_library" for qnn-htp. A backend registers what it
// takes; it throws qhx::Error naming a setting it does not take.
using BackendConfigurator = std::function<void(const nlohmann::json& settings)>;
void register_backend_configurator(const std::string& backend, BackendConfigurator configure);
// Throws qhx::Error when the backend is not built in or takes no settings.
void configure_backend(const std::string& backend, const nlohmann::json& settings);

// The file a graph entry names under `key` (e.g. "weights"), resolved against
// blob.dir. Throws qhx::Error naming the graph if the key is missing or not a string.
std::filesystem::path blob_file(const GraphBlob& blob, const char* key);

// Creates and initializes the delegate for blob.kind on `backend`. Throws
// qhx::Error naming the graph when the backend or kind is unknown.
std::unique_ptr<Delegate> create_delegate(const std::string& backend, const GraphBlob& blob);

// Checks a call's tensors against the specs: count, dtype, rank and fixed dims.
// Throws qhx::Error naming the graph and the tensor.
void check_io(const std::string& graph, std::span<const IoSpec> specs, std::span<const TensorRef> tensors,
              const char* what);

}  // namespace qhx
