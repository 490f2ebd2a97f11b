// The image targets' common path: decode_image (format sniffing, the decoder,
// EXIF orientation), then both resizes a plan can ask for on the decoded size.
// Each target keeps its input in one format by supplying the magic bytes when a
// mutation has lost them, so its time goes to its own decoder.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "image/image.hpp"

namespace qhx::fuzz {

// The runtime's own decompression-bomb guard, set low (512 x 512): a decode and
// resize then stays in milliseconds under the sanitizers. The image targets run with
// -malloc_limit_mb=64 (fuzz_image_*.options), far above what that many pixels need
// (RGB, libpng's rows, libwebp's RGBA canvas, libjpeg's coefficients), so any
// allocation the header's pixel count does not bound is a crash.
inline constexpr std::int64_t kFuzzMaxPixels = std::int64_t{1} << 18;

inline std::vector<std::uint8_t> with_prefix(std::string_view magic, const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> out;
  if (size < magic.size() || std::memcmp(data, magic.data(), magic.size()) != 0) out.assign(magic.begin(), magic.end());
  out.insert(out.end(), data, data + size);
  return out;
}

inline void decode_and_resize(const std::vector<std::uint8_t>& bytes) {
  expect_only_qhx_errors([&] {
    const image::RgbImage img = image::decode_image(bytes, "fuzz image", image::DecodeLimits{kFuzzMaxPixels});
    QHX_FUZZ_CHECK(img.width > 0 && img.height > 0 && img.width * img.height <= kFuzzMaxPixels);
    QHX_FUZZ_CHECK(img.pixels.size() == static_cast<std::size_t>(img.width * img.height * 3));
    const image::RgbImage fixed = image::resize_bicubic(img, 16, 12);  // "resize": "fixed"
    QHX_FUZZ_CHECK(fixed.pixels.size() == 16 * 12 * 3);
    // "native": smart_resize to multiples of 32 (patch 16 x merge 2) near a small area
    // (the 32-pixel floor on the short side lets an extreme aspect exceed it, as in transformers).
    const image::Size s = image::smart_resize(img.height, img.width, 32, 32 * 32, 128 * 128);
    QHX_FUZZ_CHECK(s.height % 32 == 0 && s.width % 32 == 0 && s.height > 0 && s.width > 0);
    (void)image::resize_bicubic(img, s.width, s.height);
  });
}

}  // namespace qhx::fuzz
