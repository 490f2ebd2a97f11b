// WebP through libwebp's animation decoder with default options (RGBA output),
// the very path Pillow's _webp.c takes, so lossy, lossless and animated files
// (first frame) decode to the same pixels; the alpha channel is then dropped.
#include <memory>

#include <webp/decode.h>
#include <webp/demux.h>

#include "image/codecs.hpp"
#include "qhexrt/error.hpp"

namespace qhx::image::detail {
namespace {

struct AnimDecoderDelete {
  void operator()(WebPAnimDecoder* d) const { WebPAnimDecoderDelete(d); }
};

// Pillow keeps the EXIF and XMP chunks only when they are non-empty.
template <typename Container>
void copy_chunk(const WebPDemuxer* demux, const char* fourcc, Container& out) {
  WebPChunkIterator it{};
  if (WebPDemuxGetChunk(demux, fourcc, 1, &it) != 0 && it.chunk.size > 0)
    out.assign(it.chunk.bytes, it.chunk.bytes + it.chunk.size);
  WebPDemuxReleaseChunkIterator(&it);
}

}  // namespace

Decoded decode_webp(const Source& src) {
  // Header-only parse first: the decoder allocates the whole canvas up front.
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(src.bytes.data(), src.bytes.size(), &features);
  if (status == VP8_STATUS_NOT_ENOUGH_DATA) decode_fail(src, "truncated WebP data (incomplete header)");
  if (status != VP8_STATUS_OK)
    decode_fail(src, cat("corrupt WebP header (libwebp status ", static_cast<int>(status), ")"));
  check_dimensions(src, features.width, features.height);

  const WebPData data{src.bytes.data(), src.bytes.size()};
  const std::unique_ptr<WebPAnimDecoder, AnimDecoderDelete> dec(WebPAnimDecoderNew(&data, nullptr));
  if (!dec) decode_fail(src, "truncated or corrupt WebP data (libwebp cannot parse the container)");
  WebPAnimInfo info;
  if (WebPAnimDecoderGetInfo(dec.get(), &info) == 0) decode_fail(src, "corrupt WebP data (no canvas info)");
  check_dimensions(src, info.canvas_width, info.canvas_height);
  std::uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (WebPAnimDecoderGetNext(dec.get(), &rgba, &timestamp) == 0 || rgba == nullptr)
    decode_fail(src, "truncated or corrupt WebP image data");

  Decoded out;
  out.image.width = info.canvas_width;
  out.image.height = info.canvas_height;
  const std::size_t n = static_cast<std::size_t>(out.image.width * out.image.height);
  out.image.pixels.resize(n * 3);
  for (std::size_t i = 0; i < n; ++i) {
    out.image.pixels[3 * i] = rgba[4 * i];
    out.image.pixels[3 * i + 1] = rgba[4 * i + 1];
    out.image.pixels[3 * i + 2] = rgba[4 * i + 2];
  }
  const WebPDemuxer* demux = WebPAnimDecoderGetDemuxer(dec.get());
  copy_chunk(demux, "EXIF", out.exif);
  copy_chunk(demux, "XMP ", out.xmp);
  return out;
}

}  // namespace qhx::image::detail
