// Per-target vector helpers the fast kernels' files share (kernels_fast.cpp,
// attention_fast.cpp): the f32 vector type, loads that widen a KV cache's f16
// or int8 elements, and the dot product, sum, max and exp-shift-sum every
// attention path and norm uses (one copy, so every path sums the same way).
//
// Highway's per-target include guard: foreach_target.h compiles an including
// file once per SIMD target and flips HWY_TARGET_TOGGLE between the passes, so
// this header must be read again on each pass, into that pass's HWY_NAMESPACE.
#if defined(QHX_CPU_VECTOR_HELPERS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QHX_CPU_VECTOR_HELPERS_INL_H_
#undef QHX_CPU_VECTOR_HELPERS_INL_H_
#else
#define QHX_CPU_VECTOR_HELPERS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/half.hpp"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace qhx::cpu::fast {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 f32 lanes: a w4 group (32 columns) splits into whole vectors.
using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;

inline std::int64_t lanes() { return static_cast<std::int64_t>(hn::Lanes(DF())); }

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

}  // namespace HWY_NAMESPACE
}  // namespace qhx::cpu::fast
HWY_AFTER_NAMESPACE();

#endif  // QHX_CPU_VECTOR_HELPERS_INL_H_ (per target)
