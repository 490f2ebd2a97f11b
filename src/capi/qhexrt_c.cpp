// The C API: thin wrappers that check arguments, turn exceptions into status
// codes and translate the versioned C structs to the C++ API (qhexrt/session.hpp).
// The option structs and their _init functions are in options.cpp.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/versioned_structs.hpp"
#include "common/utf8.hpp"

using namespace qhx::capi;

namespace {

int answer(qhx_session* session, std::vector<qhx::Message> messages, bool append, const qhx_generation_options* options,
           qhx_result** out, const char* function) {
  qhx_generation_options o;
  if (const int st = read_generation_options(options, o, function); st != QHX_OK) return st;
  if (o.stop == nullptr && o.n_stop > 0) return null_argument(function, "options->stop");
  for (std::size_t i = 0; i < o.n_stop; ++i)
    if (o.stop[i] == nullptr) return null_argument(function, qhx::cat("options->stop[", i, "]").c_str());
  return guarded(function, [&]() -> int {
    const qhx::GenerationOptions g = to_cpp(o);
    auto result = std::make_unique<qhx_result>();
    result->r = append ? session->session.send(std::move(messages.front()), g)
                       : session->session.respond(std::move(messages), g);
    *out = result.release();
    return QHX_OK;
  });
}

}  // namespace

extern "C" {

const char* qhx_version(void) { return QHX_VERSION_STRING; }

int qhx_api_version(void) { return QHX_API_VERSION; }

const char* qhx_last_error(void) { return g_last_error.c_str(); }

/* ---- tokenizer ---- */

int qhx_tokenizer_load(const char* path, qhx_tokenizer** out) {
  if (out == nullptr) return null_argument("qhx_tokenizer_load", "out");
  *out = nullptr;
  if (path == nullptr) return null_argument("qhx_tokenizer_load", "path");
  return guarded("qhx_tokenizer_load", [&]() -> int {
    *out = new qhx_tokenizer{qhx::Tokenizer::load(path)};
    return QHX_OK;
  });
}

void qhx_tokenizer_free(qhx_tokenizer* tok) { delete tok; }

int32_t qhx_tokenizer_vocab_size(const qhx_tokenizer* tok) {
  if (tok == nullptr) {
    null_argument("qhx_tokenizer_vocab_size", "tok");
    return 0;
  }
  return tok->tok.vocab_size();
}

int qhx_tokenizer_encode(const qhx_tokenizer* tok, const char* text, size_t len, int32_t* ids, size_t cap,
                         size_t* n_ids) {
  constexpr const char* fn = "qhx_tokenizer_encode";
  if (tok == nullptr) return null_argument(fn, "tok");
  if (text == nullptr && len > 0) return null_argument(fn, "text");
  if (n_ids == nullptr) return null_argument(fn, "n_ids");
  if (ids == nullptr && cap > 0) return null_argument(fn, "ids");
  return guarded(fn, [&]() -> int {
    const auto out = tok->tok.encode(std::string_view(text != nullptr ? text : "", len));
    *n_ids = out.size();
    if (out.size() > cap)
      return set_error(QHX_ERR_BUFFER_TOO_SMALL,
                       qhx::cat(fn, ": ids buffer too small (", cap, " ids for ", out.size(), ")"));
    if (!out.empty()) std::memcpy(ids, out.data(), out.size() * sizeof(int32_t));
    return QHX_OK;
  });
}

int qhx_tokenizer_decode(const qhx_tokenizer* tok, const int32_t* ids, size_t n_ids, int skip_special, char* buf,
                         size_t cap, size_t* len) {
  constexpr const char* fn = "qhx_tokenizer_decode";
  if (tok == nullptr) return null_argument(fn, "tok");
  if (ids == nullptr && n_ids > 0) return null_argument(fn, "ids");
  if (len == nullptr) return null_argument(fn, "len");
  if (buf == nullptr && cap > 0) return null_argument(fn, "buf");
  return guarded(fn, [&]() -> int {
    const std::string text = tok->tok.decode({ids, n_ids}, skip_special != 0);
    *len = text.size();
    if (text.size() + 1 > cap)
      return set_error(QHX_ERR_BUFFER_TOO_SMALL,
                       qhx::cat(fn, ": buffer too small (", cap, " bytes for ", text.size(), " and the NUL)"));
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return QHX_OK;
  });
}

/* ---- pipelines ---- */

int qhx_pipeline_open2(const char* path, const qhx_pipeline_options* options, qhx_pipeline** out) {
  constexpr const char* fn = "qhx_pipeline_open2";
  if (out == nullptr) return null_argument(fn, "out");
  *out = nullptr;
  if (path == nullptr) return null_argument(fn, "path");
  qhx_pipeline_options o = default_pipeline_options();
  if (options != nullptr) {
    if (const int st = check_struct_size(options, kPipelineOptionsV2, fn, "options", "qhx_pipeline_options");
        st != QHX_OK)
      return st;
    read_versioned(options, o);
  }
  if (o.threads < 0)
    return set_error(QHX_ERR_ARGUMENT, qhx::cat(fn, ": options->threads must be >= 0, got ", o.threads));
  return guarded(fn, [&]() -> int {
    auto p = std::make_unique<qhx_pipeline>();
    if (o.threads > 0) qhx::set_threads(o.threads, &p->warning);
    qhx::PipelineOptions po;
    if (o.image_cache_mb >= 0) po.image_cache_mb = o.image_cache_mb;
    po.weights_in_memory = o.weights_in_memory != 0;
    p->pipe = std::make_shared<qhx::Pipeline>(qhx::Pipeline::open(path, po, o.want_images != 0));
    *out = p.release();
    return QHX_OK;
  });
}

int qhx_pipeline_open(const char* manifest_or_dir, qhx_pipeline** out) {
  if (out == nullptr) return null_argument("qhx_pipeline_open", "out");
  *out = nullptr;
  if (manifest_or_dir == nullptr) return null_argument("qhx_pipeline_open", "manifest_or_dir");
  return qhx_pipeline_open2(manifest_or_dir, nullptr, out);
}

void qhx_pipeline_free(qhx_pipeline* pipe) { delete pipe; }

int qhx_pipeline_warning(const qhx_pipeline* pipe, const char** text) {
  if (pipe == nullptr) return null_argument("qhx_pipeline_warning", "pipe");
  if (text == nullptr) return null_argument("qhx_pipeline_warning", "text");
  *text = pipe->warning.c_str();
  return QHX_OK;
}

int qhx_pipeline_takes_images(const qhx_pipeline* pipe, int* takes_images) {
  if (pipe == nullptr) return null_argument("qhx_pipeline_takes_images", "pipe");
  if (takes_images == nullptr) return null_argument("qhx_pipeline_takes_images", "takes_images");
  *takes_images = pipe->pipe->takes_images() ? 1 : 0;
  return QHX_OK;
}

int qhx_pipeline_image_cache_stats(const qhx_pipeline* pipe, qhx_image_cache_stats* stats) {
  constexpr const char* fn = "qhx_pipeline_image_cache_stats";
  if (pipe == nullptr) return null_argument(fn, "pipe");
  if (stats == nullptr) return null_argument(fn, "stats");
  if (const int st = check_struct_size(stats, kImageCacheStatsV2, fn, "stats", "qhx_image_cache_stats"); st != QHX_OK)
    return st;
  return guarded(fn, [&]() -> int {
    const qhx::ImageCacheStats s = pipe->pipe->image_cache_stats();
    qhx_image_cache_stats c{};
    c.hits = s.hits;
    c.misses = s.misses;
    c.entries = s.entries;
    c.bytes = s.bytes;
    c.capacity_bytes = s.capacity_bytes;
    write_versioned(c, stats);
    return QHX_OK;
  });
}

int qhx_pipeline_generate(qhx_pipeline* pipe, const qhx_generate_options* o, qhx_text_callback on_text, void* user,
                          char* buf, size_t cap, size_t* len) {
  constexpr const char* fn = "qhx_pipeline_generate";
  if (pipe == nullptr) return null_argument(fn, "pipe");
  if (o == nullptr) return null_argument(fn, "options");
  if (o->prompt == nullptr) return null_argument(fn, "options->prompt");
  if (o->images == nullptr && o->n_images > 0) return null_argument(fn, "options->images");
  if (len == nullptr) return null_argument(fn, "len");
  if (buf == nullptr && cap > 0) return null_argument(fn, "buf");
  for (size_t i = 0; i < o->n_images; ++i)
    if (o->images[i] == nullptr) return null_argument(fn, qhx::cat("options->images[", i, "]").c_str());
  return guarded(fn, [&]() -> int {
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
      req.on_text = [on_text, user](std::string_view text) {
        on_text(text.data(), text.size(), user);
      };
    const qhx::GenerationResult r = pipe->pipe->generate(req);
    *len = r.text.size();
    if (r.text.size() + 1 > cap)
      return set_error(QHX_ERR_BUFFER_TOO_SMALL,
                       qhx::cat(fn, ": buffer too small (", cap, " bytes for ", r.text.size(), " and the NUL)"));
    std::memcpy(buf, r.text.c_str(), r.text.size() + 1);
    return QHX_OK;
  });
}

/* ---- messages ---- */

int qhx_message_new(const char* role, qhx_message** out) {
  constexpr const char* fn = "qhx_message_new";
  if (out == nullptr) return null_argument(fn, "out");
  *out = nullptr;
  if (role == nullptr) return null_argument(fn, "role");
  const std::string r = role;
  // Checked here, where the caller can still tell which message is wrong.
  if (r != "system" && r != "user" && r != "assistant")
    return set_error(QHX_ERR_ARGUMENT,
                     qhx::cat(fn, ": role \"", r, "\" is not one of \"system\", \"user\", \"assistant\""));
  return guarded(fn, [&]() -> int {
    *out = new qhx_message{qhx::Message{r, {}}};
    return QHX_OK;
  });
}

void qhx_message_free(qhx_message* msg) { delete msg; }

int qhx_message_add_text(qhx_message* msg, const char* text, size_t len) {
  constexpr const char* fn = "qhx_message_add_text";
  if (msg == nullptr) return null_argument(fn, "msg");
  if (text == nullptr && len > 0) return null_argument(fn, "text");
  const std::string_view t(text != nullptr ? text : "", len);
  if (const std::size_t bad = qhx::utf8::first_invalid(t); bad != t.size())
    return set_error(QHX_ERR, qhx::cat(fn, ": the text is not valid UTF-8 (byte ", bad, " of ", len, ")"));
  return guarded(fn, [&]() -> int {
    msg->msg.content.push_back(qhx::ContentPart::text_part(std::string(t)));
    return QHX_OK;
  });
}

int qhx_message_add_image_file(qhx_message* msg, const char* path) {
  constexpr const char* fn = "qhx_message_add_image_file";
  if (msg == nullptr) return null_argument(fn, "msg");
  if (path == nullptr) return null_argument(fn, "path");
  return guarded(fn, [&]() -> int {
    msg->msg.content.push_back(qhx::ContentPart::image_part(qhx::ImageSource::file(path)));
    return QHX_OK;
  });
}

int qhx_message_add_image_bytes(qhx_message* msg, const void* data, size_t len) {
  constexpr const char* fn = "qhx_message_add_image_bytes";
  if (msg == nullptr) return null_argument(fn, "msg");
  if (data == nullptr) return null_argument(fn, "data");
  // An empty ImageSource means "read the path" in the C++ API: refuse rather than misread.
  if (len == 0) return set_error(QHX_ERR_ARGUMENT, qhx::cat(fn, ": len is 0 (an encoded image has bytes)"));
  return guarded(fn, [&]() -> int {
    const auto* p = static_cast<const std::uint8_t*>(data);
    msg->msg.content.push_back(qhx::ContentPart::image_part(qhx::ImageSource::encoded({p, p + len})));
    return QHX_OK;
  });
}

int qhx_message_role(const qhx_message* msg, const char** role) {
  if (msg == nullptr) return null_argument("qhx_message_role", "msg");
  if (role == nullptr) return null_argument("qhx_message_role", "role");
  *role = msg->msg.role.c_str();
  return QHX_OK;
}

int qhx_message_part_count(const qhx_message* msg, size_t* n) {
  if (msg == nullptr) return null_argument("qhx_message_part_count", "msg");
  if (n == nullptr) return null_argument("qhx_message_part_count", "n");
  *n = msg->msg.content.size();
  return QHX_OK;
}

int qhx_message_part(const qhx_message* msg, size_t index, int* kind, const char** text, size_t* len) {
  constexpr const char* fn = "qhx_message_part";
  if (msg == nullptr) return null_argument(fn, "msg");
  if (kind == nullptr) return null_argument(fn, "kind");
  if (text == nullptr) return null_argument(fn, "text");
  if (index >= msg->msg.content.size())
    return set_error(QHX_ERR_ARGUMENT, qhx::cat(fn, ": index ", index, " is out of range (the message has ",
                                                msg->msg.content.size(), " parts)"));
  const qhx::ContentPart& p = msg->msg.content[index];
  if (p.kind == qhx::ContentPart::Kind::Text) {
    *kind = QHX_PART_TEXT;
    return text_out(p.text, text, len);
  }
  *kind = QHX_PART_IMAGE;
  // What ImageSource::name() says, from storage that lives as long as the part.
  static constexpr std::string_view kInMemory = "image in memory";
  if (!p.image.label.empty()) return text_out(p.image.label, text, len);
  if (!p.image.bytes.empty()) {
    *text = kInMemory.data();
    if (len != nullptr) *len = kInMemory.size();
    return QHX_OK;
  }
  return text_out(p.image.path.native(), text, len);
}

/* ---- generation options and results ---- */

void qhx_result_free(qhx_result* result) { delete result; }

int qhx_result_text(const qhx_result* result, const char** text, size_t* len) {
  if (result == nullptr) return null_argument("qhx_result_text", "result");
  if (text == nullptr) return null_argument("qhx_result_text", "text");
  return text_out(result->r.text, text, len);
}

int qhx_result_reasoning(const qhx_result* result, const char** text, size_t* len) {
  if (result == nullptr) return null_argument("qhx_result_reasoning", "result");
  if (text == nullptr) return null_argument("qhx_result_reasoning", "text");
  return text_out(result->r.reasoning, text, len);
}

int qhx_result_stop_reason(const qhx_result* result, const char** reason) {
  if (result == nullptr) return null_argument("qhx_result_stop_reason", "result");
  if (reason == nullptr) return null_argument("qhx_result_stop_reason", "reason");
  *reason = result->r.stop_reason.c_str();
  return QHX_OK;
}

int qhx_result_tokens(const qhx_result* result, const int32_t** ids, size_t* n) {
  if (result == nullptr) return null_argument("qhx_result_tokens", "result");
  if (ids == nullptr) return null_argument("qhx_result_tokens", "ids");
  if (n == nullptr) return null_argument("qhx_result_tokens", "n");
  *n = result->r.tokens.size();
  *ids = result->r.tokens.empty() ? nullptr : result->r.tokens.data();
  return QHX_OK;
}

int qhx_result_copy_tokens(const qhx_result* result, int32_t* ids, size_t cap, size_t* n) {
  constexpr const char* fn = "qhx_result_copy_tokens";
  if (result == nullptr) return null_argument(fn, "result");
  if (ids == nullptr && cap > 0) return null_argument(fn, "ids");
  if (n == nullptr) return null_argument(fn, "n");
  const auto& t = result->r.tokens;
  *n = t.size();
  if (t.size() > cap)
    return set_error(QHX_ERR_BUFFER_TOO_SMALL,
                     qhx::cat(fn, ": ids buffer too small (", cap, " ids for ", t.size(), ")"));
  if (!t.empty()) std::memcpy(ids, t.data(), t.size() * sizeof(int32_t));
  return QHX_OK;
}

int qhx_result_prompt_token_count(const qhx_result* result, size_t* n) {
  if (result == nullptr) return null_argument("qhx_result_prompt_token_count", "result");
  if (n == nullptr) return null_argument("qhx_result_prompt_token_count", "n");
  *n = result->r.prompt_tokens.size();
  return QHX_OK;
}

int qhx_result_cached_tokens(const qhx_result* result, size_t* n) {
  if (result == nullptr) return null_argument("qhx_result_cached_tokens", "result");
  if (n == nullptr) return null_argument("qhx_result_cached_tokens", "n");
  *n = static_cast<size_t>(result->r.cached_tokens);
  return QHX_OK;
}

int qhx_result_step_logits(const qhx_result* result, const float** logits, size_t* rows, size_t* vocab) {
  constexpr const char* fn = "qhx_result_step_logits";
  if (result == nullptr) return null_argument(fn, "result");
  if (logits == nullptr) return null_argument(fn, "logits");
  if (rows == nullptr) return null_argument(fn, "rows");
  if (vocab == nullptr) return null_argument(fn, "vocab");
  const auto& r = result->r;
  *vocab = static_cast<size_t>(r.vocab);
  *rows = r.vocab > 0 ? r.step_logits.size() / static_cast<size_t>(r.vocab) : 0;
  *logits = r.step_logits.empty() ? nullptr : r.step_logits.data();
  return QHX_OK;
}

int qhx_result_timings(const qhx_result* result, qhx_timings* timings) {
  constexpr const char* fn = "qhx_result_timings";
  if (result == nullptr) return null_argument(fn, "result");
  if (timings == nullptr) return null_argument(fn, "timings");
  if (const int st = check_struct_size(timings, kTimingsV2, fn, "timings", "qhx_timings"); st != QHX_OK) return st;
  const qhx::Timings& t = result->r.timings;
  qhx_timings c{};
  c.load_ms = t.load_ms;
  c.vision_ms = t.vision_ms;
  c.image_tokens = t.image_tokens;
  c.images_encoded = t.images_encoded;
  c.image_cache_hits = t.image_cache_hits;
  c.prefill_ms = t.prefill_ms;
  c.ttft_ms = t.ttft_ms;
  c.decode_ms_per_token = t.decode_ms_per_token;
  c.decode_steps = t.decode_steps;
  write_versioned(c, timings);
  return QHX_OK;
}

/* ---- sessions ---- */

int qhx_session_new(qhx_pipeline* pipe, qhx_session** out) {
  if (out == nullptr) return null_argument("qhx_session_new", "out");
  *out = nullptr;
  if (pipe == nullptr) return null_argument("qhx_session_new", "pipe");
  return guarded("qhx_session_new", [&]() -> int {
    *out = new qhx_session{pipe->pipe, qhx::Session(*pipe->pipe)};
    return QHX_OK;
  });
}

void qhx_session_free(qhx_session* session) { delete session; }

int qhx_session_reset(qhx_session* session) {
  if (session == nullptr) return null_argument("qhx_session_reset", "session");
  return guarded("qhx_session_reset", [&]() -> int {
    session->session.reset();
    return QHX_OK;
  });
}

int qhx_session_cached_tokens(const qhx_session* session, size_t* n) {
  if (session == nullptr) return null_argument("qhx_session_cached_tokens", "session");
  if (n == nullptr) return null_argument("qhx_session_cached_tokens", "n");
  *n = static_cast<size_t>(session->session.cached_tokens());
  return QHX_OK;
}

int qhx_session_message_count(const qhx_session* session, size_t* n) {
  if (session == nullptr) return null_argument("qhx_session_message_count", "session");
  if (n == nullptr) return null_argument("qhx_session_message_count", "n");
  *n = session->session.messages().size();
  return QHX_OK;
}

int qhx_session_copy_message(const qhx_session* session, size_t index, qhx_message** out) {
  constexpr const char* fn = "qhx_session_copy_message";
  if (out == nullptr) return null_argument(fn, "out");
  *out = nullptr;
  if (session == nullptr) return null_argument(fn, "session");
  const auto& messages = session->session.messages();
  if (index >= messages.size())
    return set_error(QHX_ERR_ARGUMENT, qhx::cat(fn, ": index ", index, " is out of range (the conversation has ",
                                                messages.size(), " messages)"));
  return guarded(fn, [&]() -> int {
    *out = new qhx_message{messages[index]};
    return QHX_OK;
  });
}

int qhx_session_send(qhx_session* session, const qhx_message* message, const qhx_generation_options* options,
                     qhx_result** out) {
  constexpr const char* fn = "qhx_session_send";
  if (out == nullptr) return null_argument(fn, "out");
  *out = nullptr;
  if (session == nullptr) return null_argument(fn, "session");
  if (message == nullptr) return null_argument(fn, "message");
  return guarded(fn, [&]() -> int { return answer(session, {message->msg}, true, options, out, fn); });
}

int qhx_session_respond(qhx_session* session, const qhx_message* const* messages, size_t n,
                        const qhx_generation_options* options, qhx_result** out) {
  constexpr const char* fn = "qhx_session_respond";
  if (out == nullptr) return null_argument(fn, "out");
  *out = nullptr;
  if (session == nullptr) return null_argument(fn, "session");
  if (messages == nullptr && n > 0) return null_argument(fn, "messages");
  for (size_t i = 0; i < n; ++i)
    if (messages[i] == nullptr) return null_argument(fn, qhx::cat("messages[", i, "]").c_str());
  return guarded(fn, [&]() -> int {
    std::vector<qhx::Message> history;
    history.reserve(n);
    for (size_t i = 0; i < n; ++i) history.push_back(messages[i]->msg);
    return answer(session, std::move(history), false, options, out, fn);
  });
}

}  // extern "C"
