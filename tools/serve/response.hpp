// serve/response.hpp — OpenAI's response objects: chat.completion, the
// chat.completion.chunk events of a stream (server-sent events), and usage with
// the runtime's timings.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "qhexrt/pipeline.hpp"

namespace qhx::serve {

struct Completion {
  std::string id;  // "chatcmpl-..."
  std::int64_t created = 0;
  std::string model;
};

std::string finish_reason(qhx::StopReason stop);  // the runtime's -> OpenAI's
nlohmann::json usage_json(const GenerationResult& r, double queue_ms);
nlohmann::json completion_json(const Completion& c, const GenerationResult& r, double queue_ms);
// One chunk: `delta` ({"role": ...} / {"content": ...} / {}), finish_reason null unless given.
nlohmann::json chunk_json(const Completion& c, nlohmann::json delta, const std::string& finish = "");
nlohmann::json usage_chunk_json(const Completion& c, const GenerationResult& r, double queue_ms);

// A server-sent event carrying `data` ("data: ...\n\n").
std::string sse_data(std::string_view data);
std::string sse(const nlohmann::json& data);

std::string new_completion_id();
std::string dump(const nlohmann::json& j);  // compact, invalid UTF-8 replaced

}  // namespace qhx::serve
