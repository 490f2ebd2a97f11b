// Qwen3-VL's chat template (Instruct), spec §8: no default system message;
// each turn is <|im_start|>{role}\n{content}<|im_end|>\n; an image item is
// <|vision_start|><|image_pad|><|vision_end|> (the pad is expanded to the
// image's token count later); the generation prompt is <|im_start|>assistant\n.
#pragma once

#include <string>
#include <vector>

namespace qhx::qwen3vl {

struct ContentItem {
  enum class Kind { Text, Image } kind = Kind::Text;
  std::string text;  // for Text
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::vector<ContentItem> content;
};

std::string render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt);

}  // namespace qhx::qwen3vl
