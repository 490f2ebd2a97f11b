// The shared kernel suite: every KernelSet of the CPU backend is checked
// against straightforward double-precision formulas, over odd sizes, f32 and
// bf16 weights (and f16, w8, w4 for linear). A new implementation joins by being added to kernel_sets().
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernel_set.hpp"
#include "backends/cpu/kernels_fast.hpp"
#include "backends/cpu/kv_cache_i8.hpp"
#include "block_step_check.hpp"
#include "common/half.hpp"
#include "formats/quantize.hpp"
#include "qhexrt/error.hpp"

namespace qhx::cpu {
namespace {

std::vector<const KernelSet*> kernel_sets() { return {&reference_kernels(), &fast_kernels()}; }

class Kernels : public ::testing::TestWithParam<const KernelSet*> {
 protected:
  const KernelSet& k() const { return *GetParam(); }
  std::vector<float> random(std::size_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }
  std::mt19937 rng_{42};
};

std::uint16_t to_bf16(float f) {  // round to nearest even, as torch does
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>(bits >> 16);
}

// |a − b| <= atol + rtol·|b| elementwise.
void expect_close(const std::vector<float>& a, const std::vector<double>& b, double atol, double rtol) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::abs(a[i] - b[i]), atol + rtol * std::abs(b[i])) << "at " << i << ": " << a[i] << " vs " << b[i];
}

// want[i, j] = b[j] + sum_c x[i, c] * w[j, c], in double.
std::vector<double> linear_want(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                                int m, int n, int kk) {
  std::vector<double> want(static_cast<std::size_t>(m * n));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = b[static_cast<std::size_t>(j)];
      for (int c = 0; c < kk; ++c)
        s += static_cast<double>(x[static_cast<std::size_t>(i * kk + c)]) * w[static_cast<std::size_t>(j * kk + c)];
      want[static_cast<std::size_t>(i * n + j)] = s;
    }
  return want;
}

// The quantized formats' values, dequantized here from the stored bytes as the
// contract says (docs/bundle.md): value = float(q) * scale, f16 widened.
std::vector<float> dequantized(const QuantizedMatrix& q) {
  const auto n = static_cast<std::size_t>(q.rows * q.cols);
  const auto cols = static_cast<std::size_t>(q.cols);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t r = i / cols, c = i % cols;
    if (q.format == WeightFormat::F16) {
      std::uint16_t h;
      std::memcpy(&h, q.data.data() + 2 * i, 2);
      v[i] = f16_to_f32(h);
    } else if (q.format == WeightFormat::W8) {
      v[i] = static_cast<float>(static_cast<std::int8_t>(q.data[i])) * q.scales[r];
    } else {
      const int nib = (q.data[i / 2] >> (4 * (i % 2))) & 0xF;
      v[i] = static_cast<float>(nib >= 8 ? nib - 16 : nib) * q.scales[r * cols / 32 + c / 32];
    }
  }
  return v;
}

TEST_P(Kernels, LinearF32AndBf16WithAndWithoutBias) {
  for (const auto& [m, n, kk] : {std::tuple{1, 7, 13}, {5, 33, 64}, {3, 1, 1}, {17, 19, 130}, {4, 9, 96}}) {
    const auto x = random(static_cast<std::size_t>(m * kk));
    auto w = random(static_cast<std::size_t>(n * kk));
    const auto b = random(static_cast<std::size_t>(n));
    std::vector<std::uint16_t> wb(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      wb[i] = to_bf16(w[i]);
      w[i] = bf16_to_f32(wb[i]);  // the same values in both forms
    }
    auto want = linear_want(x, w, b, m, n, kk);
    std::vector<float> y(want.size());
    k().linear(x.data(), m, WeightMatrix{.data = w.data(), .dtype = DType::F32, .rows = n, .cols = kk}, b.data(),
               y.data());
    expect_close(y, want, 1e-5, 1e-5);
    k().linear(x.data(), m, WeightMatrix{.data = wb.data(), .dtype = DType::BF16, .rows = n, .cols = kk}, b.data(),
               y.data());
    expect_close(y, want, 1e-5, 1e-5);

    // f16, w8 and (when kk allows) w4 of the same values, against their dequantized values.
    for (const WeightFormat f : {WeightFormat::F16, WeightFormat::W8, WeightFormat::W4}) {
      if (f == WeightFormat::W4 && kk % 32 != 0) continue;
      SCOPED_TRACE(std::string(format_name(f)) + " " + std::to_string(n) + "x" + std::to_string(kk));
      const QuantizedMatrix q = quantize_matrix(w.data(), n, kk, f, 32);  // blocks of 32: every kk the loop has
      const WeightMatrix wq =
          f == WeightFormat::F16 ? WeightMatrix{.data = q.data.data(), .dtype = DType::F16, .rows = n, .cols = kk}
          : f == WeightFormat::W8
              ? WeightMatrix::w8(reinterpret_cast<const std::int8_t*>(q.data.data()), q.scales.data(), n, kk)
              : WeightMatrix::w4(q.data.data(), q.scales.data(), n, kk);
      k().linear(x.data(), m, wq, b.data(), y.data());
      expect_close(y, linear_want(x, dequantized(q), b, m, n, kk), 1e-5, 1e-5);
    }

    k().linear(x.data(), m, WeightMatrix{.data = w.data(), .dtype = DType::F32, .rows = n, .cols = kk}, nullptr,
               y.data());
    for (std::size_t j = 0; j < want.size(); ++j) want[j] -= b[j % static_cast<std::size_t>(n)];
    expect_close(y, want, 1e-5, 1e-5);
  }
}

// f16_activations: the product of the input rounded to the nearest fp16 (half.hpp's
// f32_to_f16, ties to even), bit for bit what the same kernel gives on that rounded input.
TEST_P(Kernels, LinearWithF16ActivationsIsLinearOfTheRoundedInput) {
  for (const auto& [m, n, kk] : {std::tuple{1, 7, 13}, {5, 33, 64}, {17, 19, 130}, {4, 9, 96}}) {
    auto x = random(static_cast<std::size_t>(m * kk), 3.0f);
    x[0] = 1.0f + 1.0f / 2048;  // a tie: rounds to even (1.0)
    x[1] = 70000.0f;            // past the fp16 range: infinity, as a cast to fp16 gives
    const auto w = random(static_cast<std::size_t>(n * kk));
    const auto b = random(static_cast<std::size_t>(n));
    std::vector<float> rounded(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) rounded[i] = f16_to_f32(f32_to_f16(x[i]));
    ASSERT_EQ(rounded[0], 1.0f);
    for (const WeightFormat f : {WeightFormat::F32, WeightFormat::F16, WeightFormat::W8, WeightFormat::W4}) {
      if (f == WeightFormat::W4 && kk % 32 != 0) continue;
      SCOPED_TRACE(std::string(format_name(f)) + " " + std::to_string(n) + "x" + std::to_string(kk));
      const QuantizedMatrix q = quantize_matrix(w.data(), n, kk, f == WeightFormat::F32 ? WeightFormat::F16 : f, 32);
      WeightMatrix wq =
          f == WeightFormat::F32   ? WeightMatrix{.data = w.data(), .dtype = DType::F32, .rows = n, .cols = kk}
          : f == WeightFormat::F16 ? WeightMatrix{.data = q.data.data(), .dtype = DType::F16, .rows = n, .cols = kk}
          : f == WeightFormat::W8
              ? WeightMatrix::w8(reinterpret_cast<const std::int8_t*>(q.data.data()), q.scales.data(), n, kk)
              : WeightMatrix::w4(q.data.data(), q.scales.data(), n, kk);
      std::vector<float> want(static_cast<std::size_t>(m * n)), got(want.size());
      k().linear(rounded.data(), m, wq, b.data(), want.data());
      wq.f16_activations = true;
      k().linear(x.data(), m, wq, b.data(), got.data());
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "at " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

// linear_then: the product of linear, each block handed to the step once, when final.
TEST_P(Kernels, LinearThenStepsOverFinishedBlocks) {
  for (const auto& [m_, n_, k_] : {std::tuple{1, 7, 13}, {3, 300, 64}, {70, 33, 96}}) {
    const int m = m_, n = n_, kk = k_;  // (clang 14's lambdas do not capture structured bindings)
    const auto x = random(static_cast<std::size_t>(m * kk));
    const auto w = random(static_cast<std::size_t>(n * kk));
    const auto b = random(static_cast<std::size_t>(n));
    std::vector<WeightMatrix> ws{WeightMatrix{.data = w.data(), .dtype = DType::F32, .rows = n, .cols = kk}};
    const QuantizedMatrix q = quantize_matrix(w.data(), n, kk, kk % 32 == 0 ? WeightFormat::W4 : WeightFormat::W8, 32);
    if (kk % 32 == 0) ws.push_back(WeightMatrix::w4(q.data.data(), q.scales.data(), n, kk));
    for (const WeightMatrix& wm : ws) {
      std::vector<float> want(static_cast<std::size_t>(m * n));
      k().linear(x.data(), m, wm, b.data(), want.data());
      expect_step_sees_final_blocks(
          m, n, want, [&](float* out, BlockStep step) { k().linear_then(x.data(), m, wm, b.data(), out, step); },
          std::string(weight_format_name(wm)) + " " + std::to_string(m) + "x" + std::to_string(n));
    }
  }
}

TEST_P(Kernels, RmsNormAndLayerNorm) {
  for (const auto& [rows, n] : {std::pair{1, 1}, {3, 64}, {4, 129}}) {
    const auto x = random(static_cast<std::size_t>(rows * n), 3.0f);
    const auto w = random(static_cast<std::size_t>(n));
    const auto b = random(static_cast<std::size_t>(n));
    std::vector<double> rms(x.size()), ln(x.size());
    for (int r = 0; r < rows; ++r) {
      double ss = 0, sum = 0;
      for (int i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i], sum += x[r * n + i];
      const double mean = sum / n;
      double var = 0;
      for (int i = 0; i < n; ++i) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
      var /= n;
      for (int i = 0; i < n; ++i) {
        rms[r * n + i] = w[i] * x[r * n + i] / std::sqrt(ss / n + 1e-6);
        ln[r * n + i] = (x[r * n + i] - mean) / std::sqrt(var + 1e-6) * w[i] + b[i];
      }
    }
    std::vector<float> y(x.size());
    k().rms_norm(x.data(), w.data(), rows, n, 1e-6f, y.data());
    expect_close(y, rms, 1e-5, 1e-5);
    k().layer_norm(x.data(), w.data(), b.data(), rows, n, 1e-6f, y.data());
    expect_close(y, ln, 1e-5, 1e-5);
    std::vector<float> inplace = x;  // rms_norm may run in place
    k().rms_norm(inplace.data(), w.data(), rows, n, 1e-6f, inplace.data());
    expect_close(inplace, rms, 1e-5, 1e-5);
  }
}

TEST_P(Kernels, SiluMulAndAdd) {
  const auto g = random(37, 4.0f), u = random(37);
  std::vector<double> want(37);
  for (int i = 0; i < 37; ++i) want[i] = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
  std::vector<float> y(37);
  k().silu_mul(g.data(), u.data(), 37, y.data());
  expect_close(y, want, 1e-6, 1e-6);
  std::vector<float> acc = u;
  k().add_inplace(acc.data(), g.data(), 37);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(acc[i], u[i] + g[i]);
}

TEST_P(Kernels, GeluFlavours) {
  const auto x = random(41, 3.0f);
  std::vector<double> tanh_want(41), erf_want(41);
  for (int i = 0; i < 41; ++i) {
    const double v = x[i];
    tanh_want[i] = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    erf_want[i] = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
  }
  std::vector<float> y(41);
  k().gelu_tanh(x.data(), 41, y.data());
  expect_close(y, tanh_want, 1e-6, 1e-6);
  k().gelu_erf(x.data(), 41, y.data());
  expect_close(y, erf_want, 1e-6, 1e-6);
}

// Every float the vision mergers meet, densely (the fast kernel's erf is a polynomial
// per interval: a bad coefficient or a wrong interval edge shows here), and a
// value's result does not depend on where a call's range starts or ends.
TEST_P(Kernels, GeluErfDenseAndSplitIndependent) {
  std::vector<float> x;
  for (int i = -40000; i <= 40000; ++i) x.push_back(static_cast<float>(i) * 3e-4f);
  for (const float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, -30.0f, 1e30f, -1e30f, 0.875f * 1.41421356f})
    x.push_back(v);
  std::vector<double> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    want[i] = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
  }
  std::vector<float> y(x.size());
  k().gelu_erf(x.data(), static_cast<std::int64_t>(x.size()), y.data());
  expect_close(y, want, 1e-6, 1e-6);
  for (const std::size_t start : {std::size_t{1}, std::size_t{7}, std::size_t{33}}) {
    std::vector<float> part(x.size() - start - 3);
    k().gelu_erf(x.data() + start, static_cast<std::int64_t>(part.size()), part.data());
    for (std::size_t i = 0; i < part.size(); ++i) ASSERT_EQ(part[i], y[start + i]) << "at " << start + i;
  }
}

// The element-wise activations give each value the same result wherever a call's
// range starts or ends (the thread pool's split moves with the thread count and the
// prefill chunk).
TEST_P(Kernels, ActivationsSplitIndependent) {
  const auto x = random(1000, 4.0f), u = random(1000, 2.0f);
  std::vector<float> gt(x.size()), sm(x.size());
  k().gelu_tanh(x.data(), 1000, gt.data());
  k().silu_mul(x.data(), u.data(), 1000, sm.data());
  for (const std::int64_t start : {1, 5, 19, 40}) {
    const std::int64_t len = 1000 - start - 7;
    std::vector<float> a(static_cast<std::size_t>(len)), b(a.size());
    k().gelu_tanh(x.data() + start, len, a.data());
    k().silu_mul(x.data() + start, u.data() + start, len, b.data());
    for (std::int64_t i = 0; i < len; ++i) {
      ASSERT_EQ(a[i], gt[start + i]) << "gelu_tanh at " << start + i;
      ASSERT_EQ(b[i], sm[start + i]) << "silu_mul at " << start + i;
    }
  }
}

TEST_P(Kernels, RopeRotateHalf) {
  const int T = 3, H = 2, D = 8;
  auto x = random(T * H * D);
  const auto cos = random(T * D), sin = random(T * D);
  std::vector<double> want(x.size());
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < D; ++d) {
        const double rot = d < D / 2 ? -double(x[(t * H + h) * D + d + D / 2]) : x[(t * H + h) * D + d - D / 2];
        want[(t * H + h) * D + d] = x[(t * H + h) * D + d] * double(cos[t * D + d]) + rot * sin[t * D + d];
      }
  k().rope_rotate_half(x.data(), T, H, D, cos.data(), sin.data());
  expect_close(x, want, 1e-6, 1e-6);
}

TEST_P(Kernels, AttentionCausalGqaAndFull) {
  // {T, N, HQ, HKV, D, start}: a few queries over a cache (decode-like), and
  // blocks of many queries with head_dim 64 and 128 (prefill, vision), odd counts;
  // long passes that read a head's rows in several streams (from 1,024 visible
  // rows; attention_fast.cpp), with queries on both sides of that threshold.
  for (const auto& [T, N, HQ, HKV, D, start] : {std::array{3, 7, 4, 2, 5, 4},
                                                {1, 50, 4, 2, 128, 49},
                                                {2, 33, 6, 2, 64, 31},
                                                {1, 9, 3, 3, 128, 8},
                                                {37, 40, 4, 2, 64, 3},
                                                {20, 20, 2, 2, 128, 0},
                                                {9, 9, 3, 1, 64, 0},
                                                {2, 30, 4, 2, 256, 28},
                                                {3, 1030, 4, 2, 128, 1021},
                                                {2, 1101, 4, 2, 64, 1099}}) {
    SCOPED_TRACE("T " + std::to_string(T) + " N " + std::to_string(N) + " D " + std::to_string(D));
    const auto q = random(T * HQ * D);
    auto kc = random(N * HKV * D), vc = random(N * HKV * D);
    // Keys and values as f32 (attention) and as f16 (attention_f16kv: a decoder's
    // KV cache [HKV, CTX, D], each head's rows together, rows past N NaN); the f16
    // case rounds them first, so both are held to the same values.
    const int CTX = N + 3;
    for (const bool f16 : {false, true}) {
      std::vector<std::uint16_t> kh(static_cast<std::size_t>(HKV * CTX * D), 0x7E00), vh(kh.size(), 0x7E00);
      if (f16)
        for (int j = 0; j < N; ++j)
          for (int g = 0; g < HKV; ++g)
            for (int c = 0; c < D; ++c) {
              const auto i = static_cast<std::size_t>((j * HKV + g) * D + c),
                         h = static_cast<std::size_t>((g * CTX + j) * D + c);
              kh[h] = f32_to_f16(kc[i]);
              vh[h] = f32_to_f16(vc[i]);
              kc[i] = f16_to_f32(kh[h]);
              vc[i] = f16_to_f32(vh[h]);
            }
      for (const bool causal : {true, false}) {
        SCOPED_TRACE(std::string(f16 ? "f16" : "f32") + (causal ? " causal" : " full"));
        std::vector<double> want(static_cast<std::size_t>(T * HQ * D), 0.0);
        for (int i = 0; i < T; ++i)
          for (int h = 0; h < HQ; ++h) {
            const int kvh = h / (HQ / HKV);
            const int visible = causal ? start + i + 1 : N;
            std::vector<double> s(visible);
            double mx = -1e300, sum = 0;
            for (int j = 0; j < visible; ++j) {
              double d = 0;
              for (int c = 0; c < D; ++c) d += double(q[(i * HQ + h) * D + c]) * kc[(j * HKV + kvh) * D + c];
              s[j] = d * 0.5;
              mx = std::max(mx, s[j]);
            }
            for (auto& v : s) sum += (v = std::exp(v - mx));
            for (int j = 0; j < visible; ++j)
              for (int c = 0; c < D; ++c) want[(i * HQ + h) * D + c] += s[j] / sum * vc[(j * HKV + kvh) * D + c];
          }
        std::vector<float> out(want.size());
        if (f16)
          k().attention_f16kv(q.data(), kh.data(), vh.data(), T, N, CTX, HQ, HKV, D, start, 0.5f, causal, out.data());
        else
          k().attention(q.data(), kc.data(), vc.data(), T, N, HQ, HKV, D, start, 0.5f, causal, out.data());
        expect_close(out, want, 1e-5, 1e-5);
        if (!causal) continue;
        // A causal call's rows do not depend on how many queries share the call:
        // each query alone gives its row of the full call bit for bit (what makes
        // chunked prefill equal one pass).
        for (int i = 0; i < T; ++i) {
          std::vector<float> one(static_cast<std::size_t>(HQ * D));
          const float* qi = q.data() + i * HQ * D;
          if (f16)
            k().attention_f16kv(qi, kh.data(), vh.data(), 1, N, CTX, HQ, HKV, D, start + i, 0.5f, true, one.data());
          else
            k().attention(qi, kc.data(), vc.data(), 1, N, HQ, HKV, D, start + i, 0.5f, true, one.data());
          for (int c = 0; c < HQ * D; ++c) ASSERT_EQ(one[c], out[i * HQ * D + c]) << "query " << i << " element " << c;
        }
      }
    }
  }
}

// Attention over the 8-bit KV cache (kv_cache_i8.hpp), read here from the
// documented layout: [hkv, ctx, d + 4] bytes, d int8 then the row's f32 scale.
struct I8Cache {
  std::int64_t hkv, ctx, d;
  std::vector<std::int8_t> bytes;
  I8Cache(std::int64_t hkv_, std::int64_t ctx_, std::int64_t d_)
      : hkv(hkv_), ctx(ctx_), d(d_), bytes(static_cast<std::size_t>(hkv_ * ctx_ * (d_ + 4)), 0x55) {}
  const std::int8_t* row(std::int64_t j, std::int64_t g) const { return bytes.data() + (g * ctx + j) * (d + 4); }
  float scale(std::int64_t j, std::int64_t g) const {
    float s;
    std::memcpy(&s, row(j, g) + d, 4);
    return s;
  }
  double value(std::int64_t j, std::int64_t g, std::int64_t c) const {  // what the cache stands for
    return static_cast<double>(static_cast<float>(row(j, g)[c]) * scale(j, g));
  }
};

// want [t, hq, d] in double: causal attention with keys and values key(j, g, c), value(j, g, c).
template <class K, class V>
std::vector<double> causal_attention_want(const std::vector<float>& q, int T, int HQ, int HKV, int D, int start,
                                          double scale, K key, V value) {
  std::vector<double> want(static_cast<std::size_t>(T * HQ * D), 0.0);
  for (int i = 0; i < T; ++i)
    for (int h = 0; h < HQ; ++h) {
      const int g = h / (HQ / HKV), visible = start + i + 1;
      std::vector<double> s(static_cast<std::size_t>(visible));
      double mx = -1e300, sum = 0;
      for (int j = 0; j < visible; ++j) {
        double dot = 0;
        for (int c = 0; c < D; ++c) dot += double(q[(i * HQ + h) * D + c]) * key(j, g, c);
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      for (auto& v : s) sum += (v = std::exp(v - mx));
      for (int j = 0; j < visible; ++j)
        for (int c = 0; c < D; ++c) want[(i * HQ + h) * D + c] += s[j] / sum * value(j, g, c);
    }
  return want;
}

TEST_P(Kernels, KvI8RowsFollowTheQuantizationRule) {
  const std::int64_t HKV = 3, D = 37, CTX = 6, T = 4, START = 2;
  auto x = random(static_cast<std::size_t>(T * HKV * D), 3.0f);
  for (std::int64_t c = 0; c < D; ++c) x[static_cast<std::size_t>(HKV * D + c)] = 0.0f;  // token 1, head 0: a zero row
  x[5] = 1e30f;                                                                          // a huge element
  I8Cache cache(HKV, CTX, D);
  kv_i8_write(x.data(), T, HKV, D, CTX, START, cache.bytes.data());
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t g = 0; g < HKV; ++g) {
      const float* xr = x.data() + (t * HKV + g) * D;
      float amax = 0;
      for (std::int64_t c = 0; c < D; ++c) amax = std::max(amax, std::abs(xr[c]));
      const float s = cache.scale(START + t, g);
      ASSERT_EQ(s, amax / 127.0f) << "token " << t << " head " << g;
      for (std::int64_t c = 0; c < D; ++c) {
        const int q = cache.row(START + t, g)[c];
        const int want = amax > 0 ? static_cast<int>(std::nearbyint(xr[c] * (127.0f / amax))) : 0;
        ASSERT_EQ(q, std::clamp(want, -127, 127)) << "token " << t << " head " << g << " column " << c;
        ASSERT_LE(std::abs(double(xr[c]) - double(q) * s), 0.5 * s * (1 + 1e-5)) << t << " " << g << " " << c;
      }
    }
  // Rows of other tokens are untouched.
  for (std::int64_t g = 0; g < HKV; ++g)
    for (const std::int64_t j : {std::int64_t{0}, std::int64_t{1}})
      for (std::int64_t b = 0; b < D + 4; ++b) ASSERT_EQ(cache.row(j, g)[b], 0x55);
}

TEST_P(Kernels, KvI8QueriesFollowTheQuantizationRule) {
  // kv_cache_i8.hpp: qq = clamp(nearbyint(q · 32767 / amax), ±32767), sq = amax / 32767,
  // a NaN to 0, a zero row to zeros with scale 0.
  std::vector<float> q = random(131, 2.0f);
  q[3] = std::numeric_limits<float>::quiet_NaN();
  float others = 0;
  for (const float v : q) others = std::max(others, std::abs(v));
  q[7] = -3 * others;  // the largest magnitude, negative
  std::vector<std::int16_t> qq(q.size());
  const float sq = kv_i8_quantize_query(q.data(), static_cast<std::int64_t>(q.size()), qq.data());
  float amax = 0;
  for (const float v : q)
    if (!std::isnan(v)) amax = std::max(amax, std::abs(v));
  EXPECT_EQ(sq, amax / 32767.0f);
  EXPECT_EQ(qq[3], 0);
  EXPECT_EQ(qq[7], -32767);
  for (std::size_t c = 0; c < q.size(); ++c) {
    if (c == 3) continue;
    const long want = std::lrint(q[c] * (32767.0f / amax));  // the default rounding: half to even
    ASSERT_EQ(qq[c], std::clamp(want, -32767L, 32767L)) << "column " << c;
    // Half a step, plus the roundings of 32767 / amax and of q times it (up to
    // 32767 · 2^-23 of a step) and of sq itself.
    ASSERT_LE(std::abs(double(q[c]) - double(qq[c]) * sq), (0.5 + 3 * 32767 * 0x1p-24) * sq * (1 + 0x1p-23))
        << "column " << c;
  }
  std::vector<float> zero(9, 0.0f);
  std::vector<std::int16_t> zq(zero.size(), 7);
  EXPECT_EQ(kv_i8_quantize_query(zero.data(), 9, zq.data()), 0.0f);
  for (const std::int16_t v : zq) EXPECT_EQ(v, 0);
}

TEST_P(Kernels, AttentionOverAnI8CacheRejectsHeadsPastTheIntegerBound) {
  const std::int64_t D = kKvI8MaxHeadDim + 4;
  std::vector<float> q(static_cast<std::size_t>(D), 1.0f), out(q.size());
  I8Cache kc(1, 2, D), vc(1, 2, D);
  kv_i8_write(q.data(), 1, 1, D, 2, 0, kc.bytes.data());
  kv_i8_write(q.data(), 1, 1, D, 2, 0, vc.bytes.data());
  try {
    k().attention_i8kv(q.data(), kc.bytes.data(), vc.bytes.data(), 1, 1, 2, 1, 1, D, 0, 0.1f, out.data());
    FAIL() << "no error for head size " << D;
  } catch (const qhx::Error& e) {
    EXPECT_NE(std::string(e.what()).find("head size 516 exceeds 512"), std::string::npos) << e.what();
  }
}

TEST_P(Kernels, AttentionOverAnI8Cache) {
  // {T, N, HQ, HKV, D, start}: decode, a speculation step, prefill chunks; head_dim
  // of 4, 8 and 16 vectors and an odd one; the cache holds more tokens than are
  // visible; passes long enough to read in several streams, and queries on both
  // sides of where that starts (1,024 visible rows).
  for (const auto& [T, N, HQ, HKV, D, start] : {std::array{1, 50, 4, 2, 128, 49},
                                                {5, 21, 6, 2, 64, 16},
                                                {3, 7, 4, 2, 5, 4},
                                                {2, 30, 4, 2, 256, 28},
                                                {17, 40, 4, 1, 128, 23},
                                                {1, 300, 2, 2, 64, 299},
                                                {3, 1030, 4, 2, 128, 1021},
                                                {2, 1101, 4, 2, 64, 1099}}) {
    SCOPED_TRACE("T " + std::to_string(T) + " N " + std::to_string(N) + " D " + std::to_string(D));
    const std::int64_t ctx = N + 3;
    const auto q = random(static_cast<std::size_t>(T * HQ * D));
    const auto kx = random(static_cast<std::size_t>(N * HKV * D)), vx = random(static_cast<std::size_t>(N * HKV * D));
    I8Cache kc(HKV, ctx, D), vc(HKV, ctx, D);
    kv_i8_write(kx.data(), N, HKV, D, ctx, 0, kc.bytes.data());
    kv_i8_write(vx.data(), N, HKV, D, ctx, 0, vc.bytes.data());
    const float scale = 0.3f;
    std::vector<float> out(static_cast<std::size_t>(T * HQ * D));
    k().attention_i8kv(q.data(), kc.bytes.data(), vc.bytes.data(), T, N, ctx, HQ, HKV, D, start, scale, out.data());
    // The queries on their 16-bit grid (KvI8QueriesFollowTheQuantizationRule), as the scores use them.
    std::vector<float> q_hat(q.size());
    for (int r = 0; r < T * HQ; ++r) {
      std::vector<std::int16_t> qq(static_cast<std::size_t>(D));
      const float sq = kv_i8_quantize_query(q.data() + r * D, D, qq.data());
      for (int c = 0; c < D; ++c) q_hat[static_cast<std::size_t>(r * D + c)] = static_cast<float>(double(qq[c]) * sq);
    }
    // 1. The results of attention of the gridded queries on the values the cache stands for.
    const auto want = causal_attention_want(
        q_hat, T, HQ, HKV, D, start, scale, [&](int j, int g, int c) { return kc.value(j, g, c); },
        [&](int j, int g, int c) { return vc.value(j, g, c); });
    expect_close(out, want, 1e-5, 1e-5);
    // 2. The quantization's error bound against the exact queries, keys and values:
    // the grids move score j by e_j = scale · |Σ_c (q_c · k_jc − q̂_c · k̂_jc)|, so
    // each softmax weight by a factor within e^(±2E), E = max_j e_j; a value's
    // error is at most its row's s_v / 2:
    //   |out − exact| <= (e^(2E) − 1) · max |v| + max_j s_vj / 2.
    const auto exact = causal_attention_want(
        q, T, HQ, HKV, D, start, scale,
        [&, hkv = HKV, d = D](int j, int g, int c) { return double(kx[(j * hkv + g) * d + c]); },
        [&, hkv = HKV, d = D](int j, int g, int c) { return double(vx[(j * hkv + g) * d + c]); });
    double vmax = 0, sv_max = 0;
    for (const float v : vx) vmax = std::max(vmax, double(std::abs(v)));
    for (int j = 0; j < N; ++j)
      for (int g = 0; g < HKV; ++g) sv_max = std::max(sv_max, double(vc.scale(j, g)));
    for (int i = 0; i < T; ++i)
      for (int h = 0; h < HQ; ++h) {
        const int g = h / (HQ / HKV);
        double E = 0;
        for (int j = 0; j <= start + i; ++j) {
          double e = 0;
          for (int c = 0; c < D; ++c)
            e += double(q[(i * HQ + h) * D + c]) * double(kx[(j * HKV + g) * D + c]) -
                 double(q_hat[(i * HQ + h) * D + c]) * kc.value(j, g, c);
          E = std::max(E, scale * std::abs(e));
        }
        const double bound = std::expm1(2 * E) * vmax + sv_max / 2 + 1e-5;
        for (int c = 0; c < D; ++c) {
          const std::size_t at = static_cast<std::size_t>((i * HQ + h) * D + c);
          ASSERT_LE(std::abs(out[at] - exact[at]), bound) << "query " << i << " head " << h << " element " << c;
        }
      }
    // 3. Each query alone gives its row of the call bit for bit (chunked prefill == one pass).
    for (int i = 0; i < T; ++i) {
      std::vector<float> one(static_cast<std::size_t>(HQ * D));
      k().attention_i8kv(q.data() + i * HQ * D, kc.bytes.data(), vc.bytes.data(), 1, N, ctx, HQ, HKV, D, start + i,
                         scale, one.data());
      for (int c = 0; c < HQ * D; ++c) ASSERT_EQ(one[c], out[i * HQ * D + c]) << "query " << i << " element " << c;
    }
  }
}

TEST_P(Kernels, ToF16RoundsAsHalfHpp) {
  // Every rounding case: ties both ways, subnormal results, overflow to infinity,
  // signed zeros, NaN, and random values over the whole f16 range.
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -2.5f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          -1e9f,
                          0x1p-24f,
                          0x1p-25f,
                          0x1.8p-25f,
                          0x1p-14f,
                          0x1.ffcp-15f,
                          1.0f + 0x1p-11f,
                          1.0f + 0x3p-11f,
                          3.0e-8f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          0x1p-130f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> e(-26.0f, 17.0f);
  for (int i = 0; i < 4099; ++i) x.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(e(rng)));
  std::vector<std::uint16_t> y(x.size());
  k().to_f16(x.data(), static_cast<std::int64_t>(x.size()), y.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_EQ(y[i] & 0x7C00u, 0x7C00u) << i;  // a NaN stays a NaN (its payload may differ)
      EXPECT_NE(y[i] & 0x3FFu, 0u) << i;
      continue;
    }
    ASSERT_EQ(y[i], f32_to_f16(x[i])) << "x " << x[i] << " at " << i;
  }
}

TEST_P(Kernels, GatherRows) {
  std::vector<float> table = random(6 * 4);
  const std::int32_t ids[] = {5, 0, 5, 2};
  std::vector<float> out(4 * 4);
  k().gather_rows(WeightMatrix{.data = table.data(), .dtype = DType::F32, .rows = 6, .cols = 4}, ids, 4, out.data());
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(out[i * 4 + c], table[ids[i] * 4 + c]);
}

INSTANTIATE_TEST_SUITE_P(AllKernelSets, Kernels, ::testing::ValuesIn(kernel_sets()),
                         [](const ::testing::TestParamInfo<const KernelSet*>& p) {
                           return std::string(p.param->name);
                         });

}  // namespace
}  // namespace qhx::cpu
