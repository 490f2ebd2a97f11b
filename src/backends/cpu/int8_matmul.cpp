// Activation quantization, weight packing, the portable packed kernel, the
// choice of implementation and the threaded driver of the int8 path
// (int8_matmul.hpp). ISA-specific kernels live in int8_matmul_<isa>.cpp.
#include "backends/cpu/int8_matmul.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/int8_attention.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "qhexrt/error.hpp"

namespace qhx::cpu {

void quantize_rows_q8(const float* x, std::int64_t m, std::int64_t k, std::int64_t ldq, int offset, std::uint8_t* q,
                      float* scales) {
  for (std::int64_t i = 0; i < m; ++i) {
    const float* xr = x + i * k;
    std::uint8_t* qr = q + i * ldq;
    float amax = 0.0f;
    for (std::int64_t c = 0; c < k; ++c) amax = std::max(amax, std::abs(xr[c]));
    scales[i] = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (std::int64_t c = 0; c < k; ++c) {
      // Round half to even by the 1.5·2^23 trick: exactly nearbyint for |v| < 2^22
      // in the default rounding mode, and it vectorizes (nearbyint is a libm call).
      float v = xr[c] * inv;
      v = (v + 12582912.0f) - 12582912.0f;
      // x · inv may round a hair past 127; the clamp keeps |q| <= 127 (and a NaN becomes 0).
      v = v >= -127.0f ? (v <= 127.0f ? v : 127.0f) : (v < -127.0f ? -127.0f : 0.0f);
      qr[c] = static_cast<std::uint8_t>(static_cast<int>(v) + offset);
    }
    std::memset(qr + k, offset, static_cast<std::size_t>(ldq - k));
  }
}

void quantize_blocks_q8(const float* x, std::int64_t m, std::int64_t k, std::int64_t ldq, std::uint8_t* q,
                        float* scales, std::int32_t* sums) {
  const std::int64_t G = k / kW4GroupSize;
  for (std::int64_t i = 0; i < m; ++i) {
    // A block is a row of 32 for the per-row quantizer, so the rounding is its, bit for bit.
    for (std::int64_t g = 0; g < G; ++g)
      quantize_rows_q8(x + i * k + 32 * g, 1, 32, 32, 0, q + i * ldq + 32 * g, scales + i * G + g);
    std::memset(q + i * ldq + k, 0, static_cast<std::size_t>(ldq - k));
    const auto* s8 = reinterpret_cast<const std::int8_t*>(q + i * ldq);
    for (std::int64_t g = 0; g < G; ++g) {
      std::int32_t s = 0;
      for (int t = 0; t < 32; ++t) s += s8[32 * g + t];
      sums[i * G + g] = s;
    }
  }
}

namespace {

// 64-byte aligned storage; arrays of 2 MiB and more start on a 2 MiB boundary
// and ask for huge pages (a 2B model's weights are 1.7 GB: far fewer TLB
// misses while streaming them, which decode's bandwidth depends on).
template <class T>
std::shared_ptr<T> aligned_array(std::int64_t n) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t raw = static_cast<std::size_t>(n) * sizeof(T);
  const std::size_t align = raw >= kHuge ? kHuge : 64;
  const std::size_t bytes = std::max<std::size_t>((raw + align - 1) / align * align, align);
  void* p = std::aligned_alloc(align, bytes);
  if (p == nullptr) fail("out of memory: packing a weight matrix needs ", bytes, " bytes");
#ifdef MADV_HUGEPAGE
  if (align == kHuge) madvise(p, bytes, MADV_HUGEPAGE);  // advisory: failure is harmless
#endif
  return std::shared_ptr<T>(static_cast<T*>(p), [](T* q) { std::free(q); });
}

// The portable kernel: the contract computed over the packed layout in plain
// C++ (signed activations), one panel at a time.
void gemm_portable(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx, const PackedI8& w,
                   const float* bias, float* y, std::int64_t ldy, std::int64_t p0, std::int64_t p1) {
  const int P = w.panel;
  std::int32_t acc[64];
  for (std::int64_t p = p0; p < p1; ++p) {
    const std::int8_t* panel = w.data.get() + p * w.k4 * P * 4;
    const std::int64_t r0 = p * P, nr = std::min<std::int64_t>(P, w.rows - r0);
    for (std::int64_t i = 0; i < m; ++i) {
      const auto* qi = reinterpret_cast<const std::int8_t*>(q + i * ldq);
      std::fill(acc, acc + P, 0);
      for (std::int64_t g = 0; g < w.k4; ++g) {
        const std::int8_t* blk = panel + g * P * 4;
        for (int j = 0; j < P; ++j)
          for (int t = 0; t < 4; ++t) acc[j] += static_cast<std::int32_t>(qi[4 * g + t]) * blk[4 * j + t];
      }
      for (std::int64_t j = 0; j < nr; ++j) {
        const std::int64_t r = r0 + j;
        y[i * ldy + r] = std::fma(static_cast<float>(acc[j]), sx[i] * w.scales.get()[r], bias ? bias[r] : 0.0f);
      }
    }
  }
}

// The block contract over the w4 and block w8 layouts in plain C++ (P = 16).
void gemm_blocks_portable(const std::uint8_t* q, std::int64_t ldq, std::int64_t m, const float* sx,
                          const std::int32_t* xsum, const PackedI8& w, const float* bias, float* y, std::int64_t ldy,
                          std::int64_t p0, std::int64_t p1) {
  constexpr int P = 16;
  const std::int64_t G = w.groups, group_bytes = w.bits == 4 ? 256 : 512;
  const int offset = w.bits == 4 ? 8 : 128;
  for (std::int64_t p = p0; p < p1; ++p) {
    const std::int64_t r0 = p * P, nr = std::min<std::int64_t>(P, w.rows - r0);
    for (std::int64_t i = 0; i < m; ++i) {
      const auto* qi = reinterpret_cast<const std::int8_t*>(q + i * ldq);
      float acc[P] = {};
      for (std::int64_t g = 0; g < G; ++g) {
        const auto* blk = reinterpret_cast<const std::uint8_t*>(w.data.get()) + (p * G + g) * group_bytes;
        std::int32_t isum[P] = {};
        for (int jr = 0; jr < P; ++jr)
          for (int j = 0; j < 4; ++j)
            for (int t = 0; t < 4; ++t) {
              if (w.bits == 4) {
                const std::uint8_t b = blk[j * 64 + jr * 4 + t];
                isum[jr] += (b & 0xF) * qi[32 * g + 8 * j + t] + (b >> 4) * qi[32 * g + 8 * j + 4 + t];
              } else {
                isum[jr] += blk[j * 64 + jr * 4 + t] * qi[32 * g + 4 * j + t] +
                            blk[(j + 4) * 64 + jr * 4 + t] * qi[32 * g + 4 * (j + 4) + t];
              }
            }
        const std::int64_t s0 = (p * G + g) * P;
        const float si = sx[i * G + g];
        for (int jr = 0; jr < P; ++jr) {
          const float sw = w.scales_bf16 ? bf16_to_f32(w.scales_bf16.get()[s0 + jr]) : w.scales.get()[s0 + jr];
          acc[jr] = std::fma(static_cast<float>(isum[jr] - offset * xsum[i * G + g]), si * sw, acc[jr]);
        }
      }
      for (std::int64_t jr = 0; jr < nr; ++jr) y[i * ldy + r0 + jr] = acc[jr] + (bias ? bias[r0 + jr] : 0.0f);
    }
  }
}

const Int8Kernel kPortable{"portable", 16, 0, gemm_portable, gemm_blocks_portable, quantize_rows_q8, softmax_q8_row,
                           nullptr,    1,  1};

}  // namespace

const Int8Kernel& int8_kernel_portable() { return kPortable; }

std::vector<const Int8Kernel*> int8_kernels_available() {
  std::vector<const Int8Kernel*> out{&kPortable};
  for (const Int8Kernel* k :
       {int8_kernel_amx(), int8_kernel_avx512vnni(), int8_kernel_avx2(), int8_kernel_neon_dotprod()})
    if (k != nullptr) out.push_back(k);
  return out;
}

const Int8Kernel& int8_kernel_best() {
  static const Int8Kernel& best = []() -> const Int8Kernel& {
    const std::vector<const Int8Kernel*> all = int8_kernels_available();  // portable first, then best first
    const char* env = std::getenv("QHX_INT8_KERNEL");
    if (env == nullptr || *env == '\0') return all.size() > 1 ? *all[1] : *all[0];
    std::string names;
    for (const Int8Kernel* k : all) {
      if (std::string_view(env) == k->name) return *k;
      names += std::string(names.empty() ? "" : ", ") + k->name;
    }
    fail("QHX_INT8_KERNEL=", env, " names no int8 kernel this CPU runs (it runs: ", names, ")");
  }();
  return best;
}

namespace {

// The byte at (row jr, t) of vector j of one panel-group in the block layouts
// (int8_matmul.hpp) for row r of w (r < rows), group g.
std::uint8_t block_layout_byte(const WeightMatrix& w, std::int64_t r, std::int64_t g, int j, int t) {
  if (w.dtype == DType::I8) return static_cast<std::uint8_t>(w8_at(w, r, 32 * g + 4 * j + t) + 128);
  const auto* src = static_cast<const std::uint8_t*>(w.data);
  const std::int64_t half = w.cols / 2, c_lo = 32 * g + 8 * j + t, c_hi = c_lo + 4;
  const int lo = w4_nibble(src[r * half + c_lo / 2], static_cast<int>(c_lo & 1)) + 8;
  const int hi = w4_nibble(src[r * half + c_hi / 2], static_cast<int>(c_hi & 1)) + 8;
  return static_cast<std::uint8_t>(lo | (hi << 4));
}

// A block-scaled matrix (w4: two's complement nibbles, [rows, cols / 2] bytes; w8
// with block scales) into its panel layout, its scales in 16 bits when all are bf16.
std::shared_ptr<const PackedI8> pack_blocks(const WeightMatrix& w, const Int8Kernel& kernel) {
  const bool w8 = w.dtype == DType::I8;
  if (w.cols % kW4GroupSize != 0)
    fail("pack_i8: a ", w8 ? "w8 matrix with block scales" : "w4 matrix", " needs a multiple of 32 columns, not ",
         w.cols);
  if (w.panel_form) fail("pack_i8: a panel-form w8 matrix has one scale per row, not per block");
  constexpr int P = 16;
  auto out = std::make_shared<PackedI8>();
  out->rows = w.rows;
  out->cols = w.cols;
  out->k4 = w.cols / 4;
  out->panels = (w.rows + P - 1) / P;
  out->panel = P;
  out->kernel = &kernel;
  out->bits = w8 ? 8 : 4;
  out->groups = w.cols / kW4GroupSize;
  const std::int64_t G = out->groups;
  const int vectors = w8 ? 8 : 4;
  const std::uint8_t pad = w8 ? 0x80 : 0x88;  // the unsigned form of 0
  const std::int64_t n_scales = w.rows * G;
  bool bf16 = true;
  for (std::int64_t i = 0; i < n_scales && bf16; ++i) bf16 = bf16_to_f32(f32_to_bf16(w.scales[i])) == w.scales[i];
  out->data = aligned_array<std::int8_t>(out->panels * G * vectors * 64);
  if (bf16)
    out->scales_bf16 = aligned_array<std::uint16_t>(out->panels * G * P);
  else
    out->scales = aligned_array<float>(out->panels * G * P);
  auto* dst = reinterpret_cast<std::uint8_t*>(out->data.get());
  float* scales = out->scales.get();
  std::uint16_t* scales16 = out->scales_bf16.get();
  const std::int64_t rows = w.rows;
  parallel_for(out->panels, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t p = b; p < e; ++p)
      for (int jr = 0; jr < P; ++jr) {
        const std::int64_t r = p * P + jr;
        for (std::int64_t g = 0; g < G; ++g) {
          const float sw = r < rows ? w.scales[r * G + g] : 0.0f;
          if (bf16)
            scales16[(p * G + g) * P + jr] = f32_to_bf16(sw);
          else
            scales[(p * G + g) * P + jr] = sw;
          std::uint8_t* blk = dst + (p * G + g) * vectors * 64;
          for (int j = 0; j < vectors; ++j)
            for (int t = 0; t < 4; ++t) blk[j * 64 + jr * 4 + t] = r < rows ? block_layout_byte(w, r, g, j, t) : pad;
        }
      }
  });
  return out;
}

}  // namespace

std::shared_ptr<const PackedI8> pack_i8(const WeightMatrix& w, const Int8Kernel& kernel) {
  if (w.scales != nullptr && has_block_scales(w)) return pack_blocks(w, kernel);
  auto out = std::make_shared<PackedI8>();
  pack_i8_into(w, kernel, *out);
  return out;
}

void shape_i8(std::int64_t rows, std::int64_t cols, const Int8Kernel& kernel, PackedI8& out) {
  if (cols > kInt8MaxCols)
    fail("pack_i8: ", cols, " input features exceed the int8 path's exact limit of ", kInt8MaxCols);
  const int P = kernel.panel;
  const bool reuse =
      out.data != nullptr && out.bits == 8 && out.kernel == &kernel && out.rows == rows && out.cols == cols;
  out.rows = rows;
  out.cols = cols;
  out.k4 = (cols + 3) / 4;
  out.panels = (rows + P - 1) / P;
  out.panel = P;
  out.kernel = &kernel;
  out.bits = 8;
  out.groups = 0;
  out.scales_bf16 = nullptr;
  const std::int64_t padded_rows = out.panels * P;
  if (!reuse) {
    out.data = aligned_array<std::int8_t>(padded_rows * out.k4 * 4);
    out.row_sums = aligned_array<std::int32_t>(padded_rows);
    out.scales = aligned_array<float>(padded_rows);
  }
}

void pack_i8_into(const WeightMatrix& w, const Int8Kernel& kernel, PackedI8& out) {
  if (w.dtype != DType::I8 || w.scales == nullptr)
    fail("pack_i8: a ", weight_format_name(w), " matrix is neither w8 nor w4");
  if (w.block_scales) fail("pack_i8_into: a w8 matrix with block scales takes pack_i8");
  shape_i8(w.rows, w.cols, kernel, out);
  const int P = kernel.panel;
  const auto* src = static_cast<const std::int8_t*>(w.data);
  std::int8_t* dst = out.data.get();
  std::int32_t* sums = out.row_sums.get();
  float* scales = out.scales.get();
  const std::int64_t k4 = out.k4, cols = w.cols, rows = w.rows;
  parallel_for(out.panels, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t p = b; p < e; ++p) {
      std::int8_t* panel = dst + p * k4 * P * 4;
      for (int j = 0; j < P; ++j) {
        const std::int64_t r = p * P + j;
        std::int8_t* col = panel + j * 4;  // this row's 4 bytes of group g sit at col + g · P · 4
        if (r >= rows) {
          for (std::int64_t g = 0; g < k4; ++g) std::memset(col + g * P * 4, 0, 4);
          sums[r] = 0;
          scales[r] = 0.0f;
          continue;
        }
        const std::int8_t* row = src + r * cols;
        const std::int64_t full = cols / 4;
        for (std::int64_t g = 0; g < full; ++g) std::memcpy(col + g * P * 4, row + 4 * g, 4);
        if (full < k4) {  // the last, partial group: zero-padded
          std::int8_t last[4] = {0, 0, 0, 0};
          for (std::int64_t c = 4 * full; c < cols; ++c) last[c - 4 * full] = row[c];
          std::memcpy(col + full * P * 4, last, 4);
        }
        std::int32_t s = 0;
        for (std::int64_t c = 0; c < cols; ++c) s += row[c];
        sums[r] = s;
        scales[r] = w.scales[r];
      }
    }
  });
}

void linear_i8_packed(const float* x, std::int64_t m, const PackedI8& w, const float* bias, float* y,
                      const BlockStep* step) {
  const Int8Kernel& k = *w.kernel;
  const bool blocks = w.block_scaled();  // activations per block, signed
  const int offset = blocks ? 0 : k.offset;
  const std::int64_t ldq = (w.k4 * 4 + 63) / 64 * 64;   // rows start on cache lines
  const std::int64_t n_scales = blocks ? w.groups : 1;  // per activation row
  // Grows to the largest call once (the prefill chunk), then is reused: the
  // decode loop allocates nothing here.
  thread_local std::vector<std::uint8_t> q;
  thread_local std::vector<float> sx;
  thread_local std::vector<std::int32_t> xsum;  // block-scaled: [m, groups]
  if (q.size() < static_cast<std::size_t>(m * ldq + 64)) q.resize(static_cast<std::size_t>(m * ldq + 64));
  if (sx.size() < static_cast<std::size_t>(m * n_scales)) sx.resize(static_cast<std::size_t>(m * n_scales));
  if (xsum.size() < static_cast<std::size_t>(m * w.groups)) xsum.resize(static_cast<std::size_t>(m * w.groups));
  const std::int64_t rows_per_task = std::max<std::int64_t>(1, 64 / std::max<std::int64_t>(1, m));
  // (The buffers are this thread's: workers get their pointers, not their own thread_locals.)
  // Rows on cache lines (AMX reads 64-byte rows; a split row costs two loads).
  std::uint8_t* qp = q.data() + (64 - reinterpret_cast<std::uintptr_t>(q.data()) % 64) % 64;
  float* sp = sx.data();
  std::int32_t* xs = xsum.data();
  parallel_for(m, rows_per_task, [&](std::int64_t b, std::int64_t e) {
    if (blocks)
      quantize_blocks_q8(x + b * w.cols, e - b, w.cols, ldq, qp + b * ldq, sp + b * n_scales, xs + b * w.groups);
    else
      k.quantize(x + b * w.cols, e - b, w.cols, ldq, offset, qp + b * ldq, sp + b);
  });
  const auto gemm_blocks = k.gemm_blocks != nullptr ? k.gemm_blocks : gemm_blocks_portable;
  // With a step, a piece's rows go in blocks of kStepRows, each handed to the
  // step as soon as it is done: a whole piece's output (up to 1,024 rows a few
  // cache lines wide, rows 4 to 16 KiB apart) does not stay in cache, such a
  // block does. The kernels' own order is unchanged: a piece is one L2 block of
  // panels that all the rows pass over.
  constexpr std::int64_t kStepRows = 64;
  // Calls of at most this many rows (decode, a verification step of up to 7
  // drafts) stream like decode: AVX-512's tiles are 8 rows high, so each panel
  // comes from memory once; a 4-row kernel's second tile finds it in cache.
  constexpr std::int64_t kStreamRows = 8;
  const std::int64_t block = step != nullptr ? kStepRows : m;
  const auto panels = [&](std::int64_t b, std::int64_t e) {
    const std::int64_t c0 = b * w.panel, c1 = std::min(e * w.panel, w.rows);
    for (std::int64_t i0 = 0; i0 < m; i0 += block) {
      const std::int64_t rows = std::min(block, m - i0);
      if (blocks)
        gemm_blocks(qp + i0 * ldq, ldq, rows, sp + i0 * n_scales, xs + i0 * w.groups, w, bias, y + i0 * w.rows, w.rows,
                    b, e);
      else
        k.gemm(qp + i0 * ldq, ldq, rows, sp + i0, w, bias, y + i0 * w.rows, w.rows, b, e);
      if (step != nullptr) step->run(step->ctx, i0, i0 + rows, c0, c1);
    }
  };
  if (m <= kStreamRows) {
    // Decode streams the weights: each thread its own run of panels, balanced at
    // the end a panel at a time (thread_pool.hpp). About 64k multiply-adds per
    // thread at least, so a share is worth a hand-off. A verify step's few rows
    // read each panel once too, and stream the same way (pieces of L2 blocks,
    // below, broke each thread's stream into jumps).
    const std::int64_t grain =
        std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(1, w.cols * w.panel));
    parallel_for_balanced(w.panels, grain, 1, panels);
    return;
  }
  // Several rows: pieces of about 256 KiB of panels (the kernels' L2 block), a
  // whole number of the kernel's full-width tiles, shared out as threads come
  // free (thread_pool.hpp: parallel_for_pieces).
  const std::int64_t panel_bytes = blocks ? w.groups * (w.bits == 4 ? 256 : 512) : w.k4 * w.panel * 4;
  const std::int64_t tile = std::max(1, blocks ? k.tile_panels_blocks : k.tile_panels);
  const std::int64_t piece =
      std::max<std::int64_t>(tile, (std::int64_t{256} << 10) / std::max<std::int64_t>(1, panel_bytes) / tile * tile);
  parallel_for_pieces(w.panels, piece, panels);
}

}  // namespace qhx::cpu
