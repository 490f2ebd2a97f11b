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

// ---- block-scaled: w4 and w8 (layouts in int8_matmul.hpp) -----------------
// A 64-byte vector of a group is two ymm: rows 0-7 and 8-15, 4 bytes each. w4's
// nibbles are unsigned 0..15, vpmaddubsw's unsigned operand as they are (a pair
// is at most 2 · 15 · 127), and 8 · (the activations' block sum) comes off after
// the group; w8's bytes q + 128 become signed q by flipping their top bit and
// take the sign trick above. The group's sums are scaled as the contract says.
inline __m256 load_block_scales8(const float* s) { return _mm256_load_ps(s); }
inline __m256 load_block_scales8(const std::uint16_t* s) {  // bf16: widened exactly by a shift
  const __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(s));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Half h (rows 8h .. 8h + 7) of group g's k4 step j in the panel at `base`:
// w4 as unsigned bytes, w8 as signed ones.
template <int Bits>
inline __m256i block_weights(const std::uint8_t* base, std::int64_t g, int j, int h) {
  if constexpr (Bits == 8) {
    const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(base + g * 512 + j * 64 + h * 32));
    return _mm256_xor_si256(raw, _mm256_set1_epi8(static_cast<char>(0x80)));
  } else {
    const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(base + g * 256 + (j / 2) * 64 + h * 32));
    const __m256i nib = _mm256_set1_epi8(0x0F);
    return (j & 1) == 0 ? _mm256_and_si256(raw, nib) : _mm256_and_si256(_mm256_srli_epi16(raw, 4), nib);
  }
}

template <int Bits, class S, int MR>
void tile_blocks(const std::uint8_t* q, std::int64_t ldq, const float* sx, const std::int32_t* xsum, const PackedI8& w,
                 const float* bias, float* y, std::int64_t ldy, std::int64_t p, std::int64_t i0) {
  constexpr int kOffset = Bits == 4 ? 8 : 0;
  const std::int64_t G = w.groups;
  const auto* base = reinterpret_cast<const std::uint8_t*>(w.data.get()) + p * G * Bits * 64;
  const S* scales = block_scales(w, static_cast<const S*>(nullptr)) + p * G * kP;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 facc[MR][2];
  for (int i = 0; i < MR; ++i) facc[i][0] = facc[i][1] = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < G; ++g) {
    __m256i acc[MR][2];
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i w0 = block_weights<Bits>(base, g, j, 0), w1 = block_weights<Bits>(base, g, j, 1);
      for (int i = 0; i < MR; ++i) {
        const __m256i a = broadcast4(q + (i0 + i) * ldq + 32 * g + 4 * j);
        if constexpr (Bits == 8) {
          const __m256i abs_a = _mm256_abs_epi8(a);
          acc[i][0] = dot4(acc[i][0], abs_a, a, w0, ones);
          acc[i][1] = dot4(acc[i][1], abs_a, a, w1, ones);
        } else {
          acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(_mm256_maddubs_epi16(w0, a), ones));
          acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(_mm256_maddubs_epi16(w1, a), ones));
        }
      }
    }
    const __m256 sw0 = load_block_scales8(scales + g * kP), sw1 = load_block_scales8(scales + g * kP + 8);
    for (int i = 0; i < MR; ++i) {
      const __m256i corr = _mm256_set1_epi32(kOffset * xsum[(i0 + i) * G + g]);
      const __m256 si = _mm256_set1_ps(sx[(i0 + i) * G + g]);
      facc[i][0] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[i][0], corr)), _mm256_mul_ps(si, sw0), facc[i][0]);
      facc[i][1] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[i][1], corr)), _mm256_mul_ps(si, sw1), facc[i][1]);
    }
  }
  const std::int64_t r0 = p * kP;
  const std::int64_t valid = w.rows - r0 < kP ? w.rows - r0 : kP;
  alignas(32) float bb[kP] = {};
  if (bias != nullptr)
    for (std::int64_t t = 0; t < valid; ++t) bb[t] = bias[r0 + t];
  for (int i = 0; i < MR; ++i) {
    alignas(32) float out[kP];
    _mm256_store_ps(out, _mm256_add_ps(facc[i][0], _mm256_load_ps(bb)));
    _mm256_store_ps(out + 8, _mm256_add_ps(facc[i][1], _mm256_load_ps(bb + 8)));
    std::memcpy(y + (i0 + i) * ldy + r0, out, static_cast<std::size_t>(valid) * sizeof(float));
  }
}

template <int Bits, class S>
void gemm_blocks_typed(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx,
                       const std::int32_t* xsum, const PackedI8& w, const float* bias, float* y, std::int64_t ldy,
                       std::int64_t p0, std::int64_t p1) {
  for_each_tile(m, p0, p1, w.groups * Bits * 64, 2, 1,
                [&](std::int64_t mr, std::int64_t, std::int64_t p, std::int64_t i0) {
                  if (mr == 2)
                    tile_blocks<Bits, S, 2>(q, ldq, sx, xsum, w, bias, y, ldy, p, i0);
                  else
                    tile_blocks<Bits, S, 1>(q, ldq, sx, xsum, w, bias, y, ldy, p, i0);
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
#pragma GCC pop_options
#endif

namespace qhx::cpu {

const Int8Kernel* int8_kernel_avx2() {
  // Activation quantization and the softmax step are the portable ones, bit for bit
  // by definition.
  static const Int8Kernel k{"avx2", kP, 0, gemm, gemm_blocks, quantize_rows_q8, softmax_q8_row, nullptr, 1, 1};
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok ? &k : nullptr;
}

}  // namespace qhx::cpu

#else

namespace qhx::cpu {
const Int8Kernel* int8_kernel_avx2() { return nullptr; }
}  // namespace qhx::cpu

#endif
