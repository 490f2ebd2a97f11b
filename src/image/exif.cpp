// Which EXIF orientation Pillow sees. Image.getexif() reads IFD0 of the EXIF
// block (libexif parses it here) and, only when that has no Orientation tag,
// falls back to the first r'tiff:Orientation(="|>)([0-9])' match in the XMP.
#include <libexif/exif-data.h>

#include <algorithm>
#include <memory>
#include <new>
#include <optional>
#include <string_view>

#include "image/codecs.hpp"

namespace qhx::image::detail {
namespace {

struct ExifDataUnref {
  void operator()(ExifData* d) const { exif_data_unref(d); }
};

// Pillow accepts a single integer of any integer type as the value; anything
// else (a list, a rational, text) makes it ignore the tag.
int entry_value(const ExifEntry& e, ExifByteOrder order) {
  if (e.components != 1 || e.data == nullptr) return 0;
  const unsigned need = static_cast<unsigned>(exif_format_get_size(e.format));
  if (need == 0 || e.size < need) return 0;
  switch (e.format) {
    case EXIF_FORMAT_BYTE: return e.data[0];
    case EXIF_FORMAT_SBYTE: return static_cast<signed char>(e.data[0]);
    case EXIF_FORMAT_SHORT: return exif_get_short(e.data, order);
    case EXIF_FORMAT_SSHORT: return exif_get_sshort(e.data, order);
    case EXIF_FORMAT_LONG: return static_cast<int>(exif_get_long(e.data, order) & 0x7FFFFFFF);
    case EXIF_FORMAT_SLONG: return static_cast<int>(exif_get_slong(e.data, order));
    default: return 0;
  }
}

// nullopt when IFD0 has no Orientation tag.
std::optional<int> exif_orientation(const std::vector<std::uint8_t>& exif) {
  // Pillow strips any number of "Exif\0\0" prefixes (a PNG eXIf chunk has
  // none); libexif wants exactly one.
  static constexpr std::uint8_t kHeader[6] = {'E', 'x', 'i', 'f', 0, 0};
  std::size_t start = 0;
  while (exif.size() - start >= 6 &&
         std::equal(kHeader, kHeader + 6, exif.begin() + static_cast<std::ptrdiff_t>(start)))
    start += 6;
  if (start == exif.size()) return std::nullopt;
  std::vector<std::uint8_t> block(kHeader, kHeader + 6);
  block.insert(block.end(), exif.begin() + static_cast<std::ptrdiff_t>(start), exif.end());
  if (block.size() > 0xFFFFFFFFu) return std::nullopt;

  const std::unique_ptr<ExifData, ExifDataUnref> data(exif_data_new());
  if (!data) throw std::bad_alloc();
  // Parse only: no tags invented or rewritten to "follow the specification".
  exif_data_unset_option(data.get(), EXIF_DATA_OPTION_FOLLOW_SPECIFICATION);
  exif_data_load_data(data.get(), block.data(), static_cast<unsigned>(block.size()));
  const ExifEntry* e = exif_content_get_entry(data->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
  if (e == nullptr) return std::nullopt;
  return entry_value(*e, exif_data_get_byte_order(data.get()));
}

// The regex search spelled out: a plain scan stays linear on large packets.
int xmp_orientation(std::string_view xmp) {
  constexpr std::string_view key = "tiff:Orientation";
  for (std::size_t at = xmp.find(key); at != std::string_view::npos; at = xmp.find(key, at + 1)) {
    std::string_view rest = xmp.substr(at + key.size());
    if (rest.starts_with("=\"")) {
      rest.remove_prefix(2);
    } else if (rest.starts_with('>')) {
      rest.remove_prefix(1);
    } else {
      continue;
    }
    if (!rest.empty() && rest[0] >= '0' && rest[0] <= '9') return rest[0] - '0';
  }
  return 1;
}

}  // namespace

int orientation_of(const Decoded& decoded) {
  // An Orientation tag, even an unusable one, hides the XMP value.
  if (const std::optional<int> v = exif_orientation(decoded.exif)) return *v;
  return xmp_orientation(decoded.xmp);
}

}  // namespace qhx::image::detail
