// The int8 path (int8_matmul.hpp) with AVX-512 VNNI: vpdpbusd multiplies 64
// unsigned activation bytes by 64 signed weight bytes and adds groups of four
// into 16 int32 lanes, i.e. 16 outputs × 4 input columns per instruction.
// Activations therefore arrive as q + 128 (offset 128); the kernel subtracts
// 128 · Σ_k qw[r, k] (PackedI8::row_sums) from each sum, which is exact.
//
// Register tile: MR activation rows × NR panels of 16 outputs (MR·NR int32
// accumulators, at most 8 × 3 = 24 of the 32 zmm registers). Panels are walked
// in blocks of ~256 KiB so a block stays in L2 while every activation row
// passes over it (prefill, vision); decode (m = 1) and a verify step's few rows
// read each panel once, three panels side by side, fetched ahead.
//
// Compiled for every x86-64 build; the code is only reached after a CPUID
// check, so the rest of the library stays baseline x86-64.
#include "backends/cpu/int8_matmul.hpp"

#include "backends/cpu/int8_attention.hpp"
#include "qhexrt/error.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cmath>
#include <cstring>

// Every function below is compiled for AVX-512 VNNI; clang spells GCC's target
// pragma as an attribute applied to each function (the sanitizer build uses clang).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
// GCC 12's own AVX-512 headers start some intrinsics from _mm512_undefined_*(),
// which its -Wuninitialized flags once inlined; the values are never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qhx::cpu {
namespace {

// How far ahead of its loads a tile that streams its panels from memory
// (decode, a verify step) prefetches each of them (into L1): far enough for the
// load to arrive, near enough not to evict what the tile still reads (chosen with
// bench_kernels --only "decode stack" on a Sapphire Rapids VM; the figures are in
// the commit that set it).
constexpr std::int64_t kDecodePrefetchBytes = 3072;
constexpr int kP = 16;  // outputs per panel: one zmm of int32
constexpr int kMaxMR = 8;
constexpr int kMaxNR = 3;

// y rows [i0, i0 + MR) × panels [p, p + NR) from the finished int32 sums
// (the offset's excess already taken off: they are Σ q·qw).
template <int MR, int NR>
__attribute__((always_inline)) inline void epilogue(const __m512i (&acc)[MR][NR], const float* sx, const PackedI8& w,
                                                    const float* bias, float* y, std::int64_t ldy, std::int64_t p,
                                                    std::int64_t i0) {
  for (int j = 0; j < NR; ++j) {
    const std::int64_t r0 = (p + j) * kP;
    const std::int64_t valid = w.rows - r0 < kP ? w.rows - r0 : kP;
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    const __m512 sw = _mm512_load_ps(w.scales.get() + r0);
    const __m512 bv = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + r0) : _mm512_setzero_ps();
    for (int i = 0; i < MR; ++i) {
      const __m512 v = _mm512_cvtepi32_ps(acc[i][j]);
      const __m512 s = _mm512_mul_ps(_mm512_set1_ps(sx[i0 + i]), sw);
      _mm512_mask_storeu_ps(y + (i0 + i) * ldy + r0, mask, _mm512_fmadd_ps(v, s, bv));
    }
  }
}

// Rows [i0, i0 + MR) of panels [p, p + NR) (MR <= 8, NR <= 3): the full 8 × 3
// tile, where prefill and the vision encoder spend their time, and the edge
// tiles beside it. Written with 24 named accumulators (those a shape does not
// use are never touched, and vanish) and one-instruction asm: GCC 12 compiles
// _mm512_dpbusd_epi32 on an array of loop-carried accumulators with a register
// copy before each vpdpbusd, and for tile<8, 2> with stack spills in the loop.
// The accumulators start at −128 · Σ_k qw (the offset activations' excess), so
// the epilogue has one integer subtraction less per output.
#define QHX_DP(acc, a, b) asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))
#define QHX_ROW(i)                                 \
  if constexpr (MR > (i)) {                        \
    std::int32_t a4;                               \
    std::memcpy(&a4, a0 + (i)*ldq + 4 * g, 4);     \
    const __m512i a = _mm512_set1_epi32(a4);       \
    QHX_DP(c##i##0, a, b0v);                       \
    if constexpr (NR > 1) QHX_DP(c##i##1, a, b1v); \
    if constexpr (NR > 2) QHX_DP(c##i##2, a, b2v); \
  }

// Stream: the tile is the first of its block of panels (row 0), so its panels
// come from memory, and it fetches them ahead: all of decode's and a verify
// step's tiles are such. The tiles after it find the block in L2
// (for_each_tile) and do not fetch. Decode takes the 1 × 3 tile, three panels
// as three streams a thread, which keep more loads in flight than one panel at a
// time (four accumulators over one stream); the int32 sums are the same and the
// epilogue is one, so the results are too.
template <int MR, int NR, bool Stream = false>
void tile(const std::uint8_t* q, std::int64_t ldq, const float* sx, const PackedI8& w, const float* bias, float* y,
          std::int64_t ldy, std::int64_t p, std::int64_t i0) {
  static_assert(MR >= 1 && MR <= 8 && NR >= 1 && NR <= 3);
  const std::int64_t k4 = w.k4;
  const std::int64_t pstride = k4 * kP * 4;
  const std::int8_t* bp = w.data.get() + p * pstride;
  const std::uint8_t* a0 = q + i0 * ldq;
  const std::int32_t* sums = w.row_sums.get() + p * kP;
  const auto start = [&](int j) {  // −128 · Σ_k qw of panel p + j's rows
    return j < NR ? _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_load_si512(sums + j * kP), 7))
                  : _mm512_setzero_si512();
  };
  const __m512i s0 = start(0), s1 = start(1), s2 = start(2);
  __m512i c00 = s0, c01 = s1, c02 = s2, c10 = s0, c11 = s1, c12 = s2, c20 = s0, c21 = s1, c22 = s2;
  __m512i c30 = s0, c31 = s1, c32 = s2, c40 = s0, c41 = s1, c42 = s2, c50 = s0, c51 = s1, c52 = s2;
  __m512i c60 = s0, c61 = s1, c62 = s2, c70 = s0, c71 = s1, c72 = s2;
  for (std::int64_t g = 0; g < k4; ++g) {
    if constexpr (Stream)
      for (int j = 0; j < NR; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(bp + j * pstride + g * kP * 4 + kDecodePrefetchBytes), _MM_HINT_T0);
    const __m512i b0v = _mm512_load_si512(bp + g * kP * 4);
    __m512i b1v = s0, b2v = s0;
    if constexpr (NR > 1) b1v = _mm512_load_si512(bp + pstride + g * kP * 4);
    if constexpr (NR > 2) b2v = _mm512_load_si512(bp + 2 * pstride + g * kP * 4);
    QHX_ROW(0)
    QHX_ROW(1)
    QHX_ROW(2)
    QHX_ROW(3)
    QHX_ROW(4)
    QHX_ROW(5)
    QHX_ROW(6)
    QHX_ROW(7)
  }
  const __m512i all[8][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32},
                             {c40, c41, c42}, {c50, c51, c52}, {c60, c61, c62}, {c70, c71, c72}};
  __m512i acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = all[i][j];
  epilogue<MR, NR>(acc, sx, w, bias, y, ldy, p, i0);
}
#undef QHX_ROW
#undef QHX_DP

// quantize_rows_q8, 16 columns at a time, with the same float operations:
// max |x| (a NaN never wins, as in std::max), x · (127 / amax) rounded half to
// even (vrndscaleps), a NaN to 0, clamped to ±127, plus the offset, to bytes.
void quantize(const float* x, std::int64_t m, std::int64_t k, std::int64_t ldq, int offset, std::uint8_t* q,
              float* scales) {
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const __m512i off = _mm512_set1_epi32(offset);
  for (std::int64_t i = 0; i < m; ++i) {
    const float* xr = x + i * k;
    std::uint8_t* qr = q + i * ldq;
    __m512 vmax = _mm512_setzero_ps();
    for (std::int64_t c = 0; c < k; c += 16) {
      const __mmask16 mask =
          k - c >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (k - c)) - 1u);
      const __m512 v = _mm512_abs_ps(_mm512_maskz_loadu_ps(mask, xr + c));
      vmax = _mm512_max_ps(v, vmax);  // returns vmax when v is NaN
    }
    const float amax = _mm512_reduce_max_ps(vmax);
    scales[i] = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    for (std::int64_t c = 0; c < k; c += 16) {
      const __mmask16 mask =
          k - c >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (k - c)) - 1u);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, xr + c), inv);
      __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r);  // NaN -> 0
      r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
      const __m512i qi = _mm512_add_epi32(_mm512_cvtps_epi32(r), off);
      _mm512_mask_cvtepi32_storeu_epi8(qr + c, mask, qi);
    }
    std::memset(qr + k, offset, static_cast<std::size_t>(ldq - k));
  }
}

// 16 lanes of x · inv as quantize() rounds them: half to even, NaN to 0, ±127.
inline __m512i quantize16(__m512 x, __m512 inv) {
  __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r);
  return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f)));
}

inline __mmask16 first_lanes(std::int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

// The lines of one head's row [0, bytes) that many rows ahead: a head's rows
// are a whole token apart (hkv · d floats), too far for the hardware
// prefetchers, and from L3 each row's first load would otherwise wait.
inline void prefetch_row(const float* r, std::int64_t bytes) {
  for (std::int64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(r) + b, _MM_HINT_T0);
}

// Int8Kernel::pack_kv: the portable quantize_kv + pack_i8_into of
// int8_attention.cpp without their scalar passes and V's transposed copy.
// K: each key's row quantized (quantize, signed) and its 4-byte groups put in
// place. V: per channel, the max over all keys, then each group of 4 keys and
// 16 channels quantized as four vectors whose lanes, one byte each, form the
// panel's 64 bytes (lane = channel, bytes = the 4 keys), summed as they go.
// Both walk the keys in order, row by row.
void pack_kv(const float* k, const float* v, std::int64_t n, std::int64_t d, std::int64_t stride, PackedI8& kp,
             PackedI8& vp) {
  constexpr std::int64_t kMaxD = 1024, kAhead = 8;
  if (d > kMaxD) fail("pack_kv: head size ", d, " exceeds ", kMaxD);
  alignas(64) std::uint8_t row[kMaxD];
  const std::int64_t row_bytes = d * static_cast<std::int64_t>(sizeof(float));
  {
    const std::int64_t k4 = kp.k4;
    std::int8_t* data = kp.data.get();
    for (std::int64_t j = 0; j < kp.panels * kP; ++j) {
      std::int8_t* dst = data + (j / kP) * k4 * kP * 4 + (j % kP) * 4;  // group g at dst + g · 64
      if (j >= n) {
        for (std::int64_t g = 0; g < k4; ++g) std::memset(dst + g * kP * 4, 0, 4);
        kp.row_sums.get()[j] = 0;
        kp.scales.get()[j] = 0.0f;
        continue;
      }
      if (j + kAhead < n) prefetch_row(k + (j + kAhead) * stride, row_bytes);
      quantize(k + j * stride, 1, d, d, 0, row, kp.scales.get() + j);
      __m512i sum = _mm512_setzero_si512();
      for (std::int64_t c = 0; c < d; c += 16)
        sum = _mm512_add_epi32(sum, _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(first_lanes(d - c), row + c)));
      kp.row_sums.get()[j] = _mm512_reduce_add_epi32(sum);
      for (std::int64_t g = 0; g < k4; ++g) std::memcpy(dst + g * kP * 4, row + 4 * g, 4);
    }
  }
  // V's per-channel maxima, then inverses, over the panels' channels (0 past d).
  const std::int64_t dp = vp.panels * kP;
  alignas(64) float amax[kMaxD], inv[kMaxD];
  alignas(64) std::int32_t sums[kMaxD];
  for (std::int64_t c = 0; c < dp; c += 16) {
    _mm512_store_ps(amax + c, _mm512_setzero_ps());
    _mm512_store_si512(sums + c, _mm512_setzero_si512());
  }
  for (std::int64_t j = 0; j < n; ++j) {
    if (j + kAhead < n) prefetch_row(v + (j + kAhead) * stride, row_bytes);
    for (std::int64_t c = 0; c < d; c += 16) {
      const __m512 x = _mm512_abs_ps(_mm512_maskz_loadu_ps(first_lanes(d - c), v + j * stride + c));
      _mm512_store_ps(amax + c, _mm512_max_ps(x, _mm512_load_ps(amax + c)));  // keeps amax when x is NaN
    }
  }
  for (std::int64_t c = 0; c < dp; c += 16) {
    const __m512 a = _mm512_load_ps(amax + c);
    _mm512_store_ps(vp.scales.get() + c, _mm512_div_ps(a, _mm512_set1_ps(127.0f)));
    _mm512_store_ps(inv + c, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_GT_OQ),
                                                 _mm512_set1_ps(127.0f), a));
  }
  const std::int64_t k4 = vp.k4;
  for (std::int64_t g = 0; g < k4; ++g) {
    for (std::int64_t p = 0; p < vp.panels; ++p) {
      const std::int64_t c0 = p * kP;
      const __mmask16 lanes = first_lanes(d - c0);
      const __m512 iv = _mm512_load_ps(inv + c0);
      __m512i sum = _mm512_load_si512(sums + c0), packed = _mm512_setzero_si512();
      for (int t = 0; t < 4 && 4 * g + t < n; ++t) {
        const __m512i q = quantize16(_mm512_maskz_loadu_ps(lanes, v + (4 * g + t) * stride + c0), iv);
        sum = _mm512_add_epi32(sum, q);
        packed = _mm512_or_si512(
            packed, _mm512_sllv_epi32(_mm512_and_si512(q, _mm512_set1_epi32(0xFF)), _mm512_set1_epi32(8 * t)));
      }
      _mm512_store_si512(sums + c0, sum);
      _mm512_store_si512(vp.data.get() + (p * k4 + g) * kP * 4, packed);
    }
  }
  std::memcpy(vp.row_sums.get(), sums, static_cast<std::size_t>(dp) * sizeof(std::int32_t));
}

// exp2_127 (int8_attention.hpp) on 16 lanes, operation for operation
// (vrndscaleps rounds to nearest even as 1.5 · 2^23 does; vscalefps multiplies
// by 2^n exactly).
inline __m512 exp2_127x16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));  // x > −126 ? x : −126
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(127.0f * 0.0096181291f), f, _mm512_set1_ps(127.0f * 0.0555041087f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(127.0f * 0.2402265070f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(127.0f * 0.6931471806f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(127.0f));
  return _mm512_min_ps(_mm512_scalef_ps(p, n), _mm512_set1_ps(127.0f));  // e < 127 ? e : 127
}

// softmax_q8_row, 16 columns at a time with the same float operations
// (vcvtps2dq rounds half to even, as the scalar 1.5 · 2^23 trick does).
std::int32_t softmax_q8(const float* s, std::int64_t n, std::int64_t ldp, int offset, std::uint8_t* p) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 vm = ninf;
  for (std::int64_t c = 0; c < n; c += 16) {
    const __mmask16 mask = n - c >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - c)) - 1u);
    vm = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, mask, s + c), vm);
  }
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(vm));
  // 64 columns at a time, narrowed to bytes by two saturating packs (exact:
  // every pq lies in [0, 127]) and one permute that puts the packs' interleaved
  // 128-bit lanes back in column order; then summed by vpsadbw and offset by a
  // byte add (pq + offset <= 255), once per 64 columns instead of per 16.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i off8 = _mm512_set1_epi8(static_cast<char>(offset));
  __m512i sum64 = _mm512_setzero_si512();
  std::int64_t c = 0;
  for (; c + 64 <= n; c += 64) {
    __m512i qv[4];
    for (int u = 0; u < 4; ++u)
      qv[u] = _mm512_cvtps_epi32(exp2_127x16(_mm512_sub_ps(_mm512_loadu_ps(s + c + 16 * u), m)));
    const __m512i w01 = _mm512_packus_epi32(qv[0], qv[1]), w23 = _mm512_packus_epi32(qv[2], qv[3]);
    const __m512i bytes = _mm512_permutexvar_epi32(order, _mm512_packus_epi16(w01, w23));
    sum64 = _mm512_add_epi64(sum64, _mm512_sad_epu8(bytes, _mm512_setzero_si512()));
    _mm512_storeu_si512(p + c, _mm512_add_epi8(bytes, off8));
  }
  const __m512i off = _mm512_set1_epi32(offset);
  __m512i sum = _mm512_setzero_si512();
  for (; c < n; c += 16) {
    const __mmask16 mask = n - c >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - c)) - 1u);
    const __m512i qi = _mm512_cvtps_epi32(exp2_127x16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + c), m)));
    sum = _mm512_mask_add_epi32(sum, mask, sum, qi);
    _mm512_mask_cvtepi32_storeu_epi8(p + c, mask, _mm512_add_epi32(qi, off));
  }
  std::memset(p + n, offset, static_cast<std::size_t>(ldp - n));
  return static_cast<std::int32_t>(_mm512_reduce_add_epi64(sum64)) + _mm512_reduce_add_epi32(sum);
}

using TileFn = void (*)(const std::uint8_t*, std::int64_t, const float*, const PackedI8&, const float*, float*,
                        std::int64_t, std::int64_t, std::int64_t);

template <int MR, bool Stream>
struct Row {
  static constexpr TileFn fns[kMaxNR] = {tile<MR, 1, Stream>, tile<MR, 2, Stream>, tile<MR, 3, Stream>};
};

template <bool Stream>
constexpr const TileFn* kTiles[kMaxMR] = {Row<1, Stream>::fns, Row<2, Stream>::fns, Row<3, Stream>::fns,
                                          Row<4, Stream>::fns, Row<5, Stream>::fns, Row<6, Stream>::fns,
                                          Row<7, Stream>::fns, Row<8, Stream>::fns};

void gemm(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx, const PackedI8& w,
          const float* bias, float* y, std::int64_t ldy, std::int64_t p0, std::int64_t p1) {
  for_each_tile(m, p0, p1, w.k4 * kP * 4, kMaxMR, kMaxNR,
                [&](std::int64_t mr, std::int64_t nr, std::int64_t p, std::int64_t i0) {
                  (i0 == 0 ? kTiles<true> : kTiles<false>)[mr - 1][nr - 1](q, ldq, sx, w, bias, y, ldy, p, i0);
                });
}

// ---- block-scaled: w4 and w8 with block scales (layouts in int8_matmul.hpp) ----
// A panel-group's 16 scales as f32, from either form PackedI8 keeps them in
// (S = float, or std::uint16_t: bf16, widened exactly by a shift; int8_matmul.hpp).
inline __m512 load_block_scales(const float* s) { return _mm512_load_ps(s); }
inline __m512 load_block_scales(const std::uint16_t* s) {
  const __m256i h = _mm256_load_si256(reinterpret_cast<const __m256i*>(s));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// The unsigned weight bytes of group g's k4 step j (columns 32g + 4j .. + 3) of panel p,
// for 16 rows: w8 stores them so; w4 holds steps 2v and 2v + 1 in the low and high
// nibbles of its vector v.
template <int Bits>
inline __m512i block_weights(const std::uint8_t* base, std::int64_t G, std::int64_t p, std::int64_t g, int j) {
  if constexpr (Bits == 8) {
    return _mm512_load_si512(base + (p * G + g) * 512 + j * 64);
  } else {
    const __m512i raw = _mm512_load_si512(base + (p * G + g) * 256 + (j / 2) * 64);
    const __m512i nib = _mm512_set1_epi8(0x0F);
    return (j & 1) == 0 ? _mm512_and_si512(raw, nib) : _mm512_and_si512(_mm512_srli_epi16(raw, 4), nib);
  }
}

// Per group of 32 columns: 8 k4 steps of unsigned weight bytes multiplied as
// vpdpbusd's unsigned operand by broadcast signed activations; then the offset
// (8 or 128) times the block's activation sum comes off, and the group's int32
// sums are scaled into f32 by sx[i, g] · sw[r, g].
template <int Bits, class S, int MR, int NR>
__attribute__((always_inline)) inline void tile_blocks(const std::uint8_t* q, std::int64_t ldq, const float* sx,
                                                       const std::int32_t* xsum, const PackedI8& w, const float* bias,
                                                       float* y, std::int64_t ldy, std::int64_t p, std::int64_t i0) {
  constexpr int kOffset = Bits == 4 ? 8 : 128;
  const std::int64_t G = w.groups;
  const auto* base = reinterpret_cast<const std::uint8_t*>(w.data.get());
  __m512 facc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int jn = 0; jn < NR; ++jn) facc[i][jn] = _mm512_setzero_ps();
  for (std::int64_t g = 0; g < G; ++g) {
    __m512i acc[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int jn = 0; jn < NR; ++jn) acc[i][jn] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      __m512i wv[NR];
      for (int jn = 0; jn < NR; ++jn) wv[jn] = block_weights<Bits>(base, G, p + jn, g, j);
      for (int i = 0; i < MR; ++i) {
        std::int32_t a;
        std::memcpy(&a, q + (i0 + i) * ldq + 32 * g + 4 * j, 4);
        const __m512i v = _mm512_set1_epi32(a);
        for (int jn = 0; jn < NR; ++jn) acc[i][jn] = _mm512_dpbusd_epi32(acc[i][jn], wv[jn], v);
      }
    }
    for (int i = 0; i < MR; ++i) {
      const __m512i corr = _mm512_set1_epi32(kOffset * xsum[(i0 + i) * G + g]);
      const __m512 si = _mm512_set1_ps(sx[(i0 + i) * G + g]);
      for (int jn = 0; jn < NR; ++jn) {
        const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][jn], corr));
        const S* sw = block_scales(w, static_cast<const S*>(nullptr)) + ((p + jn) * G + g) * kP;
        facc[i][jn] = _mm512_fmadd_ps(v, _mm512_mul_ps(si, load_block_scales(sw)), facc[i][jn]);
      }
    }
  }
  for (int jn = 0; jn < NR; ++jn) {
    const std::int64_t r0 = (p + jn) * kP;
    const std::int64_t valid = w.rows - r0 < kP ? w.rows - r0 : kP;
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    const __m512 bv = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + r0) : _mm512_setzero_ps();
    for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(y + (i0 + i) * ldy + r0, mask, _mm512_add_ps(facc[i][jn], bv));
  }
}

// y[r0 .. r0 + valid) of panel p from its finished f32 sums.
inline void store_panel_m1(__m512 f, const PackedI8& w, const float* bias, float* y, std::int64_t p) {
  const std::int64_t r0 = p * kP;
  const std::int64_t valid = w.rows - r0 < kP ? w.rows - r0 : kP;
  const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
  const __m512 bv = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + r0) : _mm512_setzero_ps();
  _mm512_mask_storeu_ps(y + r0, mask, _mm512_add_ps(f, bv));
}

#define QHX_DP(acc, a, b) asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))
// Decode over one w4 panel as a single sequential stream (a thread's panels are
// adjacent, so its whole range is one stream), prefetched 4 KiB
// ahead: reading four panels side by side (four streams, plus their scales)
// fell short of w8's bandwidth. The high nibbles are used in place, as
// 16 · nibble (one AND, no shift): their chains sum to exactly 16 times the
// high halves' sum (at most 16 · 240 · 127 in magnitude per group), which an
// arithmetic shift by 4 divides out exactly; decode stays bound by memory only
// while the arithmetic per weight byte is this small. Named accumulators and
// one-instruction asm keep GCC from spilling them (see tile).
template <class S>
__attribute__((always_inline)) inline void panel_w4_m1(const std::uint8_t* q, const float* sx, const std::int32_t* xsum,
                                                       const PackedI8& w, const float* bias, float* y, std::int64_t p) {
  const std::int64_t G = w.groups;
  const auto* b = reinterpret_cast<const std::uint8_t*>(w.data.get()) + p * G * 256;
  const S* sp = block_scales(w, static_cast<const S*>(nullptr)) + p * G * kP;
  const __m512i nib = _mm512_set1_epi8(0x0F), nib_hi = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512 f = _mm512_setzero_ps();
  for (std::int64_t g = 0; g < G; ++g) {
    const std::uint8_t* bg = b + g * 256;
    for (int l = 0; l < 4; ++l) _mm_prefetch(reinterpret_cast<const char*>(bg + 4096 + l * 64), _MM_HINT_T0);
    __m512i lo = _mm512_setzero_si512(), hi = lo, lo2 = lo, hi2 = lo;
    for (int j = 0; j < 4; j += 2) {
      std::int32_t a[4];
      std::memcpy(a, q + 32 * g + 8 * j, 16);
      const __m512i r0 = _mm512_load_si512(bg + j * 64), r1 = _mm512_load_si512(bg + j * 64 + 64);
      QHX_DP(lo, _mm512_and_si512(r0, nib), _mm512_set1_epi32(a[0]));
      QHX_DP(hi, _mm512_and_si512(r0, nib_hi), _mm512_set1_epi32(a[1]));
      QHX_DP(lo2, _mm512_and_si512(r1, nib), _mm512_set1_epi32(a[2]));
      QHX_DP(hi2, _mm512_and_si512(r1, nib_hi), _mm512_set1_epi32(a[3]));
    }
    const __m512i sum = _mm512_add_epi32(_mm512_add_epi32(lo, lo2), _mm512_srai_epi32(_mm512_add_epi32(hi, hi2), 4));
    const __m512i corr = _mm512_set1_epi32(8 * xsum[g]);
    const __m512 sc = _mm512_mul_ps(_mm512_set1_ps(sx[g]), load_block_scales(sp + g * kP));
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sum, corr)), sc, f);
  }
  store_panel_m1(f, w, bias, y, p);
}

// Decode over one block-scaled w8 panel: the same single stream, 512 bytes per
// group in two independent chains of four vpdpbusd.
template <class S>
__attribute__((always_inline)) inline void panel_w8b_m1(const std::uint8_t* q, const float* sx,
                                                        const std::int32_t* xsum, const PackedI8& w, const float* bias,
                                                        float* y, std::int64_t p) {
  const std::int64_t G = w.groups;
  const auto* b = reinterpret_cast<const std::uint8_t*>(w.data.get()) + p * G * 512;
  const S* sp = block_scales(w, static_cast<const S*>(nullptr)) + p * G * kP;
  __m512 f = _mm512_setzero_ps();
  for (std::int64_t g = 0; g < G; ++g) {
    const std::uint8_t* bg = b + g * 512;
    for (int l = 0; l < 8; ++l) _mm_prefetch(reinterpret_cast<const char*>(bg + 4096 + l * 64), _MM_HINT_T0);
    std::int32_t a[8];
    std::memcpy(a, q + 32 * g, 32);
    __m512i s0 = _mm512_setzero_si512(), s1 = s0;
    for (int j = 0; j < 8; j += 2) {
      QHX_DP(s0, _mm512_load_si512(bg + j * 64), _mm512_set1_epi32(a[j]));
      QHX_DP(s1, _mm512_load_si512(bg + j * 64 + 64), _mm512_set1_epi32(a[j + 1]));
    }
    const __m512i corr = _mm512_set1_epi32(128 * xsum[g]);
    const __m512 sc = _mm512_mul_ps(_mm512_set1_ps(sx[g]), load_block_scales(sp + g * kP));
    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_add_epi32(s0, s1), corr)), sc, f);
  }
  store_panel_m1(f, w, bias, y, p);
}
#undef QHX_DP

using TileBlocksFn = void (*)(const std::uint8_t*, std::int64_t, const float*, const std::int32_t*, const PackedI8&,
                              const float*, float*, std::int64_t, std::int64_t, std::int64_t);
constexpr int kBlocksMaxMR = 4;
constexpr int kBlocksMaxNR = 2;
template <int Bits, class S>
constexpr TileBlocksFn kBlockTiles[kBlocksMaxMR][kBlocksMaxNR] = {
    {tile_blocks<Bits, S, 1, 1>, tile_blocks<Bits, S, 1, 2>},
    {tile_blocks<Bits, S, 2, 1>, tile_blocks<Bits, S, 2, 2>},
    {tile_blocks<Bits, S, 3, 1>, tile_blocks<Bits, S, 3, 2>},
    {tile_blocks<Bits, S, 4, 1>, tile_blocks<Bits, S, 4, 2>}};

template <int Bits, class S>
void gemm_blocks_typed(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx,
                       const std::int32_t* xsum, const PackedI8& w, const float* bias, float* y, std::int64_t ldy,
                       std::int64_t p0, std::int64_t p1) {
  if (m == 1) {  // decode: one panel after another, one sequential stream
    for (std::int64_t p = p0; p < p1; ++p) {
      if constexpr (Bits == 4)
        panel_w4_m1<S>(q, sx, xsum, w, bias, y, p);
      else
        panel_w8b_m1<S>(q, sx, xsum, w, bias, y, p);
    }
    return;
  }
  for_each_tile(m, p0, p1, w.groups * Bits * 64, kBlocksMaxMR, kBlocksMaxNR,
                [&](std::int64_t mr, std::int64_t nr, std::int64_t p, std::int64_t i0) {
                  kBlockTiles<Bits, S>[mr - 1][nr - 1](q, ldq, sx, xsum, w, bias, y, ldy, p, i0);
                });
}

void gemm_blocks(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx, const std::int32_t* xsum,
                 const PackedI8& w, const float* bias, float* y, std::int64_t ldy, std::int64_t p0, std::int64_t p1) {
  with_block_form(w, [&](auto bits, auto s) {
    gemm_blocks_typed<decltype(bits)::value, decltype(s)>(q, ldq, m, sx, xsum, w, bias, y, ldy, p0, p1);
  });
}

}  // namespace
}  // namespace qhx::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

namespace qhx::cpu {

const Int8Kernel* int8_kernel_avx512vnni() {
  static const Int8Kernel k{"avx512vnni", kP,         128,     gemm,   gemm_blocks,
                            quantize,     softmax_q8, pack_kv, kMaxNR, kBlocksMaxNR};
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return ok ? &k : nullptr;
}

}  // namespace qhx::cpu

#else

namespace qhx::cpu {
const Int8Kernel* int8_kernel_avx512vnni() { return nullptr; }
}  // namespace qhx::cpu

#endif
