#include "formats/npy.hpp"

#include <bit>
#include <cstddef>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>

#include "qhexrt/error.hpp"

namespace qhx {

namespace {

// The payload is written straight from memory, which is only '<' (little
// endian) on a little-endian host.
static_assert(std::endian::native == std::endian::little, "write_npy assumes a little-endian host");
static_assert(std::numeric_limits<float>::is_iec559, "'<f4' is IEEE 754 binary32");

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr std::size_t kPreludeBytes = 10;  // magic, 2 version bytes, uint16 header length
constexpr std::size_t kAlignment = 64;     // numpy >= 1.14 pads the header to 64 so data can be memory-mapped aligned

std::int64_t checked_numel(const std::filesystem::path& path, const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) fail("write_npy ", path, ": negative dimension ", d);
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) fail("write_npy ", path, ": shape overflows");
    n *= d;
  }
  return n;
}

// numpy's repr of a shape tuple: "()", "(3,)", "(2, 3)".
std::string shape_tuple(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ',';
  return s + ')';
}

// The whole header (prelude + dict + padding + '\n'), byte-identical to numpy.save.
std::string header_bytes(const std::filesystem::path& path, std::string_view descr,
                         const std::vector<std::int64_t>& shape) {
  std::string dict = cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape_tuple(shape), ", }");
  const std::size_t unpadded = kPreludeBytes + dict.size() + 1;  // +1 for the terminating newline
  dict.append((kAlignment - unpadded % kAlignment) % kAlignment, ' ');
  dict += '\n';
  if (dict.size() > std::numeric_limits<std::uint16_t>::max())
    fail("write_npy ", path, ": header of ", dict.size(), " bytes does not fit format 1.0");

  std::string out(kMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xFFu);
  out += static_cast<char>((dict.size() >> 8) & 0xFFu);
  return out + dict;
}

template <typename T>
void write_array(const std::filesystem::path& path, std::span<const T> data, const std::vector<std::int64_t>& shape,
                 std::string_view descr) {
  const std::int64_t numel = checked_numel(path, shape);
  if (static_cast<std::uint64_t>(numel) != data.size())
    fail("write_npy ", path, ": shape ", shape_tuple(shape), " has ", numel, " elements but data has ", data.size());
  const std::string header = header_bytes(path, descr, shape);

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("write_npy: cannot open ", path, " for writing");
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size_bytes()));
  f.close();  // flushes; a full disk shows up here, not at write()
  if (!f) fail("write_npy: cannot write ", path);
}

}  // namespace

void write_npy(const std::filesystem::path& path, std::span<const float> data, const std::vector<std::int64_t>& shape) {
  write_array(path, data, shape, "<f4");
}

void write_npy(const std::filesystem::path& path, std::span<const std::int64_t> data,
               const std::vector<std::int64_t>& shape) {
  write_array(path, data, shape, "<i8");
}

}  // namespace qhx
