// Test-only: writes fixed arrays with qhx::write_npy into the directory given
// as the only argument, for tests/python/test_npy.py to numpy.load. The
// values are i * 0.5 - 1 (f32) and i * 3 - 7 (i64), i = 0, 1, ...
//   f32_3.npy f32_2x3.npy f32_0x4.npy f32_scalar.npy i64_3.npy i64_2x3.npy i64_0x4.npy
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "formats/npy.hpp"
#include "qhexrt/error.hpp"

namespace {

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

void write_both(const std::filesystem::path& dir, const std::string& suffix, const std::vector<std::int64_t>& shape) {
  std::vector<float> f(static_cast<std::size_t>(numel(shape)));
  std::vector<std::int64_t> i(f.size());
  for (std::size_t k = 0; k < f.size(); ++k) {
    f[k] = static_cast<float>(k) * 0.5f - 1.0f;
    i[k] = static_cast<std::int64_t>(k) * 3 - 7;
  }
  qhx::write_npy(dir / ("f32_" + suffix + ".npy"), f, shape);
  if (!shape.empty()) qhx::write_npy(dir / ("i64_" + suffix + ".npy"), i, shape);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: npy_probe DIR\n";
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    write_both(dir, "3", {3});
    write_both(dir, "2x3", {2, 3});
    write_both(dir, "0x4", {0, 4});
    write_both(dir, "scalar", {});
    return 0;
  } catch (const qhx::Error& e) {
    std::cerr << "npy_probe: " << e.what() << '\n';
    return 1;
  }
}
