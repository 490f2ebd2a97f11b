// "load_images": decode each image of the request and bring it to the vision
// encoder's input size — "fixed" (the seed: any image to size x size) or
// "native" (Qwen's smart_resize: aspect kept, sides multiples of 32, pixel
// count within [min_pixels, max_pixels], as transformers' processor does).
#include "image/image.hpp"
#include "qhexrt/error.hpp"
#include "runtime/stage.hpp"

namespace qhx {
namespace {

class LoadImagesStage final : public Stage {
 public:
  void run(RunContext& ctx) override {
    const auto t0 = Clock::now();
    const ManifestImage& cfg = ctx.res.manifest.image;
    const std::string mode = ctx.request.resize.value_or(cfg.resize);
    if (mode != "fixed" && mode != "native") fail("resize mode must be \"fixed\" or \"native\", got \"", mode, "\"");
    const auto& vc = ctx.res.config.vision;
    const std::int64_t factor = vc.patch_size * vc.spatial_merge_size;
    for (const auto& path : ctx.request.images) {
      image::RgbImage img = image::load_image(path, image::DecodeLimits{cfg.max_decode_pixels});
      image::Size size{cfg.size, cfg.size};
      if (mode == "native") {
        try {
          size = image::smart_resize(img.height, img.width, factor, cfg.min_pixels, cfg.max_pixels);
        } catch (const Error& e) {
          fail(path.string(), ": ", e.what());
        }
      } else if (cfg.size % factor != 0) {
        fail("image.size ", cfg.size, " is not a multiple of ", factor);
      }
      if (size.height != img.height || size.width != img.width) img = image::resize_bicubic(img, size.width, size.height);
      RunContext::Image im;
      im.height = img.height;
      im.width = img.width;
      im.rgb = std::move(img.pixels);
      im.gh = im.height / vc.patch_size;
      im.gw = im.width / vc.patch_size;
      ctx.images.push_back(std::move(im));
    }
    ctx.result.timings.vision_ms += ms_since(t0);
  }
};

}  // namespace

std::unique_ptr<Stage> make_load_images_stage(const ManifestStage&, Resources&) {
  return std::make_unique<LoadImagesStage>();
}

}  // namespace qhx
