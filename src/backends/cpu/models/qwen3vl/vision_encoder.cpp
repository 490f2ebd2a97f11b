#include "backends/cpu/models/qwen3vl/vision_encoder.hpp"
#include "qwen3vl/vision_rope.hpp"

#include <cmath>
#include <cstring>
#include <optional>

#include "backends/cpu/checkpoint_weights.hpp"
#include "backends/cpu/kernel_plan.hpp"
#include "backends/cpu/kernel_set.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "common/debug_dump.hpp"
#include "common/line_aligned.hpp"
#include "qhexrt/error.hpp"
#include "qhexrt/hf_config.hpp"
#include "qhexrt/safetensors.hpp"

namespace qhx::qwen3vl {
namespace {

struct Block {
  std::vector<float> norm1_w, norm1_b, norm2_w, norm2_b;  // [hidden]
  cpu::Linear qkv, proj, fc1,
      fc2;  // qkv [3·hidden, hidden], proj [hidden, hidden], fc1 [inter, hidden], fc2 [hidden, inter]
};

struct Merger {
  bool norm_after_grouping = false;  // DeepStack mergers normalize the grouped 4·hidden vector
  std::vector<float> norm_w, norm_b;
  cpu::Linear fc1, fc2;  // fc1 [4·hidden, 4·hidden], fc2 [out, 4·hidden]
};

class VisionEncoder final : public Delegate {
 public:
  void init(const GraphBlob& blob) override;
  std::vector<IoSpec> input_specs() const override {
    return {{"hidden", DType::F32, {-1, cfg_.hidden_size}}, {"grid_thw", DType::I64, {-1, 3}}};
  }
  std::vector<IoSpec> output_specs() const override {
    return {{"image_embeds", DType::F32, {-1, cfg_.out_hidden_size}},
            {"deepstack", DType::F32, {static_cast<std::int64_t>(deepstack_.size()), -1, cfg_.out_hidden_size}}};
  }
  void execute(std::span<const TensorRef> inputs, std::span<const TensorRef> outputs) override;

 private:
  void merge(const Merger& m, const float* x, std::int64_t n, float* out);

  std::string name_;
  Qwen3VLVisionConfig cfg_;
  std::int64_t head_dim_ = 0;
  std::optional<Checkpoint> ckpt_;
  std::vector<Block> blocks_;
  std::vector<Merger> deepstack_;  // in the order of deepstack_visual_indexes
  Merger merger_;
  std::optional<VisionRope> rope_;
  const cpu::KernelSet* k_ = &cpu::active_kernels();
  // Attention's two products take int8 too when the graph's matrices do (a
  // quantized bundle on the plan's int8 path); f32 weights keep f32 attention.
  bool int8_attention_ = false;
  // Activations, kept between calls and grown to the largest image seen: fresh
  // pages on every call cost page faults (and zeroing) for ~60 MB per 512² image.
  // Sized at load when the plan says how large an image is (GraphBlob::image_patches).
  void size_scratch(std::int64_t n);
  struct Scratch {
    LineFloats x, normed, qkv, q, k, v, attn, tmp;  // [n, hidden] (qkv [n, 3·hidden])
    LineFloats mlp;                                 // [n, intermediate]
    LineFloats merge_normed, merge_mid;             // [n, hidden]
    LineFloats cos, sin;                            // [n, head_dim]
  } s_;
};

// A linear_then step that applies act (an elementwise kernel of the set) in
// place to each block of y [rows, ld].
auto in_place(void (*act)(const float*, std::int64_t, float*), float* y, std::int64_t ld) {
  return [=](std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
    for (std::int64_t i = r0; i < r1; ++i) act(y + i * ld + c0, c1 - c0, y + i * ld + c0);
  };
}

void grow(LineFloats& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

void VisionEncoder::size_scratch(std::int64_t n) {
  const auto N = static_cast<std::size_t>(n), H = static_cast<std::size_t>(cfg_.hidden_size);
  for (auto* b : {&s_.x, &s_.normed, &s_.q, &s_.k, &s_.v, &s_.attn, &s_.tmp}) grow(*b, N * H);
  grow(s_.qkv, N * 3 * H);
  grow(s_.mlp, N * static_cast<std::size_t>(cfg_.intermediate_size));
}

Merger load_merger(const Checkpoint& ck, const std::string& p, const Qwen3VLVisionConfig& c, bool after) {
  const std::int64_t grouped = c.hidden_size * c.spatial_merge_size * c.spatial_merge_size;
  const std::int64_t norm = after ? grouped : c.hidden_size;
  return Merger{after, cpu::vector_weight(ck, p + "norm.weight", norm), cpu::vector_weight(ck, p + "norm.bias", norm),
                cpu::linear_weight(ck, p + "linear_fc1", grouped, grouped, true),
                cpu::linear_weight(ck, p + "linear_fc2", c.out_hidden_size, grouped, true)};
}

void VisionEncoder::init(const GraphBlob& blob) {
  name_ = blob.name;
  cfg_ = load_qwen3vl_config(blob_file(blob, "config")).vision;
  ckpt_.emplace(Checkpoint::open(blob_file(blob, "weights")));
  const Checkpoint& ck = *ckpt_;
  const std::int64_t h = cfg_.hidden_size, inter = cfg_.intermediate_size;
  head_dim_ = h / cfg_.num_heads;
  const std::string p = "model.visual.";
  for (std::int64_t b = 0; b < cfg_.depth; ++b) {
    const std::string bp = p + "blocks." + std::to_string(b) + ".";
    blocks_.push_back(Block{
        cpu::vector_weight(ck, bp + "norm1.weight", h), cpu::vector_weight(ck, bp + "norm1.bias", h),
        cpu::vector_weight(ck, bp + "norm2.weight", h), cpu::vector_weight(ck, bp + "norm2.bias", h),
        cpu::linear_weight(ck, bp + "attn.qkv", 3 * h, h, true), cpu::linear_weight(ck, bp + "attn.proj", h, h, true),
        cpu::linear_weight(ck, bp + "mlp.linear_fc1", inter, h, true),
        cpu::linear_weight(ck, bp + "mlp.linear_fc2", h, inter, true)});
  }
  for (std::size_t k = 0; k < cfg_.deepstack_visual_indexes.size(); ++k)
    deepstack_.push_back(load_merger(ck, p + "deepstack_merger_list." + std::to_string(k) + ".", cfg_, true));
  merger_ = load_merger(ck, p + "merger.", cfg_, false);
  const cpu::KernelPlan plan = cpu::kernel_plan(blob);
  k_ = plan.kernels;
  for (Block& b : blocks_)
    for (cpu::Linear* l : {&b.qkv, &b.proj, &b.fc1, &b.fc2}) cpu::prepare(plan, l->w);
  int8_attention_ = !blocks_.empty() && blocks_.front().qkv.w.int8_activations;
  std::vector<Merger*> mergers{&merger_};
  for (Merger& m : deepstack_) mergers.push_back(&m);
  for (Merger* m : mergers) {
    cpu::prepare(plan, m->fc1.w);
    cpu::prepare(plan, m->fc2.w);
  }
  if (blob.image_patches > 0) size_scratch(blob.image_patches);
  rope_.emplace(cfg_);
}

// out [n/4, out_hidden] from x [n, hidden]: group each 2×2 window's 4 rows into one vector.
void VisionEncoder::merge(const Merger& mg, const float* x, std::int64_t n, float* out) {
  const std::int64_t h = cfg_.hidden_size, grouped = mg.fc1.w.cols, groups = n * h / grouped;
  grow(s_.merge_normed, static_cast<std::size_t>(n * h));
  grow(s_.merge_mid, static_cast<std::size_t>(n * h));
  float* normed = s_.merge_normed.data();
  float* mid = s_.merge_mid.data();
  if (mg.norm_after_grouping)
    k_->layer_norm(x, mg.norm_w.data(), mg.norm_b.data(), groups, grouped, 1e-6f, normed);
  else
    k_->layer_norm(x, mg.norm_w.data(), mg.norm_b.data(), n, h, 1e-6f, normed);
  auto gelu = in_place(k_->gelu_erf, mid, grouped);
  k_->linear_then(normed, groups, mg.fc1.w, mg.fc1.bias_or_null(), mid, cpu::block_step(gelu));
  k_->linear(mid, groups, mg.fc2.w, mg.fc2.bias_or_null(), out);
}

void VisionEncoder::execute(std::span<const TensorRef> in, std::span<const TensorRef> out) {
  const auto is = input_specs();
  const auto os = output_specs();
  check_io(name_, is, in, "input");
  check_io(name_, os, out, "output");
  const std::int64_t n = in[0].shape[0], h = cfg_.hidden_size, m = cfg_.spatial_merge_size;
  const std::span<const std::int64_t> grid(in[1].as<const std::int64_t>(), static_cast<std::size_t>(in[1].numel()));
  std::int64_t total = 0;
  std::vector<std::int64_t> segments;  // attention runs within each frame of each image
  for (std::size_t i = 0; i < grid.size(); i += 3) {
    if (grid[i] < 1 || grid[i + 1] < m || grid[i + 2] < m || grid[i + 1] % m != 0 || grid[i + 2] % m != 0)
      fail("graph \"", name_, "\": image ", i / 3 + 1, " has an invalid grid (", grid[i], ", ", grid[i + 1], ", ",
           grid[i + 2], ")");
    for (std::int64_t f = 0; f < grid[i]; ++f) segments.push_back(grid[i + 1] * grid[i + 2]);
    total += grid[i] * grid[i + 1] * grid[i + 2];
  }
  if (total != n) fail("graph \"", name_, "\": the grids cover ", total, " patches, the input has ", n);
  if (out[0].shape[0] != n / (m * m) || out[1].shape[1] != n / (m * m))
    fail("graph \"", name_, "\": outputs must have ", n / (m * m), " rows");

  s_.cos.resize(static_cast<std::size_t>(n * head_dim_));
  s_.sin.resize(s_.cos.size());
  rope_->tables(grid, n, head_dim_, s_.cos.data(), s_.sin.data());
  if (debug::dumping()) {
    debug::dump("vision.rope_cos", s_.cos.data(), {n, head_dim_});
    debug::dump("vision.rope_sin", s_.sin.data(), {n, head_dim_});
  }
  const float *cos = s_.cos.data(), *sin = s_.sin.data();
  const auto N = static_cast<std::size_t>(n), H = static_cast<std::size_t>(h);
  size_scratch(n);
  s_.x.assign(in[0].as<const float>(), in[0].as<const float>() + N * H);
  float *x = s_.x.data(), *normed = s_.normed.data(), *qkv = s_.qkv.data(), *q = s_.q.data(), *kk = s_.k.data();
  float *v = s_.v.data(), *attn = s_.attn.data(), *tmp = s_.tmp.data(), *mlp = s_.mlp.data();
  const std::int64_t heads = cfg_.num_heads, hd = head_dim_;
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  auto gelu = in_place(k_->gelu_tanh, mlp, cfg_.intermediate_size);
  std::size_t tap = 0;
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    const Block& B = blocks_[b];
    k_->layer_norm(x, B.norm1_w.data(), B.norm1_b.data(), n, h, 1e-6f, normed);
    k_->linear(normed, n, B.qkv.w, B.qkv.bias_or_null(), qkv);
    // [n, 3, heads, hd] -> q, k, v [n, heads, hd], and the rotation of q and k on
    // each block of rows while it is in the cache (rope is per token: blocks of rows
    // compute what one call over all rows would).
    cpu::parallel_for(n, 64, [&](std::int64_t r0, std::int64_t r1) {
      for (auto r = static_cast<std::size_t>(r0); r < static_cast<std::size_t>(r1); ++r) {
        std::memcpy(&q[r * H], &qkv[r * 3 * H], H * sizeof(float));
        std::memcpy(&kk[r * H], &qkv[r * 3 * H + H], H * sizeof(float));
        std::memcpy(&v[r * H], &qkv[r * 3 * H + 2 * H], H * sizeof(float));
      }
      const std::size_t R0 = static_cast<std::size_t>(r0);
      k_->rope_rotate_half(&q[R0 * H], r1 - r0, heads, hd, cos + r0 * hd, sin + r0 * hd);
      k_->rope_rotate_half(&kk[R0 * H], r1 - r0, heads, hd, cos + r0 * hd, sin + r0 * hd);
    });
    std::int64_t s = 0;
    for (const std::int64_t len : segments) {
      const std::size_t off = static_cast<std::size_t>(s) * H;
      if (int8_attention_)
        k_->attention_i8(q + off, kk + off, v + off, len, len, heads, heads, hd, scale, attn + off);
      else
        k_->attention(q + off, kk + off, v + off, len, len, heads, heads, hd, 0, scale, /*causal=*/false, attn + off);
      s += len;
    }
    k_->linear(attn, n, B.proj.w, B.proj.bias_or_null(), tmp);
    k_->add_inplace(x, tmp, n * h);
    k_->layer_norm(x, B.norm2_w.data(), B.norm2_b.data(), n, h, 1e-6f, normed);
    // fc1's GELU runs on each block of its output while the block is in cache
    // (linear_then), not as a pass of its own.
    k_->linear_then(normed, n, B.fc1.w, B.fc1.bias_or_null(), mlp, cpu::block_step(gelu));
    k_->linear(mlp, n, B.fc2.w, B.fc2.bias_or_null(), tmp);
    k_->add_inplace(x, tmp, n * h);
    if (debug::dumping()) debug::dump("vision.block" + std::to_string(b), x, {n, h});
    if (tap < deepstack_.size() && cfg_.deepstack_visual_indexes[tap] == static_cast<std::int64_t>(b)) {
      float* dst = out[1].as<float>() + static_cast<std::int64_t>(tap) * (n / (m * m)) * cfg_.out_hidden_size;
      merge(deepstack_[tap], x, n, dst);
      if (debug::dumping())
        debug::dump("vision.deepstack" + std::to_string(tap), dst, {n / (m * m), cfg_.out_hidden_size});
      ++tap;
    }
  }
  merge(merger_, x, n, out[0].as<float>());
  debug::dump("vision.merger", out[0].as<float>(), {n / (m * m), cfg_.out_hidden_size});
}

}  // namespace

std::unique_ptr<Delegate> make_vision_encoder() { return std::make_unique<VisionEncoder>(); }

}  // namespace qhx::qwen3vl
