// The qnn-htp backend: graph kind "qnn.context_graph" runs one graph of a QNN context
// binary on the HTP (emulated on x86-64) through the QAIRT runtime libraries.
//
// Manifest entry keys:
//   context_binary  the .bin file (a QNN context binary, e.g. from tools/qnn/make_qnn_graphs.py)
//   graph           the graph's name in the binary (optional when the binary holds one graph)
//   soc_model       optional: the Qnn_SocModel_t the plan targets (69 = SM8750, HTP v79).
//                   Context binaries are pinned to one HTP arch; on a device the wrong one
//                   fails in QnnContext_createFromBinary, but the x86-64 emulator runs a binary
//                   of any arch, so the plan states its target and QHexRT checks the binary.
//   row_blocks      optional, default false: the first dimension of every input and output
//                   is a row count, and a call with R rows runs the graph R / r times on
//                   consecutive blocks of r rows (r = the graph's own first dimension). This
//                   is how a [1, hidden] -> [1, vocab] lm-head serves the stages' [T, hidden].
//
// Inputs and outputs are the graph's, in the binary's order, with the binary's shapes.
// Float tensors (float16 or float32 in the binary) are f32 to the stages, as on the CPU
// backend, and converted at the boundary; int32, int8 and uint8 pass through.
#include <cstring>
#include <optional>

#include "backends/delegate.hpp"
#include "backends/qnn/qnn_runtime.hpp"
#include "common/half.hpp"
#include "common/mapped_file.hpp"
#include "qhexrt/error.hpp"

namespace qhx {
namespace qnn {
namespace {

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

class ContextGraph final : public Delegate {
 public:
  void init(const GraphBlob& blob) override {
    name_ = blob.name;
    for (const auto& [key, value] : blob.spec.items())
      if (key != "backend" && key != "kind" && key != "context_binary" && key != "graph" && key != "row_blocks" &&
          key != "soc_model")
        fail("graph \"", name_, "\": unknown key \"", key,
             "\" for qnn.context_graph (known: context_binary, graph, soc_model, row_blocks)");
    const auto path = blob_file(blob, "context_binary");
    file_.emplace(path);  // mapped; QNN copies what it needs into the context
    const std::string what = cat("graph \"", name_, "\" (", path.string(), ")");
    ctx_.emplace(Runtime::get(), std::span(file_->data(), file_->size()), what);
    if (const auto it = blob.spec.find("soc_model"); it != blob.spec.end()) {
      if (!it->is_number_integer() || it->get<std::int64_t>() < 0) fail("graph \"", name_, "\": \"soc_model\" must be a Qnn_SocModel_t number");
      const auto want = it->get<std::uint32_t>();
      const auto have = ctx_->info().soc_model;
      if (have == 0)
        fail("graph \"", name_, "\": ", path.string(), " does not record its SoC model (binary info version ",
             ctx_->info().version, "), so \"soc_model\": ", want, " cannot be checked");
      if (have != want)
        fail("graph \"", name_, "\": ", path.string(), " was prepared for SoC model ", have, " (", soc_label(have),
             "), the plan targets ", want, " (", soc_label(want),
             "); context binaries are pinned to one HTP arch: re-prepare it (tools/qnn/make_qnn_graphs.py)");
    }
    if (const auto it = blob.spec.find("graph"); it != blob.spec.end()) {
      if (!it->is_string()) fail("graph \"", name_, "\": \"graph\" must be a graph name (a string)");
      graph_ = it->get<std::string>();
    } else if (ctx_->info().graphs.size() == 1) {
      graph_ = ctx_->info().graphs[0].name;
    } else {
      ctx_->graph_info("");  // fails, listing the names
    }
    if (const auto it = blob.spec.find("row_blocks"); it != blob.spec.end()) {
      if (!it->is_boolean()) fail("graph \"", name_, "\": \"row_blocks\" must be true or false");
      row_blocks_ = it->get<bool>();
    }
    const GraphInfo& gi = ctx_->graph_info(graph_);
    ctx_->graph(graph_);  // retrieve now: a bad binary fails at load, not at the first token
    auto specs = [&](const std::vector<TensorInfo>& ts) {
      std::vector<IoSpec> out;
      for (const auto& t : ts) {
        IoSpec s{t.name, stage_dtype(name_, t), {}};
        for (const auto d : t.dims) s.shape.push_back(d);
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
    info_ = &gi;
    auto staging = [](const std::vector<TensorInfo>& ts) {
      std::vector<std::vector<std::byte>> bufs;
      for (const auto& t : ts) {
        std::size_t n = dtype_bytes(t.dtype);
        for (const auto d : t.dims) n *= d;
        bufs.emplace_back(n);
      }
      return bufs;
    };
    in_bufs_ = staging(gi.inputs);
    out_bufs_ = staging(gi.outputs);
  }

  std::vector<IoSpec> input_specs() const override { return in_specs_; }
  std::vector<IoSpec> output_specs() const override { return out_specs_; }

  void execute(std::span<const TensorRef> in, std::span<const TensorRef> out) override {
    check_io(name_, in_specs_, in, "input");
    check_io(name_, out_specs_, out, "output");
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
    std::vector<void*> ip(in.size()), op(out.size());
    for (std::int64_t b = 0; b < blocks; ++b) {
      for (std::size_t i = 0; i < in.size(); ++i) ip[i] = stage_in(info_->inputs[i], in[i], in_bufs_[i], b);
      for (std::size_t i = 0; i < out.size(); ++i) op[i] = out_bufs_[i].data();
      ctx_->execute(graph_, ip, op);
      for (std::size_t i = 0; i < out.size(); ++i) stage_out(info_->outputs[i], out_bufs_[i], out[i], b);
    }
  }

 private:
  // Copies block b of a stage tensor into the graph's layout (f32 -> f16 where it is f16).
  static void* stage_in(const TensorInfo& t, const TensorRef& src, std::vector<std::byte>& buf, std::int64_t b) {
    const std::size_t n = buf.size() / dtype_bytes(t.dtype);
    if (t.dtype == abi::DataType::Float16) {
      const float* s = src.as<float>() + static_cast<std::size_t>(b) * n;
      auto* d = reinterpret_cast<std::uint16_t*>(buf.data());
      for (std::size_t i = 0; i < n; ++i) d[i] = f32_to_f16(s[i]);
    } else {
      std::memcpy(buf.data(), static_cast<const std::byte*>(src.data) + static_cast<std::size_t>(b) * buf.size(),
                  buf.size());
    }
    return buf.data();
  }
  static void stage_out(const TensorInfo& t, const std::vector<std::byte>& buf, const TensorRef& dst, std::int64_t b) {
    const std::size_t n = buf.size() / dtype_bytes(t.dtype);
    if (t.dtype == abi::DataType::Float16) {
      const auto* s = reinterpret_cast<const std::uint16_t*>(buf.data());
      float* d = dst.as<float>() + static_cast<std::size_t>(b) * n;
      for (std::size_t i = 0; i < n; ++i) d[i] = f16_to_f32(s[i]);
    } else {
      std::memcpy(static_cast<std::byte*>(dst.data) + static_cast<std::size_t>(b) * buf.size(), buf.data(), buf.size());
    }
  }

  std::string name_, graph_;
  std::optional<MappedFile> file_;
  std::optional<Context> ctx_;
  const GraphInfo* info_ = nullptr;
  bool row_blocks_ = false;
  std::int64_t rows_ = 0;
  std::vector<IoSpec> in_specs_, out_specs_;
  std::vector<std::vector<std::byte>> in_bufs_, out_bufs_;
};

}  // namespace
}  // namespace qnn

void register_qnn_backend() {
  register_delegate("qnn-htp", "qnn.context_graph", [] { return std::make_unique<qnn::ContextGraph>(); });
}

}  // namespace qhx
