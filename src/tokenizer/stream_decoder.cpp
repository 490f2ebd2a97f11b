#include "common/utf8.hpp"
#include "qhexrt/tokenizer.hpp"

namespace qhx {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special) : tok_(&tok), skip_special_(skip_special) {}

std::string StreamDecoder::push(std::int32_t id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  pending_ += tok_->token_bytes(id);
  const std::size_t stable = utf8::stable_prefix_length(pending_);
  std::string out = utf8::to_valid_lossy(std::string_view(pending_).substr(0, stable));
  pending_.erase(0, stable);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::to_valid_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace qhx
