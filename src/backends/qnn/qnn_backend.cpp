// The qnn-htp backend: graph kind "qnn.context_graph" runs graphs of QNN context binaries
// on the HTP (emulated on x86-64) through the QAIRT runtime libraries.
//
// Manifest entry keys (docs/qnn.md):
//   context_binary   the .bin file (a QNN context binary, tools/qnn/make_qnn_bundle.py)
//   graph            the graph's name in the binary (optional when the binary holds one graph)
//   emulator_binary  optional: a binary to run instead on an x86-64 host, where the HTP is
//   emulator_graph   emulated and the emulator refuses weight-shared multi-graph binaries
//                    ("Shared weights buffer isn't supported on this platform"): the
//                    generator's non-shared twin of the same graph
//   soc_model        optional: the Qnn_SocModel_t the plan targets (69 = SM8750, HTP v79).
//                    Context binaries are pinned to one HTP arch; on a device the wrong one
//                    fails in QnnContext_createFromBinary, but the x86-64 emulator runs a binary
//                    of any arch, so the plan states its target and QHexRT checks the binary.
//   row_blocks       optional, default false: the first dimension of every input and output
//                    is a row count, and a call with R rows runs the graph R / r times on
//                    consecutive blocks of r rows (r = the graph's own first dimension). This
//                    is how a [1, hidden] -> [1, vocab] lm-head serves the stages' [T, hidden].
//   parts            instead of context_binary/graph: a decoder split along its layers, a list
//                    of {context_binary, graph, emulator_binary, emulator_graph} run in order.
//                    Part k's "inputs_embeds" is part k-1's "hidden"; the KV tensors
//                    ("past_*" inputs, "new_*" outputs, [rows, layers, ...]) are each part's
//                    slice of the whole along axis 1; every other input goes to each part
//                    that takes it. The graph's contract is the whole decoder's.
//
// Several entries naming one binary share one context (the prefill and decode graphs of a
// weight-shared binary are one context over one weight set, as on the device).
//
// Inputs and outputs are the graph's, with the binary's tensor names and shapes. Float
// tensors (float16 or float32 in the binary) are f32 to the stages, as on the CPU backend,
// and converted at the boundary into buffers allocated once; int32, int8 and uint8 pass through.
// A float16 tensor bound with F16 data is the caller's buffer itself (no copy): how the KV
// manager hands the decoder its cache, mask and new rows. A split decoder's KV tensor is
// then bound group-major (TensorRef::group_rows), each part's layers their own slab.
#include <cstring>
#include <map>
#include <optional>

#include "backends/delegate.hpp"
#include "backends/qnn/qnn_runtime.hpp"
#include "common/half.hpp"
#include "common/mapped_file.hpp"
#include "qhexrt/error.hpp"

namespace qhx {
namespace qnn {
namespace {

#if defined(__x86_64__)
constexpr bool kEmulatedHtp = true;  // libQnnHtp.so on x86-64 is Qualcomm's HTP emulator
#else
constexpr bool kEmulatedHtp = false;
#endif

DType stage_dtype(const std::string& graph, const TensorInfo& t) {
  switch (t.dtype) {
    case abi::DataType::Float16:
    case abi::DataType::Float32: return DType::F32;
    case abi::DataType::Int32: return DType::I32;
    case abi::DataType::Int8: return DType::I8;
    case abi::DataType::UInt8:
    case abi::DataType::Bool8: return DType::U8;
    default:
      fail("graph \"", graph, "\": tensor \"", t.name, "\" is ", dtype_label(t.dtype),
           "; the qnn-htp backend passes float16, float32, int32, int8 and uint8 tensors");
  }
}

// A context binary mapped and loaded once, shared by every graph entry that names it.
struct LoadedBinary {
  MappedFile file;
  Context ctx;
  LoadedBinary(const std::filesystem::path& path, const std::string& what)
      : file(path), ctx(Runtime::get(), std::span(file.data(), file.size()), what) {}
};

std::shared_ptr<LoadedBinary> load_binary(const std::filesystem::path& path, const std::string& what) {
  static std::map<std::string, std::weak_ptr<LoadedBinary>> loaded;  // by canonical path
  std::error_code ec;
  const std::string key = std::filesystem::weakly_canonical(path, ec).string();
  if (auto p = loaded[key].lock()) return p;
  auto p = std::make_shared<LoadedBinary>(path, what);
  loaded[key] = p;
  return p;
}

// Whether a tensor of a split decoder is each part's slice along axis 1 (its layers).
bool split_along_layers(const std::string& name, bool input) { return name.rfind(input ? "past_" : "new_", 0) == 0; }

// One graph of one binary, with its staging buffers (allocated once, reused every call).
struct Part {
  std::shared_ptr<LoadedBinary> bin;
  std::string graph;
  const GraphInfo* info = nullptr;
  std::vector<std::vector<std::byte>> in_bufs, out_bufs;
  std::int64_t layer0 = 0;  // a split decoder's first layer in this part
};

std::size_t tensor_bytes(const TensorInfo& t) {
  std::size_t n = dtype_bytes(t.dtype);
  for (const auto d : t.dims) n *= d;
  return n;
}

// Copies `rows` runs of `run` elements: run r from src + r * src_stride + src_off to
// dst + r * dst_stride + dst_off, converting f32 <-> f16 where the two sides differ.
// Returns the bytes read plus written.
std::uint64_t copy_runs(const void* src, bool src_f16, void* dst, bool dst_f16, std::size_t elem, std::int64_t rows,
                        std::int64_t run, std::int64_t src_stride, std::int64_t src_off, std::int64_t dst_stride,
                        std::int64_t dst_off) {
  const auto n = static_cast<std::uint64_t>(rows * run);
  const std::uint64_t moved = src_f16 == dst_f16 ? 2 * n * elem : 6 * n;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t s0 = r * src_stride + src_off, d0 = r * dst_stride + dst_off;
    if (src_f16 == dst_f16) {
      std::memcpy(static_cast<std::byte*>(dst) + d0 * static_cast<std::int64_t>(elem),
                  static_cast<const std::byte*>(src) + s0 * static_cast<std::int64_t>(elem),
                  static_cast<std::size_t>(run) * elem);
    } else if (dst_f16) {
      const float* s = static_cast<const float*>(src) + s0;
      auto* d = static_cast<std::uint16_t*>(dst) + d0;
      for (std::int64_t i = 0; i < run; ++i) d[i] = f32_to_f16(s[i]);
    } else {
      const auto* s = static_cast<const std::uint16_t*>(src) + s0;
      float* d = static_cast<float*>(dst) + d0;
      for (std::int64_t i = 0; i < run; ++i) d[i] = f16_to_f32(s[i]);
    }
  }
  return moved;
}

// The stage side's element size of a copy to or from tensor `t`: 2 for F16 data, 4 for
// other float data (f32), the tensor's own for integers.
std::size_t stage_elem(const TensorInfo& t, const TensorRef& r) {
  if (r.dtype == DType::F16) return 2;
  return t.dtype == abi::DataType::Float16 ? 4 : dtype_bytes(t.dtype);
}

class ContextGraph final : public Delegate {
 public:
  void init(const GraphBlob& blob) override {
    name_ = blob.name;
    for (const auto& [key, value] : blob.spec.items())
      if (key != "backend" && key != "kind" && key != "context_binary" && key != "graph" && key != "row_blocks" &&
          key != "soc_model" && key != "emulator_binary" && key != "emulator_graph" && key != "parts" &&
          key != "contract")
        fail("graph \"", name_, "\": unknown key \"", key,
             "\" for qnn.context_graph (known: context_binary, graph, emulator_binary, emulator_graph, soc_model, "
             "row_blocks, parts, contract)");
    // A decoder's entry declares the block contract; before "contract" (manifest version 6)
    // the decoder was the graph given as "parts", which is how qhx_export wrote every decoder.
    contract_ = blob.spec.contains("parts") ? GraphContract::DecoderBlock : GraphContract::Plain;
    if (const auto it = blob.spec.find("contract"); it != blob.spec.end()) {
      if (blob.manifest_version < 6)
        fail("graph \"", name_, "\": \"contract\" needs qhexrt_manifest >= 6 (this plan says ", blob.manifest_version,
             ")");
      if (*it == "decoder_block")
        contract_ = GraphContract::DecoderBlock;
      else if (*it == "none")
        contract_ = GraphContract::Plain;
      else
        fail("graph \"", name_, "\": \"contract\" must be \"decoder_block\" or \"none\"");
    }
    if (const auto it = blob.spec.find("soc_model"); it != blob.spec.end()) {
      if (!it->is_number_integer() || it->get<std::int64_t>() < 0)
        fail("graph \"", name_, "\": \"soc_model\" must be a Qnn_SocModel_t number");
      soc_model_ = it->get<std::uint32_t>();
    }
    if (const auto it = blob.spec.find("row_blocks"); it != blob.spec.end()) {
      if (!it->is_boolean()) fail("graph \"", name_, "\": \"row_blocks\" must be true or false");
      row_blocks_ = it->get<bool>();
    }
    if (const auto it = blob.spec.find("parts"); it != blob.spec.end()) {
      if (blob.spec.contains("context_binary") || blob.spec.contains("graph") || blob.spec.contains("emulator_binary"))
        fail("graph \"", name_, "\": give either \"parts\" or \"context_binary\", not both");
      if (!it->is_array() || it->empty()) fail("graph \"", name_, "\": \"parts\" must be a non-empty list");
      if (row_blocks_) fail("graph \"", name_, "\": \"row_blocks\" and \"parts\" do not go together");
      for (std::size_t k = 0; k < it->size(); ++k) {
        const auto& p = (*it)[k];
        if (!p.is_object()) fail("graph \"", name_, "\": parts[", k, "] must be an object");
        for (const auto& [key, value] : p.items())
          if (key != "context_binary" && key != "graph" && key != "emulator_binary" && key != "emulator_graph")
            fail("graph \"", name_, "\": parts[", k, "]: unknown key \"", key,
                 "\" (known: context_binary, graph, emulator_binary, emulator_graph)");
        parts_.push_back(open_part(blob, p, cat("parts[", k, "]")));
      }
    } else {
      parts_.push_back(open_part(blob, blob.spec, ""));
    }
    if (parts_.size() == 1)
      build_specs_single();
    else
      build_specs_split();
  }

  std::vector<IoSpec> input_specs() const override { return in_specs_; }
  std::vector<IoSpec> output_specs() const override { return out_specs_; }
  GraphContract contract() const override { return contract_; }
  std::uint64_t boundary_bytes() const override { return moved_; }

  void execute(std::span<const TensorRef> in, std::span<const TensorRef> out) override {
    check_io(name_, in_specs_, in, "input");
    check_io(name_, out_specs_, out, "output");
    if (parts_.size() == 1)
      execute_single(in, out);
    else
      execute_split(in, out);
  }

 private:
  // Opens one graph: the emulator's twin on an x86-64 host when the entry names one.
  Part open_part(const GraphBlob& blob, const nlohmann::json& spec, const std::string& where) {
    const std::string at = where.empty() ? "" : cat(where, ".");
    auto str = [&](const char* key) -> std::optional<std::string> {
      const auto it = spec.find(key);
      if (it == spec.end()) return std::nullopt;
      if (!it->is_string() || it->get<std::string>().empty())
        fail("graph \"", name_, "\": ", at, key, " must be a non-empty string");
      return it->get<std::string>();
    };
    const bool emulate = kEmulatedHtp && spec.contains("emulator_binary");
    const auto file = str(emulate ? "emulator_binary" : "context_binary");
    if (!file) fail("graph \"", name_, "\": ", at, "context_binary: missing (the QNN context binary to run)");
    const auto graph = str(emulate ? "emulator_graph" : "graph");
    std::filesystem::path path = *file;
    if (path.is_relative()) path = blob.dir / path;
    if (!std::filesystem::exists(path))
      fail("graph \"", name_, "\": ", at, "context binary ", path.string(), " does not exist");
    Part p;
    p.bin = load_binary(path, cat("graph \"", name_, "\" (", path.string(), ")"));
    const BinaryInfo& info = p.bin->ctx.info();
    if (soc_model_ != 0) {
      if (info.soc_model == 0)
        fail("graph \"", name_, "\": ", path.string(), " does not record its SoC model (binary info version ",
             info.version, "), so \"soc_model\": ", soc_model_, " cannot be checked");
      if (info.soc_model != soc_model_)
        fail("graph \"", name_, "\": ", path.string(), " was prepared for SoC model ", info.soc_model, " (",
             soc_label(info.soc_model), "), the plan targets ", soc_model_, " (", soc_label(soc_model_),
             "); context binaries are pinned to one HTP arch: re-export it (qhx_export --target qnn-htp --soc ...)");
    }
    if (graph) {
      p.graph = *graph;
    } else if (info.graphs.size() == 1) {
      p.graph = info.graphs[0].name;
    } else {
      p.bin->ctx.graph_info("");  // fails, listing the names
    }
    p.info = &p.bin->ctx.graph_info(p.graph);
    p.bin->ctx.graph(p.graph);  // retrieve now: a bad binary fails at load, not at the first token
    for (const auto& t : p.info->inputs) {
      (void)stage_dtype(name_, t);
      p.in_bufs.emplace_back(tensor_bytes(t));
    }
    for (const auto& t : p.info->outputs) {
      (void)stage_dtype(name_, t);
      p.out_bufs.emplace_back(tensor_bytes(t));
    }
    return p;
  }

  IoSpec spec_of(const TensorInfo& t) const {
    IoSpec s{t.name, stage_dtype(name_, t), {}};
    for (const auto d : t.dims) s.shape.push_back(d);
    s.f16 = t.dtype == abi::DataType::Float16;
    return s;
  }
  bool kv_tensor(const TensorInfo& t, bool input) const {
    return contract_ == GraphContract::DecoderBlock && split_along_layers(t.name, input) && t.dims.size() >= 2;
  }

  void build_specs_single() {
    const GraphInfo& gi = *parts_[0].info;
    auto specs = [&](const std::vector<TensorInfo>& ts) {
      std::vector<IoSpec> out;
      for (const auto& t : ts) {
        IoSpec s = spec_of(t);
        if (row_blocks_) {
          if (s.shape.empty()) fail("graph \"", name_, "\": row_blocks needs tensors of rank >= 1 (\"", t.name, "\")");
          if (rows_ != 0 && s.shape[0] != rows_)
            fail("graph \"", name_, "\": row_blocks needs one first dimension for all tensors (\"", t.name, "\")");
          rows_ = s.shape[0];
          s.shape[0] = -1;
        }
        out.push_back(std::move(s));
      }
      return out;
    };
    in_specs_ = specs(gi.inputs);
    out_specs_ = specs(gi.outputs);
    for (std::size_t i = 0; i < gi.inputs.size(); ++i)
      if (kv_tensor(gi.inputs[i], true)) in_specs_[i].layer_groups = {gi.inputs[i].dims[1]};
    for (std::size_t i = 0; i < gi.outputs.size(); ++i)
      if (kv_tensor(gi.outputs[i], false)) out_specs_[i].layer_groups = {gi.outputs[i].dims[1]};
  }

  // The whole decoder's contract from its parts: KV tensors span every part's layers.
  void build_specs_split() {
    std::int64_t layers = 0;
    for (std::size_t k = 0; k < parts_.size(); ++k) {
      Part& p = parts_[k];
      const TensorInfo* pk = find(p.info->inputs, "past_key");
      if (pk == nullptr || pk->dims.size() < 2)
        fail("graph \"", name_, "\": parts[", k, "] (", p.graph,
             ") has no \"past_key\" [rows, layers, ...] input, "
             "so its layers cannot be told; \"parts\" splits a decoder along its layers");
      if (find(p.info->inputs, "inputs_embeds") == nullptr || find(p.info->outputs, "hidden") == nullptr)
        fail("graph \"", name_, "\": parts[", k, "] (", p.graph,
             ") needs an \"inputs_embeds\" input and a \"hidden\" output");
      p.layer0 = layers;
      layers += pk->dims[1];
    }
    auto merge = [&](std::vector<IoSpec>& specs, const TensorInfo& t, bool input, std::size_t k) {
      IoSpec s = spec_of(t);
      const bool kv = split_along_layers(t.name, input);
      if (kv) s.shape[1] = layers;
      for (IoSpec& e : specs)
        if (e.name == s.name) {
          if (e.shape != s.shape || e.dtype != s.dtype || e.f16 != s.f16)
            fail("graph \"", name_, "\": parts[", k, "]: tensor \"", t.name, "\" differs from the earlier parts'");
          if (kv) e.layer_groups.push_back(t.dims[1]);
          return;
        }
      if (kv) s.layer_groups = {t.dims[1]};
      specs.push_back(std::move(s));
    };
    for (std::size_t k = 0; k < parts_.size(); ++k) {
      for (const auto& t : parts_[k].info->inputs)
        if (k == 0 || t.name != "inputs_embeds") merge(in_specs_, t, true, k);
      for (const auto& t : parts_[k].info->outputs) {
        const bool last = k + 1 == parts_.size();
        if (t.name == "hidden" && !last) continue;  // the next part's inputs_embeds
        if (!last && !split_along_layers(t.name, false))
          fail("graph \"", name_, "\": parts[", k, "]: output \"", t.name, "\" of a middle part has nowhere to go");
        merge(out_specs_, t, false, k);
      }
    }
    for (const auto& s : in_specs_)
      if (split_along_layers(s.name, true) && s.shape.size() < 2)
        fail("graph \"", name_, "\": \"", s.name, "\" must be [rows, layers, ...]");
  }

  static const TensorInfo* find(const std::vector<TensorInfo>& ts, const std::string& name) {
    for (const auto& t : ts)
      if (t.name == name) return &t;
    return nullptr;
  }
  std::size_t index_of(const std::vector<IoSpec>& specs, const std::string& name) const {
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (specs[i].name == name) return i;
    fail("graph \"", name_, "\": no tensor \"", name, "\" in the contract");
  }

  void execute_single(std::span<const TensorRef> in, std::span<const TensorRef> out) {
    Part& p = parts_[0];
    std::int64_t blocks = 1;
    if (row_blocks_) {
      const std::int64_t R = in.empty() ? out[0].shape[0] : in[0].shape[0];
      for (const auto& t : in)
        if (t.shape[0] != R) fail("graph \"", name_, "\": all tensors must have the same number of rows");
      for (const auto& t : out)
        if (t.shape[0] != R) fail("graph \"", name_, "\": all tensors must have the same number of rows");
      if (R % rows_ != 0) fail("graph \"", name_, "\": ", R, " rows is not a multiple of the graph's ", rows_);
      blocks = R / rows_;
    }
    ip_.resize(in.size());
    op_.resize(out.size());
    for (std::int64_t b = 0; b < blocks; ++b) {
      for (std::size_t i = 0; i < in.size(); ++i) {
        const TensorInfo& t = p.info->inputs[i];
        if (in_place(t, in[i]) && blocks == 1) {  // the caller's fp16 buffer is the graph's
          ip_[i] = in[i].data;
          continue;
        }
        const auto n = static_cast<std::int64_t>(p.in_bufs[i].size() / dtype_bytes(t.dtype));
        moved_ += copy_runs(in[i].data, in[i].dtype == DType::F16, p.in_bufs[i].data(),
                            t.dtype == abi::DataType::Float16, stage_elem(t, in[i]), 1, n, 0, b * n, 0, 0);
        ip_[i] = p.in_bufs[i].data();
      }
      for (std::size_t i = 0; i < out.size(); ++i)
        op_[i] = in_place(p.info->outputs[i], out[i]) && blocks == 1 ? out[i].data : p.out_bufs[i].data();
      p.bin->ctx.execute(p.graph, ip_, op_);
      for (std::size_t i = 0; i < out.size(); ++i) {
        const TensorInfo& t = p.info->outputs[i];
        if (op_[i] == out[i].data) continue;
        const auto n = static_cast<std::int64_t>(p.out_bufs[i].size() / dtype_bytes(t.dtype));
        moved_ += copy_runs(p.out_bufs[i].data(), t.dtype == abi::DataType::Float16, out[i].data,
                            out[i].dtype == DType::F16, stage_elem(t, out[i]), 1, n, 0, 0, 0, b * n);
      }
    }
  }

  // Whether the caller's buffer can be the graph's own: fp16 data for an fp16 tensor, laid
  // out as the graph takes it (a KV tensor of a whole decoder plain or group-major).
  static bool in_place(const TensorInfo& t, const TensorRef& r) {
    return r.dtype == DType::F16 && t.dtype == abi::DataType::Float16;
  }

  void execute_split(std::span<const TensorRef> in, std::span<const TensorRef> out) {
    for (std::size_t k = 0; k < parts_.size(); ++k) {
      Part& p = parts_[k];
      ip_.resize(p.info->inputs.size());
      op_.resize(p.info->outputs.size());
      for (std::size_t i = 0; i < p.info->inputs.size(); ++i) {
        const TensorInfo& t = p.info->inputs[i];
        if (k > 0 && t.name == "inputs_embeds") {  // the previous part's hidden, as it left the HTP
          const Part& prev = parts_[k - 1];
          const TensorInfo* h = find(prev.info->outputs, "hidden");
          const std::size_t hi = static_cast<std::size_t>(h - prev.info->outputs.data());
          if (h->dtype != t.dtype || prev.out_bufs[hi].size() != p.in_bufs[i].size())
            fail("graph \"", name_, "\": parts[", k, "]: \"inputs_embeds\" does not match parts[", k - 1,
                 "]'s \"hidden\"");
          ip_[i] = const_cast<std::byte*>(prev.out_bufs[hi].data());
          continue;
        }
        const TensorRef& src = in[index_of(in_specs_, t.name)];
        if (void* view = part_view(t, true, p, src)) {
          ip_[i] = view;
          continue;
        }
        moved_ += stage_slice(t, true, p, src, p.in_bufs[i].data());
        ip_[i] = p.in_bufs[i].data();
      }
      for (std::size_t i = 0; i < p.info->outputs.size(); ++i) {
        const TensorInfo& t = p.info->outputs[i];
        void* view = t.name == "hidden" && k + 1 < parts_.size()
                         ? nullptr
                         : part_view(t, false, p, out[index_of(out_specs_, t.name)]);
        op_[i] = view != nullptr ? view : p.out_bufs[i].data();
      }
      p.bin->ctx.execute(p.graph, ip_, op_);
      for (std::size_t i = 0; i < p.info->outputs.size(); ++i) {
        const TensorInfo& t = p.info->outputs[i];
        if (t.name == "hidden" && k + 1 < parts_.size()) continue;  // goes on to the next part
        if (op_[i] != p.out_bufs[i].data()) continue;               // written in place
        moved_ += stage_slice(t, false, p, out[index_of(out_specs_, t.name)], p.out_bufs[i].data());
      }
    }
  }

  // The part's own view of the whole decoder's tensor, when the graph can take it in place:
  // fp16 data, and for a KV tensor the group-major layout (the part's slab); else null.
  static void* part_view(const TensorInfo& t, bool input, const Part& p, const TensorRef& whole) {
    if (!in_place(t, whole)) return nullptr;
    if (!split_along_layers(t.name, input)) return whole.data;
    if (whole.group_rows == 0) return nullptr;
    std::int64_t inner = 1;
    for (std::size_t d = 2; d < t.dims.size(); ++d) inner *= t.dims[d];
    return static_cast<std::uint16_t*>(whole.data) + whole.group_rows * p.layer0 * inner;
  }

  // Moves a part's tensor between its staging buffer and the whole decoder's tensor:
  // the part's layers of a KV tensor, or all of any other. Returns the bytes moved.
  static std::uint64_t stage_slice(const TensorInfo& t, bool input, const Part& p, const TensorRef& whole, void* buf) {
    const bool f16 = t.dtype == abi::DataType::Float16, whole_f16 = whole.dtype == DType::F16;
    const std::size_t elem = stage_elem(t, whole);
    std::int64_t rows = 1, run = 1, whole_stride = 0, offset = 0;
    if (split_along_layers(t.name, input)) {
      std::int64_t inner = 1;
      for (std::size_t d = 2; d < t.dims.size(); ++d) inner *= t.dims[d];
      rows = t.dims[0];
      run = t.dims[1] * inner;
      whole_stride = whole.shape[1] * inner;
      offset = p.layer0 * inner;
    } else {
      for (const auto d : t.dims) run *= d;
    }
    if (input) return copy_runs(whole.data, whole_f16, buf, f16, elem, rows, run, whole_stride, offset, run, 0);
    return copy_runs(buf, f16, whole.data, whole_f16, elem, rows, run, run, 0, whole_stride, offset);
  }

  std::string name_;
  GraphContract contract_ = GraphContract::Plain;
  std::uint32_t soc_model_ = 0;
  std::vector<Part> parts_;
  bool row_blocks_ = false;
  std::int64_t rows_ = 0;
  std::vector<IoSpec> in_specs_, out_specs_;
  std::vector<void*> ip_, op_;
  std::uint64_t moved_ = 0;  // boundary_bytes()
};

}  // namespace
}  // namespace qnn

void register_qnn_backend() {
  register_delegate("qnn-htp", "qnn.context_graph", [] { return std::make_unique<qnn::ContextGraph>(); });
  register_backend_configurator("qnn-htp", [](const nlohmann::json& settings) {
    qnn::LibraryNames names;
    for (const auto& [key, value] : settings.items()) {
      if (!value.is_string()) fail("backend \"qnn-htp\": setting \"", key, "\" must be a string");
      if (key == "htp_library")
        names.htp = value.get<std::string>();
      else if (key == "system_library")
        names.system = value.get<std::string>();
      else
        fail("backend \"qnn-htp\" has no setting \"", key, "\" (it takes htp_library, system_library)");
    }
    qnn::request_libraries(names);
  });
}

}  // namespace qhx
