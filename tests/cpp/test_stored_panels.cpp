// Stored panels (stored_panels.hpp): bundle format version 2. A matrix packed by the exporter and viewed in place must give the
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

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/int8_matmul.hpp"
#include "backends/cpu/kernel_plan.hpp"
#include "backends/cpu/stored_panels.hpp"
#include "backends/cpu/stored_panels_file.hpp"
#include "export/bundle_writer.hpp"
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
    const Int8Kernel p4{"p4", 4, 0, k.gemm, k.gemm_blocks, k.quantize, k.softmax_q8, nullptr};
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
    const std::int64_t shape[2] = {m.rows, m.cols};
    w.add("x.weight.shape", DType::I64, {2}, std::as_bytes(std::span(shape)));
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
  expect_error([&] { find_stored_panels(*ckpt, path.string(), "x.weight", 80, m.cols); },
               "m.bin: tensor x.weight.shape");
}

// Bundle format 2 end to end: add_w8_panel_matrix writes a matrix, matrix_weight maps
// it, prepare() uses it in place (fast int8 kernel of 16-row panels) or unpacks it (the
// reference set, f32 activations); every way must give, bit for bit, what the same
// source written row-major (format 1) gives, and the rows read back must be equal.
TEST(StoredPanels, BundleFormat2MatchesTheRowMajorMatrix) {
  constexpr std::int64_t rows = 37, cols = 70;  // a partial last panel and a partial last group
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto src = std::make_shared<std::vector<float>>(static_cast<std::size_t>(rows * cols));
  for (auto& v : *src) v = nd(rng);
  const RowSource rows_of = [src](std::int64_t r, float* out) {
    std::copy_n(src->begin() + r * cols, cols, out);
  };
  test::TempDir dir;
  const auto path = dir.path() / "m.bin", path_v1 = dir.path() / "v1.bin";
  {
    BundleWriter w(path, {{"role", "test"}, {"weights", "w8"}});
    add_w8_panel_matrix(w, "p.weight", rows, cols, rows_of);
    add_matrix(w, "r.weight", WeightFormat::W8, rows, cols, rows_of);
    w.finish();
    BundleWriter v1(path_v1, {{"role", "test"}, {"weights", "w8"}});
    add_matrix(v1, "r.weight", WeightFormat::W8, rows, cols, rows_of);
    v1.finish();
  }
  EXPECT_EQ(SafetensorsFile::open(path).metadata().at("qhexrt_bundle"), "2");
  EXPECT_EQ(SafetensorsFile::open(path_v1).metadata().at("qhexrt_bundle"), "1");
  const Checkpoint ck = Checkpoint::open(path);
  const WeightMatrix wp = matrix_weight(ck, "p.weight", rows, cols), wr = matrix_weight(ck, "r.weight", rows, cols);
  ASSERT_TRUE(wp.panel_form);
  ASSERT_FALSE(wr.panel_form);
  const WeightMatrix shapeless = matrix_weight(ck, "p.weight");
  EXPECT_TRUE(shapeless.panel_form && shapeless.rows == rows && shapeless.cols == cols);
  std::vector<float> a(cols), b(cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    weight_row_to_f32(wp, r, a.data());
    weight_row_to_f32(wr, r, b.data());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "row " << r;
  }
  constexpr std::int64_t m = 5;
  std::vector<float> x(static_cast<std::size_t>(m * cols)), bias(rows);
  for (auto& v : x) v = nd(rng);
  for (auto& v : bias) v = nd(rng);
  for (const KernelSet* set : {&reference_kernels(), &active_kernels()}) {
    for (const bool int8 : {true, false}) {
      SCOPED_TRACE(std::string(set->name) + (int8 ? ", int8 activations" : ", f32 activations"));
      const KernelPlan plan{set, int8};
      WeightMatrix p = wp, r = wr;
      prepare(plan, p);
      prepare(plan, r);
      EXPECT_EQ(p.int8_activations, int8);
      const bool in_place = int8 && p.packed != nullptr && p.panel_form;
      if (set != &reference_kernels() && int8 && int8_kernel_best().panel == kStoredPanel) {
        ASSERT_TRUE(in_place);  // opening is mapping: the kernel reads the file's bytes
        EXPECT_EQ(static_cast<const void*>(p.packed->data.get()),
                  static_cast<const void*>(ck.get("p.weight.panels").data));
      } else {
        EXPECT_FALSE(p.panel_form);  // unpacked into rows of its own
        EXPECT_NE(p.owned, nullptr);
      }
      std::vector<float> yp(static_cast<std::size_t>(m * rows)), yr(yp.size());
      set->linear(x.data(), m, p, bias.data(), yp.data());
      set->linear(x.data(), m, r, bias.data(), yr.data());
      EXPECT_EQ(0, std::memcmp(yp.data(), yr.data(), yp.size() * sizeof(float)));
    }
  }
  // The reference kernels read the panel form unprepared too (w8_at).
  std::vector<float> yp(static_cast<std::size_t>(m * rows)), yr(yp.size());
  WeightMatrix p = wp, r = wr;
  p.int8_activations = r.int8_activations = true;
  reference_kernels().linear(x.data(), m, p, nullptr, yp.data());
  reference_kernels().linear(x.data(), m, r, nullptr, yr.data());
  EXPECT_EQ(0, std::memcmp(yp.data(), yr.data(), yp.size() * sizeof(float)));
  // The shape the config asks for must be the stored one; the message names the shape tensor.
  expect_error([&] { matrix_weight(ck, "p.weight", rows + 1, cols); }, "p.weight.shape");
  expect_error([&] { matrix_weight(ck, "q.weight", rows, cols); }, "q.weight");
}

// A corrupt panel form is found when it is unpacked (the panels' padding, the row sums).
TEST(StoredPanels, UnpackingACorruptPanelFormIsAnError) {
  constexpr std::int64_t rows = 20, cols = 8;
  test::TempDir dir;
  const auto path = dir.path() / "m.bin";
  {
    BundleWriter w(path, {{"role", "test"}, {"weights", "w8"}});
    add_w8_panel_matrix(w, "p.weight", rows, cols, [](std::int64_t r, float* out) {
      for (std::int64_t c = 0; c < cols; ++c) out[c] = static_cast<float>(r - c);
    });
    w.finish();
  }
  const Checkpoint ck = Checkpoint::open(path);
  WeightMatrix w = matrix_weight(ck, "p.weight", rows, cols);
  std::vector<std::int8_t> bytes(static_cast<const std::int8_t*>(w.data),
                                 static_cast<const std::int8_t*>(w.data) + stored_panels_bytes(rows, cols));
  auto buf = std::shared_ptr<std::int8_t>(static_cast<std::int8_t*>(std::aligned_alloc(64, bytes.size())), std::free);
  std::memcpy(buf.get(), bytes.data(), bytes.size());
  buf.get()[stored_panels_bytes(rows, cols) - 1] = 3;  // a byte of padding row 31
  WeightMatrix bad = w;
  bad.data = buf.get();
  expect_error([&] { unpack_panel_form(bad); }, "not zero past");
  std::memcpy(buf.get(), bytes.data(), bytes.size());
  buf.get()[0] = static_cast<std::int8_t>(buf.get()[0] + 1);  // row 0's sum no longer agrees
  bad = w;
  bad.data = buf.get();
  expect_error([&] { unpack_panel_form(bad); }, "row sum");
}

}  // namespace
}  // namespace qhx::cpu
