// Test-only: drives src/image for tests/python/test_image_vs_pillow.py.
//   image_probe load IN OUT.rgb          decode IN (EXIF-oriented RGB)
//   image_probe resize IN W H OUT.rgb    decode IN, then bicubic-resize it to W x H
// Prints "W H" of the written image, then writes its raw RGB bytes (HWC) to OUT.rgb.
// Errors go to stderr with exit status 1; usage errors exit 2.
#include <cstdint>
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

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (!((cmd == "load" && argc == 4) || (cmd == "resize" && argc == 6))) {
    std::cerr << "usage: image_probe load IN OUT.rgb | image_probe resize IN W H OUT.rgb\n";
    return 2;
  }
  try {
    qhx::image::RgbImage img = qhx::image::load_image(argv[2]);
    if (cmd == "resize") img = qhx::image::resize_bicubic(img, parse_size(argv[3]), parse_size(argv[4]));
    write_rgb(img, argv[argc - 1]);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "image_probe: " << e.what() << '\n';
    return 1;
  }
}
