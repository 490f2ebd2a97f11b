// The int8 path of linear (int8_matmul.hpp): the reference kernel set against
// the contract written out here independently, then every packed
// implementation this CPU runs — and each kernel set's linear on a prepared
// matrix — against the reference, bit for bit (integer sums are exact and the
// float epilogue is the same two roundings everywhere).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "backends/cpu/kernels_fast.hpp"
#include "backends/cpu/kernels_ref.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "block_step_check.hpp"

namespace qhx::cpu {
namespace {

struct Case {
  int m, n, k;
};

// The last six are AMX tile shapes (columns a multiple of 64, 16 rows or more):
// 2 x 2, 2 x 1, 1 x 2 and 1 x 1 blocks of 16 x 16 tiles, partial panels, rows
// past the last whole 16 (which take the VNNI code), a long sum, and more rows
// than linear_then's blocks of 64.
const Case kCases[] = {{1, 1, 1},     {1, 16, 64},    {2, 17, 3},     {3, 33, 7},    {5, 50, 130}, {8, 48, 96},
                       {9, 49, 101},  {17, 5, 256},   {1, 100, 2048}, {20, 70, 36},  {16, 16, 64}, {48, 40, 128},
                       {37, 33, 192}, {64, 64, 1024}, {33, 100, 320}, {130, 50, 192}};

struct Data {
  std::vector<float> x, b, sw;
  std::vector<std::int8_t> qw;
  WeightMatrix w;
};

Data make(const Case& c, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> qd(-127, 127);
  Data d;
  d.x.resize(static_cast<std::size_t>(c.m * c.k));
  for (auto& v : d.x) v = nd(rng) * 3.0f;
  if (c.m > 2) std::fill(d.x.begin() + c.k, d.x.begin() + 2 * c.k, 0.0f);  // an all-zero row: scale 0
  d.b.resize(static_cast<std::size_t>(c.n));
  for (auto& v : d.b) v = nd(rng);
  d.sw.resize(static_cast<std::size_t>(c.n));
  for (auto& v : d.sw) v = std::abs(nd(rng)) * 0.01f + 1e-4f;
  d.qw.resize(static_cast<std::size_t>(c.n * c.k));
  for (auto& v : d.qw) v = static_cast<std::int8_t>(qd(rng));
  d.qw[0] = -127;  // the extremes, so the x86 offset compensation is exercised at its limits
  d.qw.back() = 127;
  d.w = WeightMatrix::w8(d.qw.data(), d.sw.data(), c.n, c.k);
  d.w.int8_activations = true;
  return d;
}

// The contract of int8_matmul.hpp, written from its text.
// The contract's activation quantization of one row of k: q (resized to k) and the returned scale.
float contract_quantize(const float* x, int k, std::vector<int>& q) {
  float amax = 0.0f;
  for (int t = 0; t < k; ++t) amax = std::max(amax, std::abs(x[t]));
  q.assign(static_cast<std::size_t>(k), 0);
  for (int t = 0; t < k && amax > 0.0f; ++t)
    q[t] = static_cast<int>(std::clamp(std::nearbyint(x[t] * (127.0f / amax)), -127.0f, 127.0f));
  return amax / 127.0f;
}

std::vector<float> contract(const Data& d, const Case& c, bool bias) {
  std::vector<float> y(static_cast<std::size_t>(c.m * c.n));
  for (int i = 0; i < c.m; ++i) {
    std::vector<int> q;
    const float sx = contract_quantize(d.x.data() + i * c.k, c.k, q);
    for (int r = 0; r < c.n; ++r) {
      std::int64_t acc = 0;
      for (int t = 0; t < c.k; ++t) acc += q[t] * d.qw[r * c.k + t];
      y[i * c.n + r] = std::fma(static_cast<float>(acc), sx * d.sw[r], bias ? d.b[r] : 0.0f);
    }
  }
  return y;
}

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " at " << i << ": " << got[i] << " vs " << want[i];
}

// Every packed kernel this CPU runs, with and without bias, equals the reference bit for bit.
void expect_packed_kernels_match(const WeightMatrix& w, const std::vector<float>& x, const std::vector<float>& b,
                                 const Case& c, const std::string& what) {
  for (const bool bias : {true, false}) {
    std::vector<float> want(static_cast<std::size_t>(c.m * c.n));
    ref::linear(x.data(), c.m, w, bias ? b.data() : nullptr, want.data());
    for (const Int8Kernel* k : int8_kernels_available()) {
      const auto packed = pack_i8(w, *k);
      std::vector<float> y(want.size(), std::numeric_limits<float>::quiet_NaN());
      linear_i8_packed(x.data(), c.m, *packed, bias ? b.data() : nullptr, y.data());
      const std::string name = std::string(k->name) + " " + what + " " + std::to_string(c.m) + "x" +
                               std::to_string(c.n) + "x" + std::to_string(c.k) + " threads " +
                               std::to_string(num_threads());
      expect_bitwise(y, want, name);
      expect_step_sees_final_blocks(
          c.m, c.n, want,
          [&](float* out, BlockStep step) {
            linear_i8_packed(x.data(), c.m, *packed, bias ? b.data() : nullptr, out, &step);
          },
          name + " with a step");
    }
  }
}

// Each kernel set's linear on a matrix prepared by its own pack equals the reference.
void expect_kernel_sets_match(WeightMatrix w, const std::vector<float>& x, const std::vector<float>& b, const Case& c,
                              const std::string& what) {
  std::vector<float> want(static_cast<std::size_t>(c.m * c.n));
  ref::linear(x.data(), c.m, w, b.data(), want.data());
  for (const KernelSet* ks : {&reference_kernels(), &fast_kernels()}) {
    w.packed = ks->pack(w);
    std::vector<float> y(want.size());
    ks->linear(x.data(), c.m, w, b.data(), y.data());
    expect_bitwise(y, want, std::string(ks->name) + " " + what);
    expect_step_sees_final_blocks(
        c.m, c.n, want, [&](float* out, BlockStep step) { ks->linear_then(x.data(), c.m, w, b.data(), out, step); },
        std::string(ks->name) + " " + what + " linear_then");
  }
}

TEST(Int8Matmul, ReferenceFollowsTheContract) {
  std::mt19937 rng(7);
  for (const Case& c : kCases) {
    const Data d = make(c, rng);
    for (const bool bias : {true, false}) {
      std::vector<float> y(static_cast<std::size_t>(c.m * c.n));
      ref::linear(d.x.data(), c.m, d.w, bias ? d.b.data() : nullptr, y.data());
      expect_bitwise(y, contract(d, c, bias),
                     "reference " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k));
    }
  }
}

// Products at the largest magnitudes: every |q| = 127 with weights ±127 whose signs
// match (or oppose) the activations', so each pair of products is ±2 · 127² = ±32258,
// next to int16's limit (AVX2's vpmaddubsw saturates there), and each sum is
// ±16129 · k. Every kernel must still give the exact int32 sums.
TEST(Int8Matmul, ExtremeProductsDoNotSaturate) {
  const Case c{4, 20, 96};
  std::vector<float> x(static_cast<std::size_t>(c.m * c.k)), b(static_cast<std::size_t>(c.n), 0.5f);
  for (int i = 0; i < c.m; ++i)
    for (int t = 0; t < c.k; ++t)
      x[static_cast<std::size_t>(i * c.k + t)] = (i == 0 ? 1.0f : i == 1 ? -1.0f : (t % 2 == 0 ? 2.0f : -2.0f));
  std::vector<std::int8_t> qw(static_cast<std::size_t>(c.n * c.k));
  for (int r = 0; r < c.n; ++r)
    for (int t = 0; t < c.k; ++t)
      qw[static_cast<std::size_t>(r * c.k + t)] =
          static_cast<std::int8_t>(r % 2 == 0 ? 127 : (t % 2 == 0 ? 127 : -127));
  std::vector<float> sw(static_cast<std::size_t>(c.n), 1e-3f);
  WeightMatrix w = WeightMatrix::w8(qw.data(), sw.data(), c.n, c.k);
  w.int8_activations = true;
  std::vector<float> y(static_cast<std::size_t>(c.m * c.n));
  ref::linear(x.data(), c.m, w, nullptr, y.data());
  // The contract's own figures: sums of +16129 · 96 scaled back, and alternating terms that cancel exactly.
  EXPECT_NEAR(y[0], 127.0f * 96.0f * 1e-3f, 1e-4f);                   // x row 0 (all +1) · weight row 0 (all 127)
  EXPECT_EQ(y[1], 0.0f);                                              // · weight row 1 (±127 alternating)
  EXPECT_NEAR(y[2 * c.n + 1], 2.0f * 96.0f * 1e-3f * 127.0f, 1e-4f);  // x row 2 (±2 alternating) · weight row 1
  expect_packed_kernels_match(w, x, b, c, "extremes");
}

TEST(Int8Matmul, EveryPackedKernelEqualsTheReference) {
  std::mt19937 rng(11);
  ASSERT_GE(int8_kernels_available().size(), 1u);
  for (const int threads : {1, 2}) {
    set_threads(threads);
    for (const Case& c : kCases) {
      const Data d = make(c, rng);
      expect_packed_kernels_match(d.w, d.x, d.b, c, "w8");
    }
  }
  set_threads(0);
}

TEST(Int8Matmul, KernelSetsRunPreparedMatrices) {
  std::mt19937 rng(13);
  for (const Case& c : kCases) {
    const Data d = make(c, rng);
    expect_kernel_sets_match(d.w, d.x, d.b, c, "w8");
  }
}

TEST(Int8Matmul, QuantizationRoundsHalfToEvenAndPads) {
  // amax 127 makes the multiplier exactly 1, so the halves are exact ties.
  const float x[] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -127.0f};
  std::uint8_t q[8];
  float s = -1.0f;
  quantize_rows_q8(x, 1, 7, 8, 0, q, &s);
  const int want[] = {127, 0, 2, 2, 0, -2, -127, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(static_cast<std::int8_t>(q[i]), want[i]) << i;
  EXPECT_EQ(s, 1.0f);
  quantize_rows_q8(x, 1, 7, 8, 128, q, &s);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(static_cast<int>(q[i]), want[i] + 128) << i;
}

// ---- block-scaled matrices on the int8 path: w4, and w8 with block scales ----

struct DataBlocks {
  std::vector<float> x, b, sw;       // sw [n, k / 32]
  std::vector<std::uint8_t> packed;  // w4: [n, k / 2]: column 2j low nibble, 2j + 1 high, two's complement
  std::vector<std::int8_t> q8;       // w8: [n, k]
  std::vector<int> qw;               // [n, k] the same values, for the contract
  WeightMatrix w;
};

// bits 4 (w4) or 8 (w8 with block scales). bf16_scales: every scale a bf16 value,
// as qhx_export writes them (packed in 16 bits); otherwise arbitrary f32 scales
// (older bundles: packed in 32 bits).
DataBlocks make_blocks(const Case& c, std::mt19937& rng, bool bf16_scales, int bits = 4) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int lo = bits == 4 ? -8 : -127, hi = bits == 4 ? 7 : 127;
  std::uniform_int_distribution<int> qd(lo, hi);
  DataBlocks d;
  d.x.resize(static_cast<std::size_t>(c.m * c.k));
  for (auto& v : d.x) v = nd(rng) * 3.0f;
  if (c.k >= 64) {  // an outlier channel, and an all-zero block (scale 0) in another row
    d.x[5] = 400.0f;
    if (c.m > 1) std::fill(d.x.begin() + c.k + 32, d.x.begin() + c.k + 64, 0.0f);
  }
  d.b.resize(static_cast<std::size_t>(c.n));
  for (auto& v : d.b) v = nd(rng);
  d.sw.resize(static_cast<std::size_t>(c.n * c.k / 32));
  for (auto& v : d.sw) v = std::abs(nd(rng)) * 0.1f + 1e-3f;
  if (bf16_scales)
    for (auto& v : d.sw) v = bf16_to_f32(f32_to_bf16(v));
  else
    d.sw[0] = 0.1f + 0x1p-20f;  // not a bf16 value, whatever the draw
  d.qw.resize(static_cast<std::size_t>(c.n * c.k));
  for (auto& v : d.qw) v = qd(rng);
  d.qw[0] = lo;  // the extremes of the range
  d.qw.back() = hi;
  if (bits == 8) {
    d.q8.assign(d.qw.begin(), d.qw.end());
    d.w = WeightMatrix::w8_blocks(d.q8.data(), d.sw.data(), c.n, c.k);
  } else {
    d.packed.assign(static_cast<std::size_t>(c.n * c.k / 2), 0);
    for (int r = 0; r < c.n; ++r)
      for (int t = 0; t < c.k; ++t)
        d.packed[static_cast<std::size_t>(r * c.k / 2 + t / 2)] |=
            static_cast<std::uint8_t>((d.qw[r * c.k + t] & 0xF) << (4 * (t % 2)));
    d.w = WeightMatrix::w4(d.packed.data(), d.sw.data(), c.n, c.k);
  }
  d.w.int8_activations = true;
  return d;
}

// The block contract of int8_matmul.hpp, written from its text: activations
// quantized per block of 32 columns, sums exact per block, scaled in order.
std::vector<float> contract_blocks(const DataBlocks& d, const Case& c, bool bias) {
  std::vector<float> y(static_cast<std::size_t>(c.m * c.n));
  const int groups = c.k / 32;
  for (int i = 0; i < c.m; ++i) {
    std::vector<std::vector<int>> q(static_cast<std::size_t>(groups));
    std::vector<float> sx(static_cast<std::size_t>(groups));
    for (int g = 0; g < groups; ++g) sx[g] = contract_quantize(d.x.data() + i * c.k + 32 * g, 32, q[g]);
    for (int r = 0; r < c.n; ++r) {
      float acc = 0.0f;
      for (int g = 0; g < groups; ++g) {
        int isum = 0;
        for (int t = 0; t < 32; ++t) isum += q[g][t] * d.qw[r * c.k + 32 * g + t];
        acc = std::fma(static_cast<float>(isum), sx[g] * d.sw[r * groups + g], acc);
      }
      y[i * c.n + r] = acc + (bias ? d.b[r] : 0.0f);
    }
  }
  return y;
}

const Case kBlockCases[] = {{1, 1, 32},   {1, 16, 64},  {3, 33, 32},    {5, 50, 128}, {8, 48, 96},
                            {9, 49, 160}, {17, 5, 256}, {1, 100, 2048}, {4, 70, 64},  {70, 40, 64}};

std::string block_name(int bits, bool bf16) {
  return std::string(bits == 4 ? "w4" : "w8 (block scales)") + (bf16 ? " bf16 scales" : " f32 scales");
}

TEST(Int8MatmulBlocks, ReferenceFollowsTheContract) {
  std::mt19937 rng(23);
  for (const int bits : {4, 8})
    for (const Case& c : kBlockCases) {
      const DataBlocks d = make_blocks(c, rng, false, bits);
      for (const bool bias : {true, false}) {
        std::vector<float> y(static_cast<std::size_t>(c.m * c.n));
        ref::linear(d.x.data(), c.m, d.w, bias ? d.b.data() : nullptr, y.data());
        expect_bitwise(y, contract_blocks(d, c, bias),
                       "reference " + block_name(bits, false) + " " + std::to_string(c.m) + "x" + std::to_string(c.n) +
                           "x" + std::to_string(c.k));
      }
    }
}

TEST(Int8MatmulBlocks, EveryPackedKernelEqualsTheReference) {
  std::mt19937 rng(29);
  for (const int threads : {1, 2}) {
    set_threads(threads);
    for (const int bits : {4, 8})
      for (const Case& c : kBlockCases)
        for (const bool bf16 : {true, false}) {
          const DataBlocks d = make_blocks(c, rng, bf16, bits);
          expect_packed_kernels_match(d.w, d.x, d.b, c, block_name(bits, bf16));
        }
  }
  set_threads(0);
}

TEST(Int8MatmulBlocks, KernelSetsRunPreparedMatrices) {
  std::mt19937 rng(31);
  for (const int bits : {4, 8})
    for (const Case& c : kBlockCases)
      for (const bool bf16 : {true, false}) {
        const DataBlocks d = make_blocks(c, rng, bf16, bits);
        expect_kernel_sets_match(d.w, d.x, d.b, c, block_name(bits, bf16));
      }
}

TEST(Int8MatmulBlocks, ScalesArePackedIn16BitsExactlyWhenAllAreBf16) {
  std::mt19937 rng(37);
  const Case c{1, 33, 64};
  for (const int bits : {4, 8})
    for (const Int8Kernel* k : int8_kernels_available())
      for (const bool bf16 : {true, false}) {
        const DataBlocks d = make_blocks(c, rng, bf16, bits);
        const auto packed = pack_i8(d.w, *k);
        EXPECT_EQ(packed->scales_bf16 != nullptr, bf16) << k->name << " " << bits;
        EXPECT_EQ(packed->scales != nullptr, !bf16) << k->name << " " << bits;
      }
}

// One loud channel costs a per-row activation scale the resolution of every other
// column; with block scales only its own block's. The same w8 weights, per-row and
// per-block activation scales, against the f32 product (the weights' quantization is
// not in question: both read the same q · 0.05).
TEST(Int8MatmulBlocks, BlockScalesSurviveAnOutlierChannel) {
  std::mt19937 rng(41);
  const Case c{4, 64, 256};
  DataBlocks d = make_blocks(c, rng, true, 8);
  for (int i = 0; i < c.m; ++i) d.x[static_cast<std::size_t>(i * c.k + 7)] = 2000.0f;  // one channel, every row
  // Its block's weights are zero, so what is lost is the other columns' resolution alone.
  for (int r = 0; r < c.n; ++r) std::fill_n(d.q8.begin() + r * c.k, 32, std::int8_t{0});
  std::vector<float> row_scales(static_cast<std::size_t>(c.n), 0.05f);
  std::fill(d.sw.begin(), d.sw.end(), 0.05f);
  WeightMatrix per_row = WeightMatrix::w8(d.q8.data(), row_scales.data(), c.n, c.k);
  per_row.int8_activations = true;
  WeightMatrix f32 = d.w;
  f32.int8_activations = false;
  std::vector<float> exact(static_cast<std::size_t>(c.m * c.n)), blocks(exact.size()), rows(exact.size());
  ref::linear(d.x.data(), c.m, f32, nullptr, exact.data());
  ref::linear(d.x.data(), c.m, d.w, nullptr, blocks.data());
  ref::linear(d.x.data(), c.m, per_row, nullptr, rows.data());
  double e_blocks = 0.0, e_rows = 0.0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    e_blocks += std::abs(blocks[i] - exact[i]);
    e_rows += std::abs(rows[i] - exact[i]);
  }
  EXPECT_LT(e_blocks * 10.0, e_rows) << "block " << e_blocks << ", row " << e_rows;
}

TEST(Int8Matmul, EveryQuantizerEqualsTheReference) {
  // Rows of odd lengths with the awkward values: exact ties, zeros, ±inf, NaN, denormals.
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const int k : {1, 7, 16, 33, 100}) {
    const int m = 6, ldq = (k + 63) / 64 * 64;
    std::vector<float> x(static_cast<std::size_t>(m * k));
    for (auto& v : x) v = nd(rng);
    for (int c = 0; c < k; ++c) x[c] = static_cast<float>(c % 5) * 0.5f * (c % 2 ? -1.0f : 1.0f);  // ties at amax 2
    std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);
    x[2 * k] = inf;
    x[3 * k + k / 2] = nan;
    x[4 * k] = -inf;
    x[5 * k] = 1e-40f;
    for (const Int8Kernel* kern : int8_kernels_available()) {
      std::vector<std::uint8_t> want(static_cast<std::size_t>(m * ldq)), got(want.size(), 0xAB);
      std::vector<float> ws(static_cast<std::size_t>(m)), gs(ws.size());
      quantize_rows_q8(x.data(), m, k, ldq, kern->offset, want.data(), ws.data());
      kern->quantize(x.data(), m, k, ldq, kern->offset, got.data(), gs.data());
      EXPECT_EQ(got, want) << kern->name << " k " << k;
      for (int i = 0; i < m; ++i)
        EXPECT_EQ(std::memcmp(&gs[i], &ws[i], 4), 0) << kern->name << " k " << k << " row " << i;
    }
  }
}

TEST(Int8Matmul, PackingRejectsWhatItCannotRun) {
  std::vector<float> f(4), s_for_w4(1, 1.0f);
  const WeightMatrix wf{.data = f.data(), .dtype = DType::F32, .rows = 2, .cols = 2};
  EXPECT_THROW(pack_i8(wf, int8_kernel_portable()), std::exception);
  std::vector<std::uint8_t> nib(8);
  const WeightMatrix w4_odd = WeightMatrix::w4(nib.data(), s_for_w4.data(), 1, 16);  // 16 columns: not a w4 group
  EXPECT_THROW(pack_i8(w4_odd, int8_kernel_portable()), std::exception);
  std::vector<std::int8_t> q16(16);
  const WeightMatrix w8b_odd = WeightMatrix::w8_blocks(q16.data(), s_for_w4.data(), 1, 16);  // not a whole block
  EXPECT_THROW(pack_i8(w8b_odd, int8_kernel_portable()), std::exception);
  std::vector<std::int8_t> q(2);
  std::vector<float> s(1, 1.0f);
  const WeightMatrix wide = WeightMatrix::w8(q.data(), s.data(), 1, kInt8MaxCols + 1);
  EXPECT_THROW(pack_i8(wide, int8_kernel_portable()), std::exception);
}

}  // namespace
}  // namespace qhx::cpu
