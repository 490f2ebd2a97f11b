// The runtime's .npy code is a writer (qhx::write_npy, for --dump-logits and
// --dump-dir; nothing in QHexRT reads .npy): arbitrary shapes and data lengths,
// and every file it writes read back the way numpy.load reads format 1.0.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "formats/npy.hpp"

namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// numpy.load's view of the file: magic, version 1.0, a little-endian u16 header
// length, the dict, and exactly numel * itemsize bytes after it.
void check_file(const std::string& f, const std::string& descr, const std::vector<std::int64_t>& shape,
                const void* data, std::size_t bytes) {
  QHX_FUZZ_CHECK(f.size() >= 10 && f.compare(0, 6, "\x93NUMPY") == 0 && f[6] == 1 && f[7] == 0);
  const std::size_t len =
      static_cast<unsigned char>(f[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(f[9])) << 8);
  QHX_FUZZ_CHECK((10 + len) % 64 == 0 && f.size() == 10 + len + bytes);
  const std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  QHX_FUZZ_CHECK(f.compare(10, dict.size(), dict) == 0 && f[10 + len - 1] == '\n');
  QHX_FUZZ_CHECK(bytes == 0 || std::memcmp(f.data() + 10 + len, data, bytes) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const qhx::fuzz::ScratchFile file(".npy");
  FuzzedDataProvider fdp(data, size);
  std::vector<std::int64_t> shape(fdp.ConsumeIntegralInRange<std::size_t>(0, 12));
  // Mostly small dimensions (files that get written), sometimes any int64.
  for (auto& d : shape)
    d = fdp.ConsumeBool() ? fdp.ConsumeIntegral<std::int64_t>() : fdp.ConsumeIntegralInRange<std::int64_t>(0, 6);
  const bool as_i64 = fdp.ConsumeBool();
  const auto n = fdp.ConsumeIntegralInRange<std::size_t>(0, 4096);
  const auto path = file.write({});
  qhx::fuzz::expect_only_qhx_errors([&] {
    if (as_i64) {
      std::vector<std::int64_t> v(n);
      for (auto& x : v) x = fdp.ConsumeIntegral<std::int64_t>();
      qhx::write_npy(path, v, shape);
      check_file(read_all(path), "<i8", shape, v.data(), n * 8);
    } else {
      std::vector<float> v(n);
      for (auto& x : v) x = fdp.ConsumeFloatingPoint<float>();
      qhx::write_npy(path, v, shape);
      check_file(read_all(path), "<f4", shape, v.data(), n * 4);
    }
  });
  return 0;
}
