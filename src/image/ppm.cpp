// Binary PGM/PPM (P5/P6), hand-parsed the way Pillow's PpmImagePlugin reads
// them, so that the header tokenising, the data offset and the sample scaling
// all agree with it.
#include <algorithm>
#include <cmath>
#include <string>

#include "image/codecs.hpp"
#include "qhexrt/error.hpp"

namespace qhx::image::detail {
namespace {

bool is_space(std::uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Pillow's PpmImageFile._read_token: skips leading whitespace and '#' comments
// (to CR, LF or EOF), stops after one terminating whitespace byte, and allows
// at most 10 characters.
struct Tokens {
  const Source& src;
  std::size_t pos;

  std::int64_t next_number(const char* what) {
    const auto bytes = src.bytes;
    std::string token;
    while (token.size() <= 10) {
      if (pos >= bytes.size()) break;
      const std::uint8_t c = bytes[pos++];
      if (is_space(c)) {
        if (token.empty()) continue;
        break;
      }
      if (c == '#') {
        while (pos < bytes.size()) {
          const std::uint8_t d = bytes[pos++];
          if (d == '\r' || d == '\n') break;
        }
        continue;
      }
      token.push_back(static_cast<char>(c));
    }
    if (token.empty()) decode_fail(src, cat("truncated PGM/PPM header (no ", what, ")"));
    if (token.size() > 10) decode_fail(src, cat("PGM/PPM header ", what, " token too long: '", token, "'"));
    std::int64_t v = 0;
    for (const char c : token) {
      if (c < '0' || c > '9') decode_fail(src, cat("PGM/PPM header ", what, " is not a number: '", token, "'"));
      v = v * 10 + (c - '0');
    }
    return v;
  }
};

// Pillow's PpmDecoder: round(value / maxval * out_max) with Python's
// round-half-to-even, capped at out_max.
std::int64_t rescale(std::int64_t value, std::int64_t maxval, std::int64_t out_max) {
  const double r =
      std::nearbyint(static_cast<double>(value) / static_cast<double>(maxval) * static_cast<double>(out_max));
  return std::min(out_max, static_cast<std::int64_t>(r));
}

}  // namespace

Decoded decode_ppm(const Source& src) {
  const bool rgb = src.bytes[1] == '6';
  Tokens tokens{src, 3};  // the magic "P5"/"P6" and its whitespace
  const std::int64_t width = tokens.next_number("width");
  const std::int64_t height = tokens.next_number("height");
  const std::int64_t maxval = tokens.next_number("maxval");
  check_dimensions(src, width, height);
  if (maxval <= 0 || maxval >= 65536) decode_fail(src, cat("PGM/PPM maxval ", maxval, " is not in 1..65535"));

  const std::int64_t bands = rgb ? 3 : 1;
  const std::int64_t sample_bytes = maxval < 256 ? 1 : 2;
  const std::int64_t samples = width * height * bands;
  const std::size_t need = static_cast<std::size_t>(samples * sample_bytes);
  if (src.bytes.size() - tokens.pos < need)
    decode_fail(src, cat("truncated PGM/PPM data (", src.bytes.size() - tokens.pos, " of ", need, " bytes)"));
  const std::uint8_t* in = src.bytes.data() + tokens.pos;

  // Pillow's mode is "L" or "RGB", except a PGM with maxval > 255, which is
  // mode "I" scaled to 0..65535 (verbatim when maxval is 65535); convert("RGB")
  // then clips "I" to 0..255 rather than scaling it down.
  const bool mode_i = !rgb && maxval > 255;
  const std::int64_t out_max = mode_i ? 65535 : 255;
  Decoded out;
  out.image.width = width;
  out.image.height = height;
  out.image.pixels.resize(static_cast<std::size_t>(width * height * 3));
  std::uint8_t* px = out.image.pixels.data();
  for (std::int64_t i = 0; i < samples; ++i) {
    std::int64_t v = sample_bytes == 1 ? in[i] : (std::int64_t{in[2 * i]} << 8) | in[2 * i + 1];
    if (maxval != out_max) v = rescale(v, maxval, out_max);
    const auto byte = static_cast<std::uint8_t>(std::min<std::int64_t>(v, 255));
    if (rgb) {
      px[i] = byte;
    } else {
      px[3 * i] = px[3 * i + 1] = px[3 * i + 2] = byte;
    }
  }
  return out;
}

}  // namespace qhx::image::detail
