#include "serve/queue.hpp"

#include "qhexrt/error.hpp"

namespace qhx::serve {

namespace {

// Streamed pieces the model thread may run ahead of a slow reader.
constexpr std::size_t kMaxUnsentPieces = 64;
constexpr int kCancelPollMs = 20;

bool same_part(const ContentPart& a, const ContentPart& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == ContentPart::Kind::Text) return a.text == b.text;
  return a.image.bytes == b.image.bytes && (!a.image.bytes.empty() || a.image.path == b.image.path);
}

bool same_message(const Message& a, const Message& b) {
  if (a.role != b.role || a.content.size() != b.content.size()) return false;
  for (std::size_t i = 0; i < a.content.size(); ++i)
    if (!same_part(a.content[i], b.content[i])) return false;
  return true;
}

// A session's assistant turn holds its text as one part; a client may resend it
// split or with a different part layout, so assistant turns compare by their text.
std::string text_of(const Message& m) {
  std::string t;
  for (const auto& p : m.content)
    if (p.kind == ContentPart::Kind::Text) t += p.text;
  return t;
}

std::size_t common_prefix(const std::vector<Message>& cached, const std::vector<Message>& wanted) {
  std::size_t n = 0;
  while (n < cached.size() && n < wanted.size()) {
    const bool same = cached[n].role == "assistant" && wanted[n].role == "assistant"
                          ? text_of(cached[n]) == text_of(wanted[n])
                          : same_message(cached[n], wanted[n]);
    if (!same) break;
    ++n;
  }
  return n;
}

}  // namespace

bool Job::wait_text(std::string& out) {
  std::unique_lock<std::mutex> lock(mutex);
  changed.wait(lock, [&] { return !pieces.empty() || done; });
  out.clear();
  while (!pieces.empty()) {
    out += pieces.front();
    pieces.pop_front();
  }
  lock.unlock();
  changed.notify_all();  // the model thread may be waiting for room
  return !out.empty();
}

ModelQueue::ModelQueue(Pipeline& pipeline, std::size_t sessions, std::size_t max_queue) : max_queue_(max_queue) {
  for (std::size_t i = 0; i < std::max<std::size_t>(1, sessions); ++i)
    slots_.push_back(std::make_unique<Slot>(pipeline));
  thread_ = std::thread([this] { run(); });
}

ModelQueue::~ModelQueue() { drain(std::chrono::milliseconds(0)); }

ModelQueue::Admit ModelQueue::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_) return Admit::draining;
    if (jobs_.size() >= max_queue_) return Admit::full;
    jobs_.push_back(job);
  }
  wake_.notify_one();
  return Admit::ok;
}

std::int64_t ModelQueue::depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<std::int64_t>(jobs_.size());
}

void ModelQueue::drain(std::chrono::milliseconds grace) {
  std::deque<std::shared_ptr<Job>> refused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
    refused.swap(jobs_);
  }
  wake_.notify_all();
  for (const auto& job : refused) {
    {
      std::lock_guard<std::mutex> lock(job->mutex);
      job->error = ApiError{503, "the server is shutting down", "", "shutting_down"};
      job->done = true;
    }
    job->changed.notify_all();
  }
  if (!thread_.joinable()) return;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (generating_ && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cancel_running_ = true;
  thread_.join();
}

std::size_t ModelQueue::pick_slot(const std::vector<Message>& messages) {
  std::size_t best = 0, best_len = 0;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const std::size_t len = common_prefix(slots_[i]->session.messages(), messages);
    if (len > best_len || (len == best_len && slots_[i]->last_used < slots_[best]->last_used)) {
      best = i;
      best_len = len;
    }
  }
  return best;
}

void ModelQueue::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return draining_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // draining, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
      generating_ = true;
    }
    finish(*job);
    generating_ = false;
  }
}

void ModelQueue::finish(Job& job) {
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    job.started = true;
    job.queue_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - job.enqueued).count();
  }
  GenerationOptions options = job.request.options;
  options.on_text = [&](std::string_view text) {
    if (job.cancel || cancel_running_) return false;
    if (job.request.stream) {
      // Backpressure: a reader that stops taking text stops the generation after
      // kMaxUnsentPieces, so its write timeout (not the end of the answer) decides
      // when the model is free again. The cancel flags are set without the lock,
      // hence the bounded wait.
      std::unique_lock<std::mutex> lock(job.mutex);
      while (job.pieces.size() >= kMaxUnsentPieces) {
        if (job.cancel || cancel_running_) return false;
        job.changed.wait_for(lock, std::chrono::milliseconds(kCancelPollMs));
      }
      job.pieces.emplace_back(text);
      lock.unlock();
      job.changed.notify_all();
    }
    return true;
  };
  std::optional<ApiError> error;
  GenerationResult result;
  if (job.cancel) {
    error = ApiError{499, "the client went away before its turn", "", "cancelled"};
  } else {
    const std::size_t slot = pick_slot(job.request.messages);
    job.slot = slot;
    slots_[slot]->last_used = ++clock_;
    try {
      result = slots_[slot]->session.respond(std::move(job.request.messages), options);
    } catch (const FileChangedError& e) {
      // A model file was truncated or rewritten under the server: no request
      // can succeed until it is restarted, and none is the client's fault.
      error = ApiError{500, e.what(), "", "model_file_changed"};
    } catch (const Error& e) {
      // What the request asked for could not run (a prompt over the context, an
      // image that does not decode, ...): the client's to fix.
      const std::string what = e.what();
      const bool context = what.find("context") != std::string::npos;
      error = ApiError{400, what, context ? "messages" : "", context ? "context_length_exceeded" : "invalid_request"};
    } catch (const std::exception& e) {
      error = ApiError{500, std::string("internal error: ") + e.what(), "", "internal_error"};
    }
  }
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    job.error = std::move(error);
    job.result = std::move(result);
    job.done = true;
  }
  if (on_finished) on_finished(job);
  job.changed.notify_all();
}

}  // namespace qhx::serve
