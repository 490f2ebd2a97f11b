#include "backends/cpu/checkpoint_weights.hpp"

#include <cstdint>
#include <cstring>

#include "backends/cpu/stored_panels_file.hpp"
#include "common/shape_str.hpp"
#include "common/half.hpp"
#include "qhexrt/error.hpp"

namespace qhx::cpu {
namespace {

const TensorView& expect(const Checkpoint& ckpt, const std::string& name, const std::vector<std::int64_t>& shape) {
  const TensorView& t = ckpt.get(name);
  if (t.shape != shape)
    fail("tensor ", name, ": shape ", shape_str(t.shape), " does not match the config's ", shape_str(shape));
  return t;
}

// How a matrix's stored tensor must relate to its logical [rows, cols].
enum class Layout {
  Exact,    // exactly [rows, stored_cols]
  Flatten,  // [rows, ...] with the trailing dimensions flattening to stored_cols
};

std::string expected_str(Layout layout, std::int64_t rows, std::int64_t stored_cols) {
  return layout == Layout::Exact ? shape_str({rows, stored_cols})
                                 : cat("[", rows, ", ...] flattening to ", shape_str({rows, stored_cols}));
}

// `what` says which format fixed stored_cols, for the message ("" for float formats).
void check_stored_shape(const TensorView& t, const std::string& name, std::int64_t rows, std::int64_t cols,
                        std::int64_t stored_cols, Layout layout, const char* what) {
  const bool ok = layout == Layout::Exact ? t.shape == std::vector<std::int64_t>{rows, stored_cols}
                                          : !t.shape.empty() && t.shape[0] == rows && t.numel() == rows * stored_cols;
  if (ok) return;
  if (*what == '\0') {
    if (layout == Layout::Exact)
      fail("tensor ", name, ": shape ", shape_str(t.shape), " does not match the config's ", shape_str({rows, cols}));
    fail("tensor ", name, ": shape ", shape_str(t.shape), " does not flatten to [", rows, ", ", cols, "]");
  }
  fail("tensor ", name, ": shape ", shape_str(t.shape), " does not match ", expected_str(layout, rows, stored_cols),
       ", which a ", what, " matrix of the config's ", shape_str({rows, cols}), " needs");
}

// The F32 scales `<name>.scale` of a quantized matrix, checked against `shape`.
const float* scales_of(const Checkpoint& ckpt, const std::string& name, const char* what,
                       const std::vector<std::int64_t>& shape, const char* layout) {
  const std::string sname = name + ".scale";
  const TensorView* s = ckpt.find(sname);
  if (s == nullptr)
    fail("tensor ", name, ": a ", what, " matrix needs its scales in tensor ", sname, ", which the checkpoint lacks");
  if (s->dtype != DType::F32)
    fail("tensor ", sname, ": dtype ", dtype_name(s->dtype), " is not F32 (the scales of ", what, " matrix ", name,
         ")");
  if (s->shape != shape)
    fail("tensor ", sname, ": shape ", shape_str(s->shape), " does not match ", shape_str(shape), " (", layout,
         " scales of ", what, " matrix ", name, ")");
  if (reinterpret_cast<std::uintptr_t>(s->data) % alignof(float) != 0)
    fail("tensor ", sname, ": data is not 4-byte aligned in its file, so it cannot be used in place");
  return reinterpret_cast<const float*>(s->data);
}

// The kernels read a float matrix in place through typed pointers, so it must sit at
// a multiple of its element size in the file. Every writer puts it there (safetensors
// pads the header and orders tensors by dtype size; bundles align to 64); a file
// that does not is refused, as a misaligned scale is, not read out of alignment.
void check_aligned(const TensorView& t, const std::string& name) {
  const std::size_t align = dtype_size(t.dtype);
  if (reinterpret_cast<std::uintptr_t>(t.data) % align != 0)
    fail("tensor ", name, ": ", dtype_name(t.dtype), " data is not ", align,
         "-byte aligned in its file, so it cannot be used in place");
}

// Panel-form w8 matrices (bundle format 2) are named by their parts, not by `name`.
constexpr const char* kPanelFile = "the weights file";

WeightMatrix panel_matrix(const Checkpoint& ckpt, const std::string& name, std::int64_t rows, std::int64_t cols) {
  const auto s = find_stored_panels(ckpt, kPanelFile, name, rows, cols);
  if (!s) fail("tensor ", name, ": the checkpoint has neither it nor its panel form ", name, ".panels");
  if (reinterpret_cast<std::uintptr_t>(s->panels) % 64 != 0 ||
      reinterpret_cast<std::uintptr_t>(s->row_sums) % 64 != 0 || reinterpret_cast<std::uintptr_t>(s->scales) % 64 != 0)
    fail("tensor ", name, ".panels: the panel form is not 64-byte aligned in its file, so it cannot be used in place");
  WeightMatrix w =
      WeightMatrix::w8(static_cast<const std::int8_t*>(s->panels), static_cast<const float*>(s->scales), rows, cols);
  w.panel_form = true;
  w.panel_row_sums = static_cast<const std::int32_t*>(s->row_sums);
  return w;
}

WeightMatrix load_matrix(const Checkpoint& ckpt, const std::string& name, std::int64_t rows, std::int64_t cols,
                         Layout layout) {
  if (layout == Layout::Exact && ckpt.find(name) == nullptr && ckpt.find(name + ".panels") != nullptr)
    return panel_matrix(ckpt, name, rows, cols);
  const TensorView& t = ckpt.get(name);
  switch (t.dtype) {
    case DType::F32:
    case DType::BF16:
    case DType::F16:
      check_stored_shape(t, name, rows, cols, cols, layout, "");
      check_aligned(t, name);
      if (ckpt.find(name + ".scale") != nullptr)
        fail("tensor ", name, ": dtype ", dtype_name(t.dtype), " is not quantized, yet the checkpoint has a tensor ",
             name, ".scale (only I8 (w8) and U8 (w4) matrices have scales)");
      return WeightMatrix{.data = t.data, .dtype = t.dtype, .rows = rows, .cols = cols};
    case DType::I8: {
      check_stored_shape(t, name, rows, cols, cols, layout, "I8 (w8)");
      const auto* q = reinterpret_cast<const std::int8_t*>(t.data);
      const TensorView* st = ckpt.find(name + ".scale");
      if (st != nullptr && cols % kW4GroupSize == 0 &&
          st->shape == std::vector<std::int64_t>{rows, cols / kW4GroupSize})
        return WeightMatrix::w8_blocks(q, scales_of(ckpt, name, "I8 (w8)", st->shape, "per-block"), rows, cols);
      const float* s = scales_of(ckpt, name, "I8 (w8)", {rows},
                                 cols % kW4GroupSize == 0 ? "per-row (or [rows, cols / 32] per-block)" : "per-row");
      return WeightMatrix::w8(q, s, rows, cols);
    }
    case DType::U8: {
      if (cols % kW4GroupSize != 0)
        fail("tensor ", name, ": a U8 (w4) matrix needs a multiple of ", kW4GroupSize,
             " input features, but the config's matrix is ", shape_str({rows, cols}));
      check_stored_shape(t, name, rows, cols, cols / 2, layout, "U8 (w4)");
      const float* s = scales_of(ckpt, name, "U8 (w4)", {rows, cols / kW4GroupSize}, "per-group");
      return WeightMatrix::w4(reinterpret_cast<const std::uint8_t*>(t.data), s, rows, cols);
    }
    default:
      fail("tensor ", name, ": dtype ", dtype_name(t.dtype),
           " is not a weight matrix format (F32, BF16, F16, I8 + scale (w8), U8 + scale (w4))");
  }
}

}  // namespace

WeightMatrix matrix_weight(const Checkpoint& ckpt, const std::string& name, std::int64_t rows, std::int64_t cols) {
  return load_matrix(ckpt, name, rows, cols, Layout::Exact);
}

WeightMatrix matrix_weight(const Checkpoint& ckpt, const std::string& name) {
  if (ckpt.find(name) == nullptr)
    if (const auto shape = stored_panels_shape(ckpt, kPanelFile, name))
      return panel_matrix(ckpt, name, shape->first, shape->second);
  const TensorView& t = ckpt.get(name);
  if (t.shape.size() != 2) fail("tensor ", name, ": shape ", shape_str(t.shape), " is not a matrix");
  const std::int64_t cols = t.dtype == DType::U8 ? 2 * t.shape[1] : t.shape[1];
  return load_matrix(ckpt, name, t.shape[0], cols, Layout::Exact);
}

WeightMatrix reshaped_matrix_weight(const Checkpoint& ckpt, const std::string& name, std::int64_t rows,
                                    std::int64_t cols) {
  return load_matrix(ckpt, name, rows, cols, Layout::Flatten);
}

std::vector<float> vector_weight(const Checkpoint& ckpt, const std::string& name, std::int64_t n) {
  const TensorView& t = expect(ckpt, name, {n});
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint16_t h = 0;
    switch (t.dtype) {
      case DType::F32: std::memcpy(&out[static_cast<std::size_t>(i)], t.data + i * 4, 4); break;
      case DType::BF16:
        std::memcpy(&h, t.data + i * 2, 2);
        out[static_cast<std::size_t>(i)] = bf16_to_f32(h);
        break;
      case DType::F16:
        std::memcpy(&h, t.data + i * 2, 2);
        out[static_cast<std::size_t>(i)] = f16_to_f32(h);
        break;
      default: fail("tensor ", name, ": dtype ", dtype_name(t.dtype), " is not supported here (F32, BF16 or F16)");
    }
  }
  return out;
}

Linear linear_weight(const Checkpoint& ckpt, const std::string& prefix, std::int64_t out, std::int64_t in, bool bias) {
  Linear l{matrix_weight(ckpt, prefix + ".weight", out, in), {}};
  if (bias) l.bias = vector_weight(ckpt, prefix + ".bias", out);
  return l;
}

}  // namespace qhx::cpu
