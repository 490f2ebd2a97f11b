// qhx_serve — an OpenAI-compatible HTTP server (POST /v1/chat/completions, GET
// /v1/models, /health, /metrics, and a chat page at /) over qhx::Session.
//
//   qhx_serve -m MANIFEST [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--max-queue N]
//             [--max-body-mb N] [--allow-file-dir DIR] [--sessions N] [--threads N]
//
// SIGTERM or SIGINT drains: queued requests are refused (503), the running one
// finishes (or is cancelled after --drain-seconds), and the process exits 0.
#include <csignal>
#include <pthread.h>

#include "cli/cli.hpp"
#include "cli/model_flags.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "qhexrt/error.hpp"
#include "qhexrt/pipeline.hpp"
#include "qhexrt/session.hpp"
#include "serve/server.hpp"

namespace {

struct Args {
  std::string model, host = "127.0.0.1", api_key, allow_file_dir, model_id;
  int port = 8080, http_threads = 0, max_images = 8;
  int read_timeout = 30, write_timeout = 15, drain_seconds = 30, send_buffer_kb = 64;
  std::size_t max_queue = 16, max_body_mb = 32, sessions = 1;
  qhx_cli::RuntimeFlags runtime;
  qhx_cli::SpeculateFlag speculate;
};

int run(const Args& a) {
  // Every thread started from here on inherits this mask: the signals are taken
  // by sigwait on one thread, never by a handler in the middle of a generation.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone away is a failed write, not the end of the process

  a.runtime.apply_threads("qhx_serve");
  qhx::PipelineOptions popts = a.runtime.pipeline_options();
  std::optional<qhx::Pipeline> pipe;
  try {
    pipe.emplace(qhx::Pipeline::open(a.model, popts, /*want_images=*/true));
  } catch (const qhx::Error& e) {
    // A bundle folder without an image manifest still serves text.
    if (!std::filesystem::is_directory(a.model)) throw;
    pipe.emplace(qhx::Pipeline::open(a.model, popts, false));
    std::fprintf(stderr, "qhx_serve: note: text only (%s)\n", e.what());
  }

  qhx::serve::ServerConfig cfg;
  cfg.host = a.host;
  cfg.port = a.port;
  cfg.api_key = a.api_key;
  if (cfg.api_key.empty())
    if (const char* k = std::getenv("QHX_API_KEY")) cfg.api_key = k;
  cfg.model_id = a.model_id.empty() ? std::filesystem::path(a.model).filename().string() : a.model_id;
  if (cfg.model_id.empty()) cfg.model_id = std::filesystem::path(a.model).parent_path().filename().string();
  cfg.max_queue = a.max_queue;
  cfg.max_body_mb = a.max_body_mb;
  cfg.sessions = a.sessions;
  cfg.speculate = a.speculate.tokens();
  cfg.http_threads = static_cast<std::size_t>(a.http_threads);
  cfg.max_images = a.max_images;
  cfg.read_timeout_s = a.read_timeout;
  cfg.write_timeout_s = a.write_timeout;
  cfg.send_buffer_kb = a.send_buffer_kb;
  if (!a.allow_file_dir.empty()) {
    std::error_code ec;
    auto dir = std::filesystem::canonical(a.allow_file_dir, ec);
    if (ec || !std::filesystem::is_directory(dir))
      qhx::fail("--allow-file-dir ", a.allow_file_dir, ": not a directory");
    cfg.allow_file_dir = dir;
  }

  qhx::serve::Server server(*pipe, cfg);
  const int port = server.bind();
  std::fprintf(stderr, "qhx_serve: %s on http://%s:%d (model \"%s\", %zu session slot%s, queue %zu%s)\n",
               a.model.c_str(), cfg.host.c_str(), port, cfg.model_id.c_str(), cfg.sessions,
               cfg.sessions == 1 ? "" : "s", cfg.max_queue, cfg.api_key.empty() ? "" : ", API key required");
  std::fprintf(stdout, "listening on http://%s:%d\n", cfg.host.c_str(), port);
  std::fflush(stdout);

  std::atomic<bool> signalled{false};
  std::thread waiter([&] {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) return;
    signalled = true;
    std::fprintf(stderr, "qhx_serve: %s: draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server.drain_and_stop(std::chrono::seconds(a.drain_seconds));
  });
  const bool ok = server.listen();
  if (!signalled) {
    std::fprintf(stderr, "qhx_serve: error: the server stopped without a signal\n");
    std::_Exit(1);
  }
  waiter.join();
  std::fprintf(stderr, "qhx_serve: stopped\n");
  return ok || signalled.load() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  qhx_cli::App app{"QHexRT OpenAI-compatible server (POST /v1/chat/completions) over qhx::Session"};
  Args a;
  app.add_option("-m,--model", a.model, "manifest (.json), bundle folder, or Hugging Face checkpoint directory")
      ->required();
  app.add_option("--host", a.host, "address to listen on (default 127.0.0.1)");
  app.add_option("--port", a.port, "port (default 8080; 0: any free port, printed)")->check(qhx_cli::Range(0, 65535));
  app.add_option("--api-key", a.api_key, "require 'Authorization: Bearer KEY' (default: $QHX_API_KEY; none: open)");
  app.add_option("--model-name", a.model_id, "the model id in responses and /v1/models (default: the -m name)");
  app.add_option("--max-queue", a.max_queue, "requests waiting for the model at most; beyond, 503 (default 16)")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("--max-body-mb", a.max_body_mb, "largest request body in MB; beyond, 413 (default 32)")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("--allow-file-dir", a.allow_file_dir, "serve file:// image URLs from under this directory only");
  a.speculate.add_to(app);
  app.add_option("--sessions", a.sessions, "session slots (conversations whose KV cache is kept; default 1)")
      ->check(qhx_cli::PositiveNumber);
  a.runtime.add_to(app);
  app.add_option("--http-threads", a.http_threads, "HTTP connection threads (default: max-queue + 8)")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("--max-images", a.max_images, "images in one request at most (default 8)")
      ->check(qhx_cli::NonNegativeNumber);
  app.add_option("--read-timeout", a.read_timeout, "seconds a client may stall while sending (default 30)")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("--write-timeout", a.write_timeout, "seconds a client may stall while receiving (default 15)")
      ->check(qhx_cli::PositiveNumber);
  app.add_option("--send-buffer-kb", a.send_buffer_kb,
                 "socket send buffer in KB: how much a stalled stream reader can be sent before the write "
                 "timeout cancels its generation (default 64; 0: the kernel's autotuning)")
      ->check(qhx_cli::Range(0, 1 << 20));
  app.add_option("--drain-seconds", a.drain_seconds,
                 "on SIGTERM, how long the running generation may go on before it is cancelled (default 30)")
      ->check(qhx_cli::NonNegativeNumber);
  QHX_CLI_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qhx_serve: error: %s\n", e.what());
    return 1;
  }
}
