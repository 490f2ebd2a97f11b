// The fast CPU kernels (kernels_fast.hpp): Highway's foreach_target pattern.
// This file is compiled once per SIMD target (it re-includes itself through
// hwy/foreach_target.h); the per-target code lives in namespace HWY_NAMESPACE,
// and the part under HWY_ONCE (compiled once) dispatches to the best target
// the CPU supports (HWY_DYNAMIC_DISPATCH) and splits the work over the pool.

// Vectors are kept in small arrays (register blocking), which the sizeless
// vector types of SVE and RVV do not allow: those targets fall back to NEON
// or scalar code.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/kernels_fast.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numbers>
#include <string_view>
#include <type_traits>
#include <vector>

#include "backends/cpu/int8_attention.hpp"
#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "backends/cpu/kernels_fast.hpp"
#include "backends/cpu/kernels_ref.hpp"
#include "backends/cpu/kv_cache_i8.hpp"
#include "backends/cpu/stored_panels.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "common/half.hpp"

HWY_BEFORE_NAMESPACE();
namespace qhx::cpu::fast {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 f32 lanes: a w4 group (32 columns) splits into whole vectors.
using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;

inline std::int64_t lanes() { return static_cast<std::int64_t>(hn::Lanes(DF())); }
std::int64_t Lanes() { return lanes(); }  // exported: the dispatcher's view of the vector width

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
    const auto v = hn::BitCast(d32, hn::PromoteTo(hn::Rebind<std::uint32_t, DF>(), hn::LoadU(d8, p + g * 16 + (pos & 15))));
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
      LinearRowsT([&](std::int64_t r) { return W8Row{d + r * n, w.scales[r]}; }, x, m, w.rows, n, bias, y, r0, r1);
      return;
    }
    case DType::U8: {
      const auto* d = static_cast<const std::uint8_t*>(w.data);
      const std::int64_t groups = n / kW4GroupSize;
      LinearRowsT([&](std::int64_t r) { return W4Row{d + r * (n / 2), w.scales + r * groups}; }, x, m, w.rows, n,
                  bias, y, r0, r1);
      return;
    }
    default:
      return;  // rejected by the caller
  }
}

// ---- small vector helpers ---------------------------------------------------

// Keys and values are f32, or f16 (a decoder's KV cache) widened as they load.
using F16 = hwy::float16_t;
HWY_INLINE VF LoadKV(DF df, const float* p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadKV(DF df, const F16* p) { return hn::PromoteTo(df, hn::LoadU(hn::Rebind<F16, DF>(), p)); }
HWY_INLINE float ScalarKV(const float* p) { return *p; }
HWY_INLINE float ScalarKV(const F16* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return f16_to_f32(bits);
}
// An 8-bit cache's values (kv_cache_i8.hpp) widen exactly; their row's scale is applied after.
HWY_INLINE VF LoadKV(DF df, const std::int8_t* p) {
  return hn::ConvertTo(df, hn::PromoteTo(hn::Rebind<std::int32_t, DF>(), hn::LoadU(hn::Rebind<std::int8_t, DF>(), p)));
}
HWY_INLINE float ScalarKV(const std::int8_t* p) { return static_cast<float>(*p); }

// Where the rows of one KV head lie, and the factor a row's values carry:
// f32 and f16 keys and values [n, hkv, d] carry 1 (a product with 1 is exact,
// so those paths compute what they did before there were factors); the 8-bit
// cache [hkv, ctx, d + 4] carries each row's scale. A score is then
// (q · row) · factor · scale, and a value row's weight p · (1 / l) · factor.
template <class T>
struct DenseRows {
  using Elem = T;
  const T* base;
  std::int64_t hkv, d;
  HWY_INLINE const T* row(std::int64_t j, std::int64_t g) const { return base + (j * hkv + g) * d; }
  HWY_INLINE float factor(const T*) const { return 1.0f; }
  std::int64_t stride() const { return hkv * d; }  // elements from a head's row j to its row j + 1
};
struct I8Rows {
  using Elem = std::int8_t;
  const std::int8_t* base;
  std::int64_t ctx, d;
  HWY_INLINE const std::int8_t* row(std::int64_t j, std::int64_t g) const {
    return base + (g * ctx + j) * kv_i8_row_bytes(d);
  }
  HWY_INLINE float factor(const std::int8_t* r) const { return kv_i8_scale(r, d); }
  std::int64_t stride() const { return kv_i8_row_bytes(d); }
};

// Σ a[i] · b[i]: two vector accumulators, then the lanes, then the tail; b
// is f32 or (a key row of an f16 cache) f16.
template <class T>
HWY_INLINE float Dot(const float* a, const T* b, std::int64_t n) {
  const DF df;
  const std::int64_t N = lanes();
  VF a0 = hn::Zero(df), a1 = hn::Zero(df);
  std::int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    a0 = hn::MulAdd(hn::LoadU(df, a + i), LoadKV(df, b + i), a0);
    a1 = hn::MulAdd(hn::LoadU(df, a + i + N), LoadKV(df, b + i + N), a1);
  }
  for (; i + N <= n; i += N) a0 = hn::MulAdd(hn::LoadU(df, a + i), LoadKV(df, b + i), a0);
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
  for (; i < n; ++i) s += a[i] * ScalarKV(b + i);
  return s;
}

HWY_INLINE float Sum(const float* a, std::int64_t n) {
  const DF df;
  const std::int64_t N = lanes();
  VF a0 = hn::Zero(df), a1 = hn::Zero(df);
  std::int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    a0 = hn::Add(hn::LoadU(df, a + i), a0);
    a1 = hn::Add(hn::LoadU(df, a + i + N), a1);
  }
  for (; i + N <= n; i += N) a0 = hn::Add(hn::LoadU(df, a + i), a0);
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
  for (; i < n; ++i) s += a[i];
  return s;
}

// max(p[0 .. n)) (-inf for n = 0); the same value in any order.
HWY_INLINE float MaxOf(const float* p, std::int64_t n) {
  const DF df;
  const std::int64_t N = lanes();
  VF vmax = hn::Set(df, -std::numeric_limits<float>::infinity());
  std::int64_t j = 0;
  for (; j + N <= n; j += N) vmax = hn::Max(vmax, hn::LoadU(df, p + j));
  float m = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (; j < n; ++j) m = std::max(m, p[j]);
  return m;
}

// p[j] = exp(p[j] − max_s) for j < n, in place; returns their sum (vector lanes
// first, then the tail in order: every attention path sums the same way).
HWY_INLINE float ExpShiftSum(float* p, std::int64_t n, float max_s) {
  const DF df;
  const std::int64_t N = lanes();
  const VF vmax = hn::Set(df, max_s);
  VF vsum = hn::Zero(df);
  std::int64_t j = 0;
  for (; j + N <= n; j += N) {
    const VF ex = hn::Exp(df, hn::Sub(hn::LoadU(df, p + j), vmax));
    hn::StoreU(ex, df, p + j);
    vsum = hn::Add(vsum, ex);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, vsum));
  for (; j < n; ++j) sum += (p[j] = std::exp(p[j] - max_s));
  return sum;
}

// ---- attention ----------------------------------------------------------------

// Tasks [b, e) of t * hq (query i = task / hq, head h = task % hq); p: n floats.
template <class Rows>
void AttentionTasksT(const float* q, const Rows& k, const Rows& v, std::int64_t t, std::int64_t n, std::int64_t hq,
                     std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal, float* out,
                     std::int64_t b, std::int64_t e, float* p) {
  (void)t;
  using T = typename Rows::Elem;
  const DF df;
  const std::int64_t N = lanes();
  const std::int64_t group = hq / hkv;
  for (std::int64_t task = b; task < e; ++task) {
    const std::int64_t i = task / hq, h = task % hq;
    const std::int64_t visible = causal ? std::min(n, start + i + 1) : n;
    const float* qi = q + (i * hq + h) * d;
    const std::int64_t kvh = h / group;
    float max_s = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < visible; ++j) {
      const T* kj = k.row(j, kvh);
      p[j] = Dot(qi, kj, d) * k.factor(kj) * scale;
      max_s = std::max(max_s, p[j]);
    }
    const float sum = ExpShiftSum(p, visible, max_s);
    float* o = out + (i * hq + h) * d;
    std::fill(o, o + d, 0.0f);
    const float inv = 1.0f / sum;
    for (std::int64_t j = 0; j < visible; ++j) {
      const T* vj = v.row(j, kvh);
      const float wj = p[j] * inv * v.factor(vj);
      const VF vw = hn::Set(df, wj);
      std::int64_t c = 0;
      for (; c + N <= d; c += N) hn::StoreU(hn::MulAdd(vw, LoadKV(df, vj + c), hn::LoadU(df, o + c)), df, o + c);
      for (; c < d; ++c) o[c] += wj * ScalarKV(vj + c);
    }
  }
}


// ---- attention for a few queries (decode) -------------------------------------
// Tasks [b, e) of t · hkv: query i with HB query heads of KV head kvh at a
// time, so each key and value row is read once for the group; the output of
// those heads stays in registers (HB × NV vectors) across all keys instead of
// being loaded and stored per key. p: HB · n floats.
template <int HB, int NV, class Rows>
void AttentionGroup(const float* q, const Rows& k, const Rows& v, std::int64_t n, std::int64_t hq, std::int64_t hkv,
                    std::int64_t start, float scale, bool causal, float* out, std::int64_t i, std::int64_t h0,
                    float* p, bool prefetch) {
  using T = typename Rows::Elem;
  const DF df;
  const std::int64_t N = lanes();
  const std::int64_t d = NV * N;
  const std::int64_t kvh = h0 / (hq / hkv);
  const std::int64_t visible = causal ? std::min(n, start + i + 1) : n;
  VF qv[HB][NV];
  for (int g = 0; g < HB; ++g)
    for (int u = 0; u < NV; ++u) qv[g][u] = hn::LoadU(df, q + (i * hq + h0 + g) * d + u * N);
  float max_s[HB];
  for (int g = 0; g < HB; ++g) max_s[g] = -std::numeric_limits<float>::infinity();
  // Rows of one KV head lie hkv·d elements apart (often exactly 4 KiB): every row
  // is a new page the hardware prefetcher will not enter, so a decode step fetches
  // rows ahead. Many queries (prefill) find them in L2 after the first: there the
  // prefetches only cost (12% of prefill attention).
  // How far ahead: about 16 KiB of the rows' values (32 rows of f32, 64 of f16,
  // 128 of int8 at head_dim 128), into L2 (prefetcht1): the L1's few fill buffers
  // cannot hold that many lines in flight, and a decode step is a stream the
  // core reads once. Measured on the 2B's 28-layer cache at 4,096 tokens (bench_kernels):
  // f16 44 -> 28 ms, i8 15 -> 11.5 ms against 16 rows ahead into L1.
  const std::int64_t kAhead = std::max<std::int64_t>(16, 16384 / (d * static_cast<std::int64_t>(sizeof(T))));
  constexpr std::int64_t kLine = 64 / sizeof(T);  // elements per cache line
  const std::int64_t row_stride = k.stride();
  for (std::int64_t j = 0; j < visible; ++j) {
    const T* kj = k.row(j, kvh);
    if (prefetch && j + kAhead < visible)
      for (std::int64_t l = 0; l < d; l += kLine) __builtin_prefetch(kj + kAhead * row_stride + l, 0, 2);
    VF kv[NV];
    for (int u = 0; u < NV; ++u) kv[u] = LoadKV(df, kj + u * N);
    const float kf = k.factor(kj);
    for (int g = 0; g < HB; ++g) {
      // Two chains of products, so a row's dot product waits on half as many FMAs.
      VF acc0 = hn::Mul(qv[g][0], kv[0]), acc1 = hn::Mul(qv[g][1], kv[1]);
      for (int u = 2; u < NV; u += 2) {
        acc0 = hn::MulAdd(qv[g][u], kv[u], acc0);
        acc1 = hn::MulAdd(qv[g][u + 1], kv[u + 1], acc1);
      }
      const float sc = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1))) * kf * scale;
      p[g * n + j] = sc;
      max_s[g] = std::max(max_s[g], sc);
    }
  }
  float inv[HB];
  for (int g = 0; g < HB; ++g) {
    inv[g] = 1.0f / ExpShiftSum(p + g * n, visible, max_s[g]);
  }
  VF o[HB][NV];
  for (int g = 0; g < HB; ++g)
    for (int u = 0; u < NV; ++u) o[g][u] = hn::Zero(df);
  for (std::int64_t j = 0; j < visible; ++j) {
    const T* vj = v.row(j, kvh);
    if (prefetch && j + kAhead < visible)
      for (std::int64_t l = 0; l < d; l += kLine) __builtin_prefetch(vj + kAhead * row_stride + l, 0, 2);
    VF vv[NV];
    for (int u = 0; u < NV; ++u) vv[u] = LoadKV(df, vj + u * N);
    const float vf = v.factor(vj);
    for (int g = 0; g < HB; ++g) {
      const VF w = hn::Set(df, p[g * n + j] * inv[g] * vf);
      for (int u = 0; u < NV; ++u) o[g][u] = hn::MulAdd(w, vv[u], o[g][u]);
    }
  }
  for (int g = 0; g < HB; ++g)
    for (int u = 0; u < NV; ++u) hn::StoreU(o[g][u], df, out + (i * hq + h0 + g) * d + u * N);
}

// Whether AttentionGroups handles head_dim d: 4, 8 or 16 vectors per row (16:
// a head of 128 on 8-lane AVX2; the registers spill there, but each KV row is
// still read once per group of heads instead of once per head).
bool GroupedAttentionFits(std::int64_t d) { return d == 4 * lanes() || d == 8 * lanes() || d == 16 * lanes(); }

template <int HB, class Rows>
HWY_INLINE void AttentionGroupOfWidth(const float* q, const Rows& k, const Rows& v, std::int64_t n, std::int64_t hq,
                                      std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal,
                                      float* out, std::int64_t i, std::int64_t h0, float* p, bool prefetch) {
  if (d == 16 * lanes())
    AttentionGroup<HB, 16>(q, k, v, n, hq, hkv, start, scale, causal, out, i, h0, p, prefetch);
  else if (d == 8 * lanes())
    AttentionGroup<HB, 8>(q, k, v, n, hq, hkv, start, scale, causal, out, i, h0, p, prefetch);
  else
    AttentionGroup<HB, 4>(q, k, v, n, hq, hkv, start, scale, causal, out, i, h0, p, prefetch);
}

template <class Rows>
void AttentionGroupsT(const float* q, const Rows& k, const Rows& v, std::int64_t t, std::int64_t n, std::int64_t hq,
                      std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal, float* out,
                      std::int64_t b, std::int64_t e, float* p) {
  const std::int64_t group = hq / hkv;
  const bool prefetch = t == 1;
  for (std::int64_t task = b; task < e; ++task) {
    const std::int64_t i = task / hkv, kvh = task % hkv;
    std::int64_t g = 0;
    for (; g + 2 <= group; g += 2)
      AttentionGroupOfWidth<2>(q, k, v, n, hq, hkv, d, start, scale, causal, out, i, kvh * group + g, p, prefetch);
    if (g < group)
      AttentionGroupOfWidth<1>(q, k, v, n, hq, hkv, d, start, scale, causal, out, i, kvh * group + g, p, prefetch);
  }
}

// The per-query attention paths, exported once per key/value type (HWY_EXPORT
// takes plain functions): `grouped` runs tasks of t · hkv through
// AttentionGroupsT (head_dim of 4, 8 or 16 vectors), else tasks of t · hq
// through AttentionTasksT.
template <class Rows>
void AttentionRowsT(bool grouped, const float* q, const Rows& k, const Rows& v, std::int64_t t, std::int64_t n,
                    std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal,
                    float* out, std::int64_t b, std::int64_t e, float* p) {
  if (grouped)
    AttentionGroupsT(q, k, v, t, n, hq, hkv, d, start, scale, causal, out, b, e, p);
  else
    AttentionTasksT(q, k, v, t, n, hq, hkv, d, start, scale, causal, out, b, e, p);
}
void AttentionRows(bool grouped, const float* q, const float* k, const float* v, std::int64_t t, std::int64_t n,
                   std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal,
                   float* out, std::int64_t b, std::int64_t e, float* p) {
  AttentionRowsT(grouped, q, DenseRows<float>{k, hkv, d}, DenseRows<float>{v, hkv, d}, t, n, hq, hkv, d, start,
                 scale, causal, out, b, e, p);
}
void AttentionRowsF16(bool grouped, const float* q, const F16* k, const F16* v, std::int64_t t, std::int64_t n,
                      std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal,
                      float* out, std::int64_t b, std::int64_t e, float* p) {
  AttentionRowsT(grouped, q, DenseRows<F16>{k, hkv, d}, DenseRows<F16>{v, hkv, d}, t, n, hq, hkv, d, start, scale,
                 causal, out, b, e, p);
}
void AttentionRowsI8(bool grouped, const float* q, const std::int8_t* k, const std::int8_t* v, std::int64_t t,
                     std::int64_t n, std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d,
                     std::int64_t start, float scale, float* out, std::int64_t b, std::int64_t e, float* p) {
  AttentionRowsT(grouped, q, I8Rows{k, ctx, d}, I8Rows{v, ctx, d}, t, n, hq, hkv, d, start, scale, /*causal=*/true,
                 out, b, e, p);
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

// ---- blocked attention (many queries: prefill, vision) ----------------------
// Per (query head, block of kQB queries): S = Q·Kᵀ over the visible keys with
// K transposed per KV head (a run of keys is then one vector), softmax per row,
// O = P·V. Register tiles: 8 queries × 2 vectors of keys for S, 4 queries × 4
// vectors of head_dim for O; the only buffer is S, kQB × n.

constexpr int kQB = 8;
constexpr std::int64_t kMaxBlockedHeadDim = 256;
bool BlockedAttentionFits(std::int64_t d) { return d % (4 * lanes()) == 0 && d <= kMaxBlockedHeadDim; }

// kt [hkv, d, ldk] = k [n, hkv, d] transposed per KV head (columns >= n zero),
// vh [hkv, n, d] = v with each head's rows made contiguous (in v they lie
// hkv·d floats apart, a page apart for typical sizes: slow to stream).
void PackKeysValues(const float* k, const float* v, std::int64_t n, std::int64_t hkv, std::int64_t d,
                    std::int64_t ldk, float* kt, float* vh, std::int64_t h0, std::int64_t h1) {
  for (std::int64_t h = h0; h < h1; ++h) {
    for (std::int64_t c = 0; c < d; ++c) {
      float* row = kt + (h * d + c) * ldk;
      for (std::int64_t j = 0; j < n; ++j) row[j] = k[(j * hkv + h) * d + c];
      std::fill(row + n, row + ldk, 0.0f);
    }
    for (std::int64_t j = 0; j < n; ++j)
      std::memcpy(vh + (h * n + j) * d, v + (j * hkv + h) * d, static_cast<std::size_t>(d) * sizeof(float));
  }
}

void AttentionBlocks(const float* q, const float* kt, std::int64_t ldk, const float* vh, std::int64_t t, std::int64_t n,
                     std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal,
                     float* out, std::int64_t b, std::int64_t e, float* sbuf) {
  const DF df;
  const std::int64_t N = lanes();
  const std::int64_t blocks = (t + kQB - 1) / kQB;
  const std::int64_t group = hq / hkv;
  const VF vscale = hn::Set(df, scale);
  for (std::int64_t task = b; task < e; ++task) {
    const std::int64_t h = task / blocks, i0 = (task % blocks) * kQB;
    const std::int64_t rows = std::min<std::int64_t>(kQB, t - i0);
    const std::int64_t kvh = h / group;
    const std::int64_t nk = causal ? std::min(n, start + i0 + rows) : n;  // keys any row of the block sees
    const std::int64_t nk_pad = (nk + 2 * N - 1) / (2 * N) * (2 * N);     // <= ldk
    // The block's queries transposed, qt[c · kQB + i] = q_i[c]: the S loop then
    // broadcasts each from one address (a plain load), not through a pointer.
    float qt[kQB * kMaxBlockedHeadDim];
    for (int i = 0; i < kQB; ++i) {
      const float* qi = q + ((i0 + std::min<std::int64_t>(i, rows - 1)) * hq + h) * d;
      for (std::int64_t c = 0; c < d; ++c) qt[c * kQB + i] = qi[c];
    }
    const float* kh = kt + kvh * d * ldk;

    for (std::int64_t j0 = 0; j0 < nk_pad; j0 += 2 * N) {  // S = Q·Kᵀ · scale
      VF acc0[kQB], acc1[kQB];
      for (int i = 0; i < kQB; ++i) acc0[i] = acc1[i] = hn::Zero(df);
      for (std::int64_t c = 0; c < d; ++c) {
        const VF k0 = hn::LoadU(df, kh + c * ldk + j0), k1 = hn::LoadU(df, kh + c * ldk + j0 + N);
        for (int i = 0; i < kQB; ++i) {
          const VF qv = hn::Set(df, qt[c * kQB + i]);
          acc0[i] = hn::MulAdd(qv, k0, acc0[i]);
          acc1[i] = hn::MulAdd(qv, k1, acc1[i]);
        }
      }
      for (int i = 0; i < kQB; ++i) {
        hn::StoreU(hn::Mul(acc0[i], vscale), df, sbuf + i * ldk + j0);
        hn::StoreU(hn::Mul(acc1[i], vscale), df, sbuf + i * ldk + j0 + N);
      }
    }
    float inv[kQB];  // softmax of each row over its visible keys (0 past them); normalized at the end
    for (std::int64_t i = 0; i < rows; ++i) {
      float* p = sbuf + i * ldk;
      const std::int64_t visible = causal ? std::min(n, start + i0 + i + 1) : n;
      inv[i] = 1.0f / ExpShiftSum(p, visible, MaxOf(p, visible));
      std::fill(p + visible, p + nk, 0.0f);
    }
    for (std::int64_t r0 = 0; r0 < rows; r0 += 4) {  // O = P·V, 4 rows × 4 vectors of d at a time
      const std::int64_t rr = std::min<std::int64_t>(4, rows - r0);
      const float* pr[4];
      for (int r = 0; r < 4; ++r) pr[r] = sbuf + (r0 + std::min<std::int64_t>(r, rr - 1)) * ldk;
      for (std::int64_t c0 = 0; c0 < d; c0 += 4 * N) {
        // One small array per column vector: GCC keeps arrays of this size in
        // registers, but spilled a single [4][4] array to the stack every key.
        VF a0[4], a1[4], a2[4], a3[4];
        for (int r = 0; r < 4; ++r) a0[r] = a1[r] = a2[r] = a3[r] = hn::Zero(df);
        for (std::int64_t j = 0; j < nk; ++j) {
          const float* vj = vh + (kvh * n + j) * d + c0;
          const VF v0 = hn::LoadU(df, vj), v1 = hn::LoadU(df, vj + N), v2 = hn::LoadU(df, vj + 2 * N),
                   v3 = hn::LoadU(df, vj + 3 * N);
          for (int r = 0; r < 4; ++r) {
            const VF pv = hn::Set(df, pr[r][j]);
            a0[r] = hn::MulAdd(pv, v0, a0[r]);
            a1[r] = hn::MulAdd(pv, v1, a1[r]);
            a2[r] = hn::MulAdd(pv, v2, a2[r]);
            a3[r] = hn::MulAdd(pv, v3, a3[r]);
          }
        }
        for (int r = 0; r < 4; ++r) {  // a constant trip count: unrolled, the arrays stay in registers
          if (r >= rr) break;
          float* o = out + ((i0 + r0 + r) * hq + h) * d + c0;
          const VF vinv = hn::Set(df, inv[r0 + r]);
          hn::StoreU(hn::Mul(a0[r], vinv), df, o);
          hn::StoreU(hn::Mul(a1[r], vinv), df, o + N);
          hn::StoreU(hn::Mul(a2[r], vinv), df, o + 2 * N);
          hn::StoreU(hn::Mul(a3[r], vinv), df, o + 3 * N);
        }
      }
    }
  }
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

void LayerNormRows(const float* x, const float* w, const float* b, std::int64_t n, float eps, float* y,
                   std::int64_t r0, std::int64_t r1) {
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

void SiluMulRange(const float* gate, const float* up, float* y, std::int64_t b, std::int64_t e) {
  const DF df;
  const std::int64_t N = lanes();
  const VF one = hn::Set(df, 1.0f), lim = hn::Set(df, 88.0f);  // exp(88) is finite in f32
  std::int64_t i = b;
  for (; i + N <= e; i += N) {
    const VF g = hn::LoadU(df, gate + i);
    const VF ex = hn::Exp(df, hn::Min(hn::Neg(g), lim));
    hn::StoreU(hn::Mul(hn::Div(g, hn::Add(one, ex)), hn::LoadU(df, up + i)), df, y + i);
  }
  for (; i < e; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void GeluTanhRange(const float* x, float* y, std::int64_t b, std::int64_t e) {
  const DF df;
  const std::int64_t N = lanes();
  const float k = std::sqrt(2.0f / std::numbers::pi_v<float>);
  const VF vk = hn::Set(df, k), c = hn::Set(df, 0.044715f), one = hn::Set(df, 1.0f);
  const VF m2 = hn::Set(df, -2.0f), lim = hn::Set(df, 88.0f);
  std::int64_t i = b;
  for (; i + N <= e; i += N) {
    const VF v = hn::LoadU(df, x + i);
    const VF inner = hn::Mul(vk, hn::MulAdd(hn::Mul(c, v), hn::Mul(v, v), v));
    // 0.5·v·(1 + tanh(u)) = v / (1 + e^(−2u)): one Exp and a division, about half
    // the work of Tanh; e^(−2u) is capped where it would overflow (the result is then ~0).
    const VF ex = hn::Exp(df, hn::Min(hn::Mul(m2, inner), lim));
    hn::StoreU(hn::Div(v, hn::Add(one, ex)), df, y + i);
  }
  for (; i < e; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
  }
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
HWY_EXPORT(PackKeysValues);
HWY_EXPORT(BlockedAttentionFits);
HWY_EXPORT(AttentionBlocks);
HWY_EXPORT(Lanes);
HWY_EXPORT(GroupedAttentionFits);
HWY_EXPORT(AttentionRows);
HWY_EXPORT(AttentionRowsF16);
HWY_EXPORT(AttentionRowsI8);
HWY_EXPORT(ToF16Range);
HWY_EXPORT(RmsNormRows);
HWY_EXPORT(LayerNormRows);
HWY_EXPORT(SiluMulRange);
HWY_EXPORT(GeluTanhRange);
HWY_EXPORT(AddRange);
HWY_EXPORT(RopeRotateHalf);

namespace {

// Work items per chunk so that a chunk is worth a thread hand-off (~32k flops).
std::int64_t grain_for(std::int64_t cost_per_item) {
  return std::max<std::int64_t>(1, (std::int64_t{1} << 15) / std::max<std::int64_t>(1, cost_per_item));
}

// x [m, cols] with each group of 32 columns reordered to its 16 even columns,
// then its 16 odd ones: the order W4Row reads the nibbles in.
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

}  // namespace

void linear(const float* x, std::int64_t m, const WeightMatrix& w, const float* bias, float* y) {
  if (w.int8_activations) {
    if (w.packed != nullptr && w.packed->rows == w.rows && w.packed->cols == w.cols)
      linear_i8_packed(x, m, *w.packed, bias, y);
    else
      ref::linear(x, m, w, bias, y);  // not packed (or not w8): the contract, and its errors
    return;
  }
  const bool known = w.dtype == DType::F32 || w.dtype == DType::BF16 || w.dtype == DType::F16 ||
                     w.dtype == DType::I8 || w.dtype == DType::U8;
  // (A panel-form matrix reaches here only unprepared: prepare() gives f32 activations rows.)
  if (!known || (w.dtype == DType::U8 && w.cols % kW4GroupSize != 0) || w.panel_form) {
    ref::linear(x, m, w, bias, y);  // reports the bad matrix as the reference does
    return;
  }
  const float* xs = w.dtype == DType::U8 ? permute_for_w4(x, m, w.cols) : x;
  parallel_for(w.rows, grain_for(m * w.cols), [&](std::int64_t b, std::int64_t e) {
    HWY_DYNAMIC_DISPATCH(LinearRows)(xs, m, w, bias, y, b, e);
  });
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
  if (w.dtype != DType::I8 && !(w.dtype == DType::U8 && w.cols % kW4GroupSize == 0)) return nullptr;
  return pack_i8(w, int8_kernel_best());
}

// The per-query paths of `attention` (every causal call), for f32, f16 or 8-bit
// keys and values (ctx: the 8-bit cache's rows per head).
template <class T>
void attention_per_query(const float* q, const T* k, const T* v, std::int64_t t, std::int64_t n, std::int64_t hq,
                         std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal, float* out,
                         std::int64_t ctx = 0) {
  // A few queries: KV rows read once per group of query heads; other head sizes: per (query, head).
  const bool grouped = HWY_DYNAMIC_DISPATCH(GroupedAttentionFits)(d);
  const std::int64_t tasks = grouped ? t * hkv : t * hq;
  parallel_for(tasks, grouped ? 1 : grain_for(2 * n * d), [&](std::int64_t b, std::int64_t e) {
    thread_local std::vector<float> p;  // grows to the largest context, then is reused
    if (p.size() < static_cast<std::size_t>(2 * std::max<std::int64_t>(n, 1)))
      p.resize(static_cast<std::size_t>(2 * std::max<std::int64_t>(n, 1)));
    if constexpr (std::is_same_v<T, float>)
      HWY_DYNAMIC_DISPATCH(AttentionRows)(grouped, q, k, v, t, n, hq, hkv, d, start, scale, causal, out, b, e,
                                          p.data());
    else if constexpr (std::is_same_v<T, std::int8_t>)
      HWY_DYNAMIC_DISPATCH(AttentionRowsI8)(grouped, q, k, v, t, n, ctx, hq, hkv, d, start, scale, out, b, e,
                                            p.data());
    else
      HWY_DYNAMIC_DISPATCH(AttentionRowsF16)(grouped, q, k, v, t, n, hq, hkv, d, start, scale, causal, out, b, e,
                                             p.data());
  });
}

void attention(const float* q, const float* k, const float* v, std::int64_t t, std::int64_t n, std::int64_t hq,
               std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal, float* out) {
  const std::int64_t N = HWY_DYNAMIC_DISPATCH(Lanes)();
  // Each path gives a query row the same arithmetic whatever else is in the
  // call, but the paths differ from each other in summation order; causal
  // attention (a decoder, whose prompt may arrive in chunks or one token at a
  // time) therefore never switches path with t, so chunked prefill equals a
  // single pass bit for bit. The blocked path serves many non-causal queries (vision).
  if (!causal && t >= 8 && HWY_DYNAMIC_DISPATCH(BlockedAttentionFits)(d)) {
    // One vector more than the keys need: a row stride of a whole number of
    // KiB would map every row of Kᵀ to the same cache sets.
    const std::int64_t ldk = (n + 2 * N - 1) / (2 * N) * (2 * N) + N;
    thread_local std::vector<float> kt, vh;  // grow to the largest call, then are reused
    if (kt.size() < static_cast<std::size_t>(hkv * d * ldk)) kt.resize(static_cast<std::size_t>(hkv * d * ldk));
    if (vh.size() < static_cast<std::size_t>(hkv * n * d)) vh.resize(static_cast<std::size_t>(hkv * n * d));
    float* ktp = kt.data();
    float* vhp = vh.data();
    parallel_for(hkv, 1, [&](std::int64_t b, std::int64_t e) {
      HWY_DYNAMIC_DISPATCH(PackKeysValues)(k, v, n, hkv, d, ldk, ktp, vhp, b, e);
    });
    const std::int64_t blocks = (t + 7) / 8;
    parallel_for(hq * blocks, 1, [&](std::int64_t b, std::int64_t e) {
      thread_local std::vector<float> s;  // this thread's S block, 8 × ldk
      if (s.size() < static_cast<std::size_t>(8 * ldk)) s.resize(static_cast<std::size_t>(8 * ldk));
      HWY_DYNAMIC_DISPATCH(AttentionBlocks)(q, ktp, ldk, vhp, t, n, hq, hkv, d, start, scale, causal, out, b, e,
                                            s.data());
    });
    return;
  }
  attention_per_query(q, k, v, t, n, hq, hkv, d, start, scale, causal, out);
}

void attention_f16kv(const float* q, const std::uint16_t* k, const std::uint16_t* v, std::int64_t t, std::int64_t n,
                     std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start, float scale, bool causal,
                     float* out) {
  attention_per_query(q, reinterpret_cast<const hwy::float16_t*>(k), reinterpret_cast<const hwy::float16_t*>(v), t,
                      n, hq, hkv, d, start, scale, causal, out);
}

void attention_i8kv(const float* q, const std::int8_t* k, const std::int8_t* v, std::int64_t t, std::int64_t n,
                    std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start, float scale,
                    float* out) {
  attention_per_query(q, k, v, t, n, hq, hkv, d, start, scale, /*causal=*/true, out, ctx);
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

// The reference's std::erf, split across the pool (Highway has no vector erf).
void gelu_erf(const float* x, std::int64_t n, float* y) {
  parallel_for(n, grain_for(40), [&](std::int64_t b, std::int64_t e) { ref::gelu_erf(x + b, e - b, y + b); });
}

void add_inplace(float* y, const float* x, std::int64_t n) {
  parallel_for(n, std::int64_t{1} << 14, [&](std::int64_t b, std::int64_t e) { HWY_DYNAMIC_DISPATCH(AddRange)(y, x, b, e); });
}

void rope_rotate_half(float* x, std::int64_t tokens, std::int64_t heads, std::int64_t dim, const float* cos,
                      const float* sin) {
  HWY_DYNAMIC_DISPATCH(RopeRotateHalf)(x, tokens, heads, dim, cos, sin);
}

std::int64_t dispatched_target() { return HWY_DYNAMIC_DISPATCH(CompiledTarget)(); }

}  // namespace fast

const KernelSet& fast_kernels() {
  static const KernelSet k{"fast",          fast::linear,      fast::rms_norm,  fast::layer_norm,
                           fast::silu_mul,  fast::gelu_tanh,   fast::gelu_erf,  fast::add_inplace,
                           fast::rope_rotate_half, fast::attention, fast::attention_f16kv, fast::to_f16, fast::attention_i8kv,
                           fast::attention_i8, ref::gather_rows,
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
  static const KernelSet& k = [] () -> const KernelSet& {
    const char* env = std::getenv("QHX_KERNELS");
    return env != nullptr && std::string_view(env) == "reference" ? reference_kernels() : fast_kernels();
  }();
  return k;
}

}  // namespace qhx::cpu
#endif  // HWY_ONCE
