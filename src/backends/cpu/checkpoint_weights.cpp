#include "backends/cpu/checkpoint_weights.hpp"

#include <cmath>
#include <cstring>

#include "qhexrt/error.hpp"

namespace qhx::cpu {
namespace {

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

const TensorView& expect(const Checkpoint& ckpt, const std::string& name, const std::vector<std::int64_t>& shape) {
  const TensorView& t = ckpt.get(name);
  if (t.shape != shape)
    fail("tensor ", name, ": shape ", shape_str(t.shape), " does not match the config's ", shape_str(shape));
  return t;
}

float f16_to_f32(std::uint16_t h) {
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  const float sign = (h & 0x8000) != 0 ? -1.0f : 1.0f;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -24);
  if (exp == 31) return mant != 0 ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
}

}  // namespace

WeightMatrix matrix_weight(const Checkpoint& ckpt, const std::string& name, std::int64_t rows, std::int64_t cols) {
  const TensorView& t = expect(ckpt, name, {rows, cols});
  if (t.dtype != DType::F32 && t.dtype != DType::BF16)
    fail("tensor ", name, ": dtype ", dtype_name(t.dtype), " is not supported here (F32 or BF16)");
  return WeightMatrix{t.data, t.dtype, rows, cols};
}

WeightMatrix reshaped_matrix_weight(const Checkpoint& ckpt, const std::string& name, std::int64_t rows,
                                    std::int64_t cols) {
  const TensorView& t = ckpt.get(name);
  if (t.shape.empty() || t.shape[0] != rows || t.numel() != rows * cols)
    fail("tensor ", name, ": shape ", shape_str(t.shape), " does not flatten to [", rows, ", ", cols, "]");
  if (t.dtype != DType::F32 && t.dtype != DType::BF16)
    fail("tensor ", name, ": dtype ", dtype_name(t.dtype), " is not supported here (F32 or BF16)");
  return WeightMatrix{t.data, t.dtype, rows, cols};
}

std::vector<float> vector_weight(const Checkpoint& ckpt, const std::string& name, std::int64_t n) {
  const TensorView& t = expect(ckpt, name, {n});
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint16_t h = 0;
    switch (t.dtype) {
      case DType::F32:
        std::memcpy(&out[static_cast<std::size_t>(i)], t.data + i * 4, 4);
        break;
      case DType::BF16:
        std::memcpy(&h, t.data + i * 2, 2);
        out[static_cast<std::size_t>(i)] = bf16_to_f32(h);
        break;
      case DType::F16:
        std::memcpy(&h, t.data + i * 2, 2);
        out[static_cast<std::size_t>(i)] = f16_to_f32(h);
        break;
      default:
        fail("tensor ", name, ": dtype ", dtype_name(t.dtype), " is not supported here (F32, BF16 or F16)");
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
