#include "serve/server.hpp"

#include <httplib.h>

#include <sys/socket.h>

#include <ctime>

#include "qhexrt/error.hpp"
#include "serve/crypto.hpp"
#include "serve/peer.hpp"
#include "serve/response.hpp"
#include "serve/web_index.hpp"  // generated from tools/serve/web/index.html (tools/CMakeLists.txt)

namespace qhx::serve {

using nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";
constexpr int kPeerPollMs = 100;  // how often a waiting request looks at its connection

std::string route_of(const std::string& path) {
  for (const char* known : {"/v1/chat/completions", "/v1/models", "/health", "/metrics", "/"})
    if (path == known) return known;
  return "other";
}

// A lower bound of the prompt's tokens: its text alone (the template and the
// images only add to it). Over the context, the request cannot run at all.
std::int64_t text_tokens(const Tokenizer& tok, const std::vector<Message>& messages) {
  std::int64_t n = 0;
  for (const auto& m : messages)
    for (const auto& p : m.content)
      if (p.kind == ContentPart::Kind::Text) n += static_cast<std::int64_t>(tok.encode(p.text).size());
  return n;
}

}  // namespace

Server::Server(Pipeline& pipeline, ServerConfig config)
    : pipeline_(pipeline),
      config_(std::move(config)),
      queue_(pipeline, config_.sessions, config_.max_queue),
      http_(std::make_unique<httplib::Server>()),
      started_(static_cast<std::int64_t>(std::time(nullptr))) {
  limits_.allow_file_dir = config_.allow_file_dir;
  limits_.max_images = config_.max_images;
  limits_.context_length = pipeline_.context_length();
  queue_.on_finished = [this](const Job& job) {
    if (job.error) return;
    const auto& r = job.result;
    metrics_.completion(static_cast<std::int64_t>(r.prompt_tokens.size()), r.cached_tokens,
                        static_cast<std::int64_t>(r.tokens.size()), r.stop == qhx::StopReason::Cancelled);
  };

  auto& s = *http_;
  const std::size_t threads = config_.http_threads ? config_.http_threads : config_.max_queue + 8;
  s.new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  s.set_read_timeout(config_.read_timeout_s, 0);
  s.set_write_timeout(config_.write_timeout_s, 0);
  s.set_keep_alive_timeout(config_.keep_alive_timeout_s);
  s.set_payload_max_length(config_.max_body_mb * 1024 * 1024);
  // SO_REUSEADDR, not httplib's default SO_REUSEPORT (with which a second server on the same
  // port would bind too and take half the connections). A bounded send buffer (inherited by
  // the accepted sockets): a client that stops reading a stream blocks the writer after that
  // much output, and the write timeout then cancels its generation; with the kernel's
  // autotuning megabytes of tokens would be generated into the buffer first.
  const int send_buffer = config_.send_buffer_kb * 1024;
  s.set_socket_options([send_buffer](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (send_buffer > 0) setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof send_buffer);
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.response(route_of(req.path), res.status);
  });
  // Statuses httplib sets itself (404, 413, a request it cannot parse) get an error body too.
  const std::size_t body_mb = config_.max_body_mb;
  s.set_error_handler(
      httplib::Server::HandlerWithResponse([body_mb](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        ApiError e{res.status, "", "", ""};
        switch (res.status) {
          case 404:
            e.message = "no such route";
            e.code = "not_found";
            break;
          case 413:
            e.message = req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0
                            ? "the request body is too large for a form-encoded body (8 KB): send it as "
                              "Content-Type: application/json"
                            : cat("the request body is over the server's limit of ", body_mb, " MB (--max-body-mb)");
            e.code = "request_too_large";
            break;
          case 414: e.message = "the request URI is too long"; break;
          case 400: e.message = "the HTTP request could not be read"; break;
          default: e.message = cat("HTTP ", res.status); break;
        }
        res.set_content(dump(e.to_json()), kJson);
        return httplib::Server::HandlerResponse::Handled;
      }));
  s.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    ApiError e{500, "internal error", "", "internal_error"};
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& x) {
      e.message = cat("internal error: ", x.what());
    } catch (...) {}
    send_error(res, e);
  });

  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    try {
      chat(req, res);
    } catch (const ApiException& e) {
      send_error(res, e.error);
    }
  });
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    const json j = {{"object", "list"},
                    {"data", json::array({{{"id", config_.model_id},
                                           {"object", "model"},
                                           {"created", started_},
                                           {"owned_by", "qhexrt"},
                                           {"context_length", pipeline_.context_length()},
                                           {"takes_images", pipeline_.takes_images()}}})}};
    res.set_content(dump(j), kJson);
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const json j = {{"status", "ok"},
                    {"model", config_.model_id},
                    {"queue_depth", queue_.depth()},
                    {"generating", queue_.generating()}};
    res.set_content(dump(j), kJson);
  });
  s.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    res.set_content(metrics_.render(queue_.depth(), queue_.generating(), pipeline_.image_cache_stats()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(reinterpret_cast<const char*>(kWebIndex), kWebIndexSize), "text/html; charset=utf-8");
  });

  // The other methods on the known routes: 405 with the allowed one.
  auto not_allowed = [this](const char* allow) {
    return [this, allow](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allow);
      send_error(res, ApiError{405, cat("method ", req.method, " is not allowed on ", req.path, " (use ", allow, ")"),
                               "", "method_not_allowed"});
    };
  };
  s.Get("/v1/chat/completions", not_allowed("POST"));
  s.Put("/v1/chat/completions", not_allowed("POST"));
  s.Patch("/v1/chat/completions", not_allowed("POST"));
  s.Delete("/v1/chat/completions", not_allowed("POST"));
  for (const char* path : {"/v1/models", "/health", "/metrics", "/"}) {
    s.Post(path, not_allowed("GET"));
    s.Put(path, not_allowed("GET"));
    s.Patch(path, not_allowed("GET"));
    s.Delete(path, not_allowed("GET"));
  }
}

Server::~Server() = default;

int Server::bind() {
  int port = config_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(config_.host);
    if (port <= 0) fail("cannot bind to ", config_.host, " (any port)");
  } else if (!http_->bind_to_port(config_.host, port)) {
    fail("cannot bind to ", config_.host, ":", port, " (in use, or not an address of this machine)");
  }
  return port;
}

bool Server::listen() { return http_->listen_after_bind(); }

void Server::drain_and_stop(std::chrono::milliseconds grace) {
  queue_.drain(grace);
  http_->stop();
}

bool Server::authorized(const httplib::Request& req, httplib::Response& res) const {
  if (config_.api_key.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  const bool ok = header.size() > prefix.size() && header.compare(0, prefix.size(), prefix) == 0 &&
                  secrets_equal(std::string_view(header).substr(prefix.size()), config_.api_key);
  if (ok) return true;
  res.set_header("WWW-Authenticate", "Bearer");
  send_error(
      res,
      ApiError{401, header.empty() ? "no API key: send the header 'Authorization: Bearer KEY'" : "incorrect API key",
               "", "invalid_api_key"});
  return false;
}

void Server::send_error(httplib::Response& res, const ApiError& e) const {
  res.status = e.status;
  res.set_content(dump(e.to_json()), kJson);
}

void Server::chat(const httplib::Request& req, httplib::Response& res) {
  ChatRequest request = parse_chat_request(req.body, pipeline_.default_sampling(), limits_);
  request.options.speculate = config_.speculate;
  if (request.images > 0 && !pipeline_.takes_images())
    bad_request("this model's plan takes no images (a text-only manifest)", "messages", "images_not_supported");
  const std::int64_t ctx = pipeline_.context_length();
  const std::int64_t tokens = text_tokens(pipeline_.tokenizer(), request.messages);
  if (tokens >= ctx)
    bad_request(cat("the prompt's text alone is ", tokens, " tokens, over the model's context of ", ctx, " tokens"),
                "messages", "context_length_exceeded");

  auto job = std::make_shared<Job>();
  const bool stream = request.stream, include_usage = request.include_usage;
  job->request = std::move(request);
  switch (queue_.submit(job)) {
    case ModelQueue::Admit::ok: break;
    case ModelQueue::Admit::full:
      metrics_.rejected_queue_full();
      res.set_header("Retry-After", std::to_string(config_.retry_after_s));
      throw ApiException(ApiError{
          503,
          cat("the server is busy: ", config_.max_queue, " requests are already waiting (--max-queue); retry later"),
          "", "queue_full"});
    case ModelQueue::Admit::draining:
      res.set_header("Retry-After", std::to_string(config_.retry_after_s));
      throw ApiException(ApiError{503, "the server is shutting down", "", "shutting_down"});
  }
  Completion c{new_completion_id(), static_cast<std::int64_t>(std::time(nullptr)), config_.model_id};

  // Until the first text (or the end), the status is still open: an error before
  // any output — a prompt over the context, an image that does not decode — is
  // answered with its own status, streaming or not. Meanwhile (queued, encoding,
  // prefilling, or the whole answer when not streaming) nothing is written, so the
  // connection is watched: a client that left cancels its job.
  {
    const PeerSocket peer(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    std::unique_lock<std::mutex> lock(job->mutex);
    const auto ready = [&] {
      return job->done || (stream && !job->pieces.empty());
    };
    while (!job->changed.wait_for(lock, std::chrono::milliseconds(kPeerPollMs), ready))
      if (!job->cancel && peer.closed()) job->cancel = true;
    if (job->done && job->error) {
      if (job->error->status == 503) res.set_header("Retry-After", std::to_string(config_.retry_after_s));
      throw ApiException(*job->error);
    }
  }
  if (!stream) {
    res.set_content(dump(completion_json(c, job->result, job->queue_ms)), kJson);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, c, include_usage](std::size_t, httplib::DataSink& sink) {
        // A write that fails means the client went away: cancel its generation
        // (on_text returns false at the next piece) and end the response.
        auto write = [&](const std::string& s) {
          if (sink.write(s.data(), s.size())) return true;
          job->cancel = true;
          return false;
        };
        if (!write(sse(chunk_json(c, {{"role", "assistant"}, {"content", ""}})))) return false;
        std::string text;
        while (job->wait_text(text))
          if (!write(sse(chunk_json(c, {{"content", text}})))) return false;
        if (job->error) {
          if (!write(sse(job->error->to_json()))) return false;
        } else {
          if (!write(sse(chunk_json(c, json::object(), finish_reason(job->result.stop))))) return false;
          if (include_usage && !write(sse(usage_chunk_json(c, job->result, job->queue_ms)))) return false;
        }
        if (!write(sse_data("[DONE]"))) return false;
        sink.done();
        return true;
      },
      [job](bool) { job->cancel = true; });
}

}  // namespace qhx::serve
