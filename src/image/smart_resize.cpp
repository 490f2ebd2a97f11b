// transformers' Qwen2-VL smart_resize (spec §3.2), step for step in double
// precision. Python's round() is round-half-to-even, which std::nearbyint
// gives in the default rounding mode (std::round would send 8.5 to 9).
#include <algorithm>
#include <cmath>

#include "image/image.hpp"
#include "qhexrt/error.hpp"

namespace qhx::image {

Size smart_resize(std::int64_t height, std::int64_t width, std::int64_t factor, std::int64_t min_pixels,
                  std::int64_t max_pixels) {
  if (height <= 0 || width <= 0) fail("smart_resize: image size ", height, "x", width, " has an empty side");
  // Keeps height * width exact and far from overflow; no image comes close.
  if (height > (std::int64_t{1} << 26) || width > (std::int64_t{1} << 26))
    fail("smart_resize: image size ", height, "x", width, " is too large");
  if (factor <= 0) fail("smart_resize: factor ", factor, " must be positive");
  const auto h = static_cast<double>(height), w = static_cast<double>(width), f = static_cast<double>(factor);
  const double aspect = static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width));
  if (aspect > 200)
    fail("smart_resize: absolute aspect ratio must be smaller than 200, got ", aspect, " for ", height, "x", width);
  std::int64_t h_bar = static_cast<std::int64_t>(std::nearbyint(h / f)) * factor;
  std::int64_t w_bar = static_cast<std::int64_t>(std::nearbyint(w / f)) * factor;
  // height * width is an exact integer in Python; it is exact in double below 2^53.
  const double area = static_cast<double>(height * width);
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(area / static_cast<double>(max_pixels));
    h_bar = std::max(factor, static_cast<std::int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<std::int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / area);
    h_bar = static_cast<std::int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<std::int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {h_bar, w_bar};
}

}  // namespace qhx::image
