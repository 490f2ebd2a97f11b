#include "qhexrt/session.hpp"

#include "qhexrt/error.hpp"
#include "runtime/pipeline_impl.hpp"

namespace qhx {

struct Session::Impl {
  Pipeline::Impl* pipeline = nullptr;
  std::vector<Message> messages;
  SessionState state;

  // Answers `messages` (the last one is the user's); the answer joins them.
  GenerationResult answer(const GenerationOptions& options) {
    if (messages.empty()) fail("the conversation has no messages");
    if (messages.back().role != "user")
      fail("the conversation must end with a user message (the last one is \"", messages.back().role, "\")");
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const std::string& r = messages[i].role;
      if (r != "system" && r != "user" && r != "assistant")
        fail("message ", i, ": role \"", r, "\" is not one of \"system\", \"user\", \"assistant\"");
    }
    TurnInput input;
    input.messages = &messages;
    std::string full_text;
    GenerationResult result = pipeline->run(input, options, state, &full_text);
    messages.push_back(Message::text("assistant", std::move(full_text)));
    return result;
  }
};

Session::Session(Pipeline& pipeline) : impl_(std::make_unique<Impl>()) { impl_->pipeline = pipeline.impl_.get(); }
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

// Both calls put the conversation in place first and undo that on an error,
// so the history (which may hold images' bytes) is never copied.
GenerationResult Session::send(Message message, const GenerationOptions& options) {
  impl_->messages.push_back(std::move(message));
  try {
    return impl_->answer(options);
  } catch (...) {
    impl_->messages.pop_back();
    throw;
  }
}

GenerationResult Session::respond(std::vector<Message> messages, const GenerationOptions& options) {
  std::swap(impl_->messages, messages);
  try {
    return impl_->answer(options);
  } catch (...) {
    std::swap(impl_->messages, messages);
    throw;
  }
}

const std::vector<Message>& Session::messages() const { return impl_->messages; }

std::int64_t Session::cached_tokens() const { return static_cast<std::int64_t>(impl_->state.ids.size()); }

void Session::reset() {
  impl_->messages.clear();
  impl_->state.ids.clear();
}

}  // namespace qhx
