// serve/queue.hpp — the FIFO of chat requests in front of the model, and the
// session slots they run in.
//
// One model thread takes the requests in order: the pipeline runs one generation
// at a time (include/qhexrt/session.hpp), so with --sessions N the N slots keep N
// conversations' KV caches, not N generations at once. A request goes to the slot
// whose conversation shares the longest leading run of messages with it (then the
// least recently used one), where Session::respond reuses the cached prefix.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "qhexrt/session.hpp"
#include "serve/errors.hpp"
#include "serve/request.hpp"

namespace qhx::serve {

// One request's life between the HTTP thread that took it and the model thread.
struct Job {
  ChatRequest request;
  std::chrono::steady_clock::time_point enqueued = std::chrono::steady_clock::now();

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::string> pieces;  // streamed text not yet taken by the HTTP thread
  bool started = false;            // the model thread took it
  bool done = false;               // result or error is set
  std::optional<ApiError> error;
  GenerationResult result;
  std::size_t slot = 0;
  double queue_ms = 0;
  std::atomic<bool> cancel{false};  // set by the HTTP side: the client went away

  // Waits until there is text, or the job is done; false on done with nothing left.
  bool wait_text(std::string& out);
};

class ModelQueue {
 public:
  ModelQueue(Pipeline& pipeline, std::size_t sessions, std::size_t max_queue);
  ~ModelQueue();

  enum class Admit { ok, full, draining };
  // Queues the job, unless the queue is full or the server is draining.
  Admit submit(const std::shared_ptr<Job>& job);
  // Called on the model thread when a job ends (result or error set).
  std::function<void(const Job&)> on_finished;
  std::int64_t depth() const;
  bool generating() const { return generating_; }

  // Shutdown: the queued jobs are refused (503), the running one may go on for
  // `grace` and is then cancelled; returns when the model thread has stopped.
  void drain(std::chrono::milliseconds grace);

 private:
  void run();
  std::size_t pick_slot(const std::vector<Message>& messages);
  void finish(Job& job);

  struct Slot {
    explicit Slot(Pipeline& p) : session(p) {}
    Session session;
    std::uint64_t last_used = 0;
  };
  std::vector<std::unique_ptr<Slot>> slots_;
  std::size_t max_queue_;
  std::uint64_t clock_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool draining_ = false;
  std::atomic<bool> generating_{false};
  std::atomic<bool> cancel_running_{false};
  std::thread thread_;
};

}  // namespace qhx::serve
