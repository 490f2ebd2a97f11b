// Internal to src/image: the per-format decoders behind load_image. Each one
// hands back pixels already in the form Pillow's convert("RGB") gives for that
// format's Pillow mode, plus the metadata exif_transpose reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "image/image.hpp"

namespace qhx::image::detail {

struct Source {
  const std::filesystem::path& path;
  std::span<const std::uint8_t> bytes;
  const DecodeLimits& limits;
};

struct Decoded {
  RgbImage image;
  std::vector<std::uint8_t> exif;  // TIFF-structured EXIF, with or without the "Exif\0\0" prefix
  std::string xmp;                 // XMP packet text
};

// Throws unless 0 < width, height and width * height <= limits.max_pixels.
// Every decoder calls it as soon as the header is known, before allocating.
void check_dimensions(const Source& src, std::int64_t width, std::int64_t height);

// Throws qhx::Error naming src.path and `problem`.
[[noreturn]] void decode_fail(const Source& src, const std::string& problem);

Decoded decode_jpeg(const Source& src);
Decoded decode_png(const Source& src);
Decoded decode_webp(const Source& src);
Decoded decode_ppm(const Source& src);

// The orientation Pillow's Image.getexif() reports (IFD0 tag 0x0112, else the
// first tiff:Orientation digit in the XMP), 1 when there is none.
int orientation_of(const Decoded& decoded);

// Pillow's transpose for EXIF orientations 2..8; other values leave the image as is.
RgbImage apply_orientation(RgbImage img, int orientation);

}  // namespace qhx::image::detail
