// Attention over many queries and keys on the int8 path (the vision encoder's
// non-causal attention: 1,024 patches attend to 1,024 per image and head). Its
// two products, S = Q·Kᵀ and O = P·V, are the bulk of that attention's work and
// run on the packed int8 kernels of int8_matmul.hpp at 4× the f32 rate; only
// the softmax stays in f32.
//
// Contract, per query head h (key/value head g = h / (hq / hkv)), queries i,
// keys j, channels c; quantize() is quantize_rows_q8's row rule (int8_matmul.hpp):
//   qq[i, :], sq_i = quantize(q[i, h, :])            Q per row, at run time
//   qk[j, :], sk_j = quantize(k[j, g, :])            K per row
//   qv[:, c], sv_c = quantize(v[:, g, c])            V per channel, over all keys
//   s[i, j] = fma(float(Σ_c qq[i, c] · qk[j, c]), (sq_i · scale2) · sk_j, 0)
//             with scale2 = scale · 1.44269504f: scores in units of log2
//   m_i     = max_j s[i, j]
//   pq[i, j] = nearbyint(exp2_127(s[i, j] − m_i))       in 0 .. 127
//   l_i     = Σ_j pq[i, j]                            (exact, int32)
//   out[i, h, c] = fma(float(Σ_j pq[i, j] · qv[j, c]), (1 / float(l_i)) · sv_c, 0)
// so the output is a convex combination of the quantized value rows with weights
// pq / l; the 7-bit probabilities cost at most 1/254 absolute per weight.
// Integer sums are exact and every float step is a single rounding in a fixed
// order, so all implementations agree bit for bit. exp2_127 (below) is part of
// the contract for the same reason: a vector exp and std::exp differ in the
// last bits, and a flipped rounding of pq would change the output.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace qhx::cpu {

struct Int8Kernel;

// 127 · 2^x for the shifted scores x <= 0 of a softmax, within 6e-5 relative
// for x >= −126 (smaller terms quantize to 0 anyway): x = n + f with n the
// integer nearest x (ties to even) and |f| <= 1/2, 127 · 2^f by its Taylor
// polynomial of degree 4 in Horner form with fused multiply-adds (the 127
// folded into the coefficients; the remainder is at most
// (ln2 / 2)^5 / 5! · √2 = 5.9e-5), times 2^n exactly, capped at 127. Every step
// is a single IEEE rounding (fma rounds once), so a vector version reproduces
// it bit for bit: AVX-512 takes n with one vrndscaleps and 2^n with one
// vscalefps, 9 operations where separate × and + and exponent-bit arithmetic
// took 15. The clamps are written as vmaxps/vminps compute them
// (x > −126 ? x : −126 also sends NaN to −126).
inline float exp2_127(float x) {
  x = x > -126.0f ? x : -126.0f;
  const float n = (x + 12582912.0f) - 12582912.0f;  // nearbyint: 1.5 · 2^23 pushes the fraction out
  const float f = x - n;
  float p = std::fma(127.0f * 0.0096181291f, f, 127.0f * 0.0555041087f);  // 127 · ln2^k / k!, k = 4 .. 0
  p = std::fma(p, f, 127.0f * 0.2402265070f);
  p = std::fma(p, f, 127.0f * 0.6931471806f);
  p = std::fma(p, f, 127.0f);
  // 2^n from its exponent bits (n in [−126, 0]: a normal float; p · 2^n is exact).
  const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  const float e = p * two_n;
  return e < 127.0f ? e : 127.0f;
}

inline constexpr float kLog2e = 1.44269504f;

// One row of the softmax step: m = max s[0 .. n), p[j] = pq_j + offset (pq as
// in the contract), p[n .. ldp) = offset; returns l = Σ pq_j. The plain C++
// version that Int8Kernel::softmax_q8 implementations must equal.
std::int32_t softmax_q8_row(const float* s, std::int64_t n, std::int64_t ldp, int offset, std::uint8_t* p);

// The contract in plain loops (the reference kernel set's attention_i8).
void attention_i8_reference(const float* q, const float* k, const float* v, std::int64_t t, std::int64_t n,
                            std::int64_t hq, std::int64_t hkv, std::int64_t d, float scale, float* out);

// The contract on `kernel`'s packed products, on the thread pool: per query
// head, K and V are quantized and packed once, then queries go through in
// blocks of kAttentionBlock rows, each block's S [rows, n] and P [rows, n]
// staying in the thread's cache (nothing larger than a block is materialized).
void attention_i8(const Int8Kernel& kernel, const float* q, const float* k, const float* v, std::int64_t t,
                  std::int64_t n, std::int64_t hq, std::int64_t hkv, std::int64_t d, float scale, float* out);

inline constexpr std::int64_t kAttentionBlock = 48;

}  // namespace qhx::cpu
