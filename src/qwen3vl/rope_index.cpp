#include "qwen3vl/rope_index.hpp"

#include <algorithm>

#include "qhexrt/error.hpp"

namespace qhx::qwen3vl {

RopeIndex rope_index(std::span<const std::int32_t> ids, std::int32_t image_token_id, std::span<const ImageGrid> grids,
                     std::int64_t merge) {
  const auto L = static_cast<std::int64_t>(ids.size());
  RopeIndex r;
  r.positions.assign(static_cast<std::size_t>(3 * L), 0);
  auto set = [&](std::int64_t i, std::int64_t t, std::int64_t h, std::int64_t w) {
    r.positions[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(t);
    r.positions[static_cast<std::size_t>(L + i)] = static_cast<std::int32_t>(h);
    r.positions[static_cast<std::size_t>(2 * L + i)] = static_cast<std::int32_t>(w);
  };
  std::int64_t next = 0;  // 1 + the largest position so far
  std::int64_t i = 0;
  for (std::size_t g = 0; g < grids.size(); ++g) {
    while (i < L && ids[static_cast<std::size_t>(i)] != image_token_id) set(i, next, next, next), ++i, ++next;
    const std::int64_t mh = grids[g].h / merge, mw = grids[g].w / merge, n = grids[g].t * mh * mw;
    if (i + n > L) fail("prompt has fewer image tokens than image ", g + 1, "'s grid needs (", n, ")");
    const std::int64_t s = next;
    for (std::int64_t k = 0; k < n; ++k, ++i) {
      if (ids[static_cast<std::size_t>(i)] != image_token_id)
        fail("image ", g + 1, " needs ", n, " consecutive image tokens; the run ends after ", k);
      const std::int64_t frame = k / (mh * mw), rest = k % (mh * mw);
      set(i, s + frame, s + rest / mw, s + rest % mw);
    }
    next = s + std::max({grids[g].t, mh, mw});
  }
  for (; i < L; ++i, ++next) {
    if (ids[static_cast<std::size_t>(i)] == image_token_id)
      fail("prompt has more image tokens than the ", grids.size(), " image(s) provide");
    set(i, next, next, next);
  }
  r.rope_delta = next - L;
  return r;
}

}  // namespace qhx::qwen3vl
