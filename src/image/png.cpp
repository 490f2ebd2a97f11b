// PNG through libpng, converted to RGB with Pillow's rules for the Pillow mode
// each PNG type opens as (PngImagePlugin._MODES, then convert("RGB")):
//   gray 1/2/4/8 bit  "1"/"L" (low depths scaled by 255/85/17)  → replicated
//   gray 16 bit       "I;16"  → Convert.c I16_RGB: min(value, 255), not value >> 8
//   RGB/RGBA/LA 16    "RGB;16B"/"RGBA;16B"/"LA;16B" raw modes → the high byte
//   palette           "P"     → palette lookup; indices past the PLTE read as
//                               black (Pillow's palette is zero-filled)
// Alpha and tRNS are dropped, gamma and colour chunks ignored, as in Pillow.
//
// libpng reports errors through on_error, which longjmps back into run_libpng;
// the frames it skips hold nothing with a destructor, and png_destroy_read_struct
// in the caller frees libpng's memory.
#include <algorithm>
#include <array>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string_view>

#include <png.h>

#include "image/codecs.hpp"
#include "qhexrt/error.hpp"

namespace qhx::image::detail {
namespace {

struct PngState {
  std::jmp_buf jump{};
  char message[256]{};
  std::span<const std::uint8_t> bytes;
  std::size_t pos = 0;
  bool truncated = false;
  bool image_done = false;
};

void on_error(png_structp png, png_const_charp msg) {
  auto& st = *static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(st.message, sizeof st.message, "%s", msg);
  std::longjmp(st.jump, 1);
}

void on_warning(png_structp, png_const_charp) {}  // Pillow does not surface them either

void read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto& st = *static_cast<PngState*>(png_get_io_ptr(png));
  if (st.bytes.size() - st.pos < n) {
    st.truncated = true;
    png_error(png, "premature end of file");
  }
  std::memcpy(out, st.bytes.data() + st.pos, n);
  st.pos += n;
}

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

// The bytes up to the first chunk other than IDAT whose declared length runs past
// the end of the file. libpng allocates such a chunk's declared length (up to
// 2 GiB, whatever the file's size) before reading it; handed only whole chunks, it
// meets the end of the data at that chunk's header instead: the same truncation,
// found before the allocation. IDAT is read in pieces (no allocation of its
// length) and may complete the image before its cut-off end, so it is left whole.
std::size_t whole_chunks(std::span<const std::uint8_t> b) {
  std::size_t pos = 8;  // the signature
  while (b.size() - pos >= 8) {
    const std::uint64_t length = be32(b.data() + pos);
    if (length + 12 > b.size() - pos && std::memcmp(b.data() + pos + 4, "IDAT", 4) != 0) return pos;
    pos += static_cast<std::size_t>(std::min<std::uint64_t>(length + 12, b.size() - pos));
  }
  return b.size();
}

// ImageMagick's "Raw profile type exif" text: three header lines, then hex
// (Pillow: bytes.fromhex("".join(text.split("\n")[3:]))). Malformed hex, which
// makes Pillow's getexif raise, is treated here as no EXIF.
std::vector<std::uint8_t> raw_profile_bytes(std::string_view text) {
  for (int newlines = 0; newlines < 3; ++newlines) {
    const std::size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return {};
    text.remove_prefix(nl + 1);
  }
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<std::uint8_t> out;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == ' ' || (c >= '\t' && c <= '\r')) {
      ++i;
      continue;
    }
    if (i + 1 >= text.size() || hex(c) < 0 || hex(text[i + 1]) < 0) return {};
    out.push_back(static_cast<std::uint8_t>(hex(c) * 16 + hex(text[i + 1])));
    i += 2;
  }
  return out;
}

// Pillow's info["exif"] comes from eXIf, else from the raw-profile text;
// "XML:com.adobe.xmp" (tEXt, zTXt or iTXt) holds the XMP, the last one winning.
void collect_metadata(png_structp png, png_infop info, Decoded& out) {
  png_bytep exif = nullptr;
  png_uint_32 exif_size = 0;
  std::vector<std::uint8_t> raw_profile;
  png_textp texts = nullptr;
  int num_texts = 0;
  png_get_text(png, info, &texts, &num_texts);
  for (int i = 0; i < num_texts; ++i) {
    const png_text& t = texts[i];
    const std::string_view key = t.key;
    const std::string_view value(t.text, t.compression >= PNG_ITXT_COMPRESSION_NONE ? t.itxt_length : t.text_length);
    if (key == "XML:com.adobe.xmp") out.xmp.assign(value);
    if (key == "Raw profile type exif") raw_profile = raw_profile_bytes(value);
  }
  if (png_get_eXIf_1(png, info, &exif_size, &exif) != 0 && exif != nullptr) {
    out.exif.assign(exif, exif + exif_size);
  } else {
    out.exif = std::move(raw_profile);
  }
}

// Everything run_libpng learns, kept outside its frame so that it survives a
// longjmp and so that nothing reads libpng's structs after an error.
struct Buffers {
  std::int64_t width = 0, height = 0;
  int color_type = 0, bit_depth = 0;  // after libpng's transformations
  std::vector<std::uint8_t> raw;
  std::vector<png_bytep> rows;
  std::array<std::uint8_t, 256 * 3> palette{};
};

// All libpng calls happen here, below the setjmp. Nothing with a destructor is
// created in this frame after setjmp; the buffers live in the caller.
bool run_libpng(png_structp png, png_infop info, PngState& st, const Source& src, Buffers& buf, Decoded& out) {
  if (setjmp(st.jump) != 0) return false;
  png_set_read_fn(png, &st, read_bytes);
  png_read_info(png, info);
  buf.width = png_get_image_width(png, info);
  buf.height = png_get_image_height(png, info);
  check_dimensions(src, buf.width, buf.height);
  const int color_type = png_get_color_type(png, info), bit_depth = png_get_bit_depth(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    png_colorp plte = nullptr;
    int entries = 0;
    if (png_get_PLTE(png, info, &plte, &entries) != 0)
      for (int i = 0; i < std::min(entries, 256); ++i) {
        buf.palette[static_cast<std::size_t>(3 * i)] = plte[i].red;
        buf.palette[static_cast<std::size_t>(3 * i + 1)] = plte[i].green;
        buf.palette[static_cast<std::size_t>(3 * i + 2)] = plte[i].blue;
      }
    png_set_packing(png);
  } else if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) {
    png_set_expand_gray_1_2_4_to_8(png);
  }
  if (bit_depth == 16 && color_type != PNG_COLOR_TYPE_GRAY) png_set_strip_16(png);  // truncates, as Pillow does
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  buf.color_type = png_get_color_type(png, info);
  buf.bit_depth = png_get_bit_depth(png, info);
  collect_metadata(png, info, out);  // chunks before IDAT, in case the tail is unreadable

  const std::size_t rowbytes = png_get_rowbytes(png, info);
  buf.raw.resize(rowbytes * static_cast<std::size_t>(buf.height));
  buf.rows.resize(static_cast<std::size_t>(buf.height));
  for (std::size_t y = 0; y < buf.rows.size(); ++y) buf.rows[y] = buf.raw.data() + y * rowbytes;
  png_read_image(png, buf.rows.data());
  st.image_done = true;
  png_read_end(png, info);
  collect_metadata(png, info, out);  // now with the chunks after IDAT too
  return true;
}

RgbImage to_rgb(const Buffers& buf) {
  RgbImage img;
  img.width = buf.width;
  img.height = buf.height;
  const auto width = static_cast<std::size_t>(img.width);
  img.pixels.resize(width * static_cast<std::size_t>(img.height) * 3);
  for (std::size_t y = 0; y < buf.rows.size(); ++y) {
    const std::uint8_t* in = buf.rows[y];
    std::uint8_t* out = img.pixels.data() + y * width * 3;
    for (std::size_t x = 0; x < width; ++x, out += 3) {
      switch (buf.color_type) {
        case PNG_COLOR_TYPE_PALETTE: std::copy_n(buf.palette.data() + 3 * in[x], 3, out); break;
        case PNG_COLOR_TYPE_GRAY:
          if (buf.bit_depth == 16) {
            out[0] = out[1] = out[2] = in[2 * x] == 0 ? in[2 * x + 1] : std::uint8_t{255};
          } else {
            out[0] = out[1] = out[2] = in[x];
          }
          break;
        case PNG_COLOR_TYPE_GRAY_ALPHA: out[0] = out[1] = out[2] = in[2 * x]; break;
        case PNG_COLOR_TYPE_RGB: std::copy_n(in + 3 * x, 3, out); break;
        default: std::copy_n(in + 4 * x, 3, out); break;  // RGBA
      }
    }
  }
  return img;
}

struct ReadStructGuard {
  png_structp png;
  png_infop info;
  ~ReadStructGuard() { png_destroy_read_struct(&png, &info, nullptr); }
};

}  // namespace

Decoded decode_png(const Source& src) {
  // The bomb guard reads IHDR straight from the bytes (it must be the first
  // chunk), so an oversized header is refused before libpng sees anything.
  const auto& b = src.bytes;
  if (b.size() >= 24 && std::memcmp(b.data() + 12, "IHDR", 4) == 0)
    check_dimensions(src, be32(b.data() + 16), be32(b.data() + 20));

  PngState st;
  st.bytes = src.bytes.first(src.bytes.size() < 8 ? src.bytes.size() : whole_chunks(src.bytes));
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, on_error, on_warning);
  if (png == nullptr) throw std::bad_alloc();
  ReadStructGuard guard{png, png_create_info_struct(png)};
  if (guard.info == nullptr) throw std::bad_alloc();

  Decoded out;
  Buffers buf;
  // Pillow decodes a PNG whose trailing chunks are cut off or damaged once the
  // image data is complete; so do we.
  if (!run_libpng(png, guard.info, st, src, buf, out) && !st.image_done)
    decode_fail(src, st.truncated ? std::string("truncated PNG data (premature end of file)")
                                  : cat("corrupt PNG data: ", st.message));
  out.image = to_rgb(buf);
  return out;
}

}  // namespace qhx::image::detail
