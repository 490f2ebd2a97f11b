#include "serve/metrics.hpp"

#include <sstream>

namespace qhx::serve {

void Metrics::response(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++responses_[{route, status}];
}

void Metrics::completion(std::int64_t prompt, std::int64_t cached, std::int64_t completion, bool cancelled) {
  ++completions_;
  prompt_tokens_ += prompt;
  cached_tokens_ += cached;
  completion_tokens_ += completion;
  if (cached > 0) ++prefix_hits_;
  if (cancelled) ++cancelled_;
}

std::string Metrics::render(std::int64_t queue_depth, bool generating, const ImageCacheStats& images) const {
  std::ostringstream o;
  auto metric = [&](const char* name, const char* type, const char* help) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  metric("qhx_http_requests_total", "counter", "HTTP requests answered, by route and status.");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, n] : responses_)
      o << "qhx_http_requests_total{route=\"" << key.first << "\",status=\"" << key.second << "\"} " << n << '\n';
    metric("qhx_http_errors_total", "counter", "HTTP requests answered with an error status (>= 400), by status.");
    std::map<int, std::int64_t> errors;
    for (const auto& [key, n] : responses_)
      if (key.second >= 400) errors[key.second] += n;
    for (const auto& [status, n] : errors) o << "qhx_http_errors_total{status=\"" << status << "\"} " << n << '\n';
  }
  metric("qhx_completions_total", "counter", "Chat completions generated (finished or cancelled).");
  o << "qhx_completions_total " << completions_ << '\n';
  metric("qhx_completions_cancelled_total", "counter", "Completions cancelled (the client went away, or shutdown).");
  o << "qhx_completions_cancelled_total " << cancelled_ << '\n';
  metric("qhx_prompt_tokens_total", "counter", "Prompt tokens of the completions.");
  o << "qhx_prompt_tokens_total " << prompt_tokens_ << '\n';
  metric("qhx_prompt_cached_tokens_total", "counter", "Prompt tokens whose KV came from a session's cache.");
  o << "qhx_prompt_cached_tokens_total " << cached_tokens_ << '\n';
  metric("qhx_completion_tokens_total", "counter", "Generated tokens.");
  o << "qhx_completion_tokens_total " << completion_tokens_ << '\n';
  metric("qhx_prefix_cache_hits_total", "counter", "Completions that reused a cached prompt prefix.");
  o << "qhx_prefix_cache_hits_total " << prefix_hits_ << '\n';
  metric("qhx_queue_full_total", "counter", "Requests refused with 503 because the queue was full.");
  o << "qhx_queue_full_total " << queue_full_ << '\n';
  metric("qhx_queue_depth", "gauge", "Requests waiting for the model.");
  o << "qhx_queue_depth " << queue_depth << '\n';
  metric("qhx_generating", "gauge", "1 while a completion is being generated.");
  o << "qhx_generating " << (generating ? 1 : 0) << '\n';
  metric("qhx_image_cache_hits_total", "counter", "Images whose vision features came from the image-feature cache.");
  o << "qhx_image_cache_hits_total " << images.hits << '\n';
  metric("qhx_image_cache_misses_total", "counter", "Images that went through the vision encoder.");
  o << "qhx_image_cache_misses_total " << images.misses << '\n';
  metric("qhx_image_cache_bytes", "gauge", "Bytes held by the image-feature cache.");
  o << "qhx_image_cache_bytes " << images.bytes << '\n';
  return o.str();
}

}  // namespace qhx::serve
