// Test-only: writes a small QHexRT bundle with BundleWriter to the path given
// as the only argument, for tests/python/test_bundle_files.py to open with the
// Python safetensors library. Metadata {"role": "probe", "weights": "w4"}.
//
// Source values (f32): w[r][c] = float(((r * 31 + c * 17) % 97) - 48) / float(7 + r),
// except the rows listed below. Matrices (requested format -> stored):
//   probe.f32.weight          f32 [3, 5]
//   probe.f16.weight          f16 [4, 6]
//   probe.w8.weight           w8  [5, 11]  row 0 = kW8Ties, row 1 = zeros
//   probe.w4.weight           w4  [4, 128] row 0: cols 0..15 = kW4Ties, 16..63 = kW4Fill repeated
//                                          (64..127 as above); row 1 = zeros
//   probe.w4_fallback.weight  w4 -> w8 [3, 96] (96 is not a multiple of the w4 block, 64)
// Vectors: probe.norm.weight f32 [7] = i / 4 - 1, probe.bias f32 [3] = {0.5, -1.5, 3}.
//
// With a second path, also writes there a file of one panel-form w8 matrix
// (bundle format 2), metadata {"role": "probe", "weights": "w8"}:
//   probe.panels.weight       w8 panels [21, 11]  row 0 = kW8Ties, row 1 = zeros
// With a third path, a file of one w4 matrix with free scales, metadata {"role": "probe",
// "weights": "w4", "w4_block": "32", "w4_scales": "free"}:
//   probe.w4free.weight       w4 [4, 128] as probe.w4.weight
#include <cstdint>
#include <filesystem>
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "export/bundle_writer.hpp"
#include "qhexrt/error.hpp"

namespace {

const std::vector<float> kW8Ties = {127, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f, -127, 126.5f, -126.5f};
const std::vector<float> kW4Ties = {1,    -2,    7,    -7,    2.5f, 3.5f,  -2.5f, -3.5f,
                                    0.5f, -0.5f, 6.5f, -6.5f, 1.5f, -1.5f, 0,     3};
// Exact at scale 1 and at no other multiple of 2^-4, so the ties' block takes scale 1.
const std::vector<float> kW4Fill = {7, -7, 6, -6, 5, -5, 4, -4};

std::vector<float> source(std::int64_t rows, std::int64_t cols) {
  std::vector<float> w(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      w[static_cast<std::size_t>(r * cols + c)] =
          static_cast<float>(((r * 31 + c * 17) % 97) - 48) / static_cast<float>(7 + r);
  return w;
}

void set_row(std::vector<float>& w, std::int64_t cols, std::int64_t r, const std::vector<float>& values) {
  for (std::int64_t c = 0; c < cols; ++c)
    w[static_cast<std::size_t>(r * cols + c)] =
        c < static_cast<std::int64_t>(values.size()) ? values[static_cast<std::size_t>(c)] : 0.0f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::cerr << "usage: bundle_probe OUT.bin [PANELS.bin [W4FREE.bin]]\n";
    return 2;
  }
  try {
    qhx::BundleWriter w(argv[1], {{"role", "probe"}, {"weights", "w4"}});
    qhx::add_matrix(w, "probe.f32.weight", qhx::WeightFormat::F32, 3, 5, source(3, 5));
    qhx::add_matrix(w, "probe.f16.weight", qhx::WeightFormat::F16, 4, 6, source(4, 6));
    auto w8 = source(5, 11);
    set_row(w8, 11, 0, kW8Ties);
    set_row(w8, 11, 1, {});
    qhx::add_matrix(w, "probe.w8.weight", qhx::WeightFormat::W8, 5, 11, std::move(w8));
    auto w4 = source(4, 128);
    for (std::size_t c = 0; c < 64; ++c) w4[c] = c < kW4Ties.size() ? kW4Ties[c] : kW4Fill[c % kW4Fill.size()];
    set_row(w4, 128, 1, {});
    const std::vector<float> w4_values = w4;
    qhx::add_matrix(w, "probe.w4.weight", qhx::WeightFormat::W4, 4, 128, std::move(w4));
    qhx::add_matrix(w, "probe.w4_fallback.weight", qhx::WeightFormat::W4, 3, 96, source(3, 96));
    std::vector<float> norm(7);
    for (std::size_t i = 0; i < norm.size(); ++i) norm[i] = static_cast<float>(i) / 4.0f - 1.0f;
    w.add_f32("probe.norm.weight", {7}, norm);
    w.add_f32("probe.bias", {3}, std::vector<float>{0.5f, -1.5f, 3.0f});
    w.finish();
    if (argc == 4) {
      qhx::BundleWriter f(argv[3], {{"role", "probe"}, {"weights", "w4"}, {"w4_block", "32"}, {"w4_scales", "free"}});
      qhx::add_matrix(f, "probe.w4free.weight", qhx::WeightFormat::W4, 4, 128, w4_values);
      f.finish();
    }
    if (argc >= 3) {
      qhx::BundleWriter p(argv[2], {{"role", "probe"}, {"weights", "w8"}});
      auto m = std::make_shared<std::vector<float>>(source(21, 11));
      set_row(*m, 11, 0, kW8Ties);
      set_row(*m, 11, 1, {});
      qhx::add_w8_panel_matrix(p, "probe.panels.weight", 21, 11,
                               [m](std::int64_t r, float* out) { std::copy_n(m->begin() + r * 11, 11, out); });
      p.finish();
    }
    return 0;
  } catch (const qhx::Error& e) {
    std::cerr << "bundle_probe: " << e.what() << '\n';
    return 1;
  }
}
