// Binary PGM/PPM through the hand-written parser (src/image/ppm.cpp): header
// tokens, comments, maxval scaling, 16-bit samples; then resize.
#include "image_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Either magic: the first byte's low bit picks P5 or P6 when the input has none.
  const bool has_magic = size >= 3 && data[0] == 'P' && (data[1] == '5' || data[1] == '6');
  if (has_magic || size == 0) {
    qhx::fuzz::decode_and_resize(std::vector<std::uint8_t>(data, data + size));
  } else {
    qhx::fuzz::decode_and_resize(qhx::fuzz::with_prefix((data[0] & 1) != 0 ? "P6\n" : "P5\n", data + 1, size - 1));
  }
  return 0;
}
