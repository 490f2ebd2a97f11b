// EXIF orientation → Pillow's Image.transpose, as ImageOps.exif_transpose maps
// them: 2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE,
// 6 ROTATE_270, 7 TRANSVERSE, 8 ROTATE_90 (Pillow's rotations are counter-clockwise).
#include "image/codecs.hpp"

namespace qhx::image::detail {

RgbImage apply_orientation(RgbImage img, int orientation) {
  if (orientation < 2 || orientation > 8) return img;
  const std::int64_t w = img.width, h = img.height;
  const bool swaps = orientation >= 5;  // the four that exchange width and height
  RgbImage out;
  out.width = swaps ? h : w;
  out.height = swaps ? w : h;
  out.pixels.resize(img.pixels.size());
  for (std::int64_t y = 0; y < out.height; ++y) {
    for (std::int64_t x = 0; x < out.width; ++x) {
      std::int64_t sx = x, sy = y;  // the source pixel of output (x, y)
      switch (orientation) {
        case 2: sx = w - 1 - x; break;
        case 3:
          sx = w - 1 - x;
          sy = h - 1 - y;
          break;
        case 4: sy = h - 1 - y; break;
        case 5:
          sx = y;
          sy = x;
          break;
        case 6:
          sx = y;
          sy = h - 1 - x;
          break;
        case 7:
          sx = w - 1 - y;
          sy = h - 1 - x;
          break;
        default:
          sx = w - 1 - y;
          sy = x;
          break;  // 8
      }
      const auto src = static_cast<std::size_t>((sy * w + sx) * 3);
      const auto dst = static_cast<std::size_t>((y * out.width + x) * 3);
      out.pixels[dst] = img.pixels[src];
      out.pixels[dst + 1] = img.pixels[src + 1];
      out.pixels[dst + 2] = img.pixels[src + 2];
    }
  }
  return out;
}

}  // namespace qhx::image::detail
