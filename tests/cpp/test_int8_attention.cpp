// The int8 attention of int8_attention.hpp: its exp against exp2 in double, the
// reference against the contract written out here independently, every
// Int8Kernel's softmax step and packed driver (and each kernel set's
// attention_i8) against the reference bit for bit, and the whole against f32
// attention in double within the error its quantization allows.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/int8_attention.hpp"
#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "backends/cpu/kernels_fast.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace qhx::cpu {
namespace {

struct Shape {
  int t, n, hq, hkv, d;
};

// Odd sizes: blocks of queries that do not fill kAttentionBlock, keys that fill
// no panel, head sizes that are not a multiple of 4, grouped heads; the last two
// give both products whole AMX tiles (keys and head size multiples of 64).
const Shape kShapes[] = {{1, 1, 1, 1, 1},     {3, 7, 2, 1, 5},     {9, 9, 3, 3, 64},
                         {49, 33, 2, 2, 64},  {20, 100, 4, 2, 72}, {50, 17, 1, 1, 16},
                         {97, 130, 2, 2, 64}, {64, 128, 2, 1, 64}, {100, 256, 2, 2, 64}};

std::vector<float> random(std::size_t n, float sd, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " at " << i << ": " << got[i] << " vs " << want[i];
}

std::string name(const Shape& s) {
  return std::to_string(s.t) + "x" + std::to_string(s.n) + " heads " + std::to_string(s.hq) + "/" +
         std::to_string(s.hkv) + " d " + std::to_string(s.d);
}

// The contract's quantization of n values x[0], x[stride], ...: q and the returned scale.
float contract_quantize(const float* x, int n, int stride, std::vector<int>& q) {
  float amax = 0.0f;
  for (int t = 0; t < n; ++t) amax = std::max(amax, std::abs(x[t * stride]));
  q.assign(static_cast<std::size_t>(n), 0);
  for (int t = 0; t < n && amax > 0.0f; ++t)
    q[t] = static_cast<int>(std::clamp(std::nearbyint(x[t * stride] * (127.0f / amax)), -127.0f, 127.0f));
  return amax / 127.0f;
}

// The contract of int8_attention.hpp, written from its text.
std::vector<float> contract(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                            const Shape& s, float scale) {
  const int group = s.hq / s.hkv;
  std::vector<float> out(static_cast<std::size_t>(s.t * s.hq * s.d));
  for (int h = 0; h < s.hq; ++h) {
    const int g = h / group;
    std::vector<std::vector<int>> qk(s.n), qv(s.d);
    std::vector<float> sk(s.n), sv(s.d);
    for (int j = 0; j < s.n; ++j) sk[j] = contract_quantize(&k[(j * s.hkv + g) * s.d], s.d, 1, qk[j]);
    for (int c = 0; c < s.d; ++c) sv[c] = contract_quantize(&v[g * s.d + c], s.n, s.hkv * s.d, qv[c]);
    for (int i = 0; i < s.t; ++i) {
      std::vector<int> qq;
      const float sq = contract_quantize(&q[(i * s.hq + h) * s.d], s.d, 1, qq);
      std::vector<float> sc(s.n);
      float m = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < s.n; ++j) {
        long acc = 0;
        for (int c = 0; c < s.d; ++c) acc += qq[c] * qk[j][c];
        sc[j] = std::fma(static_cast<float>(acc), (sq * (scale * 1.44269504f)) * sk[j], 0.0f);
        m = std::max(m, sc[j]);
      }
      std::vector<int> pq(s.n);
      long l = 0;
      for (int j = 0; j < s.n; ++j) l += pq[j] = static_cast<int>(std::nearbyint(exp2_127(sc[j] - m)));
      for (int c = 0; c < s.d; ++c) {
        long acc = 0;
        for (int j = 0; j < s.n; ++j) acc += pq[j] * qv[c][j];
        out[(i * s.hq + h) * s.d + c] = std::fma(static_cast<float>(acc), (1.0f / static_cast<float>(l)) * sv[c], 0.0f);
      }
    }
  }
  return out;
}

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs make(const Shape& s, std::mt19937& rng) {
  return {random(static_cast<std::size_t>(s.t * s.hq * s.d), 1.0f, rng),
          random(static_cast<std::size_t>(s.n * s.hkv * s.d), 1.0f, rng),
          random(static_cast<std::size_t>(s.n * s.hkv * s.d), 1.0f, rng)};
}

constexpr float kScale = 0.3f;

TEST(Int8Attention, ExpFollowsExp2WithinItsStatedError) {
  EXPECT_EQ(exp2_127(0.0f), 127.0f);
  EXPECT_EQ(exp2_127(-1.0f), 63.5f);  // f = 0: the polynomial is exactly 127
  float prev = 0.0f;
  for (float x = -126.0f; x <= 0.0f; x += 1.0f / 1024) {
    const float e = exp2_127(x);
    const double want = 127.0 * std::exp2(static_cast<double>(x));
    ASSERT_LE(std::abs(e - want), 6e-5 * want) << x;
    ASSERT_LE(e, 127.0f);
    ASSERT_GE(e, prev * (1 - 1e-4f)) << x;  // as monotone as the rounding allows
    prev = e;
  }
  // Below the clamp and NaN: finite, positive and far below half a step.
  for (const float x : {-200.0f, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_GT(exp2_127(x), 0.0f);
    EXPECT_LT(exp2_127(x), 1e-30f);
  }
}

TEST(Int8Attention, ReferenceFollowsTheContract) {
  std::mt19937 rng(3);
  for (const Shape& s : kShapes) {
    const Inputs in = make(s, rng);
    std::vector<float> out(in.q.size());
    attention_i8_reference(in.q.data(), in.k.data(), in.v.data(), s.t, s.n, s.hq, s.hkv, s.d, kScale, out.data());
    expect_bitwise(out, contract(in.q, in.k, in.v, s, kScale), "reference " + name(s));
  }
}

TEST(Int8Attention, EverySoftmaxStepEqualsTheRow) {
  std::mt19937 rng(5);
  for (const Int8Kernel* kern : int8_kernels_available())
    for (const int n : {1, 5, 16, 17, 100, 1024, 4096})
      for (const float sd : {0.01f, 1.0f, 30.0f, 100.0f}) {
        const std::vector<float> s = random(static_cast<std::size_t>(n), sd, rng);
        const std::int64_t ldp = (n + 63) / 64 * 64;
        std::vector<std::uint8_t> want(static_cast<std::size_t>(ldp)), got(want.size(), 0xAB);
        const std::int32_t lw = softmax_q8_row(s.data(), n, ldp, kern->offset, want.data());
        const std::int32_t lg = kern->softmax_q8(s.data(), n, ldp, kern->offset, got.data());
        EXPECT_EQ(lg, lw) << kern->name << " n " << n << " sd " << sd;
        EXPECT_EQ(got, want) << kern->name << " n " << n << " sd " << sd;
        EXPECT_EQ(static_cast<int>(want[static_cast<std::size_t>(std::max_element(s.begin(), s.end()) - s.begin())]),
                  127 + kern->offset);  // the maximum always gets the whole weight
      }
}

TEST(Int8Attention, EveryKernelEqualsTheReference) {
  std::mt19937 rng(9);
  ASSERT_GE(int8_kernels_available().size(), 1u);
  for (const int threads : {1, 2}) {
    set_threads(threads);
    for (const Shape& s : kShapes) {
      const Inputs in = make(s, rng);
      std::vector<float> want(in.q.size());
      attention_i8_reference(in.q.data(), in.k.data(), in.v.data(), s.t, s.n, s.hq, s.hkv, s.d, kScale, want.data());
      for (const Int8Kernel* kern : int8_kernels_available()) {
        std::vector<float> out(want.size(), std::numeric_limits<float>::quiet_NaN());
        attention_i8(*kern, in.q.data(), in.k.data(), in.v.data(), s.t, s.n, s.hq, s.hkv, s.d, kScale, out.data());
        expect_bitwise(out, want, std::string(kern->name) + " " + name(s) + " threads " + std::to_string(threads));
      }
      for (const KernelSet* ks : {&reference_kernels(), &fast_kernels()}) {
        std::vector<float> out(want.size());
        ks->attention_i8(in.q.data(), in.k.data(), in.v.data(), s.t, s.n, s.hq, s.hkv, s.d, kScale, out.data());
        expect_bitwise(out, want, std::string(ks->name) + " kernel set " + name(s));
      }
    }
  }
  set_threads(0);
}

// Against attention in double. With a_j = 127 · 2^(s_j − m) from the exact
// scores, A = Σ a_j, the exact output is Σ a_j v_j / A, and the contract's is
// Σ (pq_j / l) · vq_j (vq: V dequantized). Their difference splits in two:
//   Σ (pq_j / l)(vq_j − v_j): a convex combination of V's rounding errors,
//       at most sv_c / 2 = max_j |v_jc| / 254;
//   Σ (pq_j / l − a_j / A) v_j: at most 2E / l · max|v| where E >= Σ |pq_j − a_j|
//       (then |l − A| <= E as well), and l >= A − E.
// pq_j rounds a'_j = a_j (1 ± δ_j), the contract's exp2_127 of its own scores:
// δ_j covers exp2_127's 6e-5 and the scores' two roundings (ln 2 · 2^-22 · (|s_j| + |m|)),
// so |pq_j − a_j| <= min(1/2, a_j (1 + δ_j)) + a_j δ_j, summed into E. Q and K are
// integers with an entry of ±127 per row, so they quantize exactly and the
// scores are exact up to those roundings. The last 1e-5 · max|v| covers the
// three roundings of the output's rescale. No freedom is left to tune.
TEST(Int8Attention, StaysWithinTheQuantizationErrorOfExactAttention) {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> qd(-127, 127);
  for (const Shape& s : {Shape{16, 256, 2, 2, 64}, Shape{7, 1024, 1, 1, 64}, Shape{5, 60, 2, 1, 8}})
    for (const float scale : {1e-5f, 1e-4f, 3e-4f}) {  // from nearly uniform to peaked weights
      SCOPED_TRACE(name(s) + " scale " + std::to_string(scale));
      Inputs in = make(s, rng);
      for (auto* x : {&in.q, &in.k})
        for (std::size_t r = 0; r < x->size(); r += static_cast<std::size_t>(s.d)) {
          for (int c = 0; c < s.d; ++c) (*x)[r + c] = static_cast<float>(qd(rng));
          (*x)[r] = 127.0f;
        }
      std::vector<float> out(in.q.size());
      attention_i8_reference(in.q.data(), in.k.data(), in.v.data(), s.t, s.n, s.hq, s.hkv, s.d, scale, out.data());
      const int group = s.hq / s.hkv;
      for (int i = 0; i < s.t; ++i)
        for (int h = 0; h < s.hq; ++h) {
          const int g = h / group;
          std::vector<double> s2(s.n), a(s.n);
          double m = -1e300;
          for (int j = 0; j < s.n; ++j) {
            double dot = 0;
            for (int c = 0; c < s.d; ++c)
              dot += double(in.q[(i * s.hq + h) * s.d + c]) * in.k[(j * s.hkv + g) * s.d + c];
            m = std::max(m, s2[j] = dot * scale * 1.4426950408889634);
          }
          double A = 0, E = 0;
          for (int j = 0; j < s.n; ++j) {
            A += a[j] = 127.0 * std::exp2(s2[j] - m);
            const double delta = 6e-5 + std::log(2.0) * std::ldexp(std::abs(s2[j]) + std::abs(m), -22);
            E += std::min(0.5, a[j] * (1 + delta)) + a[j] * delta;
          }
          ASSERT_GT(A, E);
          for (int c = 0; c < s.d; ++c) {
            double want = 0, vmax = 0;
            for (int j = 0; j < s.n; ++j) {
              const double vj = in.v[(j * s.hkv + g) * s.d + c];
              want += a[j] / A * vj;
              vmax = std::max(vmax, std::abs(vj));
            }
            const double bound = vmax / 254.0 + 2.0 * E / (A - E) * vmax + 1e-5 * vmax;
            ASSERT_LE(std::abs(out[(i * s.hq + h) * s.d + c] - want), bound)
                << "query " << i << " head " << h << " c " << c;
          }
        }
    }
}

}  // namespace
}  // namespace qhx::cpu
