// The int8 path (int8_matmul.hpp) on Intel AMX tiles, for the many-row products
// (prefill, the vision encoder, int8 attention). One TDPBUSD multiplies a tile
// of 16 activation rows × 64 unsigned bytes by 16 groups of 4 input columns ×
// 16 outputs of signed bytes into 16 × 16 int32 sums: 16,384 multiply-adds,
// sixteen times one vpdpbusd, at a fraction of its issue cost.
//
// Why the same panels as AVX-512 VNNI: a panel's 64-byte rows (16 outputs × 4
// columns per group of 4 columns, consecutive groups adjacent) are exactly the
// layout of an AMX B tile, so 16 consecutive groups of one panel are one B tile
// read with a stride of 64 bytes. The kernel therefore shares the packing, the
// stored panels of a bundle, the activation quantizer (q + 128, offset 128) and
// its compensation (128 · Σ_k qw[r, k]) with the VNNI kernel, whose code it
// falls back to for what tiles do not fit: m = 1 (decode streams weights; a
// tile would waste 15 of its 16 rows), the last m mod 16 rows, and matrices
// whose columns are not a multiple of 64 (a B tile needs 16 whole groups).
// The sums are exact int32 either way and the epilogue is the VNNI one,
// operation for operation, so every result equals the reference bit for bit.
//
// Tiles: C[i][j] (tmm0..3, 2 × 2 blocks of 16 × 16 sums), A[i] (tmm4, 5: 16
// rows × 64 bytes each), B[j] (tmm6, 7: one panel's 16 groups). Per step of 64
// columns: 2 A loads, 2 B loads, 4 products. Linux hands out the tile state
// only on request (arch_prctl ARCH_REQ_XCOMP_PERM), once per process.
#include "backends/cpu/int8_matmul.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qhx::cpu {
namespace {

constexpr int kP = 16;       // outputs per panel = columns of a C tile
constexpr int kRows = 16;    // activation rows per A tile
constexpr int kGroups = 16;  // groups of 4 columns per step (64 bytes of an A row)

const Int8Kernel* g_vnni = nullptr;  // set before the AMX kernel is handed out

// The palette-1 configuration: all eight tiles 16 rows × 64 bytes. A constant
// in memory: GCC 12 drops stores to a local configuration that only
// ldtilecfg reads (all but the palette byte), leaving the tiles unconfigured.
struct alignas(64) TileConfig {
  std::uint8_t palette, start_row;
  std::uint8_t reserved[14];
  std::uint16_t colsb[16];
  std::uint8_t rows[16];
};
constexpr TileConfig kTileConfig{1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

void configure_tiles() { _tile_loadconfig(&kTileConfig); }

// The sums of MT × 16 activation rows (from a, stride ldq) by NT panels (from b,
// NT panels pstride bytes apart) over k4 groups, stored to c [MT·16, NT·16].
template <int MT, int NT>
__attribute__((always_inline)) inline void tile_sums(const std::uint8_t* a, std::int64_t ldq, const std::int8_t* b,
                                                     std::int64_t pstride, std::int64_t k4, std::int32_t* c) {
  _tile_zero(0);
  if constexpr (NT > 1) _tile_zero(1);
  if constexpr (MT > 1) _tile_zero(2);
  if constexpr (MT > 1 && NT > 1) _tile_zero(3);
  for (std::int64_t g = 0; g < k4; g += kGroups) {
    _tile_loadd(4, a + 4 * g, ldq);
    _tile_loadd(6, b + g * kP * 4, kP * 4);
    if constexpr (NT > 1) _tile_loadd(7, b + pstride + g * kP * 4, kP * 4);
    _tile_dpbusd(0, 4, 6);
    if constexpr (NT > 1) _tile_dpbusd(1, 4, 7);
    if constexpr (MT > 1) {
      _tile_loadd(5, a + kRows * ldq + 4 * g, ldq);
      _tile_dpbusd(2, 5, 6);
      if constexpr (NT > 1) _tile_dpbusd(3, 5, 7);
    }
  }
  constexpr std::int64_t ldc = NT * kP * 4;  // bytes per row of c
  _tile_stored(0, c, ldc);
  if constexpr (NT > 1) _tile_stored(1, c + kP, ldc);
  if constexpr (MT > 1) _tile_stored(2, c + kRows * NT * kP, ldc);
  if constexpr (MT > 1 && NT > 1) _tile_stored(3, c + kRows * NT * kP + kP, ldc);
}

// y rows [i0, i0 + MT·16) × panels [p, p + NT) from the sums: the VNNI kernel's
// epilogue, the same operations in the same order.
template <int MT, int NT>
__attribute__((always_inline)) inline void tile(const std::uint8_t* q, std::int64_t ldq, const float* sx,
                                                const PackedI8& w, const float* bias, float* y, std::int64_t ldy,
                                                std::int64_t p, std::int64_t i0) {
  const std::int64_t pstride = w.k4 * kP * 4;
  alignas(64) std::int32_t c[MT * kRows * NT * kP];
  tile_sums<MT, NT>(q + i0 * ldq, ldq, w.data.get() + p * pstride, pstride, w.k4, c);
  for (int j = 0; j < NT; ++j) {
    const std::int64_t r0 = (p + j) * kP;
    const std::int64_t valid = w.rows - r0 < kP ? w.rows - r0 : kP;
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    const __m512i corr = _mm512_slli_epi32(_mm512_load_si512(w.row_sums.get() + r0), 7);  // 128 · Σ qw
    const __m512 sw = _mm512_load_ps(w.scales.get() + r0);
    const __m512 bv = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + r0) : _mm512_setzero_ps();
    for (int i = 0; i < MT * kRows; ++i) {
      const __m512i acc = _mm512_load_si512(c + (i * NT + j) * kP);
      const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, corr));
      const __m512 s = _mm512_mul_ps(_mm512_set1_ps(sx[i0 + i]), sw);
      _mm512_mask_storeu_ps(y + (i0 + i) * ldy + r0, mask, _mm512_fmadd_ps(v, s, bv));
    }
  }
}

using TileFn = void (*)(const std::uint8_t*, std::int64_t, const float*, const PackedI8&, const float*, float*,
                        std::int64_t, std::int64_t, std::int64_t);
constexpr TileFn kTiles[2][2] = {{tile<1, 1>, tile<1, 2>}, {tile<2, 1>, tile<2, 2>}};

void gemm(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx, const PackedI8& w,
          const float* bias, float* y, std::int64_t ldy, std::int64_t p0, std::int64_t p1) {
  const std::int64_t m_tiles = w.k4 % kGroups == 0 ? m / kRows * kRows : 0;
  if (m_tiles > 0) {
    configure_tiles();
    for_each_tile(m_tiles, p0, p1, w.k4 * kP * 4, 2 * kRows, 2,
                  [&](std::int64_t mr, std::int64_t nr, std::int64_t p, std::int64_t i0) {
                    kTiles[mr / kRows - 1][nr - 1](q, ldq, sx, w, bias, y, ldy, p, i0);
                  });
    _tile_release();  // so the thread's saved state is small again between products
  }
  if (m_tiles < m)
    g_vnni->gemm(q + m_tiles * ldq, ldq, m - m_tiles, sx + m_tiles, w, bias, y + m_tiles * ldy, ldy, p0, p1);
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
namespace {

// Plain x86-64 code (outside the AVX-512 region): it runs before anything is known.
// CPUID says the core has AMX tiles with int8 products, XCR0 says the OS saves
// their state, and Linux grants this process the tile data.
bool amx_usable() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  const bool tile = (d >> 24) & 1u, int8 = (d >> 25) & 1u;
  __cpuid(1, a, b, c, d);
  const bool osxsave = (c >> 27) & 1u;
  if (!tile || !int8 || !osxsave) return false;
  std::uint32_t lo = 0, hi = 0;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if (((lo >> 17) & 3u) != 3u) return false;  // XTILECFG and XTILEDATA
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

const Int8Kernel* int8_kernel_amx() {
  static const Int8Kernel* const k = []() -> const Int8Kernel* {
    const Int8Kernel* vnni = int8_kernel_avx512vnni();
    if (vnni == nullptr || !amx_usable()) return nullptr;
    g_vnni = vnni;
    static const Int8Kernel amx{"amx",
                                kP,
                                vnni->offset,
                                gemm,
                                vnni->gemm_blocks,
                                vnni->quantize,
                                vnni->softmax_q8,
                                vnni->pack_kv,
                                2,
                                vnni->tile_panels_blocks};
    return &amx;
  }();
  return k;
}

}  // namespace qhx::cpu

#else

namespace qhx::cpu {
const Int8Kernel* int8_kernel_amx() { return nullptr; }
}  // namespace qhx::cpu

#endif
