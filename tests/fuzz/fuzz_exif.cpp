// EXIF orientation: arbitrary EXIF blocks through libexif and the tag reading in
// src/image/exif.cpp, and arbitrary XMP text through its fallback scan; then the
// transpose on a small image of distinct pixels, and a resize of the result.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>

#include "fuzz_support.hpp"
#include "image/codecs.hpp"

namespace {

using qhx::image::RgbImage;

// Pillow's transposes are their own inverses but for the two quarter turns.
int inverse(int orientation) { return orientation == 6 ? 8 : orientation == 8 ? 6 : orientation; }

RgbImage numbered(std::int64_t w, std::int64_t h) {
  RgbImage img;
  img.width = w;
  img.height = h;
  for (std::int64_t i = 0; i < w * h; ++i)
    for (int c = 0; c < 3; ++c) img.pixels.push_back(static_cast<std::uint8_t>(i * 3 + c));
  return img;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider fdp(data, size);
  const auto w = fdp.ConsumeIntegralInRange<std::int64_t>(1, 9);
  const auto h = fdp.ConsumeIntegralInRange<std::int64_t>(1, 9);
  qhx::image::detail::Decoded d;
  d.image = numbered(w, h);
  d.xmp = fdp.ConsumeRandomLengthString(512);
  d.exif = fdp.ConsumeRemainingBytes<std::uint8_t>();
  const int orientation = qhx::image::detail::orientation_of(d);
  const RgbImage turned = qhx::image::detail::apply_orientation(d.image, orientation);
  const bool swaps = orientation >= 5 && orientation <= 8;
  QHX_FUZZ_CHECK(turned.width == (swaps ? h : w) && turned.height == (swaps ? w : h));
  QHX_FUZZ_CHECK(qhx::image::detail::apply_orientation(turned, inverse(orientation)).pixels == d.image.pixels);
  qhx::fuzz::expect_only_qhx_errors([&] { (void)qhx::image::resize_bicubic(turned, 5, 7); });
  return 0;
}
