// The C API: thin wrappers that turn exceptions into status codes.
#include "qhexrt/qhexrt.h"

#include <cstring>
#include <string>

#include "qhexrt/tokenizer.hpp"

struct qhx_tokenizer {
  qhx::Tokenizer tok;
};

namespace {

thread_local std::string g_last_error;

int set_error(int status, std::string message) {
  g_last_error = std::move(message);
  return status;
}

// Runs `fn`, mapping any exception to QHX_ERR with its message.
template <typename Fn>
int guarded(Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return set_error(QHX_ERR, e.what());
  } catch (...) {
    return set_error(QHX_ERR, "unknown error");
  }
}

}  // namespace

extern "C" {

const char* qhx_version(void) { return QHX_VERSION_STRING; }

const char* qhx_last_error(void) { return g_last_error.c_str(); }

int qhx_tokenizer_load(const char* path, qhx_tokenizer** out) {
  if (path == nullptr || out == nullptr) return set_error(QHX_ERR_ARGUMENT, "qhx_tokenizer_load: NULL argument");
  *out = nullptr;
  return guarded([&]() -> int {
    *out = new qhx_tokenizer{qhx::Tokenizer::load(path)};
    return QHX_OK;
  });
}

void qhx_tokenizer_free(qhx_tokenizer* tok) { delete tok; }

int32_t qhx_tokenizer_vocab_size(const qhx_tokenizer* tok) { return tok != nullptr ? tok->tok.vocab_size() : 0; }

int qhx_tokenizer_encode(const qhx_tokenizer* tok, const char* text, size_t len, int32_t* ids, size_t cap,
                         size_t* n_ids) {
  if (tok == nullptr || (text == nullptr && len > 0) || n_ids == nullptr || (ids == nullptr && cap > 0))
    return set_error(QHX_ERR_ARGUMENT, "qhx_tokenizer_encode: NULL argument");
  return guarded([&]() -> int {
    const auto out = tok->tok.encode(std::string_view(text != nullptr ? text : "", len));
    *n_ids = out.size();
    if (out.size() > cap) return set_error(QHX_ERR_BUFFER_TOO_SMALL, "qhx_tokenizer_encode: ids buffer too small");
    if (!out.empty()) std::memcpy(ids, out.data(), out.size() * sizeof(int32_t));
    return QHX_OK;
  });
}

int qhx_tokenizer_decode(const qhx_tokenizer* tok, const int32_t* ids, size_t n_ids, int skip_special, char* buf,
                         size_t cap, size_t* len) {
  if (tok == nullptr || (ids == nullptr && n_ids > 0) || len == nullptr || (buf == nullptr && cap > 0))
    return set_error(QHX_ERR_ARGUMENT, "qhx_tokenizer_decode: NULL argument");
  return guarded([&]() -> int {
    const std::string text = tok->tok.decode({ids, n_ids}, skip_special != 0);
    *len = text.size();
    if (text.size() + 1 > cap) return set_error(QHX_ERR_BUFFER_TOO_SMALL, "qhx_tokenizer_decode: buffer too small");
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return QHX_OK;
  });
}

}  // extern "C"
