// PNG through libpng as src/image/png.cpp drives it (every colour type and bit
// depth, palettes, transparency, eXIf and iTXt XMP chunks), then orientation and resize.
#include "image_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qhx::fuzz::decode_and_resize(qhx::fuzz::with_prefix("\x89PNG\r\n\x1A\n", data, size));
  return 0;
}
