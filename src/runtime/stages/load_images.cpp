// "load_images": every image of the request, brought to the vision encoder's
// input size — "fixed" (the seed: any image to size x size) or "native"
// (Qwen's smart_resize: aspect kept, sides multiples of 32, pixel count within
// [min_pixels, max_pixels], as transformers' processor does). An image the
// pipeline has seen before (same encoded bytes, same resize settings) is not
// decoded: the memo gives its pixel hash and size, which is all the prompt
// needs; its pixels are decoded later only if its features must be computed.
#include <optional>

#include "common/mapped_file.hpp"
#include "image/image.hpp"
#include "qhexrt/error.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

std::string resize_mode(const RunContext& ctx) {
  const std::string mode = ctx.options.resize.value_or(ctx.res.manifest.image.resize);
  if (mode != "fixed" && mode != "native") fail("resize mode must be \"fixed\" or \"native\", got \"", mode, "\"");
  return mode;
}

// Calls fn with the encoded bytes of `src` (a file is mapped, not copied).
template <typename Fn>
void with_encoded(const ImageSource& src, Fn&& fn) {
  if (!src.bytes.empty()) return fn(std::span<const std::uint8_t>(src.bytes));
  if (src.path.empty()) fail(src.name(), ": an image with neither a file nor bytes");
  std::optional<MappedFile> mapped;
  try {
    mapped.emplace(src.path);
  } catch (const Error& e) {
    if (src.label.empty()) throw;
    fail("image ", src.name(), ": ", e.what());  // the label says where the image is (e.g. which message)
  }
  // An image rewritten while it is decoded is an error naming it, not a crash or garbage pixels.
  mapped->parse([&](const MappedFile& file) {
    fn(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(file.data()), file.size()));
    return true;
  });
}

void set_grid(RunContext& ctx, RunContext::Image& im) {
  im.gh = im.height / ctx.res.family->patch_size();
  im.gw = im.width / ctx.res.family->patch_size();
}

class LoadImagesStage final : public Stage {
 public:
  void run(RunContext& ctx) override {
    const auto t0 = Clock::now();
    bool decoded_any = false;
    const std::string mode = resize_mode(ctx);
    const ManifestImage& cfg = ctx.res.manifest.image;
    const std::int64_t salt[] = {mode == "fixed", cfg.size, cfg.min_pixels, cfg.max_pixels,
                                 ctx.res.family->image_size_factor()};
    for (const ImageSource* src : ctx.input.images()) {
      RunContext::Image im;
      im.source = src;
      with_encoded(*src, [&](std::span<const std::uint8_t> bytes) {
        if (bytes.empty()) fail("image ", src->name(), ": empty file");
        const ImageKey encoded = hash_bytes(bytes, salt);
        if (const KnownImage* known = ctx.res.image_memo.find(encoded)) {
          im.key = known->pixels;
          im.height = known->height;
          im.width = known->width;
          return;
        }
        decode_resized(ctx, im, bytes);
        decoded_any = true;
        ctx.res.image_memo.insert(encoded, {im.key, im.height, im.width});
      });
      set_grid(ctx, im);
      ctx.images.push_back(std::move(im));
    }
    if (decoded_any) ctx.result.timings.vision_ms += ms_since(t0);
  }
};

}  // namespace

void decode_resized(RunContext& ctx, RunContext::Image& im, std::span<const std::uint8_t> bytes) {
  const ManifestImage& cfg = ctx.res.manifest.image;
  const std::int64_t factor = ctx.res.family->image_size_factor();
  const std::string name = im.source->name();
  image::RgbImage img = image::decode_image(bytes, name, image::DecodeLimits{cfg.max_decode_pixels});
  image::Size size{cfg.size, cfg.size};
  if (resize_mode(ctx) == "native") {
    try {
      size = image::smart_resize(img.height, img.width, factor, cfg.min_pixels, cfg.max_pixels);
    } catch (const Error& e) {
      fail(name, ": ", e.what());
    }
  } else if (cfg.size % factor != 0) {
    fail("image.size ", cfg.size, " is not a multiple of ", factor);
  }
  if (size.height != img.height || size.width != img.width) img = image::resize_bicubic(img, size.width, size.height);
  im.height = img.height;
  im.width = img.width;
  im.rgb = std::move(img.pixels);
  const std::int64_t dims[] = {im.height, im.width};
  im.key = hash_bytes(im.rgb, dims);
}

void ensure_pixels(RunContext& ctx, RunContext::Image& im) {
  if (!im.rgb.empty()) return;
  const ImageKey before = im.key;
  with_encoded(*im.source, [&](std::span<const std::uint8_t> bytes) { decode_resized(ctx, im, bytes); });
  if (im.key != before) fail("image ", im.source->name(), " changed while it was being read");
}

std::unique_ptr<Stage> make_load_images_stage(const ManifestStage&, Resources&) {
  return std::make_unique<LoadImagesStage>();
}

}  // namespace qhx
