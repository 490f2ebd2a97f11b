#include "qhexrt/session.hpp"

#include "qhexrt/error.hpp"
#include "runtime/pipeline_impl.hpp"

namespace qhx {

struct Session::Impl {
  Pipeline::Impl* pipeline = nullptr;
  std::vector<Message> messages;
  SessionState state;
};

Session::Session(Pipeline& pipeline) : impl_(std::make_unique<Impl>()) { impl_->pipeline = pipeline.impl_.get(); }
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

GenerationResult Session::send(Message message, const GenerationOptions& options) {
  std::vector<Message> messages = impl_->messages;
  messages.push_back(std::move(message));
  return respond(std::move(messages), options);
}

GenerationResult Session::respond(std::vector<Message> messages, const GenerationOptions& options) {
  if (messages.empty()) fail("the conversation has no messages");
  if (messages.back().role != "user")
    fail("the conversation must end with a user message (the last one is \"", messages.back().role, "\")");
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      fail("message ", i, ": role \"", r, "\" is not one of \"system\", \"user\", \"assistant\"");
  }
  TurnInput input;
  input.messages = std::move(messages);
  std::string full_text;
  GenerationResult result = impl_->pipeline->run(input, options, impl_->state, &full_text);
  // Only a request that ran changes the conversation.
  impl_->messages = std::move(input.messages);
  impl_->messages.push_back(Message::text("assistant", std::move(full_text)));
  return result;
}

const std::vector<Message>& Session::messages() const { return impl_->messages; }

std::int64_t Session::cached_tokens() const { return static_cast<std::int64_t>(impl_->state.ids.size()); }

void Session::reset() {
  impl_->messages.clear();
  impl_->state.ids.clear();
}

}  // namespace qhx
