// BundleWriter's files (docs/bundle.md): 64-aligned tensors, pads, errors, and reading them
// back through Checkpoint -> matrix_weight -> weight_row_to_f32 in every weight format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/weights.hpp"
#include "common/half.hpp"
#include "export/bundle_writer.hpp"
#include "formats/quantize.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/safetensors.hpp"
#include "quant_checks.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::expect_within_half_step;
using test::random_row;
using test::TempDir;

// The header of a safetensors file, and where its data section starts.
struct Header {
  nlohmann::json json;
  std::uint64_t data_start = 0;
};

Header read_header(const fs::path& p) {
  const std::string bytes = test::read_file(p);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  return {nlohmann::json::parse(bytes.substr(8, n)), 8 + n};
}

// Every tensor but the pads at a 64-aligned file offset, pads zero-filled U8
// entries, all of them back to back with nothing unlisted in between.
void expect_aligned_layout(const fs::path& p) {
  const Header h = read_header(p);
  const std::string bytes = test::read_file(p);
  EXPECT_EQ(h.data_start % 64, 0u);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (const auto& [name, e] : h.json.items()) {
    if (name == "__metadata__") continue;
    const auto begin = e["data_offsets"][0].get<std::uint64_t>(), end = e["data_offsets"][1].get<std::uint64_t>();
    spans.emplace_back(begin, end);
    if (name.rfind("__pad.", 0) == 0) {
      EXPECT_EQ(e["dtype"], "U8") << name;
      EXPECT_EQ(e["shape"][0].get<std::uint64_t>(), end - begin) << name;
      for (std::uint64_t i = begin; i < end; ++i) EXPECT_EQ(bytes[h.data_start + i], '\0') << name;
      continue;
    }
    EXPECT_EQ((h.data_start + begin) % 64, 0u) << name;
  }
  std::sort(spans.begin(), spans.end());
  std::uint64_t at = 0;
  for (const auto& [b, e] : spans) {
    EXPECT_EQ(b, at);
    at = e;
  }
  EXPECT_EQ(h.data_start + at, bytes.size());
}

std::vector<float> test_matrix(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto w = random_row(rng, static_cast<std::size_t>(rows * cols), 0.1f);
  for (std::int64_t c = 0; c < cols; ++c) w[static_cast<std::size_t>(cols + c)] = 0.0f;  // row 1: zeros
  return w;
}

std::vector<float> rows_of(const cpu::WeightMatrix& m) {
  std::vector<float> out(static_cast<std::size_t>(m.rows * m.cols));
  for (std::int64_t r = 0; r < m.rows; ++r) cpu::weight_row_to_f32(m, r, out.data() + r * m.cols);
  return out;
}

// What quantize_matrix's bytes mean, decoded here without the backend.
std::vector<float> decode(const QuantizedMatrix& q) {
  std::vector<float> v(static_cast<std::size_t>(q.rows * q.cols));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::size_t r = i / static_cast<std::size_t>(q.cols), c = i % static_cast<std::size_t>(q.cols);
    switch (q.format) {
      case WeightFormat::F32: std::memcpy(&v[i], q.data.data() + 4 * i, 4); break;
      case WeightFormat::F16: {
        std::uint16_t h;
        std::memcpy(&h, q.data.data() + 2 * i, 2);
        v[i] = f16_to_f32(h);
        break;
      }
      case WeightFormat::W8: v[i] = static_cast<float>(static_cast<std::int8_t>(q.data[i])) * q.scales[r]; break;
      case WeightFormat::W4:
        v[i] = static_cast<float>(cpu::w4_nibble(q.data[i / 2], static_cast<int>(i % 2))) *
               q.scales[r * static_cast<std::size_t>(q.cols / 32) + c / 32];
        break;
    }
  }
  return v;
}

struct MatrixCase {
  std::string name;
  WeightFormat requested, stored;
  std::int64_t rows, cols;
};

const std::vector<MatrixCase>& matrix_cases() {
  static const std::vector<MatrixCase> cases = {
      {"m.f32.weight", WeightFormat::F32, WeightFormat::F32, 3, 5},
      {"m.f16.weight", WeightFormat::F16, WeightFormat::F16, 5, 7},
      {"m.w8.weight", WeightFormat::W8, WeightFormat::W8, 4, 13},
      {"m.w4.weight", WeightFormat::W4, WeightFormat::W4, 6, 128},
      {"m.w4_fallback.weight", WeightFormat::W4, WeightFormat::W8, 3, 96},  // 96 % 64 != 0: stored as w8
  };
  return cases;
}

TEST(Bundle, RoundTripEveryFormat) {
  TempDir dir;
  const fs::path path = dir.path() / "weights.bin";
  {
    BundleWriter w(path, {{"role", "test"}, {"weights", "w4"}});
    EXPECT_EQ(w.weights(), WeightFormat::W4);
    std::uint32_t seed = 1;
    for (const auto& c : matrix_cases())
      EXPECT_EQ(add_matrix(w, c.name, c.requested, c.rows, c.cols, test_matrix(c.rows, c.cols, seed++)), c.stored);
    const std::vector<float> norm = {1.5f, -2.0f, 0.25f};
    w.add_f32("m.norm.weight", {3}, norm);
    w.add("m.empty", DType::F32, {0, 4}, std::span<const std::byte>{});
    std::vector<std::uint16_t> bf16 = {0x3F80, 0xC000, 0x4040, 0x0000, 0xBF80, 0x4080};  // 1 -2 3 0 -1 4
    w.add("m.bf16.weight", DType::BF16, {2, 3}, std::as_bytes(std::span<const std::uint16_t>(bf16)));
    w.finish();
  }
  EXPECT_FALSE(fs::exists(dir.path() / "weights.bin.partial"));
  expect_aligned_layout(path);

  const auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file.metadata().at("qhexrt_bundle"), "1");
  EXPECT_EQ(file.metadata().at("role"), "test");
  EXPECT_EQ(file.metadata().at("weights"), "w4");
  for (const auto& t : file.tensors())
    if (t.data != nullptr && t.name.rfind("__pad.", 0) != 0) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data) % 64, 0u) << t.name;
    }

  const auto ckpt = Checkpoint::open(path);
  std::uint32_t seed = 1;
  for (const auto& c : matrix_cases()) {
    SCOPED_TRACE(c.name);
    const auto src = test_matrix(c.rows, c.cols, seed++);
    const QuantizedMatrix q = quantize_matrix(src.data(), c.rows, c.cols, c.stored);
    const auto want = decode(q);
    const cpu::WeightMatrix m = cpu::matrix_weight(ckpt, c.name, c.rows, c.cols);
    EXPECT_EQ(m.dtype, stored_dtype(c.stored));
    EXPECT_STREQ(cpu::weight_format_name(m), std::string(format_name(c.stored)).c_str());
    EXPECT_EQ(m.scales != nullptr, c.stored == WeightFormat::W8 || c.stored == WeightFormat::W4);
    const auto got = rows_of(m);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << i;  // bit-exact: value = float(q) * scale
      const auto r = static_cast<std::int64_t>(i) / c.cols;
      if (r == 1) {
        ASSERT_EQ(got[i], 0.0f);  // the zero row
      }
      const float step = c.stored == WeightFormat::W8    ? q.scales[static_cast<std::size_t>(r)]
                         : c.stored == WeightFormat::W4  ? q.scales[i / 32]
                         : c.stored == WeightFormat::F16 ? std::abs(src[i]) * 0x1p-10f + 0x1p-24f
                                                         : 0.0f;
      // A w4 block may trade clipping its loudest values for a finer step (least squares).
      const bool clipped = c.stored == WeightFormat::W4 && (got[i] == 7 * step || got[i] == -8 * step);
      if (!clipped) expect_within_half_step(src[i], got[i], step);
    }
    if (c.stored == WeightFormat::W4) {
      const auto& cs = ckpt.get(c.name + ".channel_scale");
      ASSERT_EQ(cs.shape, (std::vector<std::int64_t>{c.rows}));
      for (std::int64_t r = 0; r < c.rows; ++r)
        EXPECT_EQ(reinterpret_cast<const float*>(cs.data)[r], q.channel_scales[static_cast<std::size_t>(r)]) << r;
    }
    // The same matrix with its shape taken from the file.
    const cpu::WeightMatrix inferred = cpu::matrix_weight(ckpt, c.name);
    EXPECT_EQ(inferred.rows, c.rows);
    EXPECT_EQ(inferred.cols, c.cols);
    EXPECT_EQ(inferred.data, m.data);
  }
  EXPECT_EQ(cpu::vector_weight(ckpt, "m.norm.weight", 3), (std::vector<float>{1.5f, -2.0f, 0.25f}));
  EXPECT_EQ(rows_of(cpu::matrix_weight(ckpt, "m.bf16.weight", 2, 3)), (std::vector<float>{1, -2, 3, 0, -1, 4}));
  EXPECT_EQ(ckpt.get("m.empty").nbytes, 0u);
  // A quantized matrix read through reshaped_matrix_weight (its stored 2-D shape flattens trivially).
  EXPECT_EQ(cpu::reshaped_matrix_weight(ckpt, "m.w4.weight", 6, 128).dtype, DType::U8);
}

// A bundle holding exactly `tensors` (raw bytes), for the malformed cases.
struct Raw {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
};

fs::path write_raw(const TempDir& dir, const std::string& file, const std::vector<Raw>& tensors) {
  const fs::path p = dir.path() / file;
  BundleWriter w(p, {{"role", "test"}, {"weights", "w8"}});
  for (const auto& t : tensors) {
    std::size_t n = dtype_size(t.dtype);
    for (const auto d : t.shape) n *= static_cast<std::size_t>(d);
    w.add(t.name, t.dtype, t.shape, std::vector<std::byte>(n, std::byte{0}));
  }
  w.finish();
  return p;
}

TEST(Bundle, MatrixWeightRejectsMalformedQuantizedMatrices) {
  TempDir dir;
  using V = std::vector<Raw>;
  const auto open = [&](const std::string& f, const V& t) {
    return Checkpoint::open(write_raw(dir, f, t));
  };
  {
    const auto ck = open("a.bin", V{{"x.weight", DType::I8, {4, 8}}});
    expect_error([&] { cpu::matrix_weight(ck, "x.weight", 4, 8); }, {"x.weight", "x.weight.scale", "lacks"});
  }
  {
    const auto ck = open("b.bin", V{{"x.weight", DType::I8, {4, 8}}, {"x.weight.scale", DType::F32, {5}}});
    expect_error([&] { cpu::matrix_weight(ck, "x.weight", 4, 8); }, {"x.weight.scale", "[5]", "[4]", "per-row"});
  }
  {
    const auto ck = open("c.bin", V{{"x.weight", DType::I8, {4, 8}}, {"x.weight.scale", DType::BF16, {4}}});
    expect_error([&] { cpu::matrix_weight(ck, "x.weight", 4, 8); }, {"x.weight.scale", "BF16", "F32"});
  }
  {
    const auto ck = open("d.bin", V{{"x.weight", DType::U8, {4, 32}}, {"x.weight.scale", DType::F32, {4, 4}}});
    expect_error([&] { cpu::matrix_weight(ck, "x.weight", 4, 64); }, {"x.weight.scale", "[4, 4]", "[4, 2]"});
    expect_error([&] { cpu::matrix_weight(ck, "x.weight", 4, 32); }, {"x.weight", "[4, 32]", "[4, 16]", "w4"});
  }
  {
    const auto ck = open("e.bin", V{{"x.weight", DType::U8, {4, 32}}});
    expect_error([&] { cpu::matrix_weight(ck, "x.weight", 4, 64); }, {"x.weight", "U8 (w4)", "x.weight.scale"});
    expect_error([&] { cpu::matrix_weight(ck, "x.weight", 4, 40); }, {"x.weight", "multiple of 32"});
  }
  {
    const auto ck = open("f.bin", V{{"x.weight", DType::F16, {4, 8}}, {"x.weight.scale", DType::F32, {4}}});
    expect_error([&] { cpu::matrix_weight(ck, "x.weight", 4, 8); }, {"x.weight", "not quantized", "x.weight.scale"});
  }
  {
    const auto ck = open("g.bin", V{{"x.weight", DType::I32, {4, 8}}});
    expect_error([&] { cpu::matrix_weight(ck, "x.weight", 4, 8); }, {"x.weight", "I32"});
  }
  {
    const auto ck = open("h.bin", V{{"x.weight", DType::I8, {4, 8}}, {"x.weight.scale", DType::F32, {4}}});
    expect_error([&] { cpu::matrix_weight(ck, "x.weight", 8, 4); }, {"x.weight", "[4, 8]", "[8, 4]"});
    EXPECT_EQ(cpu::matrix_weight(ck, "x.weight", 4, 8).dtype, DType::I8);
  }
}

// Found by fuzz_bundle: an F16 matrix at an odd file offset was read through a
// misaligned uint16_t pointer (undefined behaviour). Float matrices at their element
// alignment load; others are refused by name, as a misaligned scale is.
TEST(Bundle, MatrixWeightRefusesFloatMatricesOffTheirAlignment) {
  TempDir dir;
  // A U8 [1] first, so the tensor after it sits at data offset 1, 2 or 4; the header is
  // padded so that the data section itself starts 8-aligned (the mapping is page-aligned).
  const auto file = [&](const std::string& name, const char* dtype, std::int64_t lead) {
    const std::int64_t size = std::string(dtype) == "F32" ? 16 : 8;  // [2, 2]
    nlohmann::ordered_json h;
    h["lead"] = {{"dtype", "U8"}, {"shape", {lead}}, {"data_offsets", {0, lead}}};
    h["m.weight"] = {{"dtype", dtype}, {"shape", {2, 2}}, {"data_offsets", {lead, lead + size}}};
    std::string header = h.dump();
    header.append((8 - (8 + header.size()) % 8) % 8, ' ');
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i)
      bytes[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
    return dir.write(name, bytes + header + std::string(static_cast<std::size_t>(lead + size), '\0'));
  };
  expect_error([&] { cpu::matrix_weight(Checkpoint::open(file("a.safetensors", "F16", 1)), "m.weight", 2, 2); },
               {"m.weight", "F16", "not 2-byte aligned"});
  expect_error([&] { cpu::matrix_weight(Checkpoint::open(file("b.safetensors", "F32", 2)), "m.weight", 2, 2); },
               {"m.weight", "F32", "not 4-byte aligned"});
  EXPECT_EQ(cpu::matrix_weight(Checkpoint::open(file("c.safetensors", "BF16", 2)), "m.weight", 2, 2).dtype,
            DType::BF16);
  EXPECT_EQ(cpu::matrix_weight(Checkpoint::open(file("d.safetensors", "F32", 4)), "m.weight", 2, 2).dtype, DType::F32);
}

TEST(Bundle, WriterErrorsNameThePathAndTensor) {
  TempDir dir;
  const fs::path p = dir.path() / "out.bin";
  expect_error([&] { (void)BundleWriter(p, {{"weights", "w8"}}); }, {p.string(), "role"});
  expect_error([&] { (void)BundleWriter(p, {{"role", "r"}}); }, {p.string(), "weights"});
  expect_error([&] { (void)BundleWriter(p, {{"role", "r"}, {"weights", "int3"}}); }, {p.string(), "int3"});
  expect_error(
      [&] {
        (void)BundleWriter(p, {{"role", "r"}, {"weights", "w8"}, {"qhexrt_bundle", "2"}});
      },
      {p.string(), "qhexrt_bundle"});

  const std::map<std::string, std::string> meta = {{"role", "r"}, {"weights", "f32"}};
  {
    BundleWriter w(p, meta);
    const std::vector<float> v = {1, 2};
    w.add_f32("a", {2}, v);
    expect_error([&] { w.add_f32("a", {2}, v); }, {p.string(), "'a'", "twice"});
    expect_error([&] { w.add_f32("__pad.0", {2}, v); }, {p.string(), "__pad.0", "reserved"});
    expect_error([&] { w.add_f32("", {2}, v); }, {p.string(), "empty"});
    expect_error([&] { w.add_f32("neg", {-1}, v); }, {p.string(), "neg", "negative"});
  }
  // Producers held to their declared size; a failed finish leaves no file behind.
  for (const std::size_t n : {4u, 12u}) {
    BundleWriter w(p, meta);
    w.add("short", DType::F32, {2}, [n](ByteSink& sink) {
      const std::vector<std::byte> b(n);
      sink.write(b.data(), b.size());
    });
    expect_error([&] { w.finish(); }, {p.string(), "'short'", "8"});
    EXPECT_FALSE(fs::exists(p));
    EXPECT_FALSE(fs::exists(p.string() + ".partial"));
    expect_error([&] { w.finish(); }, {p.string(), "twice"});
  }
  {  // a conversion error names the tensor and the row
    BundleWriter w(p, meta);
    std::vector<float> m(6, 1.0f);
    m[4] = std::numeric_limits<float>::quiet_NaN();
    add_matrix(w, "bad.weight", WeightFormat::W8, 2, 3, m);
    expect_error([&] { w.finish(); }, {p.string(), "bad.weight", "row 1", "column 1"});
    EXPECT_FALSE(fs::exists(p));
  }
  {
    BundleWriter w(dir.path() / "missing" / "out.bin", meta);
    w.add_f32("a", {1}, std::vector<float>{1});
    expect_error([&] { w.finish(); }, {(dir.path() / "missing" / "out.bin").string(), "cannot create"});
  }
}

// "t" + std::to_string(i) trips GCC 12's -Wrestrict false positive at -O3 (a known
// libstdc++ issue); names are built with append instead.
std::string tensor_name(int i) {
  std::string name = "t";
  name.append(std::to_string(i));
  return name;
}

TEST(Bundle, PadsBetweenOddSizedTensors) {
  TempDir dir;
  const fs::path p = dir.path() / "pads.bin";
  BundleWriter w(p, {{"role", "r"}, {"weights", "w8"}});
  for (int i = 1; i <= 5; ++i)
    w.add(tensor_name(i), DType::U8, {i * 13},
          std::vector<std::byte>(static_cast<std::size_t>(i * 13), std::byte{static_cast<unsigned char>(i)}));
  w.add("aligned", DType::F32, {16}, std::vector<std::byte>(64, std::byte{7}));
  w.add("after", DType::I8, {3}, std::vector<std::byte>(3, std::byte{9}));
  w.finish();
  expect_aligned_layout(p);
  const Header h = read_header(p);
  EXPECT_TRUE(h.json.contains("__pad.0"));
  EXPECT_FALSE(h.json.contains("__pad.5"));  // "aligned" follows t5's pad, "after" needs none
  const auto ckpt = Checkpoint::open(p);
  for (int i = 1; i <= 5; ++i) {
    const auto& t = ckpt.get(tensor_name(i));
    for (std::size_t k = 0; k < t.nbytes; ++k) ASSERT_EQ(std::to_integer<int>(t.data[k]), i);
  }
  EXPECT_EQ(std::to_integer<int>(ckpt.get("after").data[2]), 9);
}

}  // namespace
}  // namespace qhx
