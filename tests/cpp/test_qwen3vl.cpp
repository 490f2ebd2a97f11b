// Model-family pieces of Qwen3-VL with expectations from the spec (§5.5, §6, §8).
#include <gtest/gtest.h>

#include "models/rope.hpp"
#include "qwen3vl/chat_template.hpp"
#include "qwen3vl/rope_index.hpp"
#include "test_support.hpp"

namespace qhx::qwen3vl {
namespace {

TEST(RopeIndex, SpecWorkedExample) {
  // "<|im_start|>user\n<|vision_start|>" + 256 pads + "<|vision_end|>Describe this image.<|im_end|>\n<|im_start|>assistant\n"
  std::vector<std::int32_t> ids = {151644, 872, 198, 151652};
  ids.insert(ids.end(), 256, 151655);
  for (int id : {151653, 74785, 419, 2168, 13, 151645, 198, 151644, 77091, 198}) ids.push_back(id);
  ASSERT_EQ(ids.size(), 270u);
  const ImageGrid grid{1, 32, 32};
  const RopeIndex r = rope_index(ids, 151655, {&grid, 1}, 2);
  const auto at = [&](int axis, int i) {
    return r.positions[static_cast<std::size_t>(axis * 270 + i)];
  };
  for (int i = 0; i < 4; ++i)
    for (int axis = 0; axis < 3; ++axis) EXPECT_EQ(at(axis, i), i);
  for (int q = 0; q < 256; ++q) {
    EXPECT_EQ(at(0, 4 + q), 4);
    EXPECT_EQ(at(1, 4 + q), 4 + q / 16);
    EXPECT_EQ(at(2, 4 + q), 4 + q % 16);
  }
  EXPECT_EQ(at(0, 260), 20);
  EXPECT_EQ(at(2, 269), 29);
  EXPECT_EQ(r.rope_delta, -240);
}

TEST(RopeIndex, TextOnlyAndTwoImages) {
  const std::vector<std::int32_t> text = {1, 2, 3};
  const RopeIndex t = rope_index(text, 9, {}, 2);
  EXPECT_EQ(t.positions, (std::vector<std::int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(t.rope_delta, 0);
  // [a, img 2x3 merged (grid 4x6), b, img 1x1 merged (grid 2x2), c]
  std::vector<std::int32_t> ids = {1};
  ids.insert(ids.end(), 6, 9);
  ids.push_back(2);
  ids.push_back(9);
  ids.push_back(3);
  const ImageGrid grids[] = {{1, 4, 6}, {1, 2, 2}};
  const RopeIndex r = rope_index(ids, 9, grids, 2);
  const std::int64_t L = 10;
  EXPECT_EQ(r.positions[1 + L], 1);      // first image, row 0
  EXPECT_EQ(r.positions[6 + 2 * L], 3);  // first image, last token: col 2
  EXPECT_EQ(r.positions[7], 4);          // text resumes at s + max(2, 3) = 1 + 3
  EXPECT_EQ(r.positions[8], 5);          // the second image starts at 5
  EXPECT_EQ(r.positions[9], 6);
  EXPECT_EQ(r.rope_delta, 7 - L);
  test::expect_error([&] { (void)rope_index(ids, 9, {grids, 1}, 2); }, {"more image tokens"});
  test::expect_error([&] { (void)rope_index(text, 9, {grids, 1}, 2); }, {"fewer image tokens"});
}

TEST(MRope, InterleavedAxesAndInvFreq) {
  const auto axes = nn::mrope_interleaved_axes({24, 20, 20}, 64);
  std::string layout;
  for (const auto a : axes) layout += "THW"[a];
  std::string want;
  for (int i = 0; i < 20; ++i) want += "THW";
  want += "TTTT";
  EXPECT_EQ(layout, want);
  const auto inv = nn::rope_inv_freq(5000000.0, 128);
  ASSERT_EQ(inv.size(), 64u);
  EXPECT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[1], 0.78583, 1e-5);
  EXPECT_NEAR(inv[2], 0.61753, 1e-5);
}

TEST(ChatTemplate, SpecExample) {
  const std::vector<ChatMessage> msgs = {
      {"user", {{ContentItem::Kind::Image, ""}, {ContentItem::Kind::Text, "Describe this image."}}}};
  EXPECT_EQ(render_chat(msgs, true),
            "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this image.<|im_end|>\n"
            "<|im_start|>assistant\n");
  const std::vector<ChatMessage> with_system = {{"system", {{ContentItem::Kind::Text, "Be brief."}}},
                                                {"user", {{ContentItem::Kind::Text, "Hi"}}}};
  EXPECT_EQ(render_chat(with_system, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

}  // namespace
}  // namespace qhx::qwen3vl
