// The int8 path (int8_matmul.hpp) with AVX2, for x86 CPUs without AVX-512 VNNI.
//
// AVX2 has no int8 dot-product-accumulate; vpmaddubsw multiplies unsigned by
// signed bytes and adds pairs into saturating int16. Saturation would break the
// contract's exact int32 sums, so the activations stay signed (offset 0, as the
// portable kernel's) and each product is formed as |a| · (w · sign(a)): vpsignb
// moves a's sign onto the weight, |a| <= 128 and |w| <= 127, so a pair sums to at
// most 2 · 128 · 127 = 32512 < 32767 and nothing saturates. vpmaddwd against ones
// then adds the pairs into int32: the 4-column sums of the panel layout, exact.
//
// A 16-row panel group is 64 bytes: rows 0-7 in its first 32 (one ymm: 8 rows ×
// 4 columns), rows 8-15 in the rest. Register tile: MR activation rows × one panel
// (2 · MR int32 accumulators, MR <= 4 of the 16 ymm registers' budget). The
// epilogue is the portable kernel's, fma(float(sum), sx · sw, bias), lane by lane.
//
// Compiled for every x86-64 build; the code is only reached after a CPUID
// check, so the rest of the library stays baseline x86-64.
#include "backends/cpu/int8_matmul.hpp"

#include "backends/cpu/int8_attention.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstring>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace qhx::cpu {
namespace {

constexpr int kP = 16;  // outputs per panel: two ymm of int32
constexpr int kMaxMR = 4;

inline __m256i broadcast4(const std::uint8_t* p) {
  std::int32_t a4;
  std::memcpy(&a4, p, 4);
  return _mm256_set1_epi32(a4);
}

// acc += the 4-column dot products of 8 rows (w: 8 × 4 signed bytes) with a (4 signed bytes, broadcast).
inline __m256i dot4(__m256i acc, __m256i abs_a, __m256i a, __m256i w, __m256i ones) {
  const __m256i pairs = _mm256_maddubs_epi16(abs_a, _mm256_sign_epi8(w, a));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
}

// y[r0 .. r0 + valid) of one activation row from the 16 finished sums.
inline void store_panel(__m256i lo, __m256i hi, float sx, const PackedI8& w, const float* bias, float* y,
                        std::int64_t r0) {
  const std::int64_t valid = w.rows - r0 < kP ? w.rows - r0 : kP;
  const __m256 s = _mm256_set1_ps(sx);
  alignas(32) float out[kP];
  for (int h = 0; h < 2; ++h) {
    const __m256 sw = _mm256_load_ps(w.scales.get() + r0 + 8 * h);  // padded to the panel: always readable
    __m256 bv = _mm256_setzero_ps();
    if (bias != nullptr) {
      alignas(32) float b[8] = {};
      for (std::int64_t j = 8 * h; j < valid && j < 8 * h + 8; ++j) b[j - 8 * h] = bias[r0 + j];
      bv = _mm256_load_ps(b);
    }
    const __m256 v = _mm256_cvtepi32_ps(h == 0 ? lo : hi);
    _mm256_store_ps(out + 8 * h, _mm256_fmadd_ps(v, _mm256_mul_ps(s, sw), bv));
  }
  std::memcpy(y + r0, out, static_cast<std::size_t>(valid) * sizeof(float));
}

// Activation rows [i0, i0 + MR) × panel p.
template <int MR>
void tile(const std::uint8_t* q, std::int64_t ldq, const float* sx, const PackedI8& w, const float* bias, float* y,
          std::int64_t ldy, std::int64_t p, std::int64_t i0) {
  const std::int64_t k4 = w.k4;
  const std::int8_t* b = w.data.get() + p * k4 * kP * 4;
  const std::uint8_t* a0 = q + i0 * ldq;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i lo[MR], hi[MR];
  for (int i = 0; i < MR; ++i) lo[i] = hi[i] = _mm256_setzero_si256();
  for (std::int64_t g = 0; g < k4; ++g) {
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + g * kP * 4));
    const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + g * kP * 4 + 32));
    for (int i = 0; i < MR; ++i) {
      const __m256i a = broadcast4(a0 + i * ldq + 4 * g);
      const __m256i abs_a = _mm256_abs_epi8(a);
      lo[i] = dot4(lo[i], abs_a, a, w0, ones);
      hi[i] = dot4(hi[i], abs_a, a, w1, ones);
    }
  }
  for (int i = 0; i < MR; ++i) store_panel(lo[i], hi[i], sx[i0 + i], w, bias, y + (i0 + i) * ldy, p * kP);
}

// One activation row (decode): each panel read once as a sequential stream, two
// accumulator pairs to cover the latency of the multiply chain.
void panel_m1(const std::uint8_t* q, const float* sx, const PackedI8& w, const float* bias, float* y, std::int64_t p) {
  const std::int64_t k4 = w.k4;
  const std::int8_t* b = w.data.get() + p * k4 * kP * 4;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i lo0 = _mm256_setzero_si256(), hi0 = lo0, lo1 = lo0, hi1 = lo0;
  std::int64_t g = 0;
  for (; g + 2 <= k4; g += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(b + g * kP * 4 + 4096), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + (g + 1) * kP * 4 + 4096), _MM_HINT_T0);
    const __m256i a = broadcast4(q + 4 * g), a1 = broadcast4(q + 4 * (g + 1));
    const __m256i abs_a = _mm256_abs_epi8(a), abs_a1 = _mm256_abs_epi8(a1);
    const auto* bg = reinterpret_cast<const __m256i*>(b + g * kP * 4);
    lo0 = dot4(lo0, abs_a, a, _mm256_load_si256(bg), ones);
    hi0 = dot4(hi0, abs_a, a, _mm256_load_si256(bg + 1), ones);
    lo1 = dot4(lo1, abs_a1, a1, _mm256_load_si256(bg + 2), ones);
    hi1 = dot4(hi1, abs_a1, a1, _mm256_load_si256(bg + 3), ones);
  }
  for (; g < k4; ++g) {
    const __m256i a = broadcast4(q + 4 * g);
    const __m256i abs_a = _mm256_abs_epi8(a);
    const auto* bg = reinterpret_cast<const __m256i*>(b + g * kP * 4);
    lo0 = dot4(lo0, abs_a, a, _mm256_load_si256(bg), ones);
    hi0 = dot4(hi0, abs_a, a, _mm256_load_si256(bg + 1), ones);
  }
  store_panel(_mm256_add_epi32(lo0, lo1), _mm256_add_epi32(hi0, hi1), sx[0], w, bias, y, p * kP);
}

using TileFn = void (*)(const std::uint8_t*, std::int64_t, const float*, const PackedI8&, const float*, float*,
                        std::int64_t, std::int64_t, std::int64_t);
constexpr TileFn kTiles[kMaxMR] = {tile<1>, tile<2>, tile<3>, tile<4>};

void gemm(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx, const PackedI8& w,
          const float* bias, float* y, std::int64_t ldy, std::int64_t p0, std::int64_t p1) {
  if (m == 1) {
    for (std::int64_t p = p0; p < p1; ++p) panel_m1(q, sx, w, bias, y, p);
    return;
  }
  for_each_tile(m, p0, p1, w.k4 * kP * 4, kMaxMR, 1,
                [&](std::int64_t mr, std::int64_t, std::int64_t p, std::int64_t i0) {
                  kTiles[mr - 1](q, ldq, sx, w, bias, y, ldy, p, i0);
                });
}

}  // namespace
}  // namespace qhx::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace qhx::cpu {

const Int8Kernel* int8_kernel_avx2() {
  // Activation quantization and the softmax step are the portable ones, bit for bit
  // by definition; w4 matrices take the portable w4 product (gemm_w4 null).
  static const Int8Kernel k{"avx2", kP, 0, gemm, nullptr, quantize_rows_q8, softmax_q8_row, nullptr, 1, 1};
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok ? &k : nullptr;
}

}  // namespace qhx::cpu

#else

namespace qhx::cpu {
const Int8Kernel* int8_kernel_avx2() { return nullptr; }
}  // namespace qhx::cpu

#endif
