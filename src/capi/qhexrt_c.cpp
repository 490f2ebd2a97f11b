// The C API: thin wrappers that turn exceptions into status codes.
#include "qhexrt/qhexrt.h"

#include <cstring>
#include <string>

#include "qhexrt/pipeline.hpp"
#include "qhexrt/tokenizer.hpp"

struct qhx_tokenizer {
  qhx::Tokenizer tok;
};

struct qhx_pipeline {
  qhx::Pipeline pipe;
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

int qhx_pipeline_open(const char* manifest_or_dir, qhx_pipeline** out) {
  if (manifest_or_dir == nullptr || out == nullptr) return set_error(QHX_ERR_ARGUMENT, "qhx_pipeline_open: NULL argument");
  *out = nullptr;
  return guarded([&]() -> int {
    *out = new qhx_pipeline{qhx::Pipeline::open(manifest_or_dir)};
    return QHX_OK;
  });
}

void qhx_pipeline_free(qhx_pipeline* pipe) { delete pipe; }

int qhx_pipeline_generate(qhx_pipeline* pipe, const qhx_generate_options* o, qhx_text_callback on_text, void* user,
                          char* buf, size_t cap, size_t* len) {
  if (pipe == nullptr || o == nullptr || o->prompt == nullptr || len == nullptr || (buf == nullptr && cap > 0) ||
      (o->images == nullptr && o->n_images > 0))
    return set_error(QHX_ERR_ARGUMENT, "qhx_pipeline_generate: NULL argument");
  return guarded([&]() -> int {
    qhx::GenerationRequest req;
    req.prompt = o->prompt;
    if (o->system != nullptr) req.system = o->system;
    for (size_t i = 0; i < o->n_images; ++i) req.images.emplace_back(o->images[i]);
    if (o->max_new_tokens > 0) req.max_new_tokens = o->max_new_tokens;
    if (o->greedy != 0) {
      qhx::SamplingParams greedy;
      greedy.greedy = true;
      req.sampling = greedy;
    }
    req.raw = o->raw != 0;
    if (on_text != nullptr)
      req.on_text = [on_text, user](std::string_view text) { on_text(text.data(), text.size(), user); };
    const qhx::GenerationResult r = pipe->pipe.generate(req);
    *len = r.text.size();
    if (r.text.size() + 1 > cap) return set_error(QHX_ERR_BUFFER_TOO_SMALL, "qhx_pipeline_generate: buffer too small");
    std::memcpy(buf, r.text.c_str(), r.text.size() + 1);
    return QHX_OK;
  });
}

}  // extern "C"
