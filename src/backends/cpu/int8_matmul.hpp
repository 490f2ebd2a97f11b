// The int8 path of `linear` for w8 weights: activations quantized per row at
// run time, integer products, one float rescale per output.
//
// Contract (the reference in kernels_ref.cpp computes exactly this, and every
// implementation below must match it bit for bit):
//   amax_i = max_k |x[i, k]|;  sx_i = amax_i / 127  (0 for a zero row)
//   qx[i, k] = clamp(nearbyint(x[i, k] · (127 / amax_i)), −127, 127)   (round half to even)
//   acc[i, r] = Σ_k qx[i, k] · qw[r, k]            (exact, int32)
//   y[i, r] = fma(float(acc[i, r]), sx_i · sw_r, bias[r] or 0)
// With |q| <= 127 the int32 sum is exact for K up to 65,536 (checked at packing).
//
// Why: decode reads every weight once per token, so it is bound by memory
// bandwidth only if the arithmetic per weight byte is a single instruction
// (VNNI vpdpbusd, NEON sdot) instead of widen + convert + FMA; prefill and the
// vision encoder are compute-bound and int8 dot products run 4× the f32 rate.
//
// The fast implementations stream weights repacked once at load ("panels"):
//   panel p holds output rows [p·P, p·P + P); inside it, for each group of 4
//   input columns k4, the P rows' 4 bytes follow each other:
//   data[((p · K4) + k4) · P · 4 + j · 4 + t] = qw[p·P + j, 4·k4 + t]   (0 past the edges)
// so one 16-byte (P = 4, NEON) or 64-byte (P = 16, AVX-512) load feeds one
// dot-product instruction for P outputs, and a panel is one sequential stream.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "backends/cpu/block_step.hpp"
#include "backends/cpu/weights.hpp"

namespace qhx::cpu {

// Largest K whose int32 accumulation is exact for both signed and offset
// (u8 = q + 128, x86) activations: 255 · 127 · K < 2^31.
inline constexpr std::int64_t kInt8MaxCols = 65536;

// Quantizes x [m, k] row by row as the contract says into q [m, ldq] (ldq >= k;
// columns k .. ldq−1 are zero, i.e. `offset` when offset = 128) and scales [m].
// offset 128 stores q + 128 as unsigned bytes (what vpdpbusd needs).
void quantize_rows_q8(const float* x, std::int64_t m, std::int64_t k, std::int64_t ldq, int offset, std::uint8_t* q,
                      float* scales);

struct Int8Kernel;

// Block-scaled matrices (w4, and w8 with block scales: a scale per row and group of
// 32 columns, cols % 32 == 0) take the int8 path with their activations quantized
// per block of 32 columns too, as llama.cpp's Q8_0 does: one loud channel then
// costs only its own block's resolution, not the whole row's.
//   amax_ig = max_{k in group g} |x[i, k]|;  sx[i, g] = amax_ig / 127 (0 for a zero block)
//   qx[i, k] = clamp(nearbyint(x[i, k] · (127 / amax_ig)), −127, 127)   (k in group g)
//   isum[i, r, g] = Σ_{k in group g} qx[i, k] · qw[r, k]               (exact, int32)
//   acc = 0;  for g in order: acc = fma(float(isum[i, r, g]), sx[i, g] · sw[r, g], acc)
//   y[i, r] = acc + (bias[r] or 0)
// The activations are signed (offset 0); xsum[i, g] = Σ_{k in g} qx[i, k] lets a
// kernel multiply the weights as unsigned bytes and take the offset off per block.
// Packed (P = 16 rows per panel), for panel p and group g, one run of bytes:
//   w4: four 64-byte vectors j = 0..3; byte (row jr, t) of vector j holds
//       (qw[r, 32g + 8j + t] + 8) | (qw[r, 32g + 8j + 4 + t] + 8) << 4
//       i.e. nibbles stored as unsigned 0..15 (a kernel subtracts 8 · xsum[i, g]);
//   w8: eight 64-byte vectors j = 0..7; byte (row jr, t) of vector j holds
//       qw[r, 32g + 4j + t] + 128, unsigned (a kernel subtracts 128 · xsum[i, g],
//       or flips the top bit back to int8);
// zero weights past the last row, and the scales sw[r, g] at [panels, groups, 16].

// A w8 matrix repacked into panels for one Int8Kernel (see the layout above).
struct PackedI8 {
  std::int64_t rows = 0, cols = 0;  // logical [rows, cols] of the source matrix
  std::int64_t k4 = 0;              // ceil(cols / 4): groups of 4 columns
  std::int64_t panels = 0;          // ceil(rows / panel)
  int panel = 0;                    // rows per panel (the kernel's P)
  const Int8Kernel* kernel = nullptr;
  std::shared_ptr<std::int8_t> data;       // [panels, k4, panel, 4], 64-byte aligned
  std::shared_ptr<std::int32_t> row_sums;  // [panels · panel]: Σ_k qw[r, k] (for offset activations)
  std::shared_ptr<float> scales;           // w8: [panels · panel]: sw_r, 0 past the last row;
                                           // block-scaled: [panels, groups, panel]: sw[r, g], 0 past
                                           //     the last row (null when scales_bf16 holds them)
  // Block scales that are all bf16 values (what qhx_export writes, docs/bundle.md):
  // the same [panels, groups, panel] in 16 bits, so decode streams 4.5 bits per
  // weight instead of 5 (w4), 8.5 instead of 9 (w8). The values, and so the
  // contract's results, are identical.
  std::shared_ptr<std::uint16_t> scales_bf16;
  int bits = 8;             // 8: w8; 4: w4 (layouts above)
  std::int64_t groups = 0;  // block-scaled (w4, w8 with block scales): cols / 32; else 0
  bool block_scaled() const { return groups > 0; }
};

// A block-scaled matrix's packed scales in the form they are kept: block_scales(w,
// (const S*) nullptr) for S = float or std::uint16_t (bf16 bits); with_block_form
// calls f(std::integral_constant<int, Bits>{}, S{}) with the bits (4 or 8) and the
// scale form w has, so a kernel is written once, templated on both.
inline const float* block_scales(const PackedI8& w, const float*) { return w.scales.get(); }
inline const std::uint16_t* block_scales(const PackedI8& w, const std::uint16_t*) { return w.scales_bf16.get(); }
template <class F>
void with_block_form(const PackedI8& w, F&& f) {
  const auto with_scales = [&](auto bits) {
    if (w.scales_bf16)
      f(bits, std::uint16_t{});
    else
      f(bits, float{});
  };
  if (w.bits == 4)
    with_scales(std::integral_constant<int, 4>{});
  else
    with_scales(std::integral_constant<int, 8>{});
}

// One implementation of the packed product. `gemm` computes output rows
// (panels) [p0, p1) of y [m, ldy] from activations q [m, ldq] quantized with
// the kernel's `offset`.
struct Int8Kernel {
  const char* name;
  int panel;   // P
  int offset;  // 0: activations as int8; 128: as q + 128 in uint8
  void (*gemm)(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx, const PackedI8& w,
               const float* bias, float* y, std::int64_t ldy, std::int64_t p0, std::int64_t p1);
  // The block-scaled product (w4 or w8, layouts above) for panels [p0, p1): q signed
  // [m, ldq], sx and xsum [m, groups] the block scales and sums of q. Null: the portable one.
  void (*gemm_blocks)(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx,
                      const std::int32_t* xsum, const PackedI8& w, const float* bias, float* y, std::int64_t ldy,
                      std::int64_t p0, std::int64_t p1);
  // quantize_rows_q8 with this kernel's offset, bit for bit (a vectorized one,
  // or quantize_rows_q8 itself).
  void (*quantize)(const float* x, std::int64_t m, std::int64_t k, std::int64_t ldq, int offset, std::uint8_t* q,
                   float* scales);
  // The softmax step of int8 attention (int8_attention.hpp), bit for bit:
  // softmax_q8_row itself or a vectorized one.
  std::int32_t (*softmax_q8)(const float* s, std::int64_t n, std::int64_t ldp, int offset, std::uint8_t* p);
  // Int8 attention's per-head step, bit for bit (null: the portable one in
  // int8_attention.cpp): K [n, d] (rows `stride` floats apart) quantized per
  // key and V per channel (int8_attention.hpp), written into kp (K as an
  // [n, d] w8 matrix) and vp (V as [d, n]), both already shaped by shape_i8.
  // Called only with d % 4 == 0.
  void (*pack_kv)(const float* k, const float* v, std::int64_t n, std::int64_t d, std::int64_t stride, PackedI8& kp,
                  PackedI8& vp);
  // Panels one full-width tile of `gemm` and of `gemm_blocks` covers (their for_each_tile's
  // max_nr). linear_i8_packed hands the threads runs of panels in multiples of these:
  // a run that is not leaves narrow edge tiles, which load the activations as often
  // for a third or half of the products (vision's fc2 lost a quarter of its panels to
  // one-panel tiles with runs of 4 where 3 is a whole tile).
  int tile_panels = 1;
  int tile_panels_blocks = 1;
};

// Plain C++ over the packed layout, any CPU (P = 16, signed activations).
const Int8Kernel& int8_kernel_portable();
// The best implementation this CPU runs (chosen once, at the first call):
// AMX, AVX-512 VNNI, AVX2, NEON dotprod, else the portable one.
// QHX_INT8_KERNEL=NAME picks another one this CPU runs by its name (e.g.
// avx512vnni beside amx, for a before/after figure); an unknown name is an error.
const Int8Kernel& int8_kernel_best();
// Every implementation this CPU can run (for the shared kernel suite).
std::vector<const Int8Kernel*> int8_kernels_available();

// Quantizes x [m, k] (k % 32 == 0) per block of 32 columns as the block contract says:
// q signed [m, ldq] (zero past k), scales and sums [m, k / 32].
void quantize_blocks_q8(const float* x, std::int64_t m, std::int64_t k, std::int64_t ldq, std::uint8_t* q,
                        float* scales, std::int32_t* sums);

// Repacks w (a w8 or w4 matrix) for `kernel`. Throws qhx::Error if w is neither or too wide.
std::shared_ptr<const PackedI8> pack_i8(const WeightMatrix& w, const Int8Kernel& kernel);
// Sets out's shape for a [rows, cols] w8 matrix in `kernel`'s panels and sizes
// its arrays (reusing them when they already fit that shape), leaving their
// contents to the caller. Throws qhx::Error past kInt8MaxCols.
void shape_i8(std::int64_t rows, std::int64_t cols, const Int8Kernel& kernel, PackedI8& out);
// pack_i8 of a w8 matrix into `out`, reusing its arrays when it already holds a
// matrix of the same shape for the same kernel (int8 attention packs K and V
// of every head into the same buffers).
void pack_i8_into(const WeightMatrix& w, const Int8Kernel& kernel, PackedI8& out);

// y [m, w.rows] by the contract, on the thread pool, through w's kernel; with
// a step, step.run on each block right after it is computed (KernelSet::linear_then).
void linear_i8_packed(const float* x, std::int64_t m, const PackedI8& w, const float* bias, float* y,
                      const BlockStep* step = nullptr);

// The loop order every packed kernel uses for m > 1: panels [p0, p1) in blocks
// of about 256 KiB (a block stays in L2 while all activation rows pass over it),
// activation rows in steps of max_mr, panels in steps of max_nr; tile(mr, nr, p, i0)
// computes rows [i0, i0 + mr) of panels [p, p + nr).
template <class Tile>
void for_each_tile(std::int64_t m, std::int64_t p0, std::int64_t p1, std::int64_t panel_bytes, std::int64_t max_mr,
                   std::int64_t max_nr, Tile&& tile) {
  std::int64_t block = (std::int64_t{256} << 10) / panel_bytes / max_nr * max_nr;
  if (block < max_nr) block = max_nr;
  for (std::int64_t pb = p0; pb < p1; pb += block) {
    const std::int64_t pe = pb + block < p1 ? pb + block : p1;
    for (std::int64_t i0 = 0; i0 < m; i0 += max_mr) {
      const std::int64_t mr = m - i0 < max_mr ? m - i0 : max_mr;
      for (std::int64_t p = pb; p < pe; p += max_nr) tile(mr, pe - p < max_nr ? pe - p : max_nr, p, i0);
    }
  }
}

// Per-ISA kernels (their own files); nullptr where this build or CPU lacks them.
const Int8Kernel* int8_kernel_amx();  // its m = 1 and edge rows run avx512vnni's code
const Int8Kernel* int8_kernel_avx512vnni();
const Int8Kernel* int8_kernel_avx2();
const Int8Kernel* int8_kernel_neon_dotprod();

}  // namespace qhx::cpu
