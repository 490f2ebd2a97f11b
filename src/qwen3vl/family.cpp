#include "qwen3vl/family.hpp"

#include "qhexrt/error.hpp"
#include "qwen3vl/chat_template.hpp"
#include "qwen3vl/rope_index.hpp"
#include "models/rope.hpp"

#include <algorithm>

namespace qhx {
namespace qwen3vl {

Family::Family(Qwen3VLConfig config)
    : cfg_(std::move(config)),
      inv_freq_(nn::rope_inv_freq(cfg_.text.rope_theta, cfg_.text.head_dim)),
      axes_(nn::mrope_interleaved_axes(cfg_.text.mrope_section, cfg_.text.head_dim / 2)),
      vision_rope_(cfg_.vision) {}

void Family::vision_rope_tables(const qhx::ImageGrid& grid, std::int64_t n, std::int64_t width, float* cos,
                                float* sin) const {
  const std::int64_t g[] = {grid.t, grid.h, grid.w};
  vision_rope_.tables(g, n, width, cos, sin);
}

std::int64_t Family::image_tokens(const qhx::ImageGrid& g) const {
  const std::int64_t merge = cfg_.vision.spatial_merge_size;
  return g.t * g.h * g.w / (merge * merge);
}

Positions Family::positions(std::span<const std::int32_t> ids, std::span<const qhx::ImageGrid> grids) const {
  std::vector<qwen3vl::ImageGrid> g;
  for (const auto& x : grids) g.push_back({x.t, x.h, x.w});
  auto r = rope_index(ids, image_token_id(), g, cfg_.vision.spatial_merge_size);
  return {std::move(r.positions), 3, r.rope_delta};
}

std::string Family::render_chat(const std::vector<Message>& messages, bool add_generation_prompt) const {
  std::vector<ChatMessage> out;
  for (const Message& m : messages) {
    ChatMessage cm{m.role, {}};
    for (const ContentPart& p : m.content)
      cm.content.push_back(p.kind == ContentPart::Kind::Image ? ContentItem{ContentItem::Kind::Image, ""}
                                                              : ContentItem{ContentItem::Kind::Text, p.text});
    out.push_back(std::move(cm));
  }
  return qwen3vl::render_chat(out, add_generation_prompt);
}

void Family::rope_tables(const std::int32_t* positions, std::int64_t T, float* cos, float* sin) const {
  const std::int64_t hd = cfg_.text.head_dim, half = hd / 2;
  std::vector<float> c(static_cast<std::size_t>(T * hd)), s(c.size());
  nn::mrope_cos_sin(positions, T, inv_freq_, axes_, c.data(), s.data());
  for (std::int64_t i = 0; i < T; ++i) {
    std::copy_n(c.data() + i * hd, half, cos + i * half);
    std::copy_n(s.data() + i * hd, half, sin + i * half);
  }
}

const Qwen3VLConfig& config_of(const ModelFamily& family) {
  const auto* f = dynamic_cast<const Family*>(&family);
  if (f == nullptr) fail("this stage is Qwen3-VL's; the plan's model is \"", family.name(), "\"");
  return f->config();
}

}  // namespace qwen3vl
}  // namespace qhx
