// write_npy: exact bytes of the header and payload. tests/python/test_npy.py
// has numpy itself load the files.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/npy.hpp"
#include "qhexrt/error.hpp"
#include "test_support.hpp"

namespace qhx {
namespace {

struct Parsed {
  std::string magic;
  int major = -1;
  int minor = -1;
  std::size_t header_len = 0;
  std::string dict;  // header text without padding and newline
  std::string padding;
  std::string payload;
};

Parsed parse(const std::string& bytes) {
  Parsed p;
  EXPECT_GE(bytes.size(), 10u);
  if (bytes.size() < 10) return p;
  p.magic = bytes.substr(0, 6);
  p.major = static_cast<unsigned char>(bytes[6]);
  p.minor = static_cast<unsigned char>(bytes[7]);
  p.header_len =
      static_cast<unsigned char>(bytes[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  const std::string header = bytes.substr(10, p.header_len);
  const auto close = header.find('}');
  EXPECT_NE(close, std::string::npos);
  p.dict = header.substr(0, close + 1);
  p.padding = header.substr(close + 1);
  p.payload = bytes.substr(10 + p.header_len);
  return p;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

template <typename T>
void check_file(const std::vector<T>& data, const std::vector<std::int64_t>& shape, const std::string& descr,
                const std::string& shape_text) {
  test::TempDir dir;
  const auto path = dir.path() / "a.npy";
  write_npy(path, std::span<const T>(data), shape);
  const Parsed p = parse(test::read_file(path));
  EXPECT_EQ(p.magic, "\x93NUMPY");
  EXPECT_EQ(p.major, 1);
  EXPECT_EQ(p.minor, 0);
  EXPECT_EQ((10 + p.header_len) % 64, 0u) << "header not 64-byte aligned";
  EXPECT_EQ(p.dict, "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text + ", }");
  // Spaces then exactly one newline, as numpy pads.
  ASSERT_FALSE(p.padding.empty());
  EXPECT_EQ(p.padding.back(), '\n');
  EXPECT_EQ(p.padding.substr(0, p.padding.size() - 1), std::string(p.padding.size() - 1, ' '));
  EXPECT_LT(p.padding.size(), 65u);
  EXPECT_EQ(p.payload, raw(data));
}

TEST(Npy, F32Shapes) {
  check_file<float>({1.0f, -2.5f, 3.25f}, {3}, "<f4", "(3,)");
  check_file<float>({0, 1, 2, 3, 4, 5.5f}, {2, 3}, "<f4", "(2, 3)");
  check_file<float>({}, {0, 4}, "<f4", "(0, 4)");
  check_file<float>({7.0f}, {}, "<f4", "()");
}

TEST(Npy, I64Shapes) {
  check_file<std::int64_t>({1, -2, INT64_MAX}, {3}, "<i8", "(3,)");
  check_file<std::int64_t>({0, 1, 2, 3, 4, INT64_MIN}, {2, 3}, "<i8", "(2, 3)");
  check_file<std::int64_t>({}, {0, 4}, "<i8", "(0, 4)");
}

TEST(Npy, KnownHeaderBytes) {
  // numpy.save(np.zeros(3, np.float32)) header, byte for byte: 118 = 0x76.
  test::TempDir dir;
  const auto path = dir.path() / "z.npy";
  const std::vector<float> zeros(3, 0.0f);
  write_npy(path, zeros, {3});
  const std::string bytes = test::read_file(path);
  std::string want =
      std::string("\x93NUMPY\x01\x00\x76\x00", 10) + "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  want += std::string(128 - 1 - want.size(), ' ') + "\n";
  EXPECT_EQ(bytes.substr(0, 128), want);
  EXPECT_EQ(bytes.size(), 128u + 12u);
}

TEST(Npy, Errors) {
  test::TempDir dir;
  const std::vector<float> three(3, 1.0f);
  test::expect_error([&] { write_npy(dir.path() / "a.npy", three, {2, 2}); }, {"a.npy", "4", "3"});
  test::expect_error([&] { write_npy(dir.path() / "b.npy", three, {-3}); }, {"b.npy", "negative"});
  const std::vector<std::int64_t> none;
  test::expect_error([&] { write_npy(dir.path() / "c.npy", none, {}); }, {"c.npy"});  // () holds one element
  test::expect_error([&] { write_npy(dir.path() / "no_such_dir" / "d.npy", three, {3}); },
                     {"no_such_dir", "d.npy", "cannot open"});
}

TEST(Npy, FullDiskIsAnError) {
  const std::vector<float> three(3, 1.0f);
  test::expect_error([&] { write_npy("/dev/full", three, {3}); }, {"/dev/full", "cannot write"});
}

}  // namespace
}  // namespace qhx
