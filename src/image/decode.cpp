// load_image: map the file, recognise the format by its magic bytes (never by
// extension), decode, then orient as PIL.ImageOps.exif_transpose does.
#include <cstring>
#include <string_view>

#include "common/mapped_file.hpp"
#include "image/codecs.hpp"
#include "image/image.hpp"
#include "qhexrt/error.hpp"

namespace qhx::image {

using namespace std::string_view_literals;

namespace detail {

void decode_fail(const Source& src, const std::string& problem) { fail("image ", src.path.string(), ": ", problem); }

void check_dimensions(const Source& src, std::int64_t width, std::int64_t height) {
  if (width <= 0 || height <= 0) decode_fail(src, cat("empty image (", width, "x", height, " pixels)"));
  // Division, not multiplication: a forged header must not overflow the check.
  if (width > src.limits.max_pixels / height)
    decode_fail(src, cat(width, "x", height, " pixels exceeds the limit of ", src.limits.max_pixels,
                         " pixels (DecodeLimits::max_pixels)"));
}

}  // namespace detail

namespace {

bool starts_with(std::span<const std::uint8_t> bytes, std::string_view magic, std::size_t at = 0) {
  return bytes.size() >= at + magic.size() && std::memcmp(bytes.data() + at, magic.data(), magic.size()) == 0;
}

bool is_ppm_whitespace(std::uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Formats Pillow would open but this runtime does not, so the error says what the file is.
const char* unsupported_format(std::span<const std::uint8_t> b) {
  if (starts_with(b, "GIF87a"sv) || starts_with(b, "GIF89a"sv)) return "GIF";
  if (starts_with(b, "BM"sv)) return "BMP";
  if (starts_with(b, "II*\0"sv) || starts_with(b, "MM\0*"sv)) return "TIFF";
  if (starts_with(b, "ftypavif"sv, 4) || starts_with(b, "ftypheic"sv, 4)) return "AVIF/HEIF";
  if (b.size() >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '4') return "plain/bitmap PNM (P1-P4)";
  return nullptr;
}

}  // namespace

RgbImage load_image(const std::filesystem::path& path, const DecodeLimits& limits) {
  const MappedFile file(path);
  return file.parse([&](const MappedFile& f) {
    const std::span<const std::uint8_t> bytes(reinterpret_cast<const std::uint8_t*>(f.data()), f.size());
    return decode_image(bytes, path.string(), limits);
  });
}

RgbImage decode_image(std::span<const std::uint8_t> bytes, const std::string& name, const DecodeLimits& limits) {
  const std::filesystem::path label(name);
  const detail::Source src{label, bytes, limits};
  if (bytes.empty()) detail::decode_fail(src, "empty file");

  detail::Decoded decoded;
  if (starts_with(bytes, "\xFF\xD8\xFF"sv)) {
    decoded = detail::decode_jpeg(src);
  } else if (starts_with(bytes, "\x89PNG\r\n\x1A\n"sv)) {
    decoded = detail::decode_png(src);
  } else if (starts_with(bytes, "RIFF"sv) && starts_with(bytes, "WEBP"sv, 8)) {
    decoded = detail::decode_webp(src);
  } else if (bytes.size() >= 3 && bytes[0] == 'P' && (bytes[1] == '5' || bytes[1] == '6') &&
             is_ppm_whitespace(bytes[2])) {
    decoded = detail::decode_ppm(src);
  } else if (const char* other = unsupported_format(bytes)) {
    detail::decode_fail(src, cat(other, " images are not supported (supported: JPEG, PNG, WebP, binary PGM/PPM)"));
  } else {
    detail::decode_fail(src, "not a recognised image (expected JPEG, PNG, WebP or binary PGM/PPM content)");
  }
  return detail::apply_orientation(std::move(decoded.image), detail::orientation_of(decoded));
}

}  // namespace qhx::image
