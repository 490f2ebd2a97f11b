// Test-only: drives src/image for tests/python/test_image_vs_pillow.py.
//   image_probe load IN OUT.rgb          decode IN (EXIF-oriented RGB)
//   image_probe resize IN W H OUT.rgb    decode IN, then bicubic-resize it to W x H
//   image_probe smart FACTOR MIN MAX     smart_resize each "H W" line of stdin
// load/resize print "W H" of the written image, then write its raw RGB bytes
// (HWC) to OUT.rgb. smart prints "h w", or "error: MESSAGE", per input line.
// Errors go to stderr with exit status 1; usage errors exit 2.
#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>

#include "image/image.hpp"
#include "qhexrt/error.hpp"

namespace {

std::int64_t parse_size(const std::string& s) {
  std::size_t used = 0;
  const long long v = std::stoll(s, &used);
  if (used != s.size() || v <= 0) qhx::fail("bad size '", s, "'");
  return v;
}

void write_rgb(const qhx::image::RgbImage& img, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(img.pixels.data()), static_cast<std::streamsize>(img.pixels.size()));
  if (!f) qhx::fail("cannot write ", path);
  std::cout << img.width << ' ' << img.height << '\n';
}

void smart_lines(std::int64_t factor, std::int64_t min_pixels, std::int64_t max_pixels) {
  std::int64_t h = 0, w = 0;
  while (std::cin >> h >> w) {
    try {
      const qhx::image::Size s = qhx::image::smart_resize(h, w, factor, min_pixels, max_pixels);
      std::cout << s.height << ' ' << s.width << '\n';
    } catch (const qhx::Error& e) {
      std::cout << "error: " << e.what() << '\n';
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (!((cmd == "load" && argc == 4) || (cmd == "resize" && argc == 6) || (cmd == "smart" && argc == 5))) {
    std::cerr << "usage: image_probe load IN OUT.rgb | resize IN W H OUT.rgb | smart FACTOR MIN MAX < sizes\n";
    return 2;
  }
  try {
    if (cmd == "smart") {
      smart_lines(parse_size(argv[2]), parse_size(argv[3]), parse_size(argv[4]));
      return 0;
    }
    qhx::image::RgbImage img = qhx::image::load_image(argv[2]);
    if (cmd == "resize") img = qhx::image::resize_bicubic(img, parse_size(argv[3]), parse_size(argv[4]));
    write_rgb(img, argv[argc - 1]);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "image_probe: " << e.what() << '\n';
    return 1;
  }
}
