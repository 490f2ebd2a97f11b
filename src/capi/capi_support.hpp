// What the C API's files share: the handles behind the header's opaque types,
// and the error plumbing (the thread's last error, NULL arguments, exceptions
// turned into status codes).
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "qhexrt/error.hpp"
#include "qhexrt/pipeline.hpp"
#include "qhexrt/qhexrt.h"
#include "qhexrt/session.hpp"
#include "qhexrt/tokenizer.hpp"

struct qhx_tokenizer {
  qhx::Tokenizer tok;
};

// Shared ownership: a session keeps its pipeline alive, so bindings whose
// garbage collector frees objects in any order (ctypes finalizers) are safe.
struct qhx_pipeline {
  std::shared_ptr<qhx::Pipeline> pipe;
  std::string warning;
};

struct qhx_session {
  std::shared_ptr<qhx::Pipeline> pipe;  // declared first: destroyed after the session
  qhx::Session session;
};

struct qhx_message {
  qhx::Message msg;
};

struct qhx_result {
  qhx::GenerationResult r;
};

namespace qhx::capi {

inline thread_local std::string g_last_error;  // qhx_last_error()

inline int set_error(int status, std::string message) {
  g_last_error = std::move(message);
  return status;
}

inline int null_argument(const char* function, const char* argument) {
  return set_error(QHX_ERR_ARGUMENT, qhx::cat(function, ": ", argument, " is NULL"));
}

// Runs `fn`, mapping any exception to QHX_ERR with the function's name and the message.
template <typename Fn>
int guarded(const char* function, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return set_error(QHX_ERR, qhx::cat(function, ": ", e.what()));
  } catch (...) {
    return set_error(QHX_ERR, qhx::cat(function, ": unknown error"));
  }
}

inline int text_out(const std::string& s, const char** text, std::size_t* len) {
  *text = s.c_str();
  if (len != nullptr) *len = s.size();
  return QHX_OK;
}

}  // namespace qhx::capi
