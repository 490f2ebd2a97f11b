// serve/metrics.hpp — counters for GET /metrics (Prometheus text format 0.0.4).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "qhexrt/pipeline.hpp"

namespace qhx::serve {

class Metrics {
 public:
  void response(const std::string& route, int status);  // every answered request
  void completion(std::int64_t prompt, std::int64_t cached, std::int64_t completion, bool cancelled);
  void rejected_queue_full() { ++queue_full_; }

  // The text of /metrics; the queue's and the image cache's figures are read at the time.
  std::string render(std::int64_t queue_depth, bool generating, const ImageCacheStats& images) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::int64_t> responses_;  // (route, status) -> count
  std::atomic<std::int64_t> prompt_tokens_{0}, cached_tokens_{0}, completion_tokens_{0};
  std::atomic<std::int64_t> completions_{0}, cancelled_{0}, queue_full_{0}, prefix_hits_{0};
};

}  // namespace qhx::serve
