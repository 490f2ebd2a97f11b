#include "qwen3vl/chat_template.hpp"

namespace qhx::qwen3vl {

std::string render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>" + m.role + "\n";
    for (const ContentItem& item : m.content)
      out += item.kind == ContentItem::Kind::Image ? "<|vision_start|><|image_pad|><|vision_end|>" : item.text;
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace qhx::qwen3vl
