// The fast CPU kernels (kernels_fast.hpp) but attention (attention_fast.cpp):
// Highway's foreach_target pattern. This file is compiled once per SIMD target
// (it re-includes itself through hwy/foreach_target.h; the targets it skips are
// set for the kernels library in src/CMakeLists.txt); the per-target code lives
// in namespace HWY_NAMESPACE, and the part under HWY_ONCE (compiled once)
// dispatches to the best target the CPU supports (HWY_DYNAMIC_DISPATCH) and
// splits the work over the pool.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/kernels_fast.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "backends/cpu/vector_helpers-inl.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "backends/cpu/attention_fast.hpp"
#include "backends/cpu/int8_attention.hpp"
#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "backends/cpu/kernels_fast.hpp"
#include "backends/cpu/kernels_ref.hpp"
#include "backends/cpu/stored_panels.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "common/half.hpp"

HWY_BEFORE_NAMESPACE();
namespace qhx::cpu::fast {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- weight rows: Load(c) gives the f32 weights at columns c .. c+N-1 ------
// (in the activation layout, see W4Row), Scalar(c) one column, for the tail;
// `post` multiplies the finished dot product (w8's row scale).

struct F32Row {
  const float* p;
  float post = 1.0f;
  HWY_INLINE VF Load(DF df, std::int64_t c) const { return hn::LoadU(df, p + c); }
  float Scalar(std::int64_t c) const { return p[c]; }
};

struct Bf16Row {
  const std::uint16_t* p;
  float post = 1.0f;
  HWY_INLINE VF Load(DF df, std::int64_t c) const {
    const hn::Rebind<std::uint16_t, DF> d16;
    const hn::Rebind<std::uint32_t, DF> d32;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(d32, hn::LoadU(d16, p + c))));
  }
  float Scalar(std::int64_t c) const { return bf16_to_f32(p[c]); }
};

struct F16Row {
  const std::uint16_t* p;
  float post = 1.0f;
  HWY_INLINE VF Load(DF df, std::int64_t c) const {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p + c)));
  }
  float Scalar(std::int64_t c) const { return f16_to_f32(p[c]); }
};

struct W8Row {  // q * row scale: the scale is applied once, to the dot product
  const std::int8_t* p;
  float post;
  HWY_INLINE VF Load(DF df, std::int64_t c) const {
    const hn::Rebind<std::int8_t, DF> d8;
    const hn::Rebind<std::int32_t, DF> d32;
    return hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, p + c)));
  }
  float Scalar(std::int64_t c) const { return static_cast<float>(p[c]); }
};

// w8 with block scales: each vector lies inside one group of 32 (lanes() divides 32,
// cols % 32 == 0), whose scale it takes. Values are float(q) * scale exactly.
struct W8BlockRow {
  const std::int8_t* p;
  const float* s;  // the row's cols / 32 scales
  float post = 1.0f;
  HWY_INLINE VF Load(DF df, std::int64_t c) const {
    const hn::Rebind<std::int8_t, DF> d8;
    const hn::Rebind<std::int32_t, DF> d32;
    return hn::Mul(hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, p + c))), hn::Set(df, s[c >> 5]));
  }
  float Scalar(std::int64_t) const { return 0.0f; }  // never used: cols % 32 == 0
};

// w4 reads the activations permuted per group of 32 columns: the 16 even
// columns first (the low nibbles of the group's 16 bytes), then the 16 odd ones
// (the high nibbles); see permute_for_w4. Values are float(q) * scale exactly.
struct W4Row {
  const std::uint8_t* p;  // the row's cols / 2 bytes
  const float* s;         // the row's cols / 32 scales
  float post = 1.0f;
  HWY_INLINE VF Load(DF df, std::int64_t c) const {
    const hn::Rebind<std::uint8_t, DF> d8;
    const hn::Rebind<std::int32_t, DF> d32;
    const std::int64_t g = c >> 5, pos = c & 31;
    const auto v =
        hn::BitCast(d32, hn::PromoteTo(hn::Rebind<std::uint32_t, DF>(), hn::LoadU(d8, p + g * 16 + (pos & 15))));
    const auto q = pos < 16 ? hn::ShiftRight<28>(hn::ShiftLeft<28>(v)) : hn::ShiftRight<28>(hn::ShiftLeft<24>(v));
    return hn::Mul(hn::ConvertTo(df, q), hn::Set(df, s[g]));
  }
  float Scalar(std::int64_t) const { return 0.0f; }  // never used: cols % 32 == 0
};

// sums[i] = post * dot(x[i * ldx ..], row) for i < MB: each weight vector is
// loaded (and widened) once and used for all MB activation rows.
template <int MB, class Row>
HWY_INLINE void DotBlock(const Row& row, const float* x, std::int64_t ldx, std::int64_t cols, float* sums) {
  const DF df;
  const std::int64_t N = lanes();
  VF a0[MB], a1[MB];
  for (int i = 0; i < MB; ++i) a0[i] = a1[i] = hn::Zero(df);
  std::int64_t c = 0;
  for (; c + 2 * N <= cols; c += 2 * N) {
    const VF w0 = row.Load(df, c);
    const VF w1 = row.Load(df, c + N);
    for (int i = 0; i < MB; ++i) {
      a0[i] = hn::MulAdd(hn::LoadU(df, x + i * ldx + c), w0, a0[i]);
      a1[i] = hn::MulAdd(hn::LoadU(df, x + i * ldx + c + N), w1, a1[i]);
    }
  }
  for (; c + N <= cols; c += N) {
    const VF w0 = row.Load(df, c);
    for (int i = 0; i < MB; ++i) a0[i] = hn::MulAdd(hn::LoadU(df, x + i * ldx + c), w0, a0[i]);
  }
  for (int i = 0; i < MB; ++i) {
    float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0[i], a1[i])));
    for (std::int64_t t = c; t < cols; ++t) s += x[i * ldx + t] * row.Scalar(t);
    sums[i] = s * row.post;
  }
}

// Output rows [r0, r1) of y[m, rows] = x[m, cols] · wᵀ (+ bias).
template <class MakeRow>
HWY_INLINE void LinearRowsT(const MakeRow& make_row, const float* x, std::int64_t m, std::int64_t rows,
                            std::int64_t cols, const float* bias, float* y, std::int64_t r0, std::int64_t r1) {
  // A tile of activation rows (about 256 KiB, so it stays in L2) is reused for
  // every weight row of the range; weights stream once per tile.
  const std::int64_t fit = (std::int64_t{1} << 16) / std::max<std::int64_t>(1, cols);
  const std::int64_t tile = std::max<std::int64_t>(4, fit / 4 * 4);
  for (std::int64_t i0 = 0; i0 < m; i0 += tile) {
    const std::int64_t i1 = std::min(m, i0 + tile);
    for (std::int64_t r = r0; r < r1; ++r) {
      const auto row = make_row(r);
      const float b = bias != nullptr ? bias[r] : 0.0f;
      float s[4];
      std::int64_t i = i0;
      for (; i + 4 <= i1; i += 4) {
        DotBlock<4>(row, x + i * cols, cols, cols, s);
        for (int k = 0; k < 4; ++k) y[(i + k) * rows + r] = s[k] + b;
      }
      const std::int64_t rest = i1 - i;
      if (rest == 3) DotBlock<3>(row, x + i * cols, cols, cols, s);
      if (rest == 2) DotBlock<2>(row, x + i * cols, cols, cols, s);
      if (rest == 1) DotBlock<1>(row, x + i * cols, cols, cols, s);
      for (std::int64_t k = 0; k < rest; ++k) y[(i + k) * rows + r] = s[k] + b;
    }
  }
}

void LinearRows(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y, std::int64_t r0,
                std::int64_t r1) {
  const std::int64_t n = w.cols;
  switch (w.dtype) {
    case DType::F32: {
      const auto* d = static_cast<const float*>(w.data);
      LinearRowsT([&](std::int64_t r) { return F32Row{d + r * n}; }, x, m, w.rows, n, bias, y, r0, r1);
      return;
    }
    case DType::BF16: {
      const auto* d = static_cast<const std::uint16_t*>(w.data);
      LinearRowsT([&](std::int64_t r) { return Bf16Row{d + r * n}; }, x, m, w.rows, n, bias, y, r0, r1);
      return;
    }
    case DType::F16: {
      const auto* d = static_cast<const std::uint16_t*>(w.data);
      LinearRowsT([&](std::int64_t r) { return F16Row{d + r * n}; }, x, m, w.rows, n, bias, y, r0, r1);
      return;
    }
    case DType::I8: {
      const auto* d = static_cast<const std::int8_t*>(w.data);
      if (w.block_scales) {
        const std::int64_t groups = n / kW4GroupSize;
        LinearRowsT(
            [&](std::int64_t r) {
              return W8BlockRow{d + r * n, w.scales + r * groups};
            },
            x, m, w.rows, n, bias, y, r0, r1);
        return;
      }
      LinearRowsT([&](std::int64_t r) { return W8Row{d + r * n, w.scales[r]}; }, x, m, w.rows, n, bias, y, r0, r1);
      return;
    }
    case DType::U8: {
      const auto* d = static_cast<const std::uint8_t*>(w.data);
      const std::int64_t groups = n / kW4GroupSize;
      LinearRowsT(
          [&](std::int64_t r) {
            return W4Row{d + r * (n / 2), w.scales + r * groups};
          },
          x, m, w.rows, n, bias, y, r0, r1);
      return;
    }
    default: return;  // rejected by the caller
  }
}

// y = f16(x), round to nearest even (the hardware conversion: F16C, NEON fcvt).
void ToF16Range(const float* x, std::uint16_t* y, std::int64_t b, std::int64_t e) {
  const DF df;
  const hn::Rebind<F16, DF> dh;
  const std::int64_t N = lanes();
  auto* yh = reinterpret_cast<F16*>(y);
  std::int64_t i = b;
  for (; i + N <= e; i += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, x + i)), dh, yh + i);
  for (; i < e; ++i) y[i] = f32_to_f16(x[i]);
}

// y = float(f16(x)): the value an fp16 activation holds, ties to even.
void RoundF16Range(const float* x, float* y, std::int64_t b, std::int64_t e) {
  const DF df;
  const hn::Rebind<F16, DF> dh;
  const std::int64_t N = lanes();
  std::int64_t i = b;
  for (; i + N <= e; i += N) hn::StoreU(hn::PromoteTo(df, hn::DemoteTo(dh, hn::LoadU(df, x + i))), df, y + i);
  for (; i < e; ++i) y[i] = f16_to_f32(f32_to_f16(x[i]));
}

// ---- norms and elementwise ------------------------------------------------------

void RmsNormRows(const float* x, const float* w, std::int64_t n, float eps, float* y, std::int64_t r0,
                 std::int64_t r1) {
  const DF df;
  const std::int64_t N = lanes();
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float mean_sq = Dot(xr, xr, n) / static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(mean_sq + eps);
    const VF vinv = hn::Set(df, inv);
    std::int64_t i = 0;
    for (; i + N <= n; i += N)
      hn::StoreU(hn::Mul(hn::LoadU(df, w + i), hn::Mul(hn::LoadU(df, xr + i), vinv)), df, yr + i);
    for (; i < n; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

void LayerNormRows(const float* x, const float* w, const float* b, std::int64_t n, float eps, float* y, std::int64_t r0,
                   std::int64_t r1) {
  const DF df;
  const std::int64_t N = lanes();
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float mean = Sum(xr, n) / static_cast<float>(n);
    const VF vmean = hn::Set(df, mean);
    VF acc = hn::Zero(df);
    std::int64_t i = 0;
    for (; i + N <= n; i += N) {
      const VF dv = hn::Sub(hn::LoadU(df, xr + i), vmean);
      acc = hn::MulAdd(dv, dv, acc);
    }
    float var = hn::GetLane(hn::SumOfLanes(df, acc));
    for (; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
    const VF vinv = hn::Set(df, inv);
    for (i = 0; i + N <= n; i += N) {
      const VF nv = hn::Mul(hn::Sub(hn::LoadU(df, xr + i), vmean), vinv);
      hn::StoreU(hn::MulAdd(nv, hn::LoadU(df, w + i), hn::LoadU(df, b + i)), df, yr + i);
    }
    for (; i < n; ++i) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
  }
}

// y[i] = op(in[i]...) for i in [b, e), lanes at a time. The last partial vector goes
// through the same op on zero-padded copies (not a scalar formula), so a value's
// result does not depend on where a range starts or ends: the thread pool's split
// moves with the thread count and the prefill chunk.
template <class Op, class... In>
void MapRange(float* y, std::int64_t b, std::int64_t e, Op op, const In*... in) {
  const DF df;
  const std::int64_t N = lanes();
  std::int64_t i = b;
  for (; i + N <= e; i += N) hn::StoreU(op(hn::LoadU(df, in + i)...), df, y + i);
  if (i == e) return;
  const auto bytes = static_cast<std::size_t>(e - i) * sizeof(float);
  const auto padded = [&](const float* x) {
    HWY_ALIGN float buf[hn::MaxLanes(DF())] = {};
    std::memcpy(buf, x + i, bytes);
    return hn::Load(df, buf);
  };
  HWY_ALIGN float out[hn::MaxLanes(DF())];
  hn::Store(op(padded(in)...), df, out);
  std::memcpy(y + i, out, bytes);
}

void SiluMulRange(const float* gate, const float* up, float* y, std::int64_t b, std::int64_t e) {
  const DF df;
  const VF one = hn::Set(df, 1.0f), lim = hn::Set(df, 88.0f);  // exp(88) is finite in f32
  MapRange(
      y, b, e,
      [&](VF g, VF u) {
        const VF ex = hn::Exp(df, hn::Min(hn::Neg(g), lim));
        return hn::Mul(hn::Div(g, hn::Add(one, ex)), u);
      },
      gate, up);
}

void GeluTanhRange(const float* x, float* y, std::int64_t b, std::int64_t e) {
  const DF df;
  const VF vk = hn::Set(df, std::sqrt(2.0f / std::numbers::pi_v<float>)), c = hn::Set(df, 0.044715f);
  const VF one = hn::Set(df, 1.0f), m2 = hn::Set(df, -2.0f), lim = hn::Set(df, 88.0f);
  MapRange(
      y, b, e,
      [&](VF v) {
        const VF inner = hn::Mul(vk, hn::MulAdd(hn::Mul(c, v), hn::Mul(v, v), v));
        // 0.5·v·(1 + tanh(u)) = v / (1 + e^(−2u)): one Exp and a division, about half
        // the work of Tanh; e^(−2u) is capped where it would overflow (the result is then ~0).
        const VF ex = hn::Exp(df, hn::Min(hn::Mul(m2, inner), lim));
        return hn::Div(v, hn::Add(one, ex));
      },
      x);
}

// erf for gelu_erf: odd, from |x| clamped to 4 (erf(4) rounds to 1 in float).
// Below 0.875, x · P(x²); above, 1 − e^(−x²) · Q(x) with Q ≈ erfc(x) · e^(x²). Both
// polynomials are least-squares fits on those intervals (Chebyshev nodes): evaluated
// in float with fused multiply-adds, the result is within 1.1e-7 of erf (about one
// float ulp of 1; std::erf is within half), which gelu's 1 + erf cannot tell apart.
VF ErfApprox(DF df, VF x) {
  const VF a = hn::Min(hn::Abs(x), hn::Set(df, 4.0f));
  const VF z = hn::Mul(a, a);
  constexpr float kP[] = {1.12837923f,    -0.376126379f,    0.112837441f,   -0.0268621445f,
                          0.00520807551f, -0.000822587346f, 8.73762765e-05f};
  constexpr float kQ[] = {0.997154176f,  -1.10853446f,     0.936907887f,    -0.630260408f,
                          0.338128746f,  -0.142579705f,    0.046244029f,    -0.0112206619f,
                          0.0019597807f, -0.000231833954f, 1.65840283e-05f, -5.40578469e-07f};
  VF p = hn::Set(df, kP[6]);
  for (int i = 5; i >= 0; --i) p = hn::MulAdd(p, z, hn::Set(df, kP[i]));
  VF q = hn::Set(df, kQ[11]);
  for (int i = 10; i >= 0; --i) q = hn::MulAdd(q, a, hn::Set(df, kQ[i]));
  const VF near = hn::Mul(a, p);
  const VF far = hn::NegMulAdd(hn::Exp(df, hn::Neg(z)), q, hn::Set(df, 1.0f));
  return hn::CopySign(hn::IfThenElse(hn::Lt(a, hn::Set(df, 0.875f)), near, far), x);
}

// The reference's 0.5 · v · (1 + erf(v · (1/√2))), the erf from ErfApprox.
void GeluErfRange(const float* x, float* y, std::int64_t b, std::int64_t e) {
  const DF df;
  const VF r2 = hn::Set(df, static_cast<float>(1.0 / std::numbers::sqrt2)), half = hn::Set(df, 0.5f);
  const VF one = hn::Set(df, 1.0f);
  MapRange(
      y, b, e, [&](VF v) { return hn::Mul(hn::Mul(half, v), hn::Add(one, ErfApprox(df, hn::Mul(v, r2)))); }, x);
}

void AddRange(float* y, const float* x, std::int64_t b, std::int64_t e) {
  const DF df;
  const std::int64_t N = lanes();
  std::int64_t i = b;
  for (; i + N <= e; i += N) hn::StoreU(hn::Add(hn::LoadU(df, y + i), hn::LoadU(df, x + i)), df, y + i);
  for (; i < e; ++i) y[i] += x[i];
}

void RopeRotateHalf(float* x, std::int64_t tokens, std::int64_t heads, std::int64_t dim, const float* cos,
                    const float* sin) {
  const DF df;
  const std::int64_t N = lanes();
  const std::int64_t half = dim / 2;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* c = cos + t * dim;
    const float* s = sin + t * dim;
    for (std::int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * dim;
      std::int64_t i = 0;
      for (; i + N <= half; i += N) {
        const VF lo = hn::LoadU(df, v + i), hi = hn::LoadU(df, v + i + half);
        hn::StoreU(hn::Sub(hn::Mul(lo, hn::LoadU(df, c + i)), hn::Mul(hi, hn::LoadU(df, s + i))), df, v + i);
        hn::StoreU(hn::Add(hn::Mul(hi, hn::LoadU(df, c + i + half)), hn::Mul(lo, hn::LoadU(df, s + i + half))), df,
                   v + i + half);
      }
      for (; i < half; ++i) {
        const float lo = v[i];
        const float hi = v[i + half];
        v[i] = lo * c[i] + (-hi) * s[i];
        v[i + half] = hi * c[i + half] + lo * s[i + half];
      }
    }
  }
}

// The target this copy was compiled for: what HWY_DYNAMIC_DISPATCH picked (fast_kernels_target).
std::int64_t CompiledTarget() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace qhx::cpu::fast
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qhx::cpu {
namespace fast {

HWY_EXPORT(LinearRows);
HWY_EXPORT(CompiledTarget);
HWY_EXPORT(ToF16Range);
HWY_EXPORT(RoundF16Range);
HWY_EXPORT(RmsNormRows);
HWY_EXPORT(LayerNormRows);
HWY_EXPORT(SiluMulRange);
HWY_EXPORT(GeluTanhRange);
HWY_EXPORT(GeluErfRange);
HWY_EXPORT(AddRange);
HWY_EXPORT(RopeRotateHalf);

namespace {

// x [m, cols] with each group of 32 columns reordered to its 16 even columns,
// then its 16 odd ones: the order W4Row reads the nibbles in.
// x [n] rounded to fp16 values, in a buffer of the calling thread's.
const float* rounded_to_f16(const float* x, std::int64_t n) {
  thread_local std::vector<float> buf;
  buf.resize(static_cast<std::size_t>(n));
  float* y = buf.data();
  parallel_for(n, std::int64_t{1} << 14, [&](std::int64_t b, std::int64_t e) {
    HWY_DYNAMIC_DISPATCH(RoundF16Range)(x, y, b, e);
  });
  return y;
}

const float* permute_for_w4(const float* x, std::int64_t m, std::int64_t cols) {
  thread_local std::vector<float> buf;
  buf.resize(static_cast<std::size_t>(m * cols));
  for (std::int64_t i = 0; i < m * cols; i += kW4GroupSize) {
    const float* src = x + i;
    float* dst = buf.data() + i;
    for (int j = 0; j < 16; ++j) {
      dst[j] = src[2 * j];
      dst[16 + j] = src[2 * j + 1];
    }
  }
  return buf.data();
}

void reference(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y,
               const BlockStep* step) {
  if (step != nullptr)
    ref::linear_then(x, m, w, bias, y, *step);
  else
    ref::linear(x, m, w, bias, y);
}

void linear_with(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y,
                 const BlockStep* step) {
  if (w.int8_activations) {
    if (w.packed != nullptr && w.packed->rows == w.rows && w.packed->cols == w.cols) {
      linear_i8_packed(x, m, *w.packed, bias, y, step);
    } else {
      reference(x, m, w, bias, y, step);  // not packed (or not w8): the contract, and its errors
    }
    return;
  }
  const bool known = w.dtype == DType::F32 || w.dtype == DType::BF16 || w.dtype == DType::F16 || w.dtype == DType::I8 ||
                     w.dtype == DType::U8;
  // (A panel-form matrix reaches here only unprepared: prepare() gives f32 activations rows.)
  if (!known || (has_block_scales(w) && w.cols % kW4GroupSize != 0) || w.panel_form) {
    reference(x, m, w, bias, y, step);  // reports the bad matrix as the reference does
    return;
  }
  if (w.f16_activations) x = rounded_to_f16(x, m * w.cols);
  const float* xs = w.dtype == DType::U8 ? permute_for_w4(x, m, w.cols) : x;
  parallel_for(w.rows, grain_for(m * w.cols), [&](std::int64_t b, std::int64_t e) {
    HWY_DYNAMIC_DISPATCH(LinearRows)(xs, m, w, bias, y, b, e);
    if (step != nullptr) step->run(step->ctx, 0, m, b, e);
  });
}

}  // namespace

void linear(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y) {
  linear_with(x, m, w, bias, y, nullptr);
}

void linear_then(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y, BlockStep step) {
  linear_with(x, m, w, bias, y, &step);
}

void attention_i8(const float* q, const float* k, const float* v, std::int64_t t, std::int64_t n, std::int64_t hq,
                  std::int64_t hkv, std::int64_t d, float scale, float* out) {
  cpu::attention_i8(int8_kernel_best(), q, k, v, t, n, hq, hkv, d, scale, out);
}

std::shared_ptr<const PackedI8> pack(const WeightMatrix& w) {
  if (!w.int8_activations || w.cols > kInt8MaxCols) return nullptr;
  if (w.panel_form) {  // stored in the 16-row layout: used in place by a kernel of that panel height
    const Int8Kernel& k = int8_kernel_best();
    if (k.panel != kStoredPanel) return nullptr;
    return view_stored_panels(stored_panels_of(w), w.rows, w.cols, k, nullptr, "a stored panel matrix");
  }
  if (w.dtype != DType::I8 && w.dtype != DType::U8) return nullptr;
  if (has_block_scales(w) && w.cols % kW4GroupSize != 0) return nullptr;
  return pack_i8(w, int8_kernel_best());
}

void to_f16(const float* x, std::int64_t n, std::uint16_t* y) {
  parallel_for(n, std::int64_t{1} << 14, [&](std::int64_t b, std::int64_t e) {
    HWY_DYNAMIC_DISPATCH(ToF16Range)(x, y, b, e);
  });
}

void rms_norm(const float* x, const float* w, std::int64_t rows, std::int64_t n, float eps, float* y) {
  parallel_for(rows, grain_for(3 * n), [&](std::int64_t b, std::int64_t e) {
    HWY_DYNAMIC_DISPATCH(RmsNormRows)(x, w, n, eps, y, b, e);
  });
}

void layer_norm(const float* x, const float* w, const float* b, std::int64_t rows, std::int64_t n, float eps,
                float* y) {
  parallel_for(rows, grain_for(5 * n), [&](std::int64_t r0, std::int64_t r1) {
    HWY_DYNAMIC_DISPATCH(LayerNormRows)(x, w, b, n, eps, y, r0, r1);
  });
}

void silu_mul(const float* gate, const float* up, std::int64_t n, float* y) {
  parallel_for(n, grain_for(20), [&](std::int64_t b, std::int64_t e) {
    HWY_DYNAMIC_DISPATCH(SiluMulRange)(gate, up, y, b, e);
  });
}

void gelu_tanh(const float* x, std::int64_t n, float* y) {
  parallel_for(n, grain_for(20), [&](std::int64_t b, std::int64_t e) {
    HWY_DYNAMIC_DISPATCH(GeluTanhRange)(x, y, b, e);
  });
}

// Highway has no vector erf: ErfApprox above is this project's.
void gelu_erf(const float* x, std::int64_t n, float* y) {
  parallel_for(n, grain_for(40), [&](std::int64_t b, std::int64_t e) {
    HWY_DYNAMIC_DISPATCH(GeluErfRange)(x, y, b, e);
  });
}

void add_inplace(float* y, const float* x, std::int64_t n) {
  parallel_for(n, std::int64_t{1} << 14, [&](std::int64_t b, std::int64_t e) {
    HWY_DYNAMIC_DISPATCH(AddRange)(y, x, b, e);
  });
}

void rope_rotate_half(float* x, std::int64_t tokens, std::int64_t heads, std::int64_t dim, const float* cos,
                      const float* sin) {
  HWY_DYNAMIC_DISPATCH(RopeRotateHalf)(x, tokens, heads, dim, cos, sin);
}

std::int64_t dispatched_target() { return HWY_DYNAMIC_DISPATCH(CompiledTarget)(); }

}  // namespace fast

const KernelSet& fast_kernels() {
  static const KernelSet k{"fast",
                           fast::linear,
                           fast::linear_then,
                           fast::rms_norm,
                           fast::layer_norm,
                           fast::silu_mul,
                           fast::gelu_tanh,
                           fast::gelu_erf,
                           fast::add_inplace,
                           fast::rope_rotate_half,
                           fast::attention,
                           fast::attention_f16kv,
                           fast::to_f16,
                           fast::attention_i8kv,
                           fast::attention_i8,
                           ref::gather_rows,
                           fast::pack};
  return k;
}

std::string_view fast_kernels_target() { return hwy::TargetName(fast::dispatched_target()); }

std::vector<std::string_view> fast_kernels_targets() {
  std::vector<std::string_view> out;
  for (const std::int64_t t : hwy::SupportedAndGeneratedTargets()) out.push_back(hwy::TargetName(t));
  return out;
}

const KernelSet& active_kernels() {
  static const KernelSet& k = []() -> const KernelSet& {
    const char* env = std::getenv("QHX_KERNELS");
    return env != nullptr && std::string_view(env) == "reference" ? reference_kernels() : fast_kernels();
  }();
  return k;
}

}  // namespace qhx::cpu
#endif  // HWY_ONCE
