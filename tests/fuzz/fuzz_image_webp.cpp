// WebP through libwebp's demuxer and animation decoder as src/image/webp.cpp
// drives them (lossy, lossless, VP8X with alpha, EXIF and XMP chunks, animation),
// then orientation and resize.
#include "image_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0) {
    qhx::fuzz::decode_and_resize(std::vector<std::uint8_t>(data, data + size));
    return 0;
  }
  // A RIFF header whose size field matches, around the chunks the input holds.
  std::vector<std::uint8_t> framed = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
  const auto riff = static_cast<std::uint32_t>(size + 4);
  for (int i = 0; i < 4; ++i) framed[4 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(riff >> (8 * i));
  framed.insert(framed.end(), data, data + size);
  qhx::fuzz::decode_and_resize(framed);
  return 0;
}
