// JPEG through libjpeg-turbo, configured as Pillow's JpegDecode.c leaves it
// (ISLOW DCT, fancy upsampling, output colour space chosen by the component
// count), so the pixels match Pillow's bit for bit.
//
// libjpeg reports errors by calling error_exit, which must not return; ours
// longjmps back into run_libjpeg. Every object in the frames that longjmp
// skips (libjpeg's C frames, our callbacks) is trivially destructible, and
// libjpeg's own allocations are released by jpeg_destroy_decompress in the
// caller, so the jump neither leaks nor is undefined behaviour.
#include <algorithm>
#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE without including <stdio.h>
#include <cstring>

#include <jpeglib.h>

#include "image/codecs.hpp"
#include "qhexrt/error.hpp"

namespace qhx::image::detail {
namespace {

struct JpegState {
  jpeg_error_mgr err{};
  jpeg_source_mgr source{};
  std::jmp_buf jump{};
  char message[JMSG_LENGTH_MAX]{};
};

JpegState& state_of(j_common_ptr cinfo) { return *static_cast<JpegState*>(cinfo->client_data); }

void on_error(j_common_ptr cinfo) {
  JpegState& st = state_of(cinfo);
  (*cinfo->err->format_message)(cinfo, st.message);
  std::longjmp(st.jump, 1);
}

// Corrupt-data warnings: libjpeg works around them and Pillow ignores them.
void on_message(j_common_ptr, int) {}

// Pillow feeds libjpeg through a suspending source: at the end of the data
// libjpeg suspends instead of being handed a fake EOI marker (as jpeg_mem_src
// does). A suspension before the last row is Pillow's "image file is
// truncated"; one after it (a file that only lacks its EOI) is accepted. The
// whole file is in memory, so "no more data" is final.
void source_nothing(j_decompress_ptr) {}
boolean source_suspend(j_decompress_ptr) { return FALSE; }
void source_skip(j_decompress_ptr cinfo, long n) {
  jpeg_source_mgr& s = *cinfo->src;
  const std::size_t k = n <= 0 ? 0 : std::min(static_cast<std::size_t>(n), s.bytes_in_buffer);
  s.next_input_byte += k;
  s.bytes_in_buffer -= k;
}

bool starts_with(const jpeg_marker_struct& m, const char* prefix, std::size_t n) {
  return m.data_length >= n && std::memcmp(m.data, prefix, n) == 0;
}

// Pillow's APP1 handling: the first "Exif\0\0" segment is kept whole and later
// ones are appended without their header; the last XMP segment wins.
void collect_metadata(const jpeg_decompress_struct& cinfo, Decoded& out) {
  static constexpr char kExif[] = "Exif\0";                       // with the literal's own NUL: 6 bytes
  static constexpr char kXmp[] = "http://ns.adobe.com/xap/1.0/";  // 29 bytes with its NUL
  for (const jpeg_marker_struct* m = cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker != JPEG_APP0 + 1) continue;
    if (starts_with(*m, kExif, sizeof kExif)) {
      out.exif.insert(out.exif.end(), m->data + (out.exif.empty() ? 0 : sizeof kExif), m->data + m->data_length);
    } else if (starts_with(*m, kXmp, sizeof kXmp)) {
      out.xmp.assign(reinterpret_cast<const char*>(m->data) + sizeof kXmp, m->data_length - sizeof kXmp);
    }
  }
}

// Pillow decodes CMYK JPEGs as Adobe-inverted ("CMYK;I") and converts with
// Convert.c's cmyk2rgb: nk = 255 - k; r = nk - MULDIV255(c, nk), where
// MULDIV255(a, b) = (((a*b + 128) >> 8) + (a*b + 128)) >> 8.
std::uint8_t cmyk_channel(std::uint8_t stored_c, std::uint8_t stored_k) {
  const int c = 255 - stored_c, nk = stored_k;  // nk = 255 - (255 - stored_k)
  const int t = c * nk + 128;
  return static_cast<std::uint8_t>(std::clamp(nk - (((t >> 8) + t) >> 8), 0, 255));
}

enum class Outcome { ok, truncated, error };

// All libjpeg calls happen here, below the setjmp. Nothing with a destructor
// is created in this frame after setjmp; `out` lives in the caller.
Outcome run_libjpeg(jpeg_decompress_struct& cinfo, JpegState& st, const Source& src, Decoded& out) {
  if (setjmp(st.jump) != 0) return Outcome::error;
  jpeg_create_decompress(&cinfo);
  st.source.next_input_byte = src.bytes.data();
  st.source.bytes_in_buffer = src.bytes.size();
  st.source.init_source = source_nothing;
  st.source.fill_input_buffer = source_suspend;
  st.source.skip_input_data = source_skip;
  st.source.resync_to_restart = jpeg_resync_to_restart;
  st.source.term_source = source_nothing;
  cinfo.src = &st.source;
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  if (jpeg_read_header(&cinfo, TRUE) != JPEG_HEADER_OK) return Outcome::truncated;
  check_dimensions(src, cinfo.image_width, cinfo.image_height);
  switch (cinfo.num_components) {
    case 1: cinfo.out_color_space = JCS_GRAYSCALE; break;
    case 3: cinfo.out_color_space = JCS_RGB; break;
    case 4: cinfo.out_color_space = JCS_CMYK; break;
    default:
      decode_fail(src, cat("JPEG with ", cinfo.num_components, " components is not supported (Pillow rejects it too)"));
  }
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  collect_metadata(cinfo, out);

  if (!jpeg_start_decompress(&cinfo)) return Outcome::truncated;  // progressive files are read in full here
  const std::size_t width = cinfo.output_width;
  out.image.width = cinfo.output_width;
  out.image.height = cinfo.output_height;
  out.image.pixels.resize(width * cinfo.output_height * 3);
  const auto stride = static_cast<JDIMENSION>(width * static_cast<std::size_t>(cinfo.output_components));
  JSAMPARRAY row = (*cinfo.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&cinfo), JPOOL_IMAGE, stride, 1);
  while (cinfo.output_scanline < cinfo.output_height) {
    std::uint8_t* dst = out.image.pixels.data() + static_cast<std::size_t>(cinfo.output_scanline) * width * 3;
    if (jpeg_read_scanlines(&cinfo, row, 1) != 1) return Outcome::truncated;
    const std::uint8_t* in = row[0];
    for (std::size_t x = 0; x < width; ++x) {
      if (cinfo.output_components == 1) {
        dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = in[x];
      } else if (cinfo.output_components == 3) {
        std::copy_n(in + 3 * x, 3, dst + 3 * x);
      } else {
        for (std::size_t c = 0; c < 3; ++c) dst[3 * x + c] = cmyk_channel(in[4 * x + c], in[4 * x + 3]);
      }
    }
  }
  jpeg_finish_decompress(&cinfo);  // may suspend on a missing EOI: harmless, every row is out
  return Outcome::ok;
}

struct DecompressGuard {
  jpeg_decompress_struct& cinfo;
  ~DecompressGuard() { jpeg_destroy_decompress(&cinfo); }  // safe on a zeroed or half-built struct
};

}  // namespace

Decoded decode_jpeg(const Source& src) {
  JpegState st;
  jpeg_decompress_struct cinfo{};
  cinfo.err = jpeg_std_error(&st.err);
  st.err.error_exit = on_error;
  st.err.emit_message = on_message;
  cinfo.client_data = &st;
  const DecompressGuard guard{cinfo};
  Decoded out;
  switch (run_libjpeg(cinfo, st, src, out)) {
    case Outcome::ok: return out;
    case Outcome::truncated: decode_fail(src, "truncated JPEG data (premature end of file)");
    case Outcome::error: break;
  }
  decode_fail(src, cat("corrupt JPEG data: ", st.message));
}

}  // namespace qhx::image::detail
