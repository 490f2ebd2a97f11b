// serve/request.hpp — a POST /v1/chat/completions body -> the conversation
// (qhx::Message list) and the generation options, every field checked: a bad one
// raises ApiException (400) naming the field as OpenAI does ("messages[1].content[0].type").
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "qhexrt/sampling.hpp"
#include "qhexrt/session.hpp"

namespace qhx::serve {

struct RequestLimits {
  std::optional<std::filesystem::path> allow_file_dir;  // file:// image URLs only under it
  int max_images = 8;                                   // images in one request, all messages
  std::int64_t context_length = 0;                      // the plan's
};

struct ChatRequest {
  std::vector<Message> messages;
  GenerationOptions options;  // everything but on_text
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::int64_t images = 0;
  std::string model;  // as the client named it ("" if absent)
};

// The JSON body -> a request; `defaults` are the plan's sampling parameters,
// which the request's fields override.
ChatRequest parse_chat_request(std::string_view body, const SamplingParams& defaults, const RequestLimits& limits);

// What an encoded image's first bytes say it is: "jpeg", "png", "webp", "ppm", or "" for none of them.
std::string sniff_image(const std::vector<std::uint8_t>& bytes);

}  // namespace qhx::serve
