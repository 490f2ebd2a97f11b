// Stored panels (stored_panels.hpp): the building block of bundle format
// version 2. A matrix packed by the exporter and viewed in place must give the
// same products, bit for bit, as pack_i8 of its rows, with no copy (the packed
// data pointer lies inside the stored buffer); unpacking gives the rows back;
// bad stored arrays are errors naming where they came from.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/stored_panels.hpp"
#include "backends/cpu/stored_panels_file.hpp"
#include "formats/bundle_writer.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/safetensors.hpp"
#include "test_support.hpp"

namespace qhx::cpu {
namespace {

// A 64-byte aligned copy of the stored arrays, as a mapped file would hold them.
struct Stored {
  std::shared_ptr<std::byte> buf;
  StoredPanels s;
};

std::size_t up64(std::size_t n) { return (n + 63) / 64 * 64; }

Stored store(const std::vector<std::int8_t>& pn, const std::vector<std::int32_t>& rs, const std::vector<float>& sc) {
  const std::size_t a = up64(pn.size()), b = up64(rs.size() * 4), c = up64(sc.size() * 4);
  Stored out;
  out.buf = std::shared_ptr<std::byte>(static_cast<std::byte*>(std::aligned_alloc(64, a + b + c + 64)), std::free);
  std::byte* base = out.buf.get();
  std::memcpy(base, pn.data(), pn.size());
  std::memcpy(base + a, rs.data(), rs.size() * 4);
  std::memcpy(base + a + b, sc.data(), sc.size() * 4);
  out.s = {base, pn.size(), base + a, rs.size() * 4, base + a + b, sc.size() * 4};
  return out;
}

struct Matrix {
  std::int64_t rows, cols;
  std::vector<std::int8_t> q;
  std::vector<float> sw;
};

Matrix random_matrix(std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
  std::uniform_int_distribution<int> qd(-127, 127);
  std::uniform_real_distribution<float> sd(0.001f, 0.05f);
  Matrix m{rows, cols, std::vector<std::int8_t>(static_cast<std::size_t>(rows * cols)),
           std::vector<float>(static_cast<std::size_t>(rows))};
  for (auto& v : m.q) v = static_cast<std::int8_t>(qd(rng));
  for (auto& v : m.sw) v = sd(rng);
  return m;
}

Stored pack(const Matrix& m) {
  std::vector<std::int8_t> pn;
  std::vector<std::int32_t> rs;
  std::vector<float> sc;
  pack_stored_panels(m.q.data(), m.sw.data(), m.rows, m.cols, pn, rs, sc);
  return store(pn, rs, sc);
}

const std::int64_t kShapes[][2] = {{1, 1}, {16, 64}, {17, 3}, {33, 7}, {50, 130}, {100, 2048}};

TEST(StoredPanels, ViewInPlaceMatchesRepackBitForBit) {
  std::mt19937 rng(17);
  for (const Int8Kernel* kernel : int8_kernels_available()) {
    if (kernel->panel != kStoredPanel) continue;  // NEON (P = 4) repacks; covered below
    for (const auto& shape : kShapes) {
      const Matrix m = random_matrix(shape[0], shape[1], rng);
      const Stored st = pack(m);
      const auto viewed = view_stored_panels(st.s, m.rows, m.cols, *kernel, st.buf, "test");
      // No copy: the kernel reads the stored bytes.
      EXPECT_EQ(static_cast<const void*>(viewed->data.get()), st.s.panels);
      EXPECT_EQ(static_cast<const void*>(viewed->row_sums.get()), st.s.row_sums);
      EXPECT_EQ(static_cast<const void*>(viewed->scales.get()), st.s.scales);
      const auto repacked = pack_i8(WeightMatrix::w8(m.q.data(), m.sw.data(), m.rows, m.cols), *kernel);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (std::int64_t rows_x : {1, 5}) {
        std::vector<float> x(static_cast<std::size_t>(rows_x * m.cols));
        for (auto& v : x) v = nd(rng);
        std::vector<float> a(static_cast<std::size_t>(rows_x * m.rows)), b(a.size());
        linear_i8_packed(x.data(), rows_x, *viewed, nullptr, a.data());
        linear_i8_packed(x.data(), rows_x, *repacked, nullptr, b.data());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << kernel->name << " [" << m.rows << ", " << m.cols << "] m=" << rows_x;
      }
    }
  }
}

TEST(StoredPanels, ViewKeepsOwnerAlive) {
  std::mt19937 rng(3);
  const Matrix m = random_matrix(20, 12, rng);
  Stored st = pack(m);
  std::weak_ptr<std::byte> weak = st.buf;
  auto viewed = view_stored_panels(st.s, m.rows, m.cols, int8_kernel_portable(), st.buf, "test");
  st.buf.reset();
  EXPECT_FALSE(weak.expired());
  viewed.reset();
  EXPECT_TRUE(weak.expired());
}

TEST(StoredPanels, UnpackGivesTheRowsBack) {
  std::mt19937 rng(5);
  for (const auto& shape : kShapes) {
    const Matrix m = random_matrix(shape[0], shape[1], rng);
    const Stored st = pack(m);
    std::vector<std::int8_t> q;
    std::vector<float> sw;
    unpack_w8_panels(st.s, m.rows, m.cols, "test", q, sw);
    EXPECT_EQ(q, m.q);
    EXPECT_EQ(sw, m.sw);
  }
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL() << "no error; expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(StoredPanels, BadStoredArraysAreErrorsNamingWhere) {
  std::mt19937 rng(9);
  const Matrix m = random_matrix(20, 12, rng);
  const std::string where = "b/llm.bin: tensor 'x.weight.panels'";
  const Int8Kernel& k = int8_kernel_portable();
  {  // truncated panels
    Stored st = pack(m);
    st.s.panels_bytes -= 64;
    expect_error([&] { view_stored_panels(st.s, m.rows, m.cols, k, st.buf, where); }, where);
    expect_error([&] { view_stored_panels(st.s, m.rows, m.cols, k, st.buf, where); }, "panels hold");
  }
  {  // wrong shape: the arrays of [20, 12] are not those of [40, 12]
    Stored st = pack(m);
    expect_error([&] { view_stored_panels(st.s, 40, 12, k, st.buf, where); }, where);
  }
  {  // misaligned
    Stored st = pack(m);
    st.s.scales = static_cast<const std::byte*>(st.s.scales) + 4;
    expect_error([&] { view_stored_panels(st.s, m.rows, m.cols, k, st.buf, where); }, "64-byte aligned");
  }
  {  // a kernel of another panel height cannot use them in place
    const Int8Kernel p4{"p4", 4, 0, k.gemm, k.gemm_w4, k.quantize, k.softmax_q8};
    Stored st = pack(m);
    expect_error([&] { view_stored_panels(st.s, m.rows, m.cols, p4, st.buf, where); }, "4-row panels");
  }
  {  // corrupt row sum
    Stored st = pack(m);
    static_cast<std::int32_t*>(const_cast<void*>(st.s.row_sums))[3] += 1;
    std::vector<std::int8_t> q;
    std::vector<float> sw;
    expect_error([&] { unpack_w8_panels(st.s, m.rows, m.cols, where, q, sw); }, "row sum");
  }
  {  // nonzero padding (row 20 of the 32 padded ones)
    Stored st = pack(m);
    const std::int64_t k4 = 3;
    static_cast<std::int8_t*>(const_cast<void*>(st.s.panels))[(1 * k4) * 16 * 4 + 4 * 4] = 1;
    std::vector<std::int8_t> q;
    std::vector<float> sw;
    expect_error([&] { unpack_w8_panels(st.s, m.rows, m.cols, where, q, sw); }, "not zero past");
  }
}

// From a real file: BundleWriter aligns the tensors, Checkpoint maps them, and
// the view's arrays lie inside the mapping (no copy) and give the repack's products.
TEST(StoredPanels, MappedFromABundleFileWithNoCopy) {
  std::mt19937 rng(11);
  const Matrix m = random_matrix(40, 100, rng);
  std::vector<std::int8_t> pn;
  std::vector<std::int32_t> rs;
  std::vector<float> sc;
  pack_stored_panels(m.q.data(), m.sw.data(), m.rows, m.cols, pn, rs, sc);
  test::TempDir dir;
  const auto path = dir.path() / "m.bin";
  {
    BundleWriter w(path, {{"role", "test"}, {"weights", "w8"}});
    w.add("x.weight.panels", DType::I8, {3, 25, 16, 4}, std::as_bytes(std::span(pn)));
    w.add("x.weight.row_sums", DType::I32, {48}, std::as_bytes(std::span(rs)));
    w.add("x.weight.scale", DType::F32, {48}, std::as_bytes(std::span(sc)));
    w.add("y.weight", DType::I8, {1, 4}, std::as_bytes(std::span(pn).first(4)));
    w.finish();
  }
  const auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(path));
  EXPECT_FALSE(find_stored_panels(*ckpt, path.string(), "y.weight", 1, 4).has_value());  // row-major
  const auto found = find_stored_panels(*ckpt, path.string(), "x.weight", m.rows, m.cols);
  ASSERT_TRUE(found.has_value());
  const TensorView& t = ckpt->get("x.weight.panels");
  const auto viewed = view_stored_panels(*found, m.rows, m.cols, int8_kernel_best(), ckpt, path.string());
  EXPECT_EQ(static_cast<const void*>(viewed->data.get()), static_cast<const void*>(t.data));
  const auto repacked = pack_i8(WeightMatrix::w8(m.q.data(), m.sw.data(), m.rows, m.cols), int8_kernel_best());
  std::vector<float> x(static_cast<std::size_t>(3 * m.cols));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(rng);
  std::vector<float> a(static_cast<std::size_t>(3 * m.rows)), b(a.size());
  linear_i8_packed(x.data(), 3, *viewed, nullptr, a.data());
  linear_i8_packed(x.data(), 3, *repacked, nullptr, b.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  // The shape the config asks for must be the stored one.
  expect_error([&] { find_stored_panels(*ckpt, path.string(), "x.weight", 80, m.cols); }, "m.bin: tensor x.weight.panels");
}

}  // namespace
}  // namespace qhx::cpu

