// JPEG through libjpeg-turbo as src/image/jpeg.cpp drives it (suspending source,
// longjmp errors, CMYK, APP1 EXIF/XMP), then orientation and resize.
#include "image_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qhx::fuzz::decode_and_resize(qhx::fuzz::with_prefix("\xFF\xD8\xFF", data, size));
  return 0;
}
