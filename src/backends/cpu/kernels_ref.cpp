#include "backends/cpu/kernels_ref.hpp"

#include "backends/cpu/kernel_set.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "backends/cpu/int8_attention.hpp"
#include "common/half.hpp"
#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/kv_cache_i8.hpp"
#include "qhexrt/error.hpp"

namespace qhx::cpu {

const char* weight_format_name(const WeightMatrix& w) {
  switch (w.dtype) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I8: return "w8";
    case DType::U8: return "w4";
    default: return "invalid";
  }
}

void weight_row_to_f32(const WeightMatrix& w, std::int64_t r, float* out) {
  const std::int64_t n = w.cols;
  switch (w.dtype) {
    case DType::F32:
      std::memcpy(out, static_cast<const float*>(w.data) + r * n, static_cast<std::size_t>(n) * sizeof(float));
      return;
    case DType::BF16: {
      const auto* src = static_cast<const std::uint16_t*>(w.data) + r * n;
      for (std::int64_t c = 0; c < n; ++c) out[c] = bf16_to_f32(src[c]);
      return;
    }
    case DType::F16: {
      const auto* src = static_cast<const std::uint16_t*>(w.data) + r * n;
      for (std::int64_t c = 0; c < n; ++c) out[c] = f16_to_f32(src[c]);
      return;
    }
    case DType::I8: {  // w8: one scale per row, or per block of 32 columns
      if (w.block_scales) {
        const float* s = w.scales + r * (n / kW4GroupSize);
        for (std::int64_t c = 0; c < n; ++c) out[c] = static_cast<float>(w8_at(w, r, c)) * s[c / kW4GroupSize];
        return;
      }
      const float s = w.scales[r];
      if (w.panel_form) {
        for (std::int64_t c = 0; c < n; ++c) out[c] = static_cast<float>(w8_at(w, r, c)) * s;
        return;
      }
      const auto* q = static_cast<const std::int8_t*>(w.data) + r * n;
      for (std::int64_t c = 0; c < n; ++c) out[c] = static_cast<float>(q[c]) * s;
      return;
    }
    case DType::U8: {  // w4: two values per byte, one scale per 32 columns
      const auto* q = static_cast<const std::uint8_t*>(w.data) + r * (n / 2);
      const float* s = w.scales + r * (n / kW4GroupSize);
      for (std::int64_t c = 0; c < n; ++c)
        out[c] = static_cast<float>(w4_nibble(q[c / 2], static_cast<int>(c & 1))) * s[c / kW4GroupSize];
      return;
    }
    default: break;
  }
  fail("weight_row_to_f32: dtype ", dtype_name(w.dtype), " is not a weight format (F32, BF16, F16, I8, U8)");
}

namespace ref {
namespace {

// Dot product with 8 interleaved partial sums: a fixed order, and one the
// compiler can vectorize without reassociating anything.
float dot(const float* a, const float* b, std::int64_t n) {
  float acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) + tail;
}

}  // namespace

namespace {

// The int8 path's contracts (int8_matmul.hpp), straight from their definitions.

// qw[r, c] of a block-scaled matrix (w4, or w8 with block scales).
int block_weight(const WeightMatrix& w, std::int64_t r, std::int64_t c) {
  if (w.dtype == DType::I8) return w8_at(w, r, c);
  const auto* packed = static_cast<const std::uint8_t*>(w.data);
  return w4_nibble(packed[r * (w.cols / 2) + c / 2], static_cast<int>(c & 1));
}

void linear_int8_blocks(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y) {
  if (w.cols % kW4GroupSize != 0)
    fail("linear: a ", w.dtype == DType::I8 ? "w8 matrix with block scales" : "w4 matrix",
         " needs a multiple of 32 columns, not ", w.cols);
  const std::int64_t groups = w.cols / kW4GroupSize;
  std::vector<std::uint8_t> q(static_cast<std::size_t>(m * w.cols));
  std::vector<float> sx(static_cast<std::size_t>(m * groups));
  std::vector<std::int32_t> sums(static_cast<std::size_t>(m * groups));
  quantize_blocks_q8(x, m, w.cols, w.cols, q.data(), sx.data(), sums.data());
  for (std::int64_t n = 0; n < w.rows; ++n) {
    for (std::int64_t i = 0; i < m; ++i) {
      const auto* qx = reinterpret_cast<const std::int8_t*>(q.data() + i * w.cols);
      float acc = 0.0f;
      for (std::int64_t g = 0; g < groups; ++g) {
        std::int32_t isum = 0;
        for (std::int64_t c = g * kW4GroupSize; c < (g + 1) * kW4GroupSize; ++c)
          isum += static_cast<std::int32_t>(qx[c]) * block_weight(w, n, c);
        acc = std::fma(static_cast<float>(isum),
                       sx[static_cast<std::size_t>(i * groups + g)] * w.scales[n * groups + g], acc);
      }
      y[i * w.rows + n] = acc + (bias != nullptr ? bias[n] : 0.0f);
    }
  }
}

void linear_int8(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y) {
  if (has_block_scales(w)) {
    linear_int8_blocks(x, m, w, bias, y);
    return;
  }
  if (w.dtype != DType::I8) fail("linear: int8 activations need a w8 or w4 matrix, not ", weight_format_name(w));
  if (w.cols > kInt8MaxCols) fail("linear: ", w.cols, " input features exceed the int8 limit of ", kInt8MaxCols);
  std::vector<std::uint8_t> q(static_cast<std::size_t>(m * w.cols));
  std::vector<float> sx(static_cast<std::size_t>(m));
  quantize_rows_q8(x, m, w.cols, w.cols, 0, q.data(), sx.data());
  for (std::int64_t n = 0; n < w.rows; ++n) {
    for (std::int64_t i = 0; i < m; ++i) {
      const auto* qx = reinterpret_cast<const std::int8_t*>(q.data() + i * w.cols);
      std::int32_t acc = 0;
      for (std::int64_t c = 0; c < w.cols; ++c) acc += static_cast<std::int32_t>(qx[c]) * w8_at(w, n, c);
      y[i * w.rows + n] = std::fma(static_cast<float>(acc), sx[static_cast<std::size_t>(i)] * w.scales[n],
                                   bias != nullptr ? bias[n] : 0.0f);
    }
  }
}

}  // namespace

void linear(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y) {
  if (w.int8_activations) {
    linear_int8(x, m, w, bias, y);
    return;
  }
  std::vector<float> rounded;
  if (w.f16_activations) {
    rounded.resize(static_cast<std::size_t>(m * w.cols));
    for (std::size_t i = 0; i < rounded.size(); ++i) rounded[i] = f16_to_f32(f32_to_f16(x[i]));
    x = rounded.data();
  }
  std::vector<float> row(static_cast<std::size_t>(w.cols));
  for (std::int64_t n = 0; n < w.rows; ++n) {
    weight_row_to_f32(w, n, row.data());  // once per weight row, reused for all m inputs
    const float b = bias != nullptr ? bias[n] : 0.0f;
    for (std::int64_t i = 0; i < m; ++i) y[i * w.rows + n] = dot(x + i * w.cols, row.data(), w.cols) + b;
  }
}

void linear_then(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y, BlockStep step) {
  linear(x, m, w, bias, y);
  step.run(step.ctx, 0, m, 0, w.rows);
}

void rms_norm(const float* x, const float* w, std::int64_t rows, std::int64_t n, float eps, float* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double ss = 0.0;  // mean of squares in double: closer to torch's pairwise sum than a naive f32 sum
    for (std::int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float mean_sq = static_cast<float>(ss / static_cast<double>(n));
    const float inv = 1.0f / std::sqrt(mean_sq + eps);
    for (std::int64_t i = 0; i < n; ++i) y[r * n + i] = w[i] * (xr[i] * inv);
  }
}

void layer_norm(const float* x, const float* w, const float* b, std::int64_t rows, std::int64_t n, float eps,
                float* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double sum = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(n);
    double var = 0.0;
    for (std::int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const float inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(n) + eps));
    const auto meanf = static_cast<float>(mean);
    for (std::int64_t i = 0; i < n; ++i) y[r * n + i] = (xr[i] - meanf) * inv * w[i] + b[i];
  }
}

void silu_mul(const float* gate, const float* up, std::int64_t n, float* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    y[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void gelu_tanh(const float* x, std::int64_t n, float* y) {
  const float k = std::sqrt(2.0f / std::numbers::pi_v<float>);
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
  }
}

void gelu_erf(const float* x, std::int64_t n, float* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::erf(v * static_cast<float>(1.0 / std::numbers::sqrt2)));
  }
}

void add_inplace(float* y, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void rope_rotate_half(float* x, std::int64_t tokens, std::int64_t heads, std::int64_t dim, const float* cos,
                      const float* sin) {
  const std::int64_t half = dim / 2;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* c = cos + t * dim;
    const float* s = sin + t * dim;
    for (std::int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const float lo = v[i];
        const float hi = v[i + half];
        v[i] = lo * c[i] + (-hi) * s[i];
        v[i + half] = hi * c[i + half] + lo * s[i + half];
      }
    }
  }
}

namespace {

// o [d] = Σ_j softmax(p)_j · row_j over scores p [visible] whose maximum is max_s
// (p is overwritten); add_row(j, w, o) adds w times value row j into o.
template <class AddRow>
void softmax_weighted_rows(float* p, std::int64_t visible, float max_s, std::int64_t d, float* o, AddRow&& add_row) {
  float sum = 0.0f;
  for (std::int64_t j = 0; j < visible; ++j) {
    p[j] = std::exp(p[j] - max_s);
    sum += p[j];
  }
  std::fill(o, o + d, 0.0f);
  for (std::int64_t j = 0; j < visible; ++j) add_row(j, p[j] / sum, o);
}

}  // namespace

void attention(const float* q, const float* k, const float* v, std::int64_t t, std::int64_t n, std::int64_t hq,
               std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal, float* out) {
  const std::int64_t group = hq / hkv;
  std::vector<float> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < t; ++i) {
    const std::int64_t visible = causal ? std::min(n, start + i + 1) : n;
    for (std::int64_t h = 0; h < hq; ++h) {
      const float* qi = q + (i * hq + h) * d;
      const std::int64_t kvh = h / group;
      float max_s = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < visible; ++j) {
        p[j] = dot(qi, k + (j * hkv + kvh) * d, d) * scale;
        max_s = std::max(max_s, p[j]);
      }
      softmax_weighted_rows(p.data(), visible, max_s, d, out + (i * hq + h) * d,
                            [&](std::int64_t j, float w, float* o) {
                              const float* vj = v + (j * hkv + kvh) * d;
                              for (std::int64_t c = 0; c < d; ++c) o[c] += w * vj[c];
                            });
    }
  }
}

void gather_rows(const WeightMatrix& table, const std::int32_t* ids, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) weight_row_to_f32(table, ids[i], out + i * table.cols);
}

void attention_f16kv(const float* q, const std::uint16_t* k, const std::uint16_t* v, std::int64_t t, std::int64_t n,
                     std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start,
                     float scale, bool causal, float* out) {
  // Widened into attention's [n, hkv, d].
  std::vector<float> kf(static_cast<std::size_t>(n * hkv * d)), vf(kf.size());
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t g = 0; g < hkv; ++g)
      for (std::int64_t c = 0; c < d; ++c) {
        const auto from = static_cast<std::size_t>((g * ctx + j) * d + c);
        const auto to = static_cast<std::size_t>((j * hkv + g) * d + c);
        kf[to] = f16_to_f32(k[from]);
        vf[to] = f16_to_f32(v[from]);
      }
  attention(q, kf.data(), vf.data(), t, n, hq, hkv, d, start, scale, causal, out);
}

void to_f16(const float* x, std::int64_t n, std::uint16_t* y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

void attention_i8kv(const float* q, const std::int8_t* k, const std::int8_t* v, std::int64_t t, std::int64_t n,
                    std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start,
                    float scale, float* out) {
  // kv_cache_i8.hpp's contract in plain loops: integer scores, then `attention`'s
  // softmax and weighted sum over the values the cache stands for.
  if (d > kKvI8MaxHeadDim) fail("attention over the 8-bit KV cache: head size ", d, " exceeds ", kKvI8MaxHeadDim);
  const std::int64_t group = hq / hkv, rb = kv_i8_row_bytes(d);
  std::vector<std::int16_t> qq(static_cast<std::size_t>(d));
  std::vector<float> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < t; ++i) {
    const std::int64_t visible = std::min(n, start + i + 1);
    for (std::int64_t h = 0; h < hq; ++h) {
      const std::int64_t g = h / group;
      const float qs = kv_i8_quantize_query(q + (i * hq + h) * d, d, qq.data()) * scale;
      float max_s = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < visible; ++j) {
        const std::int8_t* kj = k + (g * ctx + j) * rb;
        std::int32_t dot = 0;
        for (std::int64_t c = 0; c < d; ++c) dot += qq[static_cast<std::size_t>(c)] * kj[c];
        p[j] = kv_i8_score(dot, kv_i8_scale(kj, d), qs);
        max_s = std::max(max_s, p[j]);
      }
      softmax_weighted_rows(p.data(), visible, max_s, d, out + (i * hq + h) * d,
                            [&](std::int64_t j, float w, float* o) {
                              const std::int8_t* vj = v + (g * ctx + j) * rb;
                              const float s = kv_i8_scale(vj, d);
                              for (std::int64_t c = 0; c < d; ++c) o[c] += w * (static_cast<float>(vj[c]) * s);
                            });
    }
  }
}

}  // namespace ref
}  // namespace qhx::cpu

namespace qhx::cpu {

const KernelSet& reference_kernels() {
  static const KernelSet k{"reference",
                           ref::linear,
                           ref::linear_then,
                           ref::rms_norm,
                           ref::layer_norm,
                           ref::silu_mul,
                           ref::gelu_tanh,
                           ref::gelu_erf,
                           ref::add_inplace,
                           ref::rope_rotate_half,
                           ref::attention,
                           ref::attention_f16kv,
                           ref::to_f16,
                           ref::attention_i8kv,
                           attention_i8_reference,
                           ref::gather_rows,
                           [](const WeightMatrix&) -> std::shared_ptr<const PackedI8> {
                             return nullptr;
                           }};
  return k;
}

}  // namespace qhx::cpu
