#include "backends/cpu/models/qwen3vl/patch_embed.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "common/debug_dump.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx::qwen3vl {

using cpu::weight_row_to_f32;
using cpu::WeightMatrix;

namespace {

// torch.linspace(0, end, n) in f32 on the CPU: the first half counts up from
// 0, the second half down from `end`, so both ends are exact.
std::vector<float> linspace_f32(float end, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n), 0.0f);
  if (n == 1) return v;
  const float step = end / static_cast<float>(n - 1);
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] =
        i < n / 2 ? step * static_cast<float>(i) : end - step * static_cast<float>(n - 1 - i);
  return v;
}

}  // namespace

std::vector<float> interpolate_pos_embed(const WeightMatrix& table, std::int64_t t, std::int64_t gh, std::int64_t gw,
                                         std::int64_t merge) {
  const auto side = static_cast<std::int64_t>(std::lround(std::sqrt(static_cast<double>(table.rows))));
  if (side * side != table.rows) fail("position-embedding table of ", table.rows, " rows is not square");
  const std::int64_t hidden = table.cols;
  const auto ys = linspace_f32(static_cast<float>(side - 1), gh);
  const auto xs = linspace_f32(static_cast<float>(side - 1), gw);

  // Raster order first, as transformers computes it.
  std::vector<float> raster(static_cast<std::size_t>(gh * gw * hidden));
  std::vector<float> e00(static_cast<std::size_t>(hidden)), e01(e00.size()), e10(e00.size()), e11(e00.size());
  for (std::int64_t i = 0; i < gh; ++i) {
    const float y = ys[static_cast<std::size_t>(i)];
    const auto y0 = static_cast<std::int64_t>(y);  // truncation, as .int()
    const std::int64_t y1 = std::min(y0 + 1, side - 1);
    const float dy = y - static_cast<float>(y0);
    for (std::int64_t j = 0; j < gw; ++j) {
      const float x = xs[static_cast<std::size_t>(j)];
      const auto x0 = static_cast<std::int64_t>(x);
      const std::int64_t x1 = std::min(x0 + 1, side - 1);
      const float dx = x - static_cast<float>(x0);
      const float w00 = (1.0f - dy) * (1.0f - dx), w01 = (1.0f - dy) * dx, w10 = dy * (1.0f - dx), w11 = dy * dx;
      weight_row_to_f32(table, y0 * side + x0, e00.data());
      weight_row_to_f32(table, y0 * side + x1, e01.data());
      weight_row_to_f32(table, y1 * side + x0, e10.data());
      weight_row_to_f32(table, y1 * side + x1, e11.data());
      float* dst = raster.data() + (i * gw + j) * hidden;
      for (std::int64_t c = 0; c < hidden; ++c) {
        const auto u = static_cast<std::size_t>(c);
        dst[c] = ((e00[u] * w00 + e01[u] * w01) + e10[u] * w10) + e11[u] * w11;
      }
    }
  }
  // Then merge-window order, repeated for every frame.
  std::vector<float> out(static_cast<std::size_t>(t * gh * gw * hidden));
  const std::int64_t mw = gw / merge;
  for (std::int64_t f = 0; f < t; ++f)
    for (std::int64_t r = 0; r < gh * gw; ++r) {
      const std::int64_t window = r / (merge * merge), j = r % (merge * merge);
      const std::int64_t py = (window / mw) * merge + j / merge, px = (window % mw) * merge + j % merge;
      std::copy_n(raster.data() + (py * gw + px) * hidden, hidden, out.data() + (f * gh * gw + r) * hidden);
    }
  return out;
}

namespace {

std::int64_t spec_int(const GraphBlob& blob, const char* key) {
  const auto it = blob.spec.find(key);
  if (it == blob.spec.end() || !it->is_number_integer() || it->get<std::int64_t>() <= 0)
    fail("graph \"", blob.name, "\": \"", key, "\" must be a positive integer");
  return it->get<std::int64_t>();
}

class PatchEmbed final : public Delegate {
 public:
  void init(const GraphBlob& blob) override {
    name_ = blob.name;
    const std::int64_t channels = spec_int(blob, "in_channels"), T = spec_int(blob, "temporal_patch_size");
    const std::int64_t p = spec_int(blob, "patch_size"), hidden = spec_int(blob, "hidden_size");
    merge_ = spec_int(blob, "spatial_merge_size");
    if (channels != 3) fail("graph \"", name_, "\": only 3-channel (RGB) vision input is supported");
    const std::int64_t pp = p * p;
    cols_ = channels * T * pp;
    const WeightMatrix patch =
        cpu::reshaped_matrix_weight(open(blob, "patch_weight", 0), tensor(blob, "patch_weight"), hidden, cols_);
    bias_ = cpu::vector_weight(open(blob, "patch_bias", 1), tensor(blob, "patch_bias"), hidden);
    pos_ = cpu::matrix_weight(open(blob, "pos_embed", 2), tensor(blob, "pos_embed"),
                              spec_int(blob, "num_position_embeddings"), hidden);
    // A still image fills all T frames of a patch with the same pixels, so the
    // Conv3d over them equals a 2-D one whose kernel is the sum of the T frame
    // slices: half the multiply-adds (T = 2). Summing first rounds differently
    // from transformers' order only in the last bits of f32.
    frame_cols_ = channels * pp;
    folded_.assign(static_cast<std::size_t>(hidden * frame_cols_), 0.0f);
    std::vector<float> row(static_cast<std::size_t>(cols_));
    for (std::int64_t o = 0; o < hidden; ++o) {
      weight_row_to_f32(patch, o, row.data());
      for (std::int64_t c = 0; c < channels; ++c)
        for (std::int64_t f = 0; f < T; ++f)
          for (std::int64_t i = 0; i < pp; ++i)
            folded_[static_cast<std::size_t>(o * frame_cols_ + c * pp + i)] +=
                row[static_cast<std::size_t>((c * T + f) * pp + i)];
    }
    folded_w_ = {.data = folded_.data(), .dtype = DType::F32, .rows = hidden, .cols = frame_cols_};
  }
  std::vector<IoSpec> input_specs() const override {
    return {{"pixel_values", DType::F32, {-1, cols_}}, {"grid_thw", DType::I64, {3}}};
  }
  std::vector<IoSpec> output_specs() const override { return {{"hidden", DType::F32, {-1, folded_w_.rows}}}; }

  void execute(std::span<const TensorRef> in, std::span<const TensorRef> out) override {
    check_io(name_, input_specs(), in, "input");
    check_io(name_, output_specs(), out, "output");
    const std::int64_t n = in[0].shape[0], hidden = folded_w_.rows;
    const auto* grid = in[1].as<const std::int64_t>();
    if (out[0].shape[0] != n || grid[0] * grid[1] * grid[2] != n)
      fail("graph \"", name_, "\": ", n, " patches for a grid of ", grid[0], "x", grid[1], "x", grid[2]);
    const float* px = in[0].as<const float>();
    float* y = out[0].as<float>();
    // The first frame of each patch row (all frames are the same image), against the folded kernel.
    const std::int64_t pp = frame_cols_ / 3, T = cols_ / frame_cols_;
    std::vector<float> frame(static_cast<std::size_t>(n * frame_cols_));
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < 3; ++c)
        std::copy_n(px + r * cols_ + c * T * pp, pp, frame.data() + r * frame_cols_ + c * pp);
    cpu::active_kernels().linear(frame.data(), n, folded_w_, bias_.data(), y);
    const auto pos = interpolate_pos_embed(pos_, grid[0], grid[1], grid[2], merge_);
    debug::dump("vision.patch_embed", y, {n, hidden});
    debug::dump("vision.pos_embed", pos.data(), {n, hidden});
    cpu::active_kernels().add_inplace(y, pos.data(), n * hidden);
  }

 private:
  // The checkpoint of entry `key` ({"weights", "tensor"}), opened into slot `i`.
  const Checkpoint& open(const GraphBlob& blob, const char* key, int i) {
    const auto it = blob.spec.find(key);
    if (it == blob.spec.end() || !it->is_object()) fail("graph \"", name_, "\": \"", key, "\" must be an object");
    GraphBlob part = blob;
    part.spec = *it;
    files_[i].emplace(Checkpoint::open(blob_file(part, "weights")));
    return *files_[i];
  }
  std::string tensor(const GraphBlob& blob, const char* key) const {
    const auto it = blob.spec.find(key);
    const nlohmann::json* t =
        it != blob.spec.end() && it->is_object() && it->contains("tensor") ? &(*it)["tensor"] : nullptr;
    if (t == nullptr || !t->is_string()) fail("graph \"", name_, "\": \"", key, ".tensor\" must be a tensor name");
    return t->get<std::string>();
  }

  std::string name_;
  std::optional<Checkpoint> files_[3];
  std::int64_t cols_ = 0, frame_cols_ = 0, merge_ = 2;
  WeightMatrix pos_;
  std::vector<float> bias_;
  std::vector<float> folded_;  // [hidden, C·p·p]: the kernel summed over its T frames
  WeightMatrix folded_w_;
};

}  // namespace

std::unique_ptr<Delegate> make_patch_embed() { return std::make_unique<PatchEmbed>(); }

}  // namespace qhx::qwen3vl
