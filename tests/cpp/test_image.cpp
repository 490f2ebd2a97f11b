// src/image: smart_resize against the spec's table (§3.2), resize invariants,
// PGM/PPM parsing, and every kind of bad input failing with a message that
// names the file. Pixel parity with Pillow is tests/python/test_image_vs_pillow.py.
#include <cstdio>  // jpeglib.h uses FILE without including <stdio.h>
#include <jpeglib.h>
#include <png.h>

#include <array>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "image/image.hpp"
#include "test_support.hpp"

namespace qhx::image {
namespace {

using test::expect_error;
using test::TempDir;

constexpr std::int64_t kFactor = 32, kMinPixels = 65536, kMaxPixels = 16777216;

// A deterministic RGB gradient with some texture.
RgbImage pattern(std::int64_t w, std::int64_t h) {
  RgbImage img{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w * h * 3))};
  for (std::int64_t y = 0; y < h; ++y)
    for (std::int64_t x = 0; x < w; ++x) {
      std::uint8_t* p = img.pixels.data() + (y * w + x) * 3;
      p[0] = static_cast<std::uint8_t>(x * 255 / std::max<std::int64_t>(w - 1, 1));
      p[1] = static_cast<std::uint8_t>(y * 255 / std::max<std::int64_t>(h - 1, 1));
      p[2] = static_cast<std::uint8_t>(((x / 3) ^ (y / 5)) * 37);
    }
  return img;
}

std::string encode_jpeg(const RgbImage& img) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);  // fixed, valid input: libjpeg's exit-on-error is acceptable here
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = static_cast<JDIMENSION>(img.width);
  cinfo.image_height = static_cast<JDIMENSION>(img.height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    auto* row = const_cast<std::uint8_t*>(img.pixels.data() + cinfo.next_scanline * img.width * 3);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(buf), size);
  std::free(buf);
  return out;
}

std::string encode_png(const RgbImage& img) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(img.width);
  image.height = static_cast<png_uint_32>(img.height);
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  EXPECT_NE(png_image_write_to_memory(&image, nullptr, &size, 0, img.pixels.data(), 0, nullptr), 0);
  std::string out(size, '\0');
  EXPECT_NE(png_image_write_to_memory(&image, out.data(), &size, 0, img.pixels.data(), 0, nullptr), 0);
  out.resize(size);
  return out;
}

std::uint32_t crc32(const std::string& bytes) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (const char ch : bytes) {
    c ^= static_cast<std::uint8_t>(ch);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

std::string be32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string png_chunk(const std::string& type, const std::string& data) {
  return be32(static_cast<std::uint32_t>(data.size())) + type + data + be32(crc32(type + data));
}

// A PNG that is nothing but a header claiming width x height 8-bit RGB pixels.
std::string png_header_only(std::uint32_t width, std::uint32_t height) {
  const std::string ihdr = be32(width) + be32(height) + std::string("\x08\x02\x00\x00\x00", 5);
  return std::string("\x89PNG\r\n\x1A\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("IEND", "");
}

// ---------------------------------------------------------------- smart_resize

TEST(SmartResize, SpecTable) {
  struct Row {
    std::int64_t h, w, want_h, want_w;
  };
  const Row rows[] = {
      {512, 512, 512, 512}, {256, 320, 256, 320},     {300, 200, 320, 224},     {272, 400, 256, 384},
      {100, 100, 256, 256}, {1080, 1920, 1088, 1920}, {4000, 6000, 3328, 4992},
  };
  for (const Row& r : rows) {
    const Size s = smart_resize(r.h, r.w, kFactor, kMinPixels, kMaxPixels);
    EXPECT_EQ(s.height, r.want_h) << r.h << "x" << r.w;
    EXPECT_EQ(s.width, r.want_w) << r.h << "x" << r.w;
  }
}

TEST(SmartResize, RoundsHalfToEven) {
  // 272/32 = 8.5 and 400/32 = 12.5 both round down to even; 304/32 = 9.5 rounds up.
  EXPECT_EQ(smart_resize(272, 400, kFactor, 0, kMaxPixels).height, 256);
  EXPECT_EQ(smart_resize(272, 400, kFactor, 0, kMaxPixels).width, 384);
  EXPECT_EQ(smart_resize(304, 304, kFactor, 0, kMaxPixels).height, 320);
}

TEST(SmartResize, AspectRatioLimit) {
  EXPECT_NO_THROW(smart_resize(10, 2000, kFactor, kMinPixels, kMaxPixels));  // exactly 200
  expect_error([] { smart_resize(10, 2001, kFactor, kMinPixels, kMaxPixels); }, {"aspect ratio", "200"});
  expect_error([] { smart_resize(30000, 100, kFactor, kMinPixels, kMaxPixels); }, {"aspect ratio"});
  expect_error([] { smart_resize(0, 100, kFactor, kMinPixels, kMaxPixels); }, {"empty side"});
}

// ---------------------------------------------------------------- resize

TEST(Resize, SameSizeIsACopy) {
  const RgbImage img = pattern(37, 23);
  const RgbImage out = resize_bicubic(img, 37, 23);
  EXPECT_EQ(out.width, 37);
  EXPECT_EQ(out.height, 23);
  EXPECT_EQ(out.pixels, img.pixels);
}

TEST(Resize, ConstantImageStaysConstant) {
  // The normalised fixed-point weights sum to 1 within rounding, and Pillow's
  // +1/2 before the shift makes a flat colour come back unchanged.
  RgbImage img{31, 17, {}};
  for (int i = 0; i < 31 * 17; ++i) img.pixels.insert(img.pixels.end(), {200, 7, 128});
  for (const auto [w, h] : {std::array<std::int64_t, 2>{64, 40}, {9, 5}, {31, 50}, {1, 1}, {200, 3}}) {
    const RgbImage out = resize_bicubic(img, w, h);
    ASSERT_EQ(out.width, w);
    ASSERT_EQ(out.height, h);
    ASSERT_EQ(out.pixels.size(), static_cast<std::size_t>(w * h * 3));
    for (std::size_t i = 0; i < out.pixels.size(); i += 3) {
      ASSERT_EQ(out.pixels[i], 200);
      ASSERT_EQ(out.pixels[i + 1], 7);
      ASSERT_EQ(out.pixels[i + 2], 128);
    }
  }
}

TEST(Resize, RejectsEmptyTarget) {
  const RgbImage img = pattern(4, 4);
  expect_error([&] { resize_bicubic(img, 0, 4); }, {"empty"});
  expect_error([&] { resize_bicubic(img, 4, -1); }, {"empty"});
}

// ---------------------------------------------------------------- PGM/PPM

TEST(Ppm, P6WithComments) {
  TempDir dir;
  const std::string data("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0A\x0B\x0C\xFD\xFE\xFF\x00\x80\x10", 18);
  const auto path = dir.write("a.bin", "P6\n# made by hand\n3 2\n255\n" + data);
  const RgbImage img = load_image(path);
  EXPECT_EQ(img.width, 3);
  EXPECT_EQ(img.height, 2);
  EXPECT_EQ(std::string(img.pixels.begin(), img.pixels.end()), data);
}

TEST(Ppm, P5IsReplicatedToRgb) {
  TempDir dir;
  const RgbImage img = load_image(dir.write("g.pgm", std::string("P5 2 2 255\n\x00\x40\x80\xFF", 15)));
  const std::vector<std::uint8_t> want = {0, 0, 0, 0x40, 0x40, 0x40, 0x80, 0x80, 0x80, 0xFF, 0xFF, 0xFF};
  EXPECT_EQ(img.pixels, want);
}

TEST(Ppm, SixteenBitFollowsPillow) {
  TempDir dir;
  // PGM maxval 65535 opens as Pillow mode "I"; convert("RGB") clips it to 255.
  const RgbImage g = load_image(dir.write("g16.pgm", std::string("P5 3 1 65535\n\x00\x07\x00\xFF\x01\x00", 19)));
  EXPECT_EQ(g.pixels, (std::vector<std::uint8_t>{7, 7, 7, 255, 255, 255, 255, 255, 255}));
  // PPM maxval 65535 is scaled: round(v / 65535 * 255), half to even.
  const RgbImage c = load_image(dir.write("c16.ppm", std::string("P6 1 1 65535\n\x80\x00\x00\x80\xFF\xFF", 19)));
  EXPECT_EQ(c.pixels, (std::vector<std::uint8_t>{128, 0, 255}));
  // A small maxval is scaled to 0..255.
  const RgbImage s = load_image(dir.write("s.pgm", std::string("P5 2 1 15\n\x0F\x07", 12)));
  EXPECT_EQ(s.pixels, (std::vector<std::uint8_t>{255, 255, 255, 119, 119, 119}));
}

TEST(Ppm, BadHeadersAndData) {
  TempDir dir;
  const auto zero = dir.write("zero.ppm", "P6 0 0 255\n");
  expect_error([&] { load_image(zero); }, {zero.string(), "empty image", "0x0"});
  const auto short_data = dir.write("short.ppm", "P6 4 4 255\n" + std::string(47, 'x'));
  expect_error([&] { load_image(short_data); }, {short_data.string(), "truncated"});
  const auto bad_max = dir.write("max.ppm", "P6 1 1 0\nxyz");
  expect_error([&] { load_image(bad_max); }, {bad_max.string(), "maxval"});
  const auto no_height = dir.write("noh.ppm", "P6 4");
  expect_error([&] { load_image(no_height); }, {no_height.string(), "height"});
}

// ---------------------------------------------------------------- bad inputs

TEST(LoadImage, HugeHeadersFailFastWithoutAllocating) {
  TempDir dir;
  const auto ppm = dir.write("huge.ppm", "P6 100000 100000 255\n");
  const auto png = dir.write("huge.png", png_header_only(100000, 100000));
  const auto start = std::chrono::steady_clock::now();
  expect_error([&] { load_image(ppm); }, {ppm.string(), "100000x100000", "exceeds the limit"});
  expect_error([&] { load_image(png); }, {png.string(), "100000x100000", "exceeds the limit"});
  // With the guard lifted, the missing data is noticed before 30 GB are allocated.
  const DecodeLimits unlimited{std::int64_t{1} << 40};
  expect_error([&] { load_image(ppm, unlimited); }, {ppm.string(), "truncated"});
  expect_error([&] { load_image(png, unlimited); }, {png.string(), "PNG"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(LoadImage, ZeroSizedPngHeader) {
  TempDir dir;
  const auto png = dir.write("zero.png", png_header_only(0, 0));
  expect_error([&] { load_image(png); }, {png.string(), "empty image"});
}

TEST(LoadImage, LimitIsConfigurable) {
  TempDir dir;
  const auto png = dir.write("small.png", encode_png(pattern(20, 10)));
  EXPECT_NO_THROW(load_image(png, DecodeLimits{200}));
  expect_error([&] { load_image(png, DecodeLimits{199}); }, {png.string(), "20x10", "199"});
}

TEST(LoadImage, NotAnImage) {
  TempDir dir;
  const auto txt = dir.write("notes.png", "This is a text file, whatever its name says.\n");
  expect_error([&] { load_image(txt); }, {txt.string(), "not a recognised image"});
  const auto empty = dir.write("empty.jpg", "");
  expect_error([&] { load_image(empty); }, {empty.string(), "empty file"});
  const auto gif = dir.write("a.gif", "GIF89a\x01\x00\x01\x00");
  expect_error([&] { load_image(gif); }, {gif.string(), "GIF"});
}

TEST(LoadImage, MissingFile) {
  TempDir dir;
  const auto path = dir.path() / "does_not_exist.png";
  expect_error([&] { load_image(path); }, {path.string(), "cannot open"});
}

TEST(LoadImage, PngRoundTripAndTruncation) {
  TempDir dir;
  const RgbImage src = pattern(57, 33);
  const std::string png = encode_png(src);
  const RgbImage back = load_image(dir.write("ok.png", png));
  EXPECT_EQ(back.width, 57);
  EXPECT_EQ(back.height, 33);
  EXPECT_EQ(back.pixels, src.pixels);
  const auto cut = dir.write("cut.png", png.substr(0, png.size() / 2));
  expect_error([&] { load_image(cut); }, {cut.string(), "truncated PNG"});
  // Damage inside the compressed data, with the file length intact.
  std::string corrupt = png;
  for (std::size_t i = 60; i < 90; ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5A);
  const auto bad = dir.write("bad.png", corrupt);
  expect_error([&] { load_image(bad); }, {bad.string(), "PNG"});
}

// Found by fuzz_image_png: libpng allocates a chunk's declared length (up to 2 GiB) before
// reading it, so an 84-byte file could ask for 2 GB. Chunks that run past the end of the file
// are now cut off before libpng sees them: the same outcome, without the allocation (the fuzz
// target's 64 MB malloc limit checks that part, on tests/fuzz/regressions/fuzz_image_png).
TEST(LoadImage, PngChunkLongerThanTheFile) {
  TempDir dir;
  const RgbImage src = pattern(9, 4);
  const std::string png = encode_png(src);
  const std::string huge_text = std::string("\x7f\xff\xff\xf0tEXt", 8) + "Comment\0x";  // 2 GiB declared, 9 present
  const std::size_t after_ihdr = 8 + 25;
  const auto early = dir.write("early.png", png.substr(0, after_ihdr) + huge_text + png.substr(after_ihdr));
  expect_error([&] { load_image(early); }, {early.string(), "truncated PNG"});
  // After the image data, a damaged tail is accepted, as Pillow accepts it.
  const std::size_t iend = png.size() - 12;
  const RgbImage late = load_image(dir.write("late.png", png.substr(0, iend) + huge_text));
  EXPECT_EQ(late.pixels, src.pixels);
}

TEST(LoadImage, JpegDecodesAndTruncationFails) {
  TempDir dir;
  const RgbImage src = pattern(64, 48);
  const std::string jpeg = encode_jpeg(src);
  const RgbImage back = load_image(dir.write("ok.jpg", jpeg));
  ASSERT_EQ(back.width, 64);
  ASSERT_EQ(back.height, 48);
  double err = 0;
  for (std::size_t i = 0; i < src.pixels.size(); ++i) err += std::abs(int{src.pixels[i]} - int{back.pixels[i]});
  EXPECT_LT(err / static_cast<double>(src.pixels.size()), 16.0);  // lossy: close, not exact
  const auto cut = dir.write("cut.jpg", jpeg.substr(0, jpeg.size() / 2));
  expect_error([&] { load_image(cut); }, {cut.string(), "truncated JPEG"});
  const auto header_only = dir.write("hdr.jpg", jpeg.substr(0, 20));
  expect_error([&] { load_image(header_only); }, {header_only.string(), "JPEG"});
}

}  // namespace
}  // namespace qhx::image
