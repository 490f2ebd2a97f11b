#include "serve/response.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>

namespace qhx::serve {

using nlohmann::json;

std::string finish_reason(qhx::StopReason stop) { return stop == qhx::StopReason::MaxNewTokens ? "length" : "stop"; }

json usage_json(const GenerationResult& r, double queue_ms) {
  const auto& t = r.timings;
  const auto prompt = static_cast<std::int64_t>(r.prompt_tokens.size());
  const auto completion = static_cast<std::int64_t>(r.tokens.size());
  const std::int64_t prefilled = prompt - r.cached_tokens;
  const double decode_ms = t.decode_ms_per_token * static_cast<double>(t.decode_steps);
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}},
          {"timings",
           {{"queue_ms", queue_ms},
            {"vision_ms", t.vision_ms},
            {"images_encoded", t.images_encoded},
            {"image_cache_hits", t.image_cache_hits},
            {"prompt_ms", t.prefill_ms},
            {"prompt_tokens_prefilled", prefilled},
            {"prompt_per_second", t.prefill_ms > 0 ? 1000.0 * static_cast<double>(prefilled) / t.prefill_ms : 0.0},
            {"ttft_ms", t.ttft_ms},
            {"decode_ms", decode_ms},
            {"decode_per_second", t.decode_ms_per_token > 0 ? 1000.0 / t.decode_ms_per_token : 0.0},
            {"decode_steps", t.decode_steps},  // graph runs: fewer than tokens when drafts are accepted
            {"draft_tokens", r.draft_tokens},
            {"accepted_tokens", r.accepted_tokens}}}};
}

json completion_json(const Completion& c, const GenerationResult& r, double queue_ms) {
  json message = {{"role", "assistant"}, {"content", r.text}};
  if (!r.reasoning.empty()) message["reasoning_content"] = r.reasoning;
  return {
      {"id", c.id},
      {"object", "chat.completion"},
      {"created", c.created},
      {"model", c.model},
      {"system_fingerprint", "qhexrt"},
      {"choices",
       json::array(
           {{{"index", 0}, {"message", message}, {"logprobs", nullptr}, {"finish_reason", finish_reason(r.stop)}}})},
      {"usage", usage_json(r, queue_ms)}};
}

json chunk_json(const Completion& c, json delta, const std::string& finish) {
  return {{"id", c.id},
          {"object", "chat.completion.chunk"},
          {"created", c.created},
          {"model", c.model},
          {"system_fingerprint", "qhexrt"},
          {"choices", json::array({{{"index", 0},
                                    {"delta", std::move(delta)},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}}})}};
}

json usage_chunk_json(const Completion& c, const GenerationResult& r, double queue_ms) {
  return {{"id", c.id},
          {"object", "chat.completion.chunk"},
          {"created", c.created},
          {"model", c.model},
          {"system_fingerprint", "qhexrt"},
          {"choices", json::array()},
          {"usage", usage_json(r, queue_ms)}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_data(std::string_view data) {
  std::string s = "data: ";
  s += data;
  s += "\n\n";
  return s;
}

std::string sse(const json& data) { return sse_data(dump(data)); }

std::string new_completion_id() {
  static std::atomic<std::uint64_t> counter{0};
  static const std::uint64_t salt = std::random_device{}();
  char buf[48];
  std::snprintf(buf, sizeof buf, "chatcmpl-%012llx%06llx", static_cast<unsigned long long>(salt & 0xffffffffffffULL),
                static_cast<unsigned long long>(++counter));
  return buf;
}

}  // namespace qhx::serve
