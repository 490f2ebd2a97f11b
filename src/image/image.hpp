// Image input: decode a file to 8-bit RGB and resize it, reproducing what the
// Hugging Face processor sees (Pillow's open + exif_transpose + convert("RGB"),
// then Pillow's bicubic resize to Qwen's smart_resize target). Spec §3.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace qhx::image {

// Row-major HWC, RGB8: pixels.size() == width * height * 3.
struct RgbImage {
  std::int64_t width = 0, height = 0;
  std::vector<std::uint8_t> pixels;
};

// Decompression-bomb guard: a header claiming more pixels is rejected before
// any pixel memory is allocated.
struct DecodeLimits {
  std::int64_t max_pixels = 100'000'000;
};

// JPEG, PNG, WebP and binary PGM/PPM (P5/P6), recognised by content, not by
// extension. Applies the EXIF orientation as PIL.ImageOps.exif_transpose does,
// and converts to RGB exactly as Pillow's convert("RGB") does. Throws
// qhx::Error naming the file and the problem.
RgbImage load_image(const std::filesystem::path& path, const DecodeLimits& limits = {});
// The same for an encoded image in memory; `name` stands for the path in errors.
RgbImage decode_image(std::span<const std::uint8_t> bytes, const std::string& name, const DecodeLimits& limits = {});

// Pillow's Image.resize((width, height), Image.BICUBIC) on 8-bit RGB, bit-exact;
// a copy when the size does not change. Throws qhx::Error on a non-positive size.
RgbImage resize_bicubic(const RgbImage& img, std::int64_t width, std::int64_t height);

struct Size {
  std::int64_t height, width;
};

// transformers' smart_resize (spec §3.2): both sides multiples of `factor`,
// area within [min_pixels, max_pixels], Python's round-half-to-even. Throws
// qhx::Error for an empty side or an aspect ratio above 200.
Size smart_resize(std::int64_t height, std::int64_t width, std::int64_t factor, std::int64_t min_pixels,
                  std::int64_t max_pixels);

}  // namespace qhx::image
