// Pillow's bicubic resize (src/libImaging/Resample.c, 8 bits per channel),
// reproduced operation for operation so that the output is bit-exact:
// double-precision tap weights normalised to sum 1, rounded to 22-bit fixed
// point, integer accumulation starting at 1/2, then clip8(sum >> 22). The two
// passes go through a uint8 intermediate, so their order changes the result:
// Pillow 13 runs the vertical pass first when the height shrinks by more than
// twice as many pixels as the width does, else the horizontal one (older
// Pillows and the spec's §3.3 say "always horizontal first"). A pass whose
// dimension does not change is skipped (need_horizontal / need_vertical).
#include <algorithm>
#include <cmath>

#include "image/image.hpp"
#include "qhexrt/error.hpp"

namespace qhx::image {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

// Keys' cubic with a = -0.5, in Pillow's evaluation order.
double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// For each output index: the first input tap and the fixed-point weights.
struct Coefficients {
  std::int64_t ksize = 0;
  std::vector<int> first;       // xmin per output index
  std::vector<int> count;       // taps per output index
  std::vector<std::int32_t> k;  // ksize weights per output index
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for the box (0, in_size).
Coefficients coefficients(std::int64_t in_size, std::int64_t out_size) {
  constexpr double support_unit = 2.0;  // bicubic
  // Pillow passes the box edges as float; for any realistic size they are exact.
  const double scale = static_cast<double>(static_cast<float>(in_size) - 0.0f) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = support_unit * filterscale;
  Coefficients c;
  c.ksize = static_cast<std::int64_t>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<std::size_t>(out_size));
  c.count.resize(static_cast<std::size_t>(out_size));
  c.k.assign(static_cast<std::size_t>(out_size * c.ksize), 0);
  std::vector<double> w(static_cast<std::size_t>(c.ksize));
  const double inv_filterscale = 1.0 / filterscale;
  for (std::int64_t xx = 0; xx < out_size; ++xx) {
    const double center = 0.0 + (static_cast<double>(xx) + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);  // truncation toward zero, as C's (int)
    xmin = std::max(xmin, 0);
    int xmax = static_cast<int>(center + support + 0.5);
    xmax = static_cast<int>(std::min<std::int64_t>(xmax, in_size)) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double v = bicubic((x + xmin - center + 0.5) * inv_filterscale);
      w[static_cast<std::size_t>(x)] = v;
      ww += v;
    }
    std::int32_t* k = c.k.data() + xx * c.ksize;
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[static_cast<std::size_t>(x)] / ww : w[static_cast<std::size_t>(x)];
      const double fixed = v * (1 << kPrecisionBits);
      k[x] = static_cast<std::int32_t>(v < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    c.first[static_cast<std::size_t>(xx)] = xmin;
    c.count[static_cast<std::size_t>(xx)] = xmax;
  }
  return c;
}

// Pillow's clip8: the lookup table it indexes is clamp(v >> 22, 0, 255).
std::uint8_t clip8(std::int32_t v) { return static_cast<std::uint8_t>(std::clamp(v >> kPrecisionBits, 0, 255)); }

// Rows [row0, row0 + rows) of `in`, resampled horizontally to out_w.
RgbImage horizontal(const RgbImage& in, const Coefficients& c, std::int64_t out_w, std::int64_t row0,
                    std::int64_t rows) {
  RgbImage out{out_w, rows, std::vector<std::uint8_t>(static_cast<std::size_t>(out_w * rows * 3))};
  for (std::int64_t y = 0; y < rows; ++y) {
    const std::uint8_t* line = in.pixels.data() + (row0 + y) * in.width * 3;
    std::uint8_t* dst = out.pixels.data() + y * out_w * 3;
    for (std::int64_t xx = 0; xx < out_w; ++xx) {
      const std::int32_t* k = c.k.data() + xx * c.ksize;
      const std::uint8_t* src = line + c.first[static_cast<std::size_t>(xx)] * 3;
      std::int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < c.count[static_cast<std::size_t>(xx)]; ++x) {
        s0 += src[3 * x] * k[x];
        s1 += src[3 * x + 1] * k[x];
        s2 += src[3 * x + 2] * k[x];
      }
      dst[3 * xx] = clip8(s0);
      dst[3 * xx + 1] = clip8(s1);
      dst[3 * xx + 2] = clip8(s2);
    }
  }
  return out;
}

// `in` holds source rows from row0 on; c's tap positions are absolute rows.
RgbImage vertical(const RgbImage& in, const Coefficients& c, std::int64_t out_h, std::int64_t row0) {
  const std::int64_t w = in.width;
  RgbImage out{w, out_h, std::vector<std::uint8_t>(static_cast<std::size_t>(w * out_h * 3))};
  for (std::int64_t yy = 0; yy < out_h; ++yy) {
    const std::int32_t* k = c.k.data() + yy * c.ksize;
    const std::int64_t ymin = c.first[static_cast<std::size_t>(yy)] - row0;
    const int taps = c.count[static_cast<std::size_t>(yy)];
    std::uint8_t* dst = out.pixels.data() + yy * w * 3;
    for (std::int64_t i = 0; i < w * 3; ++i) {
      std::int32_t s = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < taps; ++y) s += in.pixels[static_cast<std::size_t>((ymin + y) * w * 3 + i)] * k[y];
      dst[i] = clip8(s);
    }
  }
  return out;
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& img, std::int64_t width, std::int64_t height) {
  if (width <= 0 || height <= 0) fail("resize_bicubic: target size ", width, "x", height, " is empty");
  if (img.width <= 0 || img.height <= 0 || img.pixels.size() != static_cast<std::size_t>(img.width * img.height * 3))
    fail("resize_bicubic: malformed source image ", img.width, "x", img.height, " with ", img.pixels.size(), " bytes");
  if (width == img.width && height == img.height) return img;

  const bool need_horizontal = width != img.width, need_vertical = height != img.height;
  const Coefficients vert = coefficients(img.height, height);
  const Coefficients horiz = coefficients(img.width, width);
  // Pillow 13's ImagingResampleInner, in int arithmetic as there.
  const std::int64_t shrink_h = img.height - height, shrink_w = img.width - width;
  const bool horizontal_first = !(shrink_h > 0 && shrink_h > shrink_w * 2);
  if (!horizontal_first) {
    const RgbImage tmp = vertical(img, vert, height, 0);
    return need_horizontal ? horizontal(tmp, horiz, width, 0, height) : tmp;
  }
  if (!need_horizontal) return vertical(img, vert, height, 0);
  // The vertical taps decide which source rows the horizontal pass must produce.
  const std::int64_t row_first = vert.first.front();
  const std::int64_t row_last = vert.first.back() + vert.count.back();
  RgbImage tmp = horizontal(img, horiz, width, row_first, row_last - row_first);
  return need_vertical ? vertical(tmp, vert, height, row_first) : tmp;
}

}  // namespace qhx::image
