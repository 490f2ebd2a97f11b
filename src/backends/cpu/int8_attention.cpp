// The int8 attention of int8_attention.hpp: the contract in plain loops, and the
// driver that runs it on a packed int8 kernel.
#include "backends/cpu/int8_attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "backends/cpu/weights.hpp"
#include "common/line_aligned.hpp"

namespace qhx::cpu {

std::int32_t softmax_q8_row(const float* s, std::int64_t n, std::int64_t ldp, int offset, std::uint8_t* p) {
  float m = -INFINITY;
  for (std::int64_t j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
  std::int32_t l = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const float e = (exp2_127(s[j] - m) + 12582912.0f) - 12582912.0f;  // nearbyint, as in quantize_rows_q8
    const int pq = static_cast<int>(e);
    l += pq;
    p[j] = static_cast<std::uint8_t>(pq + offset);
  }
  for (std::int64_t j = n; j < ldp; ++j) p[j] = static_cast<std::uint8_t>(offset);
  return l;
}

namespace {

// The rows x[r · stride + 0 .. cols) for r in [0, rows), copied into dst [rows, cols].
void gather(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t stride, float* dst) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[r * cols + c] = x[r * stride + c];
}

// K of one head as int8 rows [n, d] and V as int8 channels [d, n] (V transposed),
// each with its scales, by quantize_rows_q8's rule (signed: offset 0).
struct QuantizedKV {
  std::vector<std::uint8_t> qk, qv;    // int8 bytes
  std::vector<float> sk, sv;           // [n], [d]
  std::vector<float> rows, amax, inv;  // scratch: [n, d], [d], [d]
};

void quantize_kv(const float* k, const float* v, std::int64_t n, std::int64_t d, std::int64_t stride,
                 void (*quantize)(const float*, std::int64_t, std::int64_t, std::int64_t, int, std::uint8_t*, float*),
                 QuantizedKV& out) {
  std::vector<float>& rows = out.rows;
  rows.resize(static_cast<std::size_t>(n * d));
  out.qk.resize(rows.size());
  out.qv.resize(rows.size());
  out.sk.resize(static_cast<std::size_t>(n));
  out.sv.resize(static_cast<std::size_t>(d));
  gather(k, n, d, stride, rows.data());
  quantize(rows.data(), n, d, d, 0, out.qk.data(), out.sk.data());
  // V by channel, walked by key (rows of v are contiguous, its columns are not):
  // the same max, scale and rounding as quantize_rows_q8 on each column.
  std::vector<float>& amax = out.amax;
  std::vector<float>& inv = out.inv;
  amax.assign(static_cast<std::size_t>(d), 0.0f);
  inv.resize(amax.size());
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t c = 0; c < d; ++c) amax[c] = std::max(amax[c], std::abs(v[j * stride + c]));
  for (std::int64_t c = 0; c < d; ++c) {
    out.sv[c] = amax[c] / 127.0f;
    inv[c] = amax[c] > 0.0f ? 127.0f / amax[c] : 0.0f;
  }
  auto* qv = reinterpret_cast<std::int8_t*>(rows.data());  // [n, d] int8, reusing the buffer
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t c = 0; c < d; ++c) {
      float x = v[j * stride + c] * inv[c];
      x = (x + 12582912.0f) - 12582912.0f;
      x = x >= -127.0f ? (x <= 127.0f ? x : 127.0f) : (x < -127.0f ? -127.0f : 0.0f);
      qv[j * d + c] = static_cast<std::int8_t>(x);
    }
  for (std::int64_t c = 0; c < d; ++c)
    for (std::int64_t j = 0; j < n; ++j) out.qv[c * n + j] = static_cast<std::uint8_t>(qv[j * d + c]);
}

// One thread's buffers for attention_i8 (sizes in elements).
struct Scratch {
  std::vector<float> qrows;      // [block, d]: a block of one head's query rows
  std::vector<std::uint8_t> qq;  // [block, ldq]: quantized
  float sq[kAttentionBlock], sx[kAttentionBlock], inv[kAttentionBlock];
  LineFloats s;                 // S [block, lds]
  std::vector<std::uint8_t> p;  // P [block, ldp]
  QuantizedKV kv;
  PackedI8 kp, vp;  // K [n, d] and V [d, n] packed
  void grow(std::int64_t nq, std::int64_t nqq, std::int64_t ns, std::int64_t np) {
    if (qrows.size() < static_cast<std::size_t>(nq)) qrows.resize(static_cast<std::size_t>(nq));
    if (qq.size() < static_cast<std::size_t>(nqq)) qq.resize(static_cast<std::size_t>(nqq));
    if (s.size() < static_cast<std::size_t>(ns)) s.resize(static_cast<std::size_t>(ns));
    if (p.size() < static_cast<std::size_t>(np)) p.resize(static_cast<std::size_t>(np));
  }
};

}  // namespace

void attention_i8_reference(const float* q, const float* k, const float* v, std::int64_t t, std::int64_t n,
                            std::int64_t hq, std::int64_t hkv, std::int64_t d, float scale, float* out) {
  const std::int64_t group = hq / hkv;
  const float scale2 = scale * kLog2e;
  std::vector<float> qrow(static_cast<std::size_t>(d)), s(static_cast<std::size_t>(n));
  std::vector<std::uint8_t> qq(static_cast<std::size_t>(d)), pq(static_cast<std::size_t>(n));
  for (std::int64_t h = 0; h < hq; ++h) {
    const std::int64_t g = h / group;
    QuantizedKV kv;
    quantize_kv(k + g * d, v + g * d, n, d, hkv * d, quantize_rows_q8, kv);
    const auto* qk = reinterpret_cast<const std::int8_t*>(kv.qk.data());
    const auto* qv = reinterpret_cast<const std::int8_t*>(kv.qv.data());
    for (std::int64_t i = 0; i < t; ++i) {
      float sq = 0.0f;
      quantize_rows_q8(q + (i * hq + h) * d, 1, d, d, 0, qq.data(), &sq);
      const auto* qi = reinterpret_cast<const std::int8_t*>(qq.data());
      for (std::int64_t j = 0; j < n; ++j) {
        std::int32_t acc = 0;
        for (std::int64_t c = 0; c < d; ++c) acc += qi[c] * qk[j * d + c];
        s[j] = std::fma(static_cast<float>(acc), (sq * scale2) * kv.sk[j], 0.0f);
      }
      const std::int32_t l = softmax_q8_row(s.data(), n, n, 0, pq.data());
      const float inv = l > 0 ? 1.0f / static_cast<float>(l) : 0.0f;
      for (std::int64_t c = 0; c < d; ++c) {
        std::int32_t acc = 0;
        for (std::int64_t j = 0; j < n; ++j) acc += pq[j] * qv[c * n + j];
        out[(i * hq + h) * d + c] = std::fma(static_cast<float>(acc), inv * kv.sv[c], 0.0f);
      }
    }
  }
}

void attention_i8(const Int8Kernel& kernel, const float* q, const float* k, const float* v, std::int64_t t,
                  std::int64_t n, std::int64_t hq, std::int64_t hkv, std::int64_t d, float scale, float* out) {
  const std::int64_t group = hq / hkv;
  const float scale2 = scale * kLog2e;
  const std::int64_t ldq = (d + 63) / 64 * 64;  // Q rows (d columns, padded to whole 4-column groups and lines)
  const std::int64_t ldp = (n + 63) / 64 * 64;  // P rows
  // S rows start on cache lines and are not a multiple of 4 KiB apart: the Q·Kᵀ
  // product writes S a tile of 32 rows at a time, and rows 4 KiB apart (n =
  // 1,024) share the L1's sets, so its lines left L1 between the tiles that
  // write their halves (AMX at 48 rows × 1,024 keys × 64: 20 -> 7 us a block).
  const std::int64_t lds = (n + 15) / 16 * 16 + 16;
  // A head's work is ~4·t·n·d multiply-adds: heads are the unit of parallelism,
  // taken one at a time as threads come free.
  parallel_for_pieces(hq, 1, [&](std::int64_t h0, std::int64_t h1) {
    // Each thread's scratch lives as long as the thread and only grows: fresh
    // pages per call would cost page faults, and unmapping them TLB shootdowns
    // that stall the other threads.
    thread_local Scratch sc;
    sc.grow(kAttentionBlock * d, kAttentionBlock * ldq, kAttentionBlock * lds, kAttentionBlock * ldp);
    float* const s = sc.s.data();
    for (std::int64_t h = h0; h < h1; ++h) {
      const std::int64_t g = h / group;
      if (kernel.pack_kv != nullptr && d % 4 == 0) {
        shape_i8(n, d, kernel, sc.kp);
        shape_i8(d, n, kernel, sc.vp);
        kernel.pack_kv(k + g * d, v + g * d, n, d, hkv * d, sc.kp, sc.vp);
      } else {
        quantize_kv(k + g * d, v + g * d, n, d, hkv * d, kernel.quantize, sc.kv);
        // pack_i8_into's own parallel_for runs serially here, inside a worker.
        pack_i8_into(WeightMatrix::w8(reinterpret_cast<const std::int8_t*>(sc.kv.qk.data()), sc.kv.sk.data(), n, d),
                     kernel, sc.kp);
        pack_i8_into(WeightMatrix::w8(reinterpret_cast<const std::int8_t*>(sc.kv.qv.data()), sc.kv.sv.data(), d, n),
                     kernel, sc.vp);
      }
      for (std::int64_t i0 = 0; i0 < t; i0 += kAttentionBlock) {
        const std::int64_t rows = t - i0 < kAttentionBlock ? t - i0 : kAttentionBlock;
        gather(q + (i0 * hq + h) * d, rows, d, hq * d, sc.qrows.data());
        kernel.quantize(sc.qrows.data(), rows, d, ldq, kernel.offset, sc.qq.data(), sc.sq);
        for (std::int64_t i = 0; i < rows; ++i) sc.sx[i] = sc.sq[i] * scale2;
        kernel.gemm(sc.qq.data(), ldq, rows, sc.sx, sc.kp, nullptr, s, lds, 0, sc.kp.panels);
        for (std::int64_t i = 0; i < rows; ++i) {
          const std::int32_t l = kernel.softmax_q8(s + i * lds, n, ldp, kernel.offset, sc.p.data() + i * ldp);
          sc.inv[i] = l > 0 ? 1.0f / static_cast<float>(l) : 0.0f;
        }
        kernel.gemm(sc.p.data(), ldp, rows, sc.inv, sc.vp, nullptr, out + (i0 * hq + h) * d, hq * d, 0, sc.vp.panels);
      }
    }
  });
}

}  // namespace qhx::cpu
