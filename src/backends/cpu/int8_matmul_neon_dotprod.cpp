// The int8 path (int8_matmul.hpp) with Arm's dot-product extension (Armv8.2
// dotprod, on every recent phone core): sdot multiplies 16 signed activation
// bytes by 16 signed weight bytes and adds groups of four into 4 int32 lanes,
// i.e. 4 outputs × 4 input columns per instruction, so panels are 4 rows
// (P = 4) and activations stay signed (offset 0).
//
// Register tile: MR activation rows × NR panels (at most 4 × 4 = 16 int32x4
// accumulators of the 32 vector registers), panels walked in L2-sized blocks.
// Block-scaled matrices (w4, w8 with block scales: 16-row panels) have their own tile below.
// Compiled for every aarch64 build; reached only when the CPU reports dotprod.
#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/int8_attention.hpp"

#if defined(__aarch64__) && defined(__GNUC__)
#include <arm_neon.h>
#include <sys/auxv.h>

#include <cstring>

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)  // Linux's bit for dotprod in AT_HWCAP
#endif

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")

namespace qhx::cpu {
namespace {

constexpr int kP = 4;
constexpr int kMaxMR = 4;
constexpr int kMaxNR = 4;

template <int MR, int NR>
__attribute__((always_inline)) inline void tile(const std::uint8_t* q, std::int64_t ldq, const float* sx,
                                                const PackedI8& w, const float* bias, float* y, std::int64_t ldy,
                                                std::int64_t p, std::int64_t i0) {
  const std::int64_t k4 = w.k4;
  const std::int64_t pstride = k4 * kP * 4;
  const std::int8_t* b0 = w.data.get() + p * pstride;
  const auto* a0 = reinterpret_cast<const std::int8_t*>(q + i0 * ldq);
  int32x4_t acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = vdupq_n_s32(0);
  for (std::int64_t g = 0; g < k4; ++g) {
    int8x16_t b[NR];
    for (int j = 0; j < NR; ++j) b[j] = vld1q_s8(b0 + j * pstride + g * kP * 4);
    for (int i = 0; i < MR; ++i) {
      std::int32_t a4;
      std::memcpy(&a4, a0 + i * ldq + 4 * g, 4);
      const int8x16_t a = vreinterpretq_s8_s32(vdupq_n_s32(a4));
      for (int j = 0; j < NR; ++j) acc[i][j] = vdotq_s32(acc[i][j], b[j], a);
    }
  }
  for (int j = 0; j < NR; ++j) {
    const std::int64_t r0 = (p + j) * kP;
    const std::int64_t valid = w.rows - r0 < kP ? w.rows - r0 : kP;
    const float32x4_t sw = vld1q_f32(w.scales.get() + r0);
    float bb[kP] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (bias != nullptr)
      for (std::int64_t t = 0; t < valid; ++t) bb[t] = bias[r0 + t];
    const float32x4_t bv = vld1q_f32(bb);
    for (int i = 0; i < MR; ++i) {
      const float32x4_t v = vcvtq_f32_s32(acc[i][j]);
      const float32x4_t s = vmulq_f32(vdupq_n_f32(sx[i0 + i]), sw);
      const float32x4_t out = vfmaq_f32(bv, v, s);  // bv + v · s, one rounding
      float* dst = y + (i0 + i) * ldy + r0;
      if (valid == kP) {
        vst1q_f32(dst, out);
      } else {
        float tmp[kP];
        vst1q_f32(tmp, out);
        for (std::int64_t t = 0; t < valid; ++t) dst[t] = tmp[t];
      }
    }
  }
}

using TileFn = void (*)(const std::uint8_t*, std::int64_t, const float*, const PackedI8&, const float*, float*,
                        std::int64_t, std::int64_t, std::int64_t);

template <int MR>
struct Row {
  static constexpr TileFn fns[kMaxNR] = {tile<MR, 1>, tile<MR, 2>, tile<MR, 3>, tile<MR, 4>};
};

constexpr const TileFn* kTiles[kMaxMR] = {Row<1>::fns, Row<2>::fns, Row<3>::fns, Row<4>::fns};

void gemm(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx, const PackedI8& w,
          const float* bias, float* y, std::int64_t ldy, std::int64_t p0, std::int64_t p1) {
  for_each_tile(m, p0, p1, w.k4 * kP * 4, kMaxMR, kMaxNR,
                [&](std::int64_t mr, std::int64_t nr, std::int64_t p, std::int64_t i0) {
                  kTiles[mr - 1][nr - 1](q, ldq, sx, w, bias, y, ldy, p, i0);
                });
}

// ---- block-scaled: w4 and w8 (layouts in int8_matmul.hpp: 16-row panels) -----
// Each 64-byte vector of a group holds four quads of 16 bytes, rows 4·qd ..
// 4·qd + 3 with 4 bytes each: exactly an sdot operand. w4's low nibbles (columns
// 8j .. 8j+3) and high ones (8j+4 .. 8j+7) are unsigned 0..15, so they can stand
// as sdot's signed operand, and 8 · (the activations' block sum) comes off after
// the group; w8's bytes q + 128 become q again by flipping their top bit. The
// group's int32 sums are then scaled into f32 as the contract says.

inline float32x4_t load_block_scales(const float* s) { return vld1q_f32(s); }
inline float32x4_t load_block_scales(const std::uint16_t* s) {  // bf16: widened exactly by a shift
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(s), 16));
}

constexpr int kBlockP = 16;
constexpr int kBlocksMaxMR = 2;

// Group g's k4 step j (columns 32g + 4j .. + 3) for rows 4·qd .. 4·qd + 3 of the
// panel at `base`, as sdot's signed operand.
template <int Bits>
inline int8x16_t block_weights(const std::uint8_t* base, std::int64_t g, int j, int qd) {
  if constexpr (Bits == 8) {
    const uint8x16_t raw = vld1q_u8(base + g * 512 + j * 64 + qd * 16);
    return vreinterpretq_s8_u8(veorq_u8(raw, vdupq_n_u8(0x80)));
  } else {
    const uint8x16_t raw = vld1q_u8(base + g * 256 + (j / 2) * 64 + qd * 16);
    return vreinterpretq_s8_u8((j & 1) == 0 ? vandq_u8(raw, vdupq_n_u8(0x0F)) : vshrq_n_u8(raw, 4));
  }
}

template <int Bits, class S, int MR>
__attribute__((always_inline)) inline void tile_blocks(const std::uint8_t* q, std::int64_t ldq, const float* sx,
                                                       const std::int32_t* xsum, const PackedI8& w, const float* bias,
                                                       float* y, std::int64_t ldy, std::int64_t p, std::int64_t i0) {
  constexpr int kOffset = Bits == 4 ? 8 : 0;
  const std::int64_t G = w.groups;
  const auto* base = reinterpret_cast<const std::uint8_t*>(w.data.get()) + p * G * Bits * 64;
  const S* scales = block_scales(w, static_cast<const S*>(nullptr)) + p * G * kBlockP;
  float32x4_t facc[MR][4];
  for (int i = 0; i < MR; ++i)
    for (int qd = 0; qd < 4; ++qd) facc[i][qd] = vdupq_n_f32(0.0f);
  for (std::int64_t g = 0; g < G; ++g) {
    int32x4_t acc[MR][4];
    for (int i = 0; i < MR; ++i)
      for (int qd = 0; qd < 4; ++qd) acc[i][qd] = vdupq_n_s32(0);
    for (int j = 0; j < 8; ++j) {
      int8x16_t wv[4];
      for (int qd = 0; qd < 4; ++qd) wv[qd] = block_weights<Bits>(base, g, j, qd);
      for (int i = 0; i < MR; ++i) {
        std::int32_t a;
        std::memcpy(&a, q + (i0 + i) * ldq + 32 * g + 4 * j, 4);
        const int8x16_t v = vreinterpretq_s8_s32(vdupq_n_s32(a));
        for (int qd = 0; qd < 4; ++qd) acc[i][qd] = vdotq_s32(acc[i][qd], wv[qd], v);
      }
    }
    for (int i = 0; i < MR; ++i) {
      const int32x4_t corr = vdupq_n_s32(kOffset * xsum[(i0 + i) * G + g]);
      const float32x4_t si = vdupq_n_f32(sx[(i0 + i) * G + g]);
      for (int qd = 0; qd < 4; ++qd) {
        const float32x4_t v = vcvtq_f32_s32(vsubq_s32(acc[i][qd], corr));
        const float32x4_t sc = vmulq_f32(si, load_block_scales(scales + g * kBlockP + qd * 4));
        facc[i][qd] = vfmaq_f32(facc[i][qd], v, sc);  // facc + v · sc, one rounding
      }
    }
  }
  const std::int64_t r0 = p * kBlockP;
  const std::int64_t valid = w.rows - r0 < kBlockP ? w.rows - r0 : kBlockP;
  float bb[kBlockP] = {};
  if (bias != nullptr)
    for (std::int64_t t = 0; t < valid; ++t) bb[t] = bias[r0 + t];
  for (int i = 0; i < MR; ++i) {
    float out[kBlockP];
    for (int qd = 0; qd < 4; ++qd) vst1q_f32(out + qd * 4, vaddq_f32(facc[i][qd], vld1q_f32(bb + qd * 4)));
    std::memcpy(y + (i0 + i) * ldy + r0, out, static_cast<std::size_t>(valid) * sizeof(float));
  }
}

template <int Bits, class S>
void gemm_blocks_typed(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx,
                       const std::int32_t* xsum, const PackedI8& w, const float* bias, float* y, std::int64_t ldy,
                       std::int64_t p0, std::int64_t p1) {
  for_each_tile(m, p0, p1, w.groups * Bits * 64, kBlocksMaxMR, 1,
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

#pragma GCC pop_options

namespace qhx::cpu {

const Int8Kernel* int8_kernel_neon_dotprod() {
  static const Int8Kernel k{"neon-dotprod", kP,      0,      gemm, gemm_blocks, quantize_rows_q8,
                            softmax_q8_row, nullptr, kMaxNR, 1};
  static const bool ok = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
  return ok ? &k : nullptr;
}

}  // namespace qhx::cpu

#else

namespace qhx::cpu {
const Int8Kernel* int8_kernel_neon_dotprod() { return nullptr; }
}  // namespace qhx::cpu

#endif
