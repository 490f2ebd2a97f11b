// The fast attention kernels (attention_fast.hpp; kernels_fast.hpp describes
// the paths): per-query attention for causal calls (decode, and prefill in any
// chunks) over f32, f16 or 8-bit keys and values, and blocked attention for many
// non-causal queries (vision). Highway's foreach_target pattern, as in
// kernels_fast.cpp: compiled once per SIMD target, dispatched under HWY_ONCE.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/attention_fast.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backends/cpu/vector_helpers-inl.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/attention_fast.hpp"
#include "backends/cpu/kv_cache_i8.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "qhexrt/error.hpp"

HWY_BEFORE_NAMESPACE();
namespace qhx::cpu::fast {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

std::int64_t Lanes() { return lanes(); }  // exported: the dispatcher's view of the vector width

// Where the rows of one KV head lie, and the factor a row's values carry:
// f32 keys and values [n, hkv, d] and the f16 cache [hkv, ctx, d] carry 1 (a
// product with 1 is exact, so those paths compute what they did before there
// were factors); the 8-bit cache [hkv, ctx, d + 4] carries each row's scale. A
// score is then (q · row) · factor · scale, and a value row's weight p · (1 / l) · factor.
// Dense rows: row j of head g at j · row_stride + g · head_stride elements. The f16
// cache keeps a head's rows together (one sequential stream per head in decode;
// token-major rows, hkv · d apart, left the hardware prefetchers a 256-byte run
// in every 2 KiB, far below the memory's bandwidth).
template <class T>
struct DenseRows {
  using Elem = T;
  const T* base;
  std::int64_t row_stride, head_stride;
  static DenseRows token_major(const T* base, std::int64_t hkv, std::int64_t d) { return {base, hkv * d, d}; }
  static DenseRows head_major(const T* base, std::int64_t ctx, std::int64_t d) { return {base, d, ctx * d}; }
  HWY_INLINE const T* row(std::int64_t j, std::int64_t g) const { return base + j * row_stride + g * head_stride; }
  HWY_INLINE float factor(const T*) const { return 1.0f; }
  std::int64_t stride() const { return row_stride; }  // elements from a head's row j to its row j + 1
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

// Decode reads each KV row once, in one stream per head, and fetches its lines
// twice ahead of the loads: far (~16 KiB of rows, at least 16) into L2 and near
// (~4 KiB, at least 4 rows) into L1. On Sapphire Rapids the far fetch into L2 beat
// a fetch into L1 alone; on Zen 4 the L2 fetch alone left the 8-bit cache's rows
// waiting on L2, and the near fetch into L1 took that wait away; both together keep
// what each won (bench_kernels' decode attention; the figures are in the commits).
struct RowsAhead {
  std::int64_t rows;       // the far fetch's distance in rows (no fetches in the last `rows` rows)
  std::int64_t far, near;  // elements from a row to the rows fetched
  template <class T>
  static RowsAhead of(std::int64_t d, std::int64_t stride) {
    const std::int64_t row_bytes = d * static_cast<std::int64_t>(sizeof(T));
    const std::int64_t rows = std::max<std::int64_t>(16, 16384 / row_bytes);
    return {rows, rows * stride, std::max<std::int64_t>(4, 4096 / row_bytes) * stride};
  }
  // The lines of the rows far and near ahead of row j (its first `elems` elements) of `visible`.
  template <class T>
  HWY_INLINE void fetch(const T* row, std::int64_t j, std::int64_t visible, std::int64_t elems) const {
    if (j + rows >= visible) return;
    constexpr std::int64_t kLine = 64 / sizeof(T);  // elements per cache line
    for (std::int64_t l = 0; l < elems; l += kLine) {
      __builtin_prefetch(row + far + l, 0, 2);
      __builtin_prefetch(row + near + l, 0, 3);
    }
  }
};

// A long pass over one head's rows reads them as kStreams runs taken in turn
// (run 0's row, run 1's row, ..., then each run's next): the hardware
// prefetchers fetch ahead on every run at once, where a single stream per core
// kept too few lines in flight to hide memory's latency behind the arithmetic.
// Below kStreamsFrom rows the cache is read from L2/L3 and the turns only cost
// time. The value
// pass sums in that order, so a query's result depends on its visible rows
// only, never on the call it is in (chunked prefill stays bit-identical).
constexpr int kStreams = 4;
constexpr std::int64_t kStreamsFrom = 1024;
HWY_INLINE int StreamsFor(std::int64_t visible) { return visible >= kStreamsFrom ? kStreams : 1; }

// fn(i) for every i in [0, count), in `streams` runs taken in turn.
template <class Fn>
HWY_INLINE void InStreams(std::int64_t count, int streams, Fn&& fn) {
  if (streams <= 1) {
    for (std::int64_t i = 0; i < count; ++i) fn(i);
    return;
  }
  const std::int64_t per = (count + streams - 1) / streams;
  for (std::int64_t i = 0; i < per; ++i)
    for (int r = 0; r < streams; ++r)
      if (r * per + i < count) fn(r * per + i);
}

// ---- scores against the 8-bit cache (kv_cache_i8.hpp: integer products) ------
#if HWY_TARGET == HWY_SCALAR
// One lane: no int16 pairs to multiply-add; plain loops (the sums are exact either way).
HWY_INLINE std::int32_t DotI8(const std::int16_t* qq, const std::int8_t* k, std::int64_t d) {
  std::int32_t s = 0;
  for (std::int64_t c = 0; c < d; ++c) s += qq[c] * k[c];
  return s;
}
#else
using DI32 = hn::RebindToSigned<DF>;               // the f32 lanes' count of int32
using DI16 = hn::Repartition<std::int16_t, DI32>;  // twice as many int16
using DI8 = hn::Rebind<std::int8_t, DI16>;         // as many int8, widened to DI16
using VI32 = hn::Vec<DI32>;

// Σ_c qq[c] · k_j[c] of one key row, as partial sums in the lanes (exact int32).
template <int U>
HWY_INLINE VI32 KeyPartials(const hn::Vec<DI16> (&qv)[U], const hn::Vec<DI16> (&kw)[U]) {
  const DI32 di;
  VI32 a0 = hn::Zero(di), a1 = hn::Zero(di);
  for (int u = 0; u < U; ++u) a0 = hn::ReorderWidenMulAccumulate(di, qv[u], kw[u], a0, a1);
  return hn::RearrangeToOddPlusEven(a0, a1);
}

// One key row's exact Σ_c qq[c] · k[c], any d (the per-query path and tails).
HWY_INLINE std::int32_t DotI8(const std::int16_t* qq, const std::int8_t* k, std::int64_t d) {
  const DI32 di;
  const DI16 dw;
  const DI8 db;
  const std::int64_t W = static_cast<std::int64_t>(hn::Lanes(dw));
  VI32 a0 = hn::Zero(di), a1 = hn::Zero(di);
  std::int64_t c = 0;
  for (; c + W <= d; c += W)
    a0 = hn::ReorderWidenMulAccumulate(di, hn::LoadU(dw, qq + c), hn::PromoteTo(dw, hn::LoadU(db, k + c)), a0, a1);
  std::int32_t s = hn::GetLane(hn::SumOfLanes(di, hn::RearrangeToOddPlusEven(a0, a1)));
  for (; c < d; ++c) s += qq[c] * k[c];
  return s;
}

// A lambda the compiler must inline (GCC and clang): a FoldKeys leaf called as a
// function passes its vectors through memory, 16 calls a block.
#define QHX_LAMBDA_INLINE __attribute__((always_inline))

// Dot products of keys [j, j + 2^L) as one vector: `leaf(j, v)` gives key j's
// partial-sum vector per head (v[g]: its lanes sum to the dot product with
// head g); pairs of vectors are then folded level by level (even lanes + odd
// lanes of the two, side by side), so that after L = log2(lanes) levels lane r
// of out[g] holds key j + r's whole sum, its lanes added pairwise, adjacent
// ones first. Folding costs about 3 instructions a key where a horizontal sum
// costs 8 or more (its shuffles and adds wait on each other), and the
// recursion keeps at most L + 1 vectors a head alive.
template <int L, class D, int HB, class Leaf>
HWY_INLINE void FoldKeys(D d, std::int64_t j, const Leaf& leaf, hn::Vec<D> (&out)[HB]) {
  if constexpr (L == 0) {
    leaf(j, out);
  } else {
    hn::Vec<D> lo[HB], hi[HB];
    FoldKeys<L - 1>(d, j, leaf, lo);
    FoldKeys<L - 1>(d, j + (std::int64_t{1} << (L - 1)), leaf, hi);
    for (int g = 0; g < HB; ++g) out[g] = hn::Add(hn::ConcatEven(d, hi[g], lo[g]), hn::ConcatOdd(d, hi[g], lo[g]));
  }
}

// A block's scores s of one head stored at pg, and its maximum taken (lane by
// lane, as the one-key paths take it).
HWY_INLINE void StoreBlockScores(VF s, float* pg, float& max_s) {
  const DF df;
  hn::StoreU(s, df, pg);
  for (std::int64_t r = 0; r < static_cast<std::int64_t>(hn::Lanes(df)); ++r) max_s = std::max(max_s, pg[r]);
}

constexpr int Log2(std::size_t n) { return n <= 1 ? 0 : 1 + Log2(n / 2); }
#endif  // HWY_TARGET != HWY_SCALAR

// Scores p[g · n + j] of HB query heads (q: their f32 rows, d = U · 2 · lanes)
// over keys [0, visible) of KV head kvh, and each head's maximum.
template <int HB, int U>
HWY_INLINE void ScoresI8(const float* q, std::int64_t d, const I8Rows& k, std::int64_t kvh, std::int64_t visible,
                         float scale, const RowsAhead* ahead, float* p, std::int64_t n, float* max_s) {
  alignas(64) std::int16_t qq[HB][kKvI8MaxHeadDim];
  float qs[HB];
  for (int g = 0; g < HB; ++g) qs[g] = kv_i8_quantize_query(q + g * d, d, qq[g]) * scale;
  std::int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR
  const DF df;
  const DI16 dw;
  constexpr std::int64_t N = static_cast<std::int64_t>(hn::MaxLanes(DF()));
  constexpr int L = Log2(static_cast<std::size_t>(N));
  hn::Vec<DI16> qv[HB][U];
  for (int g = 0; g < HB; ++g)
    for (int u = 0; u < U; ++u) qv[g][u] = hn::LoadU(dw, qq[g] + u * hn::Lanes(dw));
  const DI32 di;
  const DI8 db;
  const std::int64_t W = static_cast<std::int64_t>(hn::Lanes(dw));
  const auto partials = [&](std::int64_t jk, VI32(&v)[HB]) QHX_LAMBDA_INLINE {  // key jk's exact int32 partial sums
    const std::int8_t* kj = k.row(jk, kvh);
    if (ahead != nullptr) ahead->fetch(kj, jk, visible, U * W);
    hn::Vec<DI16> kw[U];
    for (int u = 0; u < U; ++u) kw[u] = hn::PromoteTo(dw, hn::LoadU(db, kj + u * W));
    for (int g = 0; g < HB; ++g) v[g] = KeyPartials<U>(qv[g], kw);
  };
  alignas(64) float factors[N];
  // Whole blocks of N keys, folded (every compiled target has N lanes).
  InStreams(visible / N, StreamsFor(visible), [&](std::int64_t blk) {
    const std::int64_t jb = blk * N;
    VI32 sums[HB];
    FoldKeys<L>(di, jb, partials, sums);
    for (std::int64_t r = 0; r < N; ++r) factors[r] = k.factor(k.row(jb + r, kvh));
    const VF kfv = hn::Load(df, factors);
    for (int g = 0; g < HB; ++g)
      StoreBlockScores(hn::Mul(hn::Mul(hn::ConvertTo(df, sums[g]), kfv), hn::Set(df, qs[g])), p + g * n + jb, max_s[g]);
  });
  j = visible / N * N;
#else
  (void)ahead;
#endif
  for (; j < visible; ++j) {  // the rest one key at a time: the same sums, the same roundings
    const std::int8_t* kj = k.row(j, kvh);
    const float kf = k.factor(kj);
    for (int g = 0; g < HB; ++g) {
      const float sc = kv_i8_score(DotI8(qq[g], kj, d), kf, qs[g]);
      p[g * n + j] = sc;
      max_s[g] = std::max(max_s[g], sc);
    }
  }
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
    if constexpr (std::is_same_v<Rows, I8Rows>) {
      alignas(64) std::int16_t qq[kKvI8MaxHeadDim];
      const float qs = kv_i8_quantize_query(qi, d, qq) * scale;
      for (std::int64_t j = 0; j < visible; ++j) {
        const T* kj = k.row(j, kvh);
        p[j] = kv_i8_score(DotI8(qq, kj, d), k.factor(kj), qs);
        max_s = std::max(max_s, p[j]);
      }
    } else {
      for (std::int64_t j = 0; j < visible; ++j) {
        const T* kj = k.row(j, kvh);
        p[j] = Dot(qi, kj, d) * k.factor(kj) * scale;
        max_s = std::max(max_s, p[j]);
      }
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

// One key row's products with HB query heads (qv: their rows, NV vectors each)
// as one partial-sum vector per head: two chains of products, so a row's dot
// product waits on half as many FMAs, then added.
template <int HB, int NV, class Rows>
HWY_INLINE void DensePartials(const VF (&qv)[HB][NV], const Rows& k, std::int64_t kvh, std::int64_t j,
                              const RowsAhead* ahead, std::int64_t visible, VF (&out)[HB]) {
  const DF df;
  const std::int64_t N = lanes();
  const auto* kj = k.row(j, kvh);
  if (ahead != nullptr) ahead->fetch(kj, j, visible, NV * N);
  VF kv[NV];
  for (int u = 0; u < NV; ++u) kv[u] = LoadKV(df, kj + u * N);
  for (int g = 0; g < HB; ++g) {
    VF acc0 = hn::Mul(qv[g][0], kv[0]), acc1 = hn::Mul(qv[g][1], kv[1]);
    for (int u = 2; u < NV; u += 2) {
      acc0 = hn::MulAdd(qv[g][u], kv[u], acc0);
      acc1 = hn::MulAdd(qv[g][u + 1], kv[u + 1], acc1);
    }
    out[g] = hn::Add(acc0, acc1);
  }
}

// Scores p[g · n + j] of HB query heads (q: their rows, d = NV · lanes) over
// f32 or f16 keys [0, visible) of KV head kvh, and each head's maximum: whole
// blocks of `lanes` keys folded (FoldKeys), the rest one key at a time (a
// horizontal sum).
// Which keys a block holds depends only on `visible`, so a query's scores do
// not depend on the call it is in.
template <int HB, int NV, class Rows>
HWY_INLINE void ScoresDense(const float* q, const Rows& k, std::int64_t kvh, std::int64_t visible, float scale,
                            const RowsAhead* ahead, float* p, std::int64_t n, float* max_s) {
  const DF df;
  const std::int64_t N = lanes();
  const std::int64_t d = NV * N;
  VF qv[HB][NV];
  for (int g = 0; g < HB; ++g)
    for (int u = 0; u < NV; ++u) qv[g][u] = hn::LoadU(df, q + g * d + u * N);
  std::int64_t j = 0;
#if HWY_TARGET != HWY_SCALAR
  constexpr int L = Log2(hn::MaxLanes(DF()));
  const auto partials = [&](std::int64_t jk, VF(&v)[HB]) QHX_LAMBDA_INLINE {
    DensePartials<HB, NV>(qv, k, kvh, jk, ahead, visible, v);
  };
  InStreams(visible / N, StreamsFor(visible), [&](std::int64_t blk) {
    const std::int64_t jb = blk * N;
    VF sums[HB];
    FoldKeys<L>(df, jb, partials, sums);
    for (int g = 0; g < HB; ++g)  // a dense row's factor is 1: sum · 1 · scale is sum · scale
      StoreBlockScores(hn::Mul(sums[g], hn::Set(df, scale)), p + g * n + jb, max_s[g]);
  });
  j = visible / N * N;
#endif
  for (; j < visible; ++j) {
    VF part[HB];
    DensePartials<HB, NV>(qv, k, kvh, j, ahead, visible, part);
    for (int g = 0; g < HB; ++g) {
      const float sc = hn::GetLane(hn::SumOfLanes(df, part[g])) * scale;
      p[g * n + j] = sc;
      max_s[g] = std::max(max_s[g], sc);
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
                    std::int64_t start, float scale, bool causal, float* out, std::int64_t i, std::int64_t h0, float* p,
                    bool prefetch) {
  using T = typename Rows::Elem;
  const DF df;
  const std::int64_t N = lanes();
  const std::int64_t d = NV * N;
  const std::int64_t kvh = h0 / (hq / hkv);
  const std::int64_t visible = causal ? std::min(n, start + i + 1) : n;
  float max_s[HB];
  for (int g = 0; g < HB; ++g) max_s[g] = -std::numeric_limits<float>::infinity();
  // Rows of one KV head lie hkv·d elements apart in an f32 cache (often exactly
  // 4 KiB): every row is a new page the hardware prefetcher will not enter, so a
  // decode step fetches rows ahead (RowsAhead; the f16 and 8-bit caches keep a
  // head's rows together, and the fetches run ahead of one stream). Many queries
  // (prefill) find them in L2 after the first: there the fetches only cost.
  const RowsAhead rows_ahead = RowsAhead::of<T>(d, k.stride());
  const RowsAhead* ahead = prefetch ? &rows_ahead : nullptr;
  if constexpr (std::is_same_v<Rows, I8Rows>)
    ScoresI8<HB, NV / 2>(q + (i * hq + h0) * d, d, k, kvh, visible, scale, ahead, p, n, max_s);
  else
    ScoresDense<HB, NV>(q + (i * hq + h0) * d, k, kvh, visible, scale, ahead, p, n, max_s);
  float inv[HB];
  for (int g = 0; g < HB; ++g) {
    inv[g] = 1.0f / ExpShiftSum(p + g * n, visible, max_s[g]);
  }
  VF o[HB][NV];
  for (int g = 0; g < HB; ++g)
    for (int u = 0; u < NV; ++u) o[g][u] = hn::Zero(df);
  InStreams(visible, StreamsFor(visible), [&](std::int64_t j) {
    const T* vj = v.row(j, kvh);
    if (ahead != nullptr) ahead->fetch(vj, j, visible, d);
    VF vv[NV];
    for (int u = 0; u < NV; ++u) vv[u] = LoadKV(df, vj + u * N);
    const float vf = v.factor(vj);
    for (int g = 0; g < HB; ++g) {
      const VF w = hn::Set(df, p[g * n + j] * inv[g] * vf);
      for (int u = 0; u < NV; ++u) o[g][u] = hn::MulAdd(w, vv[u], o[g][u]);
    }
  });
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
  for (std::int64_t task = b; task < e; ++task) {
    // KV head first, then query: the queries of one head follow each other and
    // find its rows in L2 after the first (a verify step's few queries used to
    // stream every head's rows from memory once per query). The first query of
    // a head fetches ahead when the call is decode-sized; in a long prefill the
    // rows are mostly in cache already and the fetches only cost.
    const std::int64_t kvh = task / t, i = task % t;
    const bool prefetch = i == 0 && t <= 16;
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
  AttentionRowsT(grouped, q, DenseRows<float>::token_major(k, hkv, d), DenseRows<float>::token_major(v, hkv, d), t, n,
                 hq, hkv, d, start, scale, causal, out, b, e, p);
}
void AttentionRowsF16(bool grouped, const float* q, const F16* k, const F16* v, std::int64_t t, std::int64_t n,
                      std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start,
                      float scale, bool causal, float* out, std::int64_t b, std::int64_t e, float* p) {
  AttentionRowsT(grouped, q, DenseRows<F16>::head_major(k, ctx, d), DenseRows<F16>::head_major(v, ctx, d), t, n, hq,
                 hkv, d, start, scale, causal, out, b, e, p);
}
void AttentionRowsI8(bool grouped, const float* q, const std::int8_t* k, const std::int8_t* v, std::int64_t t,
                     std::int64_t n, std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d,
                     std::int64_t start, float scale, float* out, std::int64_t b, std::int64_t e, float* p) {
  AttentionRowsT(grouped, q, I8Rows{k, ctx, d}, I8Rows{v, ctx, d}, t, n, hq, hkv, d, start, scale, /*causal=*/true, out,
                 b, e, p);
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
void PackKeysValues(const float* k, const float* v, std::int64_t n, std::int64_t hkv, std::int64_t d, std::int64_t ldk,
                    float* kt, float* vh, std::int64_t h0, std::int64_t h1) {
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

}  // namespace HWY_NAMESPACE
}  // namespace qhx::cpu::fast
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qhx::cpu::fast {

HWY_EXPORT(Lanes);
HWY_EXPORT(GroupedAttentionFits);
HWY_EXPORT(AttentionRows);
HWY_EXPORT(AttentionRowsF16);
HWY_EXPORT(AttentionRowsI8);
HWY_EXPORT(BlockedAttentionFits);
HWY_EXPORT(PackKeysValues);
HWY_EXPORT(AttentionBlocks);

namespace {

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
    float* const scratch = p.data();
    if constexpr (std::is_same_v<T, float>) {
      HWY_DYNAMIC_DISPATCH(AttentionRows)(grouped, q, k, v, t, n, hq, hkv, d, start, scale, causal, out, b, e, scratch);
    } else if constexpr (std::is_same_v<T, std::int8_t>) {
      HWY_DYNAMIC_DISPATCH(AttentionRowsI8)(grouped, q, k, v, t, n, ctx, hq, hkv, d, start, scale, out, b, e, scratch);
    } else {
      const auto rows = HWY_DYNAMIC_DISPATCH(AttentionRowsF16);
      rows(grouped, q, k, v, t, n, ctx, hq, hkv, d, start, scale, causal, out, b, e, scratch);
    }
  });
}

}  // namespace

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
      float* const scores = s.data();
      const auto blocks_of_queries = HWY_DYNAMIC_DISPATCH(AttentionBlocks);
      blocks_of_queries(q, ktp, ldk, vhp, t, n, hq, hkv, d, start, scale, causal, out, b, e, scores);
    });
    return;
  }
  attention_per_query(q, k, v, t, n, hq, hkv, d, start, scale, causal, out);
}

void attention_f16kv(const float* q, const std::uint16_t* k, const std::uint16_t* v, std::int64_t t, std::int64_t n,
                     std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start,
                     float scale, bool causal, float* out) {
  attention_per_query(q, reinterpret_cast<const hwy::float16_t*>(k), reinterpret_cast<const hwy::float16_t*>(v), t, n,
                      hq, hkv, d, start, scale, causal, out, ctx);
}

void attention_i8kv(const float* q, const std::int8_t* k, const std::int8_t* v, std::int64_t t, std::int64_t n,
                    std::int64_t ctx, std::int64_t hq, std::int64_t hkv, std::int64_t d, std::int64_t start,
                    float scale, float* out) {
  if (d > kKvI8MaxHeadDim) fail("attention over the 8-bit KV cache: head size ", d, " exceeds ", kKvI8MaxHeadDim);
  attention_per_query(q, k, v, t, n, hq, hkv, d, start, scale, /*causal=*/true, out, ctx);
}

}  // namespace qhx::cpu::fast
#endif  // HWY_ONCE
